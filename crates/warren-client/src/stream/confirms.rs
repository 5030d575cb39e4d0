//! A producer's publishes awaiting the broker's word, by publishing id,
//! and the in-flight limit they fill: the connection's reader settles
//! them (PublishConfirm, PublishError), and a publish waits for room
//! while `max_unconfirmed` are out.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::{oneshot, Semaphore};

use super::entry::Body;
use super::error::{Error, ResponseCode};
use super::metrics::Metrics;

/// What the broker said of one published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confirmation {
    /// Stored (on a majority of a replicated stream's members).
    Confirmed {
        /// The message's publishing id.
        publishing_id: u64,
    },
    /// Refused (PublishError), with the broker's code.
    Rejected {
        /// The message's publishing id.
        publishing_id: u64,
        /// Why.
        code: ResponseCode,
    },
}

impl Confirmation {
    /// True for [`Confirmation::Confirmed`].
    pub fn is_confirmed(&self) -> bool {
        matches!(self, Confirmation::Confirmed { .. })
    }
}

type Told = Result<Confirmation, Error>;

struct Waiting {
    /// The message's own publishing id (a sub-entry batch goes under its
    /// last message's, and its confirm settles every message in it).
    id: u64,
    tx: oneshot::Sender<Told>,
}

/// What waits under one publishing id on the wire: a message, or a
/// sub-entry batch's messages (no list for the common case), and the
/// entry, kept to be sent again after a recovery.
struct Sent {
    under: Under,
    entry: Body,
}

enum Under {
    One(Waiting),
    Many(Vec<Waiting>),
}

impl Under {
    fn len(&self) -> usize {
        match self {
            Under::One(_) => 1,
            Under::Many(v) => v.len(),
        }
    }

    fn tell(self, told: impl Fn(u64) -> Told) {
        let send = |w: Waiting| {
            let _ = w.tx.send(told(w.id));
        };
        match self {
            Under::One(w) => send(w),
            Under::Many(v) => v.into_iter().for_each(send),
        }
    }
}

/// One producer's outstanding publishes, by the publishing id they went
/// under on the wire, and the in-flight limit's free places (taken a
/// batch at a time, given back as confirms settle).
pub(crate) struct Confirms {
    pending: Mutex<HashMap<u64, Sent>>,
    slots: Semaphore,
    max: usize,
    /// What the producer does when its connection is lost (recover);
    /// without it, every outstanding publish fails.
    on_lost: OnceLock<Box<dyn Fn(Error) + Send + Sync>>,
    /// Where confirmed and failed counts go, and the stream to name.
    metrics: Option<(Arc<dyn Metrics>, Arc<str>)>,
}

impl Confirms {
    pub(crate) fn new(max_unconfirmed: usize) -> Confirms {
        let max = max_unconfirmed.max(1);
        Confirms {
            pending: Mutex::new(HashMap::new()),
            slots: Semaphore::new(max),
            max,
            on_lost: OnceLock::new(),
            metrics: None,
        }
    }

    /// Count confirmed and failed publishes of `stream` into `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Option<Arc<dyn Metrics>>, stream: &str) -> Confirms {
        self.metrics = metrics.map(|m| (m, Arc::from(stream)));
        self
    }

    /// What to do when the producer's connection is lost.
    pub(crate) fn set_on_lost(&self, f: Box<dyn Fn(Error) + Send + Sync>) {
        let _ = self.on_lost.set(f);
    }

    /// The producer's connection was lost, or its stream moved.
    pub(crate) fn lost(&self, why: Error) {
        match self.on_lost.get() {
            Some(f) => f(why),
            None => self.fail_all(&why),
        }
    }

    /// Give back `n` places taken for publishes that were not sent.
    pub(crate) fn give_back(&self, n: usize) {
        self.slots.add_permits(n);
    }

    /// The entries not yet confirmed, in publishing id order, to send
    /// again.
    pub(crate) fn unconfirmed(&self) -> Vec<(u64, Body)> {
        let mut v: Vec<(u64, Body)> = self
            .pending
            .lock()
            .iter()
            .map(|(wire, s)| (*wire, s.entry.clone()))
            .collect();
        v.sort_unstable_by_key(|(wire, _)| *wire);
        v
    }

    /// The in-flight limit.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// `n` places under the in-flight limit (at most the limit), waiting
    /// while they are not free. They come back as the publishes settle.
    pub(crate) async fn take(&self, n: usize) {
        debug_assert!(n <= self.max);
        self.slots
            .acquire_many(n as u32)
            .await
            .expect("the semaphore is never closed")
            .forget();
    }

    /// An entry is on its way under publishing id `wire` (its own, or its
    /// sub-entry batch's last), holding places taken for its messages
    /// `ids`: their confirms arrive on the futures.
    pub(crate) fn wait(&self, wire: u64, ids: &[u64], entry: Body, out: &mut Vec<Confirm>) {
        let mut waiting = ids.iter().map(|&id| {
            let (tx, rx) = oneshot::channel();
            out.push(Confirm(Awaited::One(rx)));
            Waiting { id, tx }
        });
        let under = match ids.len() {
            1 => Under::One(waiting.next().expect("one")),
            _ => Under::Many(waiting.collect()),
        };
        self.pending.lock().insert(wire, Sent { under, entry });
    }

    /// Settle what waits under these wire ids, giving their places back
    /// and counting them (`report`) into the metrics.
    fn settle(
        &self,
        ids: impl IntoIterator<Item = u64>,
        told: impl Fn(u64) -> Told,
        report: fn(&dyn Metrics, &str, u64),
    ) {
        let settled: Vec<Under> = {
            let mut p = self.pending.lock();
            ids.into_iter()
                .filter_map(|id| p.remove(&id))
                .map(|s| s.under)
                .collect()
        };
        let n: usize = settled.iter().map(Under::len).sum();
        for u in settled {
            u.tell(&told);
        }
        if n > 0 {
            self.slots.add_permits(n);
            if let Some((m, stream)) = &self.metrics {
                report(&**m, stream, n as u64);
            }
        }
    }

    /// PublishConfirm: these ids are stored.
    pub(crate) fn confirmed(&self, ids: &[u64]) {
        self.settle(
            ids.iter().copied(),
            |publishing_id| Ok(Confirmation::Confirmed { publishing_id }),
            |m, s, n| m.confirmed(s, n),
        );
    }

    /// PublishError: this id was refused.
    pub(crate) fn rejected(&self, wire: u64, code: u16) {
        self.settle(
            [wire],
            |publishing_id| {
                Ok(Confirmation::Rejected {
                    publishing_id,
                    code: ResponseCode::from_u16(code),
                })
            },
            |m, s, n| m.errored(s, n),
        );
    }

    /// The producer or its connection ended: every outstanding publish
    /// learns why (it may or may not have been stored).
    pub(crate) fn fail_all(&self, why: &Error) {
        let all: Vec<u64> = self.pending.lock().keys().copied().collect();
        self.settle(all, |_| Err(why.clone()), |m, s, n| m.errored(s, n));
    }

    /// How many publishes await their confirm.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.lock().values().map(|s| s.under.len()).sum()
    }
}

/// The broker's answer to one publish: a future resolving to its
/// [`Confirmation`], or to an error when the producer or its connection
/// ended first (the message may or may not have been stored).
#[must_use = "a confirm says whether the broker stored the message"]
pub struct Confirm(Awaited);

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Confirm")
    }
}

enum Awaited {
    /// One message's word.
    One(oneshot::Receiver<Told>),
    /// Several partitions' words on one message (a super stream key
    /// bound to more than one).
    All(Pin<Box<dyn Future<Output = Told> + Send>>),
}

impl Confirm {
    /// One confirm for a message sent to several streams: the first that
    /// is not a confirmation, else the first.
    pub(crate) fn all(confirms: Vec<Confirm>) -> Confirm {
        Confirm(Awaited::All(Box::pin(async move {
            let told = futures_util::future::join_all(confirms).await;
            let bad = told.iter().position(|t| !matches!(t, Ok(c) if c.is_confirmed()));
            told.into_iter()
                .nth(bad.unwrap_or(0))
                .unwrap_or(Err(Error::Protocol("a message sent nowhere".into())))
        })))
    }
}

impl Future for Confirm {
    type Output = Result<Confirmation, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Awaited::One(rx) => Pin::new(rx).poll(cx).map(|r| {
                r.unwrap_or_else(|_| {
                    Err(Error::ConnectionLost(
                        "the producer ended before the confirm".into(),
                    ))
                })
            }),
            Awaited::All(f) => f.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Message;

    fn one(c: &Confirms, wire: u64) -> Confirm {
        let mut out = Vec::new();
        c.wait(wire, &[wire], Body::Simple(Message::new("m")), &mut out);
        out.pop().unwrap()
    }

    #[tokio::test]
    async fn confirms_and_errors_settle_their_publishes_and_free_their_places() {
        let c = Confirms::new(2);
        c.take(2).await;
        let a = one(&c, 1);
        let b = one(&c, 2);
        assert_eq!(c.slots.available_permits(), 0);
        assert_eq!(
            c.unconfirmed().iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            vec![1, 2]
        );
        c.confirmed(&[1, 7]);
        c.rejected(2, 0x06);
        assert_eq!(a.await.unwrap(), Confirmation::Confirmed { publishing_id: 1 });
        assert_eq!(
            b.await.unwrap(),
            Confirmation::Rejected {
                publishing_id: 2,
                code: ResponseCode::StreamNotAvailable
            }
        );
        assert_eq!(c.slots.available_permits(), 2);
        c.take(1).await;
        let d = one(&c, 3);
        c.lost(Error::Closed);
        assert!(
            matches!(d.await, Err(Error::Closed)),
            "no recovery: lost is failed"
        );
        assert_eq!(c.outstanding(), 0);
        // A sub-entry batch: one confirm under its last id settles all.
        c.take(2).await;
        let mut out = Vec::new();
        c.wait(5, &[4, 5], Body::Simple(Message::new("batch")), &mut out);
        assert_eq!(c.outstanding(), 2);
        c.confirmed(&[5]);
        let f = out.pop().unwrap();
        let e = out.pop().unwrap();
        assert_eq!(e.await.unwrap(), Confirmation::Confirmed { publishing_id: 4 });
        assert_eq!(f.await.unwrap(), Confirmation::Confirmed { publishing_id: 5 });
        assert_eq!(c.slots.available_permits(), 2);
    }
}
