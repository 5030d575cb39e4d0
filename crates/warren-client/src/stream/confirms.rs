//! A producer's publishes awaiting the broker's word, by publishing id,
//! and the in-flight limit they fill: the connection's reader settles
//! them (PublishConfirm, PublishError), and a publish waits for room
//! while `max_unconfirmed` are out.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::sync::{oneshot, Semaphore};

use super::error::{Error, ResponseCode};

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
/// sub-entry batch's messages (no list for the common case).
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
    pending: Mutex<HashMap<u64, Under>>,
    slots: Semaphore,
    max: usize,
}

impl Confirms {
    pub(crate) fn new(max_unconfirmed: usize) -> Confirms {
        let max = max_unconfirmed.max(1);
        Confirms {
            pending: Mutex::new(HashMap::new()),
            slots: Semaphore::new(max),
            max,
        }
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

    /// Message `id`, holding a place taken, is on its way under
    /// publishing id `wire` (its own, or its sub-entry batch's): its
    /// confirm arrives on the future.
    pub(crate) fn wait(&self, wire: u64, id: u64) -> Confirm {
        let (tx, rx) = oneshot::channel();
        let w = Waiting { id, tx };
        let mut p = self.pending.lock();
        match p.remove(&wire) {
            None => p.insert(wire, Under::One(w)),
            Some(Under::One(first)) => p.insert(wire, Under::Many(vec![first, w])),
            Some(Under::Many(mut v)) => {
                v.push(w);
                p.insert(wire, Under::Many(v))
            }
        };
        Confirm(rx)
    }

    /// Settle what waits under these wire ids, giving their places back.
    fn settle(&self, ids: impl IntoIterator<Item = u64>, told: impl Fn(u64) -> Told) {
        let settled: Vec<Under> = {
            let mut p = self.pending.lock();
            ids.into_iter().filter_map(|id| p.remove(&id)).collect()
        };
        let n: usize = settled.iter().map(Under::len).sum();
        for u in settled {
            u.tell(&told);
        }
        if n > 0 {
            self.slots.add_permits(n);
        }
    }

    /// PublishConfirm: these ids are stored.
    pub(crate) fn confirmed(&self, ids: &[u64]) {
        self.settle(ids.iter().copied(), |publishing_id| {
            Ok(Confirmation::Confirmed { publishing_id })
        });
    }

    /// PublishError: this id was refused.
    pub(crate) fn rejected(&self, wire: u64, code: u16) {
        self.settle([wire], |publishing_id| {
            Ok(Confirmation::Rejected {
                publishing_id,
                code: ResponseCode::from_u16(code),
            })
        });
    }

    /// The producer or its connection ended: every outstanding publish
    /// learns why (it may or may not have been stored).
    pub(crate) fn fail_all(&self, why: &Error) {
        let all: Vec<u64> = self.pending.lock().keys().copied().collect();
        self.settle(all, |_| Err(why.clone()));
    }

    /// How many publishes await their confirm.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.lock().values().map(Under::len).sum()
    }
}

/// The broker's answer to one publish: a future resolving to its
/// [`Confirmation`], or to an error when the producer or its connection
/// ended first (the message may or may not have been stored).
#[must_use = "a confirm says whether the broker stored the message"]
#[derive(Debug)]
pub struct Confirm(oneshot::Receiver<Told>);

impl Future for Confirm {
    type Output = Result<Confirmation, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(Error::ConnectionLost(
                    "the producer ended before the confirm".into(),
                ))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn confirms_and_errors_settle_their_publishes_and_free_their_places() {
        let c = Confirms::new(2);
        c.take(2).await;
        let a = c.wait(1, 1);
        let b = c.wait(2, 2);
        assert_eq!(c.slots.available_permits(), 0);
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
        let d = c.wait(3, 3);
        c.fail_all(&Error::Closed);
        assert!(matches!(d.await, Err(Error::Closed)));
        assert_eq!(c.outstanding(), 0);
        // A sub-entry batch: one confirm under its last id settles all.
        c.take(2).await;
        let e = c.wait(5, 4);
        let f = c.wait(5, 5);
        assert_eq!(c.outstanding(), 2);
        c.confirmed(&[5]);
        assert_eq!(e.await.unwrap(), Confirmation::Confirmed { publishing_id: 4 });
        assert_eq!(f.await.unwrap(), Confirmation::Confirmed { publishing_id: 5 });
        assert_eq!(c.slots.available_permits(), 2);
    }
}
