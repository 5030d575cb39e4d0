//! Group commit: one thread that writes out and fsyncs every store that
//! asked for it, then wakes whoever waits for durability. A round takes
//! every store dirtied since the last one, so the cost of an fsync is
//! shared by all the messages written while the previous one ran.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::writer::Shared;

/// Told when a sync round has finished; must not block (a connection's
/// implementation just wakes its task, which then checks its tickets).
pub trait SyncWaiter: Send + Sync {
    fn synced(&self);
}

#[derive(Default)]
struct State {
    dirty: Vec<Arc<Shared>>,
    waiters: Vec<Arc<dyn SyncWaiter>>,
    stop: bool,
}

pub struct Syncer {
    state: Mutex<State>,
    cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Syncer")
    }
}

impl Syncer {
    pub fn start() -> Arc<Syncer> {
        let s = Arc::new(Syncer {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            thread: Mutex::new(None),
        });
        let me = s.clone();
        let handle = std::thread::Builder::new()
            .name("warren-sync".into())
            .spawn(move || me.run())
            .expect("spawn the sync thread");
        *s.thread.lock() = Some(handle);
        s
    }

    /// Ask for a round covering `store` (once per round, whatever the
    /// number of writes: the store's dirty flag filters repeats).
    pub(crate) fn request(&self, store: &Arc<Shared>) {
        if !store.dirty.swap(true, Ordering::SeqCst) {
            let mut st = self.state.lock();
            st.dirty.push(store.clone());
            drop(st);
            self.cv.notify_one();
        }
    }

    /// Wake `w` after the next round ends (it then checks its tickets and
    /// registers again if some are still pending).
    ///
    /// Callers check their tickets first and register after, so the round
    /// they waited for may end in between and the thread go to sleep with
    /// nothing dirty: the notify makes it wake `w` at once rather than at
    /// the next write, which may never come (a publisher waiting for its
    /// confirms sends nothing).
    pub fn wait(&self, w: Arc<dyn SyncWaiter>) {
        let mut st = self.state.lock();
        if !st.waiters.iter().any(|x| Arc::ptr_eq(x, &w)) {
            st.waiters.push(w);
        }
        drop(st);
        self.cv.notify_one();
    }

    /// Finish the round in progress and stop the thread.
    pub fn stop(&self) {
        self.state.lock().stop = true;
        self.cv.notify_one();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }

    fn run(&self) {
        loop {
            let dirty = {
                let mut st = self.state.lock();
                while st.dirty.is_empty() && !st.stop {
                    // Waiters with nothing dirty were satisfied by the last
                    // round before they registered: wake them anyway.
                    if !st.waiters.is_empty() {
                        break;
                    }
                    self.cv.wait(&mut st);
                }
                if st.stop && st.dirty.is_empty() {
                    for w in st.waiters.drain(..) {
                        w.synced();
                    }
                    return;
                }
                std::mem::take(&mut st.dirty)
            };
            for s in dirty {
                // Clear first: a write that lands during the sync asks again.
                s.dirty.store(false, Ordering::SeqCst);
                if let Err(e) = s.sync() {
                    // Confirms wait until a later round succeeds; back off
                    // so a failing disk is not retried in a tight loop.
                    tracing::error!("message store sync failed (retrying): {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    self.request(&s);
                }
            }
            let waiters = std::mem::take(&mut self.state.lock().waiters);
            for w in waiters {
                w.synced();
            }
        }
    }
}
