//! Channel state (0-9-1 §2.2.2, the channel class) and method dispatch.
//! A channel is open, or closing after the server sent channel.close and
//! waits for close-ok (0-9-1 §4.2.6: everything else is then discarded).

use std::collections::VecDeque;

use ahash::AHashMap as HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use warren_amqp091::methods::*;
use warren_amqp091::{Method, ShortStr};
use warren_core::queue::{ChannelLimit, Entry, Queue, Ticket};

use super::connection::Conn;
use super::error::{AmqpError, Result};
use super::publish::{PendingPublish, TxState};
use super::{consume, declare, publish};
use warren_node::connections::ChannelInfo;

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

/// Handle one method on an open channel.
pub fn dispatch(conn: &mut Conn, ch: &mut Channel, m: Method) -> Result<()> {
    let (class_id, method_id) = (m.class_id(), m.method_id());
    if ch.pending.is_some() {
        return Err(AmqpError::new(
            505,
            "expected content header for class 60, got non content header frame instead",
        ));
    }
    let r = match m {
        Method::ChannelOpen(_) => Err(AmqpError::new(504, "second 'channel.open' seen")),
        Method::ChannelFlow(f) => {
            if f.active {
                conn.send(ch.id, ChannelFlowOk { active: true });
                Ok(())
            } else {
                Err(AmqpError::new(540, "active=false"))
            }
        }
        Method::ChannelFlowOk(_) => Ok(()),
        Method::ExchangeDeclare(m) => declare::exchange_declare(conn, ch, m),
        Method::ExchangeDelete(m) => declare::exchange_delete(conn, ch, m),
        Method::ExchangeBind(m) => declare::exchange_bind(conn, ch, m),
        Method::ExchangeUnbind(m) => declare::exchange_unbind(conn, ch, m),
        Method::QueueDeclare(m) => declare::queue_declare(conn, ch, m),
        Method::QueueBind(m) => declare::queue_bind(conn, ch, m),
        Method::QueueUnbind(m) => declare::queue_unbind(conn, ch, m),
        Method::QueuePurge(m) => declare::queue_purge(conn, ch, m),
        Method::QueueDelete(m) => declare::queue_delete(conn, ch, m),
        Method::BasicQos(m) => consume::basic_qos(conn, ch, m),
        Method::BasicConsume(m) => consume::basic_consume(conn, ch, m),
        Method::BasicCancel(m) => consume::basic_cancel(conn, ch, m),
        Method::BasicPublish(m) => publish::basic_publish(conn, ch, m),
        Method::BasicGet(m) => consume::basic_get(conn, ch, m),
        Method::BasicAck(m) => consume::settle(conn, ch, m.delivery_tag, m.multiple, consume::How::Ack),
        Method::BasicNack(m) => consume::settle(
            conn,
            ch,
            m.delivery_tag,
            m.multiple,
            consume::How::reject(m.requeue),
        ),
        Method::BasicReject(m) => {
            let how = if m.requeue {
                consume::How::RequeueFailed
            } else {
                consume::How::Discard
            };
            consume::settle(conn, ch, m.delivery_tag, false, how)
        }
        Method::BasicRecover(m) => consume::basic_recover(conn, ch, m.requeue, true),
        Method::BasicRecoverAsync(m) => consume::basic_recover(conn, ch, m.requeue, false),
        Method::TxSelect(_) => publish::tx_select(conn, ch),
        Method::TxCommit(_) => publish::tx_commit(conn, ch),
        Method::TxRollback(_) => publish::tx_rollback(conn, ch),
        Method::ConfirmSelect(m) => {
            if ch.tx.is_some() {
                Err(AmqpError::new(406, "cannot switch from tx to confirm mode"))
            } else {
                ch.confirm = true;
                if !m.nowait {
                    conn.send(ch.id, ConfirmSelectOk {});
                }
                Ok(())
            }
        }
        // Methods only a server sends, or connection methods on a channel.
        _ => Err(AmqpError::new(503, "unimplemented method")),
    };
    r.map_err(|e| e.on(class_id, method_id))
}

/// Release everything a channel holds: cancel its consumers (first, so
/// requeued messages do not come straight back to them), then requeue its
/// unacknowledged messages and forget its direct reply-to name.
pub fn cleanup(conn: &mut Conn, ch: &mut Channel) {
    ch.pending = None;
    ch.tx = None;
    for (_, rec) in ch.consumers.drain() {
        let (_, effects) = rec.queue.cancel(rec.id);
        conn.apply(&rec.queue, effects);
    }
    let unacked: Vec<Unacked> = ch.unacked.drain(..).collect();
    consume::settle_entries(conn, unacked, warren_core::queue::Settle::Requeue);
    if let Some((name, _)) = ch.reply_consumer.take() {
        conn.ctx.replies.unregister(&name);
    }
    ch.confirms.clear();
}
