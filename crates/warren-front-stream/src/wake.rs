//! What wakes a stream connection's task from outside it: a stream it
//! reads has grown, a single-active-consumer subscription must become
//! active or step down, or the writer completed one of its chunks.

use tokio::sync::Notify;
use warren_core::queue::StreamWaiter;

/// Wakes the connection when a stream it reads has grown, or when one of
/// its single-active-consumer subscriptions became active or must step
/// down.
#[derive(Default)]
pub struct Wake {
    pub notify: Notify,
    /// Subscription id, and active (true) or stepping down (false).
    activations: parking_lot::Mutex<Vec<(u8, bool)>>,
    completions: parking_lot::Mutex<Vec<Completion>>,
}

/// A chunk the writer finished: confirm these ids (or report the error).
#[derive(Debug)]
pub struct Completion {
    pub publisher_id: u8,
    pub ids: Vec<u64>,
    pub error: Option<u16>,
    /// What this completion ends: the chunk's time at the writer and its
    /// confirm (`Whole`), only the writer's part (`Written`: a
    /// replicated stream's leader appended it, the confirm waits for a
    /// majority), or only the confirm of a chunk already `Written`.
    pub stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Whole,
    Written,
    Committed,
}

impl StreamWaiter for Wake {
    fn grown(&self) {
        self.notify.notify_one();
    }
}

impl Wake {
    /// Subscription `id` of this connection is now its group's active one.
    pub fn activate(&self, id: u8) {
        self.activations.lock().push((id, true));
        self.notify.notify_one();
    }

    /// Subscription `id` of this connection must step down (a super
    /// stream partition's group rebalanced).
    pub fn deactivate(&self, id: u8) {
        self.activations.lock().push((id, false));
        self.notify.notify_one();
    }

    pub(crate) fn take_activations(&self) -> Vec<(u8, bool)> {
        std::mem::take(&mut *self.activations.lock())
    }

    /// The writer finished a chunk of this connection's.
    pub fn complete(&self, c: Completion) {
        self.completions.lock().push(c);
        self.notify.notify_one();
    }

    pub(crate) fn take_completions(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.completions.lock())
    }
}
