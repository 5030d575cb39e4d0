//! A quorum queue as the broker's other queue types are used
//! ([`QueueType`]): what a client's publish, consume, settle, get and
//! purge do on this member (proposals to the group, or hand-offs to the
//! leader's node), its timers and its figures. Applying what commits is
//! `quorum.rs`'s.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_amqp091::{FieldValue, ShortStr};
use warren_fifo::{codec, Command};

use super::super::{
    now_ms, promise, Answer, ConsumerInfo, ConsumerSpec, Ctx, Entry, FlowWaiter, PublishOutcome, QueueStats,
    QueueType, RemoteConfirm, Settle, Ticket,
};
use super::{encode_message, is_getter, Consumer, Local, QuorumQueue, Role, Waiting};
use crate::error::BrokerError;
use crate::message::MessageRef;

/// The header a deduplicating queue reads its key from when
/// x-deduplication-header names none (as the community plugin does).
const DEDUP_HEADER: &str = "x-deduplication-header";

/// A message's deduplication key: the value of the queue's
/// x-deduplication-header header (by default a header of that name),
/// else its message-id; strings as they are, integers in decimal.
fn dedup_key(msg: &MessageRef, header: Option<&ShortStr>) -> Option<Vec<u8>> {
    let p = msg.properties().ok()?;
    let name = header.map_or(DEDUP_HEADER.to_string(), |h| h.to_str_lossy().to_string());
    if let Some(v) = p.headers.as_ref().and_then(|h| h.get(&name)) {
        return match v {
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => Some(b.to_vec()),
            v => v.as_i64().map(|n| n.to_string().into_bytes()),
        };
    }
    p.message_id.map(|m| m.as_bytes().to_vec())
}

impl QueueType for QuorumQueue {
    fn publish(&mut self, ctx: &mut Ctx, msg: MessageRef) -> PublishOutcome {
        if let (false, Some(leader), Some(c)) = (self.leads(), self.leader_node(), self.replication.get()) {
            if let Some(p) = c.publish(ctx.queue, &leader, &msg) {
                while self.sent.front().is_some_and(|c| c.outcome().is_some()) {
                    self.sent.pop_front();
                }
                self.sent.push_back(p.confirm.clone());
                ctx.effects.sync = Some(Ticket::Remote(p.confirm));
                ctx.effects.flow = p.flow;
                return PublishOutcome::Enqueued;
            }
            // The leader's node is not reachable from here (it may be
            // gone, and an election under way): proposed here, the Raft
            // thread holds it for whichever leader comes next.
        }
        let now = now_ms().max(0) as u64;
        let ttl = match (msg.expiration_ms, ctx.config().message_ttl_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let key = if self.fifo.config().dedup_window > 0 {
            dedup_key(&msg, ctx.config().quorum.dedup_header.as_ref())
        } else {
            None
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut e = Vec::with_capacity(64 + msg.memory_size());
        e.extend_from_slice(&self.system.node_id().to_le_bytes());
        e.extend_from_slice(&seq.to_le_bytes());
        codec::encode_enqueue(
            now,
            ttl.map(|t| now.saturating_add(t).max(1)),
            msg.body_size().min(u32::MAX as usize) as u32,
            // A queue without x-max-priority ignores priorities: its
            // entries are written as before them.
            if self.fifo.config().max_priority > 0 {
                msg.priority
            } else {
                0
            },
            key.as_deref(),
            &mut e,
        );
        encode_message(&msg, &mut e);
        let confirm = RemoteConfirm::new();
        self.confirms.insert(seq, (confirm.clone(), Instant::now()));
        self.system.propose(self.group, e);
        ctx.effects.sync = Some(Ticket::Remote(confirm));
        ctx.effects.flow = self.backlogged();
        PublishOutcome::Enqueued
    }

    /// On any member: the consumer is served by this node, whoever
    /// leads (its Consume goes to the leader like any proposal).
    fn consume(&mut self, _ctx: &mut Ctx, spec: ConsumerSpec) -> Result<(), BrokerError> {
        self.idle_since = None;
        let cid = self.cid(spec.id);
        let local = Local {
            consumer: Consumer { spec, unacked: 0 },
            waiting: VecDeque::new(),
            asked: 0,
            cid,
            settling: BTreeMap::new(),
            told_active: None,
        };
        let c = Self::consume_command(&local);
        self.locals.insert(local.consumer.spec.id, local);
        // Without a prefetch, its first window is proposed once this is
        // applied (`top_up` then finds it in the state).
        self.propose(0, &c);
        Ok(())
    }

    fn cancel(&mut self, _ctx: &mut Ctx, consumer_id: u64) -> bool {
        let Some(l) = self.locals.remove(&consumer_id) else {
            return false;
        };
        // Deliveries not handed over go back with what it holds.
        self.propose(0, &Command::Cancel { consumer: l.cid });
        true
    }

    fn settle(&mut self, _ctx: &mut Ctx, consumer_id: Option<u64>, entries: Vec<Entry>, how: Settle) {
        // A get the leader's node answered (this node's front end asked
        // it): settled there.
        let home = match consumer_id {
            Some(_) => None,
            None => self.leader_node(),
        };
        if let Some(home) = home {
            if let Some(c) = self.replication.get() {
                c.settle(&home, consumer_id, entries.iter().map(|e| e.seq).collect(), how);
            }
            return;
        }
        if let Some(l) = consumer_id.and_then(|id| self.locals.get_mut(&id)) {
            l.consumer.unacked = l.consumer.unacked.saturating_sub(entries.len() as u32);
            if let Some(cl) = &l.consumer.spec.channel_limit {
                cl.released(entries.len() as u32);
            }
        }
        self.ids_command(consumer_id, &entries, how);
    }

    /// basic.get, as RabbitMQ's quorum queues do it: a dequeue of the
    /// next message is proposed (a follower's goes to the leader like any
    /// proposal) and answered once applied here, so it comes after every
    /// command this node's clients sent before it (their publishes, their
    /// requeues) and sees what they did. The message is held under this
    /// node's getter (or, no-ack, leaves the queue).
    fn get(&mut self, _ctx: &mut Ctx, no_ack: bool) -> Answer<Option<(Entry, u64)>> {
        let (promise, answer) = promise();
        let seq = self.next_seq;
        self.next_seq += 1;
        let c = Command::DequeueNext {
            consumer: self.getter(),
            settled: no_ack,
        };
        self.propose(seq, &c);
        self.answers.insert(
            seq,
            Waiting::Get {
                no_ack,
                promise,
                at: Instant::now(),
            },
        );
        answer
    }

    fn pump(&mut self, ctx: &mut Ctx) {
        self.deliver(ctx);
        self.top_up();
    }

    fn drain(&mut self, _ctx: &mut Ctx, _consumer_id: u64) -> bool {
        false
    }

    /// As `get`: answered once applied, with the count it dropped.
    fn purge(&mut self, _ctx: &mut Ctx) -> Answer<u64> {
        let (promise, answer) = promise();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.propose(seq, &Command::Purge);
        self.answers.insert(
            seq,
            Waiting::Purge {
                promise,
                at: Instant::now(),
            },
        );
        answer
    }

    fn expire(&mut self, ctx: &mut Ctx) {
        if self.role != Role::Leader {
            return;
        }
        if !self.dlx.is_idle() {
            self.pump_dlx(ctx);
        }
        let now = now_ms().max(0) as u64;
        if let Some(t) = self.fifo.next_expiry() {
            if t <= now && self.tick_asked != Some(t) {
                self.tick_asked = Some(t);
                self.propose(0, &Command::Tick { now });
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.role != Role::Leader {
            return None;
        }
        let now = Instant::now();
        let expiry = self.fifo.next_expiry().map(|t| {
            if self.tick_asked == Some(t) {
                // Asked; look again in a moment in case the leader changes.
                now + Duration::from_secs(1)
            } else {
                now + Duration::from_millis(t.saturating_sub(now_ms().max(0) as u64))
            }
        });
        [expiry, self.dlx.next_look(now)].into_iter().flatten().min()
    }

    fn delete(&mut self, _ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        self.system.remove(self.group);
        self.nack_all();
        // Its files go with the group (the Raft thread's removal).
        self.bodies.clear();
        std::mem::take(&mut self.locals)
            .into_values()
            .map(|l| l.consumer.spec)
            .collect()
    }

    /// A policy changed the queue's settings: the leader proposes them.
    fn limits_changed(&mut self, ctx: &mut Ctx) {
        self.reconcile_config(ctx);
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.fifo.ready() as u64,
            unacked: self.fifo.checked_out() as u64,
            // Every node's, as the state has them.
            consumers: self.fifo.consumers().keys().filter(|c| !is_getter(**c)).count() as u32,
            ready_bytes: self.fifo.ready_bytes(),
            ram_bytes: self.bodies.in_memory().1,
            ram_messages: self.bodies.in_memory().0,
            dlx: self.fifo.discards().len() as u64,
            dlx_bytes: self.fifo.discard_bytes(),
            delayed: self.fifo.delayed().len() as u64,
        }
    }

    fn consumers(&self) -> Vec<ConsumerInfo> {
        self.locals.values().map(|l| l.consumer.info()).collect()
    }

    /// A follower's consumer count is the leader's (which its figures
    /// report): the state knows only how many consumers there are.
    fn set_figures(&mut self, _figures: QueueStats) {}

    fn wait_for_drain(&mut self, waiter: Arc<dyn FlowWaiter>) -> bool {
        if let (Some(leader), Some(c)) = (self.leader_node(), self.replication.get()) {
            return c.wait_for_credit(&leader, waiter);
        }
        if self.drained() {
            return false;
        }
        if !self.flow_waiters.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
            self.flow_waiters.push(waiter);
        }
        true
    }

    /// x-expires is the leader's to judge (it answers the gets; the
    /// state has every node's consumers); a follower never expires the
    /// queue.
    fn idle_since(&self) -> Option<Instant> {
        match self.role {
            Role::Leader => self.idle_since,
            _ => None,
        }
    }

    fn touch(&mut self, now: Instant) {
        if self.idle_since.is_some() {
            self.idle_since = Some(now);
        }
    }

    fn as_quorum(&mut self) -> Option<&mut QuorumQueue> {
        Some(self)
    }
}
