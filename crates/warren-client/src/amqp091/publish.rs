//! Publisher confirms: the outstanding publishes of a channel in
//! sequence order, so an ack or nack settles from the front (its cost is
//! what it settles, not what is outstanding), and the future each
//! publish returns.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use warren_amqp091::BasicProperties;

use super::error::Error;

/// What the broker said of a publish.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Confirmation {
    /// The broker took responsibility for it (routed and, for durable
    /// queues and persistent messages, on disk).
    Ack,
    /// The broker could not take it (a queue refused it).
    Nack,
    /// Published with `mandatory` and no queue took it.
    Returned(Box<Returned>),
    /// The channel is not in confirm mode: the message was handed to the
    /// connection; nothing more is known.
    Sent,
}

/// A message the broker returned (basic.return).
#[derive(Debug, Clone, PartialEq)]
pub struct Returned {
    /// Why (312 NO_ROUTE).
    pub reply_code: u16,
    /// The broker's text.
    pub reply_text: String,
    /// The exchange it was published to.
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its properties, as published.
    pub properties: BasicProperties,
    /// Its body, as published.
    pub body: Bytes,
}

type Settled = Result<Confirmation, Error>;

struct Pending {
    seq: u64,
    tx: oneshot::Sender<Settled>,
    /// The publish's frames, kept to publish again after a recovery
    /// when the application asked for that.
    frames: Option<Bytes>,
    /// The in-flight slot, free again once the confirm arrives.
    _permit: OwnedSemaphorePermit,
}

/// A channel's confirm state.
#[derive(Default)]
pub(crate) struct Confirms {
    pub(crate) enabled: bool,
    next: u64,
    pending: VecDeque<Pending>,
    /// A basic.return waiting for the ack of its publish (the broker
    /// sends the return first).
    returned: Option<Returned>,
}

impl Confirms {
    pub(crate) fn enable(&mut self) {
        if !self.enabled {
            self.enabled = true;
            self.next = 1;
        }
    }

    /// Confirm mode again on a new wire: the broker numbers from 1 (the
    /// publishes of the old one were failed when it ended).
    /// Confirm mode again on a new wire: the broker numbers from 1. The
    /// publishes held over from the old wire (see [`Self::hold`]) are
    /// numbered first, in their order; their frames come back to be
    /// sent again before anything else.
    pub(crate) fn restart(&mut self) -> Vec<Bytes> {
        self.returned = None;
        self.next = 1;
        let mut resend = Vec::with_capacity(self.pending.len());
        for p in self.pending.iter_mut() {
            p.seq = self.next;
            self.next += 1;
            resend.extend(p.frames.clone());
        }
        resend
    }

    /// The wire ended and the application wants unconfirmed publishes
    /// published again: keep those whose frames were kept, fail the rest.
    pub(crate) fn hold(&mut self, why: &Error) {
        self.returned = None;
        let (keep, fail): (VecDeque<_>, VecDeque<_>) =
            self.pending.drain(..).partition(|p| p.frames.is_some());
        self.pending = keep;
        for p in fail {
            let _ = p.tx.send(Err(why.clone()));
        }
    }

    /// Number the next publish; its confirm arrives on the receiver.
    pub(crate) fn push(
        &mut self,
        permit: OwnedSemaphorePermit,
        frames: Option<Bytes>,
    ) -> oneshot::Receiver<Settled> {
        let (tx, rx) = oneshot::channel();
        self.pending.push_back(Pending {
            seq: self.next,
            tx,
            frames,
            _permit: permit,
        });
        self.next += 1;
        rx
    }

    pub(crate) fn returned(&mut self, r: Returned) {
        self.returned = Some(r);
    }

    /// basic.ack (`ack`) or basic.nack of `tag`, `multiple` or not.
    pub(crate) fn settle(&mut self, tag: u64, multiple: bool, ack: bool) {
        let mut returned = self.returned.take();
        let mut answer = |p: Pending| {
            let c = if !ack {
                Confirmation::Nack
            } else if p.seq == tag {
                returned
                    .take()
                    .map_or(Confirmation::Ack, |r| Confirmation::Returned(Box::new(r)))
            } else {
                Confirmation::Ack
            };
            let _ = p.tx.send(Ok(c));
        };
        if multiple {
            while self.pending.front().is_some_and(|p| p.seq <= tag) {
                answer(self.pending.pop_front().expect("checked"));
            }
        } else if self.pending.front().is_some_and(|p| p.seq == tag) {
            answer(self.pending.pop_front().expect("checked"));
        } else if let Ok(i) = self.pending.binary_search_by_key(&tag, |p| p.seq) {
            answer(self.pending.remove(i).expect("found"));
        }
    }

    /// The channel ended: every outstanding publish learns why.
    pub(crate) fn fail_all(&mut self, why: &Error) {
        for p in self.pending.drain(..) {
            let _ = p.tx.send(Err(why.clone()));
        }
        self.returned = None;
    }
}

/// The broker's answer to one publish: a future resolving to its
/// [`Confirmation`], or to an error when the channel or connection ended
/// first (the message may or may not have been taken).
#[must_use = "a confirm says whether the broker took the message"]
pub struct Confirm {
    state: State,
}

enum State {
    Ready(Option<Confirmation>),
    Waiting(oneshot::Receiver<Settled>),
}

impl Confirm {
    pub(crate) fn waiting(rx: oneshot::Receiver<Settled>) -> Confirm {
        Confirm {
            state: State::Waiting(rx),
        }
    }

    pub(crate) fn sent() -> Confirm {
        Confirm {
            state: State::Ready(Some(Confirmation::Sent)),
        }
    }
}

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirm").finish_non_exhaustive()
    }
}

impl Future for Confirm {
    type Output = Result<Confirmation, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(c) => Poll::Ready(Ok(c.take().unwrap_or(Confirmation::Sent))),
            State::Waiting(rx) => Pin::new(rx).poll(cx).map(|r| {
                r.unwrap_or_else(|_| {
                    Err(Error::ConnectionLost(
                        "the channel ended before the confirm".into(),
                    ))
                })
            }),
        }
    }
}
