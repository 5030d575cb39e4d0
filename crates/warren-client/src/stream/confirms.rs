//! A producer's publishes awaiting the broker's word, by publishing id,
//! and the in-flight limit they fill: the connection's reader settles
//! them (PublishConfirm, PublishError), and a publish waits for room
//! while `max_unconfirmed` are out.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

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
    /// Its place under the in-flight limit, given back when settled.
    _slot: OwnedSemaphorePermit,
}

/// One producer's outstanding publishes, by the publishing id they went
/// under on the wire.
pub(crate) struct Confirms {
    pending: Mutex<HashMap<u64, Vec<Waiting>>>,
    slots: Arc<Semaphore>,
}

impl Confirms {
    pub(crate) fn new(max_unconfirmed: usize) -> Confirms {
        Confirms {
            pending: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(max_unconfirmed.max(1))),
        }
    }

    /// A place under the in-flight limit, waiting while it is full.
    pub(crate) async fn slot(&self) -> OwnedSemaphorePermit {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// Message `id` is on its way under publishing id `wire` (its own, or
    /// its sub-entry batch's): its confirm arrives on the future.
    pub(crate) fn wait(&self, wire: u64, id: u64, slot: OwnedSemaphorePermit) -> Confirm {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .entry(wire)
            .or_default()
            .push(Waiting { id, tx, _slot: slot });
        Confirm(rx)
    }

    /// PublishConfirm: these ids are stored.
    pub(crate) fn confirmed(&self, ids: &[u64]) {
        let told: Vec<Waiting> = {
            let mut p = self.pending.lock();
            ids.iter().filter_map(|id| p.remove(id)).flatten().collect()
        };
        for w in told {
            let _ = w.tx.send(Ok(Confirmation::Confirmed { publishing_id: w.id }));
        }
    }

    /// PublishError: this id was refused.
    pub(crate) fn rejected(&self, wire: u64, code: u16) {
        let told = self.pending.lock().remove(&wire).unwrap_or_default();
        for w in told {
            let _ = w.tx.send(Ok(Confirmation::Rejected {
                publishing_id: w.id,
                code: ResponseCode::from_u16(code),
            }));
        }
    }

    /// The producer or its connection ended: every outstanding publish
    /// learns why (it may or may not have been stored).
    pub(crate) fn fail_all(&self, why: &Error) {
        let all: Vec<Waiting> = self.pending.lock().drain().flat_map(|(_, w)| w).collect();
        for w in all {
            let _ = w.tx.send(Err(why.clone()));
        }
    }

    /// How many publishes await their confirm.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.lock().values().map(Vec::len).sum()
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
    async fn confirms_and_errors_settle_their_publishes_and_free_their_slots() {
        let c = Confirms::new(2);
        let a = c.wait(1, 1, c.slot().await);
        let b = c.wait(2, 2, c.slot().await);
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
        let d = c.wait(3, 3, c.slot().await);
        c.fail_all(&Error::Closed);
        assert!(matches!(d.await, Err(Error::Closed)));
        assert_eq!(c.outstanding(), 0);
        // A sub-entry batch: one confirm under its last id settles all.
        let e = c.wait(5, 4, c.slot().await);
        let f = c.wait(5, 5, c.slot().await);
        c.confirmed(&[5]);
        assert_eq!(e.await.unwrap(), Confirmation::Confirmed { publishing_id: 4 });
        assert_eq!(f.await.unwrap(), Confirmation::Confirmed { publishing_id: 5 });
    }
}
