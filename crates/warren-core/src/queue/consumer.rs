//! Consumers as a queue sees them, and the sink a front end hands the queue
//! to receive deliveries. The queue decides who gets which message and
//! counts each consumer's unacknowledged deliveries against its prefetch;
//! the sink only buffers (boundedly) what the queue gives it.
//!
//! This file imports up, from `mod.rs`, the queue handle and its entries:
//! a delivery names the queue it comes from (the sink acks to it and
//! asks it for more), while the handle holds the consumers. Naming the
//! queue by id instead would cost a lookup on every delivery.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use warren_amqp091::ShortStr;

use super::{Entry, Queue};
use crate::stats::Stat;

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
    /// A drain of `consumer_id` sent to another node is done (see
    /// [`crate::queue::QueueType::drain`]); what it delivered came first.
    fn drained(&self, _consumer_id: u64) {}
    /// With a single active consumer, `consumer_id` became the active
    /// one (`true`) or stopped being it, or was told its state for the
    /// first time (quorum queues; AMQP 1.0 tells the receiver).
    fn activity(&self, _consumer_id: u64, _active: bool) {}
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

/// AMQP 1.0 link credit (§2.6.7), owned by the queue: it counts each
/// delivery under its own lock, so deliveries in flight to the connection
/// can never take a link past what the receiver granted. The front end
/// only sets credit from the receiver's flow, against this delivery-count.
#[derive(Debug, Default)]
pub struct LinkCredit {
    state: parking_lot::Mutex<(u32, u32)>,
}

impl LinkCredit {
    pub fn new(delivery_count: u32) -> LinkCredit {
        LinkCredit {
            state: parking_lot::Mutex::new((delivery_count, 0)),
        }
    }

    /// (delivery-count, credit) now.
    pub fn get(&self) -> (u32, u32) {
        *self.state.lock()
    }

    /// A flow from the receiver: its delivery-count (None before it has
    /// seen one) and link-credit. Credit = theirs + granted - ours
    /// (serial-number arithmetic), never negative.
    pub fn flow(&self, their_count: Option<u32>, link_credit: u32) -> u32 {
        let mut s = self.state.lock();
        let theirs = their_count.unwrap_or(s.0);
        let limit = theirs.wrapping_add(link_credit);
        let ahead = limit.wrapping_sub(s.0);
        s.1 = if ahead < (1 << 31) { ahead } else { 0 };
        s.1
    }

    /// Drain: use up what is left, as if delivered (§2.6.7). Returns the
    /// new delivery-count.
    pub fn drain(&self) -> u32 {
        let mut s = self.state.lock();
        s.0 = s.0.wrapping_add(s.1);
        s.1 = 0;
        s.0
    }

    fn has(&self) -> bool {
        self.state.lock().1 > 0
    }

    fn take(&self) {
        let mut s = self.state.lock();
        s.0 = s.0.wrapping_add(1);
        s.1 = s.1.saturating_sub(1);
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
    /// AMQP 1.0 receivers: deliveries are limited by link credit.
    pub link_credit: Option<Arc<LinkCredit>>,
    /// The consumer's arguments (basic.consume's; an AMQP 1.0 source's
    /// filters in the same terms): streams read x-stream-offset,
    /// x-stream-filter and x-stream-match-unfiltered.
    pub arguments: warren_amqp091::FieldTable,
    /// Which stored records a stream consumer gets (AMQP 1.0 filter
    /// expressions, judged on each message after the chunk's bloom
    /// filter); None: all.
    pub record_filter: Option<Arc<dyn RecordFilter>>,
}

/// A stream consumer's judge of each record (a stored message's bytes).
pub trait RecordFilter: Send + Sync + std::fmt::Debug {
    fn matches(&self, record: &[u8]) -> bool;
}

impl ConsumerSpec {
    /// Count one delivery against link credit (under the queue's lock, or
    /// by the cluster for a delivery from another node).
    pub fn took_credit(&self) {
        if let Some(c) = &self.link_credit {
            c.take();
        }
    }
}

#[derive(Debug)]
pub(crate) struct Consumer {
    pub spec: ConsumerSpec,
    pub unacked: u32,
}

/// A consumer as the management API lists it (`/api/consumers`).
#[derive(Debug, Clone)]
pub struct ConsumerInfo {
    pub connection_id: u64,
    pub channel: u16,
    pub tag: ShortStr,
    pub ack_required: bool,
    pub exclusive: bool,
    pub prefetch: u32,
    pub priority: i32,
    pub unacked: u32,
    /// False for a waiting single-active-consumer.
    pub active: bool,
    pub arguments: warren_amqp091::FieldTable,
}

impl Consumer {
    pub fn info(&self) -> ConsumerInfo {
        let s = &self.spec;
        ConsumerInfo {
            connection_id: s.connection_id,
            channel: s.channel,
            tag: s.tag.clone(),
            ack_required: !s.no_ack,
            exclusive: s.exclusive,
            prefetch: s.prefetch,
            priority: s.priority,
            unacked: self.unacked,
            active: true,
            arguments: s.arguments.clone(),
        }
    }

    /// Count a delivery against this consumer's credit (link credit,
    /// prefetch, the channel's limit unless no-ack) and hand it to its
    /// sink. The queue type does its own bookkeeping first.
    pub fn hand_over(&mut self, queue: &Arc<super::Queue>, entry: super::Entry) {
        self.spec.took_credit();
        if !self.spec.no_ack {
            self.unacked += 1;
            if let Some(l) = &self.spec.channel_limit {
                l.taken();
            }
        }
        queue.count(
            if self.spec.no_ack {
                Stat::DeliverNoAck
            } else {
                Stat::Deliver
            },
            1,
        );
        if entry.redelivered {
            queue.count(Stat::Redeliver, 1);
        }
        self.spec.sink.deliver(Delivery {
            channel: self.spec.channel,
            consumer_tag: self.spec.tag.clone(),
            consumer_id: self.spec.id,
            no_ack: self.spec.no_ack,
            queue: queue.clone(),
            entry,
        });
    }

    /// May this consumer take one more message right now (prefetch only;
    /// sink room is checked separately because it has a side effect).
    pub fn has_credit(&self) -> bool {
        if let Some(c) = &self.spec.link_credit {
            if !c.has() {
                return false;
            }
        }
        if self.spec.no_ack {
            return true;
        }
        if self.spec.prefetch != 0 && self.unacked >= self.spec.prefetch {
            return false;
        }
        self.spec.channel_limit.as_ref().is_none_or(|l| l.has_credit())
    }
}
