//! Channel state (0-9-1 §2.2.2, the channel class): what a channel holds
//! between methods (its consumers and unacknowledged deliveries, confirms,
//! a publish whose content is still arriving, a transaction's buffer).
//! A channel is open, or closing after the server sent channel.close and
//! waits for close-ok (0-9-1 §4.2.6: everything else is then discarded).

use std::collections::VecDeque;

use ahash::AHashMap as HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use warren_amqp091::methods::*;
use warren_amqp091::ShortStr;
use warren_core::queue::{ChannelLimit, Entry, Queue, Ticket};

use bytes::{Bytes, BytesMut};
use warren_amqp091::FieldTable;
use warren_core::message::Message;
use warren_core::queue::Settle;
use warren_node::connections::ChannelInfo;

use crate::error::{AmqpError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelState {
    Open,
    /// We sent channel.close; waiting for close-ok.
    Closing,
}

/// A delivery the client has yet to settle.
#[derive(Debug)]
pub struct Unacked {
    pub tag: u64,
    pub queue: Arc<Queue>,
    /// None for basic.get.
    pub consumer_id: Option<u64>,
    pub entry: Entry,
    /// When it was written (the consumer timeout counts from it).
    pub delivered_at: std::time::Instant,
    /// Its queue's own consumer timeout (ms), if not the broker's.
    pub timeout: Option<u64>,
}

/// What to send once every ticket is synced.
#[derive(Debug)]
pub struct AfterSync {
    pub reply: SyncedReply,
    pub tickets: Vec<Ticket>,
}

#[derive(Debug, Clone, Copy)]
pub enum SyncedReply {
    /// basic.ack or basic.nack for publish `seq`.
    Confirm {
        seq: u64,
        ack: bool,
    },
    TxCommitOk,
}

#[derive(Debug)]
pub struct ConsumerRec {
    pub id: u64,
    pub queue: Arc<Queue>,
    /// Its queue's own consumer timeout (ms), when it has one.
    pub timeout: Option<u64>,
}

#[derive(Debug)]
pub struct Channel {
    pub id: u16,
    pub state: ChannelState,
    /// A publish whose header or body frames are still arriving.
    pub pending: Option<PendingPublish>,
    pub confirm: bool,
    /// Sequence number of the next publish in confirm mode (starts at 1).
    pub next_publish_seq: u64,
    /// Confirms decided but not yet sent: (seq, ack?) in order.
    pub confirms: Vec<(u64, bool)>,
    /// Replies that wait for the message store's fsync (confirms of
    /// persistent messages, tx.commit-ok), in order; later confirms queue
    /// behind earlier ones so `multiple` never covers an unsynced message.
    pub unsynced: VecDeque<AfterSync>,
    pub tx: Option<TxState>,
    /// basic.qos global=false: prefetch for consumers created from now on.
    pub prefetch: u32,
    /// basic.qos global=true: one limit for the whole channel.
    pub limit: Arc<ChannelLimit>,
    pub consumers: HashMap<ShortStr, ConsumerRec>,
    pub unacked: VecDeque<Unacked>,
    /// A delivery of a queue with its own consumer timeout was made here:
    /// the timeout check looks at every unacked delivery, not only the
    /// oldest (sticky; rare).
    pub custom_timeouts: bool,
    pub next_delivery_tag: u64,
    /// The last queue declared on this channel, for empty-name shortcuts.
    pub last_queue: Option<ShortStr>,
    /// The direct reply-to name and consumer tag, when consuming from it.
    pub reply_consumer: Option<(String, ShortStr)>,
    /// What the management API shows of this channel.
    pub info: Arc<ChannelInfo>,
}

impl Channel {
    pub fn new(id: u16, info: Arc<ChannelInfo>) -> Channel {
        Channel {
            id,
            state: ChannelState::Open,
            pending: None,
            confirm: false,
            next_publish_seq: 1,
            confirms: Vec::new(),
            unsynced: VecDeque::new(),
            tx: None,
            prefetch: 0,
            limit: Arc::new(ChannelLimit::default()),
            consumers: HashMap::new(),
            unacked: VecDeque::new(),
            custom_timeouts: false,
            next_delivery_tag: 1,
            last_queue: None,
            reply_consumer: None,
            info,
        }
    }

    /// Store this channel's numbers for the management API.
    pub fn publish_info(&self) {
        let i = &self.info;
        i.prefetch.store(self.prefetch, Relaxed);
        i.global_prefetch.store(self.limit.limit.load(Relaxed), Relaxed);
        i.confirm.store(self.confirm, Relaxed);
        i.transactional.store(self.tx.is_some(), Relaxed);
        i.consumers.store(self.consumers.len() as u32, Relaxed);
        i.unacked.store(self.unacked.len() as u64, Relaxed);
    }

    /// Resolve the empty-name shortcut (0-9-1 queue.declare: "the last
    /// queue declared on this channel").
    pub fn queue_name(&self, name: &ShortStr) -> Result<ShortStr> {
        if !name.is_empty() {
            return Ok(name.clone());
        }
        self.last_queue
            .clone()
            .ok_or_else(|| AmqpError::new(404, "no previously declared queue"))
    }
}

/// How the client settled a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Ack,
    Requeue,
    /// basic.reject with requeue: the consumer says processing failed,
    /// which counts towards a quorum queue's delivery limit (RabbitMQ
    /// 4.3's reading; basic.nack's requeue does not count).
    RequeueFailed,
    Discard,
}

impl How {
    pub fn reject(requeue: bool) -> How {
        if requeue {
            How::Requeue
        } else {
            How::Discard
        }
    }

    pub(crate) fn settle(self) -> Settle {
        match self {
            How::Ack => Settle::Ack,
            How::Requeue | How::RequeueFailed => Settle::Requeue,
            How::Discard => Settle::Discard,
        }
    }
}

#[derive(Debug)]
pub struct PendingPublish {
    pub(crate) method: BasicPublish,
    /// Body size and raw properties, once the header frame arrived.
    pub(crate) header: Option<(u64, Bytes)>,
    pub(crate) body: Body,
}

#[derive(Debug)]
pub(crate) enum Body {
    Empty,
    /// One body frame: kept as a slice of the read buffer, no copy.
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    pub(crate) fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(b) => b.len(),
            Body::Many(b) => b.len(),
        }
    }

    pub(crate) fn push(&mut self, part: Bytes) {
        *self = match std::mem::replace(self, Body::Empty) {
            Body::Empty => Body::One(part),
            Body::One(first) => {
                let mut m = BytesMut::with_capacity(first.len() + part.len());
                m.extend_from_slice(&first);
                m.extend_from_slice(&part);
                Body::Many(m)
            }
            Body::Many(mut m) => {
                m.extend_from_slice(&part);
                Body::Many(m)
            }
        }
    }

    /// The body as its own allocation. A single frame is copied out of the
    /// read buffer: a slice would pin the whole buffer (64 KiB) for as long
    /// as the message sits in a queue.
    pub(crate) fn freeze(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(b) => Bytes::copy_from_slice(&b),
            Body::Many(m) => m.freeze(),
        }
    }
}

/// A publish held back by a transaction until tx.commit.
#[derive(Debug)]
pub struct TxPublish {
    pub(crate) exchange: ShortStr,
    pub(crate) keys: Vec<ShortStr>,
    pub(crate) headers: Option<FieldTable>,
    pub(crate) message: Arc<Message>,
    pub(crate) mandatory: bool,
}

#[derive(Debug, Default)]
pub struct TxState {
    pub publishes: Vec<TxPublish>,
    /// Settlements taken out of the unacked list, applied on commit and put
    /// back on rollback.
    pub settles: Vec<(Unacked, How)>,
}
