//! Publisher confirms: the outstanding publishes of a channel in
//! sequence order, so an ack or nack settles from the front (its cost is
//! what it settles, not what is outstanding), and the future each
//! publish returns.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;
use warren_amqp091::{BasicProperties, FieldValue};

use super::deferral::flush_here;
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

/// A publish the broker has answered, whose future is yet to be told.
pub(crate) struct Settle(oneshot::Sender<Settled>, Confirmation);

impl Settle {
    /// Tell the publish's future. Done with no lock held: the task it
    /// wakes may run at once on another thread, and its next publish
    /// takes the confirm state's lock.
    pub(crate) fn tell(self) {
        let _ = self.0.send(Ok(self.1));
    }
}

/// Publishes in flight per channel in confirm mode before `publish`
/// waits for confirms.
pub const DEFAULT_IN_FLIGHT: usize = 256;

/// The header a mandatory publish in confirm mode carries: a number for
/// it, which the broker gives back in basic.return so the return is
/// matched to its publish (as the .NET client's `x-dotnet-pub-seq-no`).
pub(crate) const PUBLISH_SEQ_HEADER: &str = "x-warren-publish-seq";

struct Pending {
    seq: u64,
    /// Its number on the channel for good (sequence numbers start again
    /// on each wire; this does not): what [`PUBLISH_SEQ_HEADER`] carries.
    id: u64,
    tx: oneshot::Sender<Settled>,
    /// The publish's frames, kept to publish again after a recovery
    /// when the application asked for that.
    frames: Option<Bytes>,
    /// The broker returned it (basic.return comes before the ack).
    returned: Option<Box<Returned>>,
}

/// A channel's confirm state. The outstanding publishes are also the
/// in-flight count: a publish waits while there are `max` of them.
pub(crate) struct Confirms {
    pub(crate) enabled: bool,
    /// The in-flight limit (`Channel::set_max_in_flight`).
    pub(crate) max: usize,
    next: u64,
    next_id: u64,
    pending: VecDeque<Pending>,
}

impl Confirms {
    pub(crate) fn new(max: usize) -> Confirms {
        Confirms {
            enabled: false,
            max,
            next: 0,
            next_id: 1,
            pending: VecDeque::new(),
        }
    }

    /// Slots left under the in-flight limit (unlimited out of confirm
    /// mode).
    pub(crate) fn room(&self) -> usize {
        match self.enabled {
            true => self.max.saturating_sub(self.pending.len()),
            false => usize::MAX,
        }
    }

    pub(crate) fn enable(&mut self) {
        if !self.enabled {
            self.enabled = true;
            self.next = 1;
        }
    }

    /// Confirm mode again on a new wire: the broker numbers from 1. The
    /// publishes held over from the old wire (see [`Self::hold`]) are
    /// numbered first, in their order; their frames come back to be
    /// sent again before anything else.
    pub(crate) fn restart(&mut self) -> Vec<Bytes> {
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
        let (keep, fail): (VecDeque<_>, VecDeque<_>) =
            self.pending.drain(..).partition(|p| p.frames.is_some());
        self.pending = keep;
        for p in fail {
            let _ = p.tx.send(Err(why.clone()));
        }
    }

    /// Number the next publish; its confirm arrives on the receiver.
    pub(crate) fn push(&mut self, frames: Option<Bytes>) -> oneshot::Receiver<Settled> {
        let (tx, rx) = oneshot::channel();
        self.pending.push_back(Pending {
            seq: self.next,
            id: self.next_id,
            tx,
            frames,
            returned: None,
        });
        self.next += 1;
        self.next_id += 1;
        rx
    }

    /// The id ([`PUBLISH_SEQ_HEADER`]) the next publish gets.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// A basic.return: filed with its publish, found by the id its
    /// publish carried in [`PUBLISH_SEQ_HEADER`] (a return names no
    /// delivery tag, and acks may cover it with `multiple`). The header
    /// is taken off again. Ids only grow, so the outstanding publishes
    /// are in id order too.
    pub(crate) fn returned(&mut self, mut r: Returned) {
        let Some(seq) = r
            .properties
            .headers
            .as_mut()
            .and_then(|h| h.remove(PUBLISH_SEQ_HEADER))
        else {
            return;
        };
        if r.properties
            .headers
            .as_ref()
            .is_some_and(|h| h.iter().next().is_none())
        {
            r.properties.headers = None;
        }
        let FieldValue::I64(id) = seq else { return };
        if let Ok(i) = self.pending.binary_search_by_key(&(id as u64), |p| p.id) {
            self.pending[i].returned = Some(Box::new(r));
        }
    }

    /// basic.ack (`ack`) or basic.nack of `tag`, `multiple` or not; true
    /// if that freed a slot a publish may be waiting for. The publishes
    /// it settles go to `settled`, to be told once the caller has let go
    /// of this state's lock (see [`Settle::tell`]).
    pub(crate) fn settle(&mut self, tag: u64, multiple: bool, ack: bool, settled: &mut Vec<Settle>) -> bool {
        let was_full = self.pending.len() >= self.max;
        let mut answer = |p: Pending| {
            let c = match (ack, p.returned) {
                (false, _) => Confirmation::Nack,
                (true, Some(r)) => Confirmation::Returned(r),
                (true, None) => Confirmation::Ack,
            };
            settled.push(Settle(p.tx, c));
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
        was_full && self.pending.len() < self.max
    }

    /// The channel ended: every outstanding publish learns why.
    pub(crate) fn fail_all(&mut self, why: &Error) {
        for p in self.pending.drain(..) {
            let _ = p.tx.send(Err(why.clone()));
        }
    }
}

/// The broker's answer to one publish: a future resolving to its
/// [`Confirmation`], or to an error when the channel or connection ended
/// first (the message may or may not have been taken).
///
/// Awaiting it is also when the publishes your task made since it last
/// waited are written, in one write, if they have not gone already: so
/// publish what you have, then await. A confirm dropped unanswered sends
/// its publish at once; one held without being awaited while the task
/// waits on something else still goes within a couple of milliseconds
/// (and after that twice, the connection stops holding publishes back).
#[must_use = "a confirm says whether the broker took the message"]
pub struct Confirm {
    state: State,
}

enum State {
    Ready(Option<Confirmation>),
    /// The answer to come. The publish's frames may wait for its task
    /// to write them when it waits (see `deferral`): polling this, or
    /// dropping it unanswered, writes what this thread's publishes left.
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
            State::Waiting(rx) => {
                let answer = match Pin::new(rx).poll(cx) {
                    Poll::Pending => {
                        flush_here();
                        return Poll::Pending;
                    }
                    Poll::Ready(answer) => answer,
                };
                // Answered: nothing to write when it is dropped.
                self.state = State::Ready(None);
                Poll::Ready(answer.unwrap_or_else(|_| {
                    Err(Error::ConnectionLost(
                        "the channel ended before the confirm".into(),
                    ))
                }))
            }
        }
    }
}

impl Drop for Confirm {
    /// A confirm let go unanswered: its publish's frames go now rather
    /// than at the writer's fallback.
    fn drop(&mut self) {
        if let State::Waiting(_) = &self.state {
            flush_here();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outstanding_publishes_fill_the_in_flight_limit_and_confirms_free_it() {
        let mut c = Confirms::new(3);
        assert_eq!(c.room(), usize::MAX, "no limit out of confirm mode");
        c.enable();
        let mut rx: Vec<_> = (0..3).map(|_| c.push(None)).collect();
        assert_eq!(c.room(), 0);
        let mut settled = Vec::new();
        assert!(c.settle(1, false, true, &mut settled), "a slot freed from full");
        assert_eq!(c.room(), 1);
        assert!(
            !c.settle(3, false, true, &mut settled),
            "not full before: nobody waits"
        );
        assert_eq!(c.room(), 2);
        rx.push(c.push(None));
        assert!(!c.settle(4, true, true, &mut settled));
        assert_eq!(c.room(), 3);
        assert!(rx[0].try_recv().is_err(), "told only once the caller lets go");
        assert_eq!(settled.len(), 4);
        settled.into_iter().for_each(Settle::tell);
        for r in &mut rx {
            assert_eq!(r.try_recv().unwrap().unwrap(), Confirmation::Ack);
        }
    }
}
