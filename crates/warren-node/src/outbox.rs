//! The outbox: where queues leave deliveries for one connection. Queues push
//! under their own lock (so deliveries to one consumer stay in order); the
//! connection task drains everything at once, turns it into frames, and
//! pumps the queues that stopped because the outbox was full. Bounded by
//! count and bytes, so a slow socket slows its queues' delivery instead of
//! growing memory.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_amqp091::ShortStr;
use warren_core::message::MessageRef;
use warren_core::queue::{Delivery, DeliverySink, FlowWaiter, Queue};

/// Deliveries buffered per connection before queues hold back.
const MAX_ITEMS: usize = 2048;
/// ... and bytes (at least one message always fits).
const MAX_BYTES: usize = 4 << 20;

#[derive(Debug)]
pub enum OutItem {
    Deliver(Delivery),
    /// A direct reply-to message (no queue, never acknowledged).
    Reply {
        channel: u16,
        consumer_tag: ShortStr,
        message: MessageRef,
    },
    /// The broker cancelled a consumer (basic.cancel from the server).
    Cancel {
        channel: u16,
        consumer_tag: ShortStr,
    },
    /// An AMQP 1.0 drain a queue's home answered (see
    /// `DeliverySink::drained`); after the deliveries it led to.
    Drained {
        consumer_id: u64,
    },
    /// A single active consumer's state (see `DeliverySink::activity`).
    Activity {
        consumer_id: u64,
        active: bool,
    },
}

#[derive(Debug, Default)]
struct Inner {
    items: VecDeque<OutItem>,
    waiting: Vec<Weak<Queue>>,
}

#[derive(Debug, Default)]
pub struct Outbox {
    inner: Mutex<Inner>,
    len: AtomicUsize,
    bytes: AtomicUsize,
    /// A queue this connection published into has drained (flow control).
    flow_resumed: AtomicBool,
    /// A round of the message store's fsync ended (publisher confirms).
    synced: AtomicBool,
    pub notify: Notify,
}

impl Outbox {
    pub fn new() -> Arc<Outbox> {
        Arc::new(Outbox::default())
    }

    /// The counters change only under the lock, together with the items, so
    /// `has_room` and `is_pending` (which read them without it) never see a
    /// count that disagrees with the buffer for long, and never strand an
    /// item: a drain racing a push used to zero the count after the push,
    /// leaving a delivery unseen until the next notification.
    fn push(&self, item: OutItem, size: usize) {
        let was_empty = {
            let mut inner = self.inner.lock();
            inner.items.push_back(item);
            self.len.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(size, Ordering::Relaxed);
            inner.items.len() == 1
        };
        if was_empty {
            self.notify.notify_one();
        }
    }

    pub fn push_reply(&self, channel: u16, consumer_tag: ShortStr, message: MessageRef) {
        let size = message.body.len();
        self.push(
            OutItem::Reply {
                channel,
                consumer_tag,
                message,
            },
            size,
        );
    }

    /// Did a queue let this (paused) publisher go since the last call?
    pub fn take_flow_resumed(&self) -> bool {
        self.flow_resumed.swap(false, Ordering::AcqRel)
    }

    /// Is anything waiting to be drained?
    pub fn is_pending(&self) -> bool {
        self.len.load(Ordering::Relaxed) > 0 || !self.inner.lock().waiting.is_empty()
    }

    /// Take everything buffered, and the queues waiting for room.
    pub fn drain(&self) -> (VecDeque<OutItem>, Vec<Weak<Queue>>) {
        let mut inner = self.inner.lock();
        let items = std::mem::take(&mut inner.items);
        let waiting = std::mem::take(&mut inner.waiting);
        self.len.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        drop(inner);
        (items, waiting)
    }
}

impl Outbox {
    /// Did an fsync round end since the last call?
    pub fn take_synced(&self) -> bool {
        self.synced.swap(false, Ordering::AcqRel)
    }
}

impl warren_store::SyncWaiter for Outbox {
    fn synced(&self) {
        self.synced.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

impl FlowWaiter for Outbox {
    fn resume(&self) {
        self.flow_resumed.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

impl DeliverySink for Outbox {
    fn has_room(&self) -> bool {
        let len = self.len.load(Ordering::Relaxed);
        len == 0 || (len < MAX_ITEMS && self.bytes.load(Ordering::Relaxed) < MAX_BYTES)
    }

    fn deliver(&self, d: Delivery) {
        let size = d.entry.message.body.len();
        self.push(OutItem::Deliver(d), size);
    }

    fn cancelled(&self, channel: u16, consumer_tag: ShortStr) {
        self.push(
            OutItem::Cancel {
                channel,
                consumer_tag,
            },
            0,
        );
    }

    fn drained(&self, consumer_id: u64) {
        self.push(OutItem::Drained { consumer_id }, 0);
    }

    fn activity(&self, consumer_id: u64, active: bool) {
        self.push(OutItem::Activity { consumer_id, active }, 0);
    }

    fn wait_for_room(&self, queue: Weak<Queue>) {
        let mut inner = self.inner.lock();
        if !inner.waiting.iter().any(|w| w.ptr_eq(&queue)) {
            inner.waiting.push(queue);
        }
        // The connection may have drained between our check and now: make
        // sure it looks again.
        drop(inner);
        self.notify.notify_one();
    }
}
