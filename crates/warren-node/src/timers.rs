//! Queue timers: message TTL expiry and x-expires. A queue gets a timer task
//! only once it needs one (a TTL argument, x-expires, or a message with an
//! expiration), so idle queues cost no wakeups. The task sleeps until the
//! queue's next deadline or until poked because an earlier one appeared.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::queue::Queue;
use warren_core::VHost;

/// How often a timer with nothing due checks that its queue still exists.
const IDLE_CHECK: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Timers {
    running: Mutex<HashMap<usize, Arc<Notify>>>,
}

impl Timers {
    pub fn new() -> Arc<Timers> {
        Arc::new(Timers::default())
    }

    /// Make sure `queue`'s timer runs and re-reads its deadlines.
    pub fn arm(self: &Arc<Self>, vhost: &Arc<VHost>, queue: &Arc<Queue>) {
        let key = Arc::as_ptr(queue) as usize;
        let mut running = self.running.lock();
        if let Some(n) = running.get(&key) {
            n.notify_one();
            return;
        }
        let notify = Arc::new(Notify::new());
        running.insert(key, notify.clone());
        drop(running);
        let timers = self.clone();
        let vhost = vhost.clone();
        let weak = Arc::downgrade(queue);
        tokio::spawn(async move {
            run(&timers, vhost, weak, notify).await;
            timers.running.lock().remove(&key);
        });
    }
}

async fn run(timers: &Arc<Timers>, vhost: Arc<VHost>, weak: Weak<Queue>, notify: Arc<Notify>) {
    loop {
        let Some(q) = weak.upgrade() else { return };
        if !vhost.queue_is_current(&q) {
            return;
        }
        let now = Instant::now();
        let effects = q.expire();
        let mut arm = |other: &Arc<Queue>| {
            if !Arc::ptr_eq(other, &q) {
                timers.arm(&vhost, other)
            }
        };
        vhost.apply(&q, effects, &mut arm);
        let mut next = q.next_deadline();
        if let Some(ms) = q.config().expires_ms {
            let ttl = Duration::from_millis(ms);
            match q.idle_since() {
                Some(idle) if now >= idle + ttl => {
                    vhost.discard_queue(&q);
                    return;
                }
                Some(idle) => next = Some(next.map_or(idle + ttl, |n| n.min(idle + ttl))),
                // In use: look again after one period.
                None => next = Some(next.map_or(now + ttl, |n| n.min(now + ttl))),
            }
        }
        drop(q);
        let until = next.unwrap_or(now + IDLE_CHECK).min(now + IDLE_CHECK);
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = notify.notified() => {}
        }
    }
}
