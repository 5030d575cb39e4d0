//! Consumers as a queue sees them, and the sink a front end hands the queue
//! to receive deliveries. The queue decides who gets which message and
//! counts each consumer's unacknowledged deliveries against its prefetch;
//! the sink only buffers (boundedly) what the queue gives it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use warren_amqp091::ShortStr;

use super::{Entry, Queue};

/// One delivery handed to a front end.
#[derive(Debug)]
pub struct Delivery {
    pub channel: u16,
    pub consumer_tag: ShortStr,
    pub consumer_id: u64,
    pub no_ack: bool,
    pub queue: Arc<Queue>,
    pub entry: Entry,
}

/// Where a queue puts deliveries for one connection. Called with the queue's
/// lock held: implementations must not block and must not call into a queue.
pub trait DeliverySink: Send + Sync + std::fmt::Debug {
    /// Is there room for another delivery? When there is not, the queue stops
    /// delivering to this sink's consumers and calls [`DeliverySink::wait_for_room`].
    fn has_room(&self) -> bool;
    fn deliver(&self, d: Delivery);
    /// The broker cancelled this consumer (its queue went away).
    fn cancelled(&self, channel: u16, consumer_tag: ShortStr);
    /// Remember `queue`, and call [`Queue::pump`] on it once room frees up.
    fn wait_for_room(&self, queue: Weak<Queue>);
}

/// A publisher paused by a queue's backlog (flow control, after RabbitMQ's
/// credit flow): resumed once the queue has drained below its low mark.
/// Called with the queue's lock held: must not block or call a queue.
pub trait FlowWaiter: Send + Sync + std::fmt::Debug {
    fn resume(&self);
}

/// A channel-wide prefetch limit (basic.qos global=true as RabbitMQ 3.x
/// defines it): shared by every consumer on the channel, across queues.
#[derive(Debug, Default)]
pub struct ChannelLimit {
    pub limit: AtomicU32,
    pub unacked: AtomicU32,
}

impl ChannelLimit {
    pub fn has_credit(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit == 0 || self.unacked.load(Ordering::Relaxed) < limit
    }

    pub fn taken(&self) {
        self.unacked.fetch_add(1, Ordering::Relaxed);
    }

    pub fn released(&self, n: u32) {
        let _ = self
            .unacked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }
}

/// What basic.consume asks of a queue.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub id: u64,
    pub connection_id: u64,
    pub channel: u16,
    pub tag: ShortStr,
    pub no_ack: bool,
    pub exclusive: bool,
    /// Per-consumer prefetch (basic.qos global=false); 0 is unlimited.
    pub prefetch: u32,
    /// The x-priority consumer argument.
    pub priority: i32,
    pub sink: Arc<dyn DeliverySink>,
    pub channel_limit: Option<Arc<ChannelLimit>>,
}

#[derive(Debug)]
pub(crate) struct Consumer {
    pub spec: ConsumerSpec,
    pub unacked: u32,
}

impl Consumer {
    /// May this consumer take one more message right now (prefetch only;
    /// sink room is checked separately because it has a side effect).
    pub fn has_credit(&self) -> bool {
        if self.spec.no_ack {
            return true;
        }
        if self.spec.prefetch != 0 && self.unacked >= self.spec.prefetch {
            return false;
        }
        self.spec.channel_limit.as_ref().is_none_or(|l| l.has_credit())
    }
}
