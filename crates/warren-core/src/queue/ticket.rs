//! When a publish may be confirmed. A queue on this node that wrote the
//! message to disk gives a [`SyncTicket`], done once an fsync covers it;
//! a queue on another node gives a [`RemoteConfirm`], done when that
//! node confirms the publish (after its own fsync), or refused when it
//! cannot (the queue refused it, or the node went away). The front ends
//! confirm a publish once all its tickets are done, as a nack if any was
//! refused.

use std::sync::Arc;

use parking_lot::Mutex;
use warren_store::{SyncTicket, SyncWaiter, Syncer};

#[derive(Clone, Debug)]
pub enum Ticket {
    Disk(SyncTicket),
    Remote(Arc<RemoteConfirm>),
}

impl Ticket {
    pub fn is_done(&self) -> bool {
        match self {
            Ticket::Disk(t) => t.is_synced(),
            Ticket::Remote(r) => r.outcome().is_some(),
        }
    }

    /// Done and not refused (a disk ticket is never refused).
    pub fn is_ok(&self) -> bool {
        match self {
            Ticket::Disk(_) => true,
            Ticket::Remote(r) => r.outcome() == Some(true),
        }
    }

    /// Have `w` told when this may be done: after the next sync round for
    /// a disk ticket, when the answer comes for a remote one.
    pub fn wake(&self, syncer: Option<&Arc<Syncer>>, w: &Arc<dyn SyncWaiter>) {
        match self {
            Ticket::Disk(_) => {
                if let Some(s) = syncer {
                    s.wait(w.clone());
                }
            }
            Ticket::Remote(r) => r.wake(w),
        }
    }
}

/// A publish to a queue on another node, until that node answers.
#[derive(Default)]
pub struct RemoteConfirm {
    state: Mutex<RemoteState>,
}

#[derive(Default)]
struct RemoteState {
    outcome: Option<bool>,
    waiters: Vec<Arc<dyn SyncWaiter>>,
}

impl std::fmt::Debug for RemoteConfirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteConfirm({:?})", self.outcome())
    }
}

impl RemoteConfirm {
    pub fn new() -> Arc<RemoteConfirm> {
        Arc::new(RemoteConfirm::default())
    }

    /// None until answered; then whether the home took it.
    pub fn outcome(&self) -> Option<bool> {
        self.state.lock().outcome
    }

    /// The home's answer (the first one counts); waiters are told.
    pub fn resolve(&self, ok: bool) {
        let waiters = {
            let mut s = self.state.lock();
            if s.outcome.is_some() {
                return;
            }
            s.outcome = Some(ok);
            std::mem::take(&mut s.waiters)
        };
        for w in waiters {
            w.synced();
        }
    }

    fn wake(&self, w: &Arc<dyn SyncWaiter>) {
        let mut s = self.state.lock();
        if s.outcome.is_some() {
            drop(s);
            w.synced();
        } else if !s.waiters.iter().any(|x| Arc::ptr_eq(x, w)) {
            s.waiters.push(w.clone());
        }
    }
}
