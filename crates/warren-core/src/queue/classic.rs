//! The classic queue, in memory: a FIFO (or one FIFO per priority with
//! x-max-priority) of ready messages ordered by position, consumers ordered
//! by x-priority and served round-robin within a priority, single active
//! consumer, per-queue and per-message TTL (expiring at the head, as
//! RabbitMQ does), length limits with the three overflow behaviours, and
//! dead-lettering. Unacknowledged messages live with the channel that got
//! them; the queue only counts them, and a requeued message goes back to its
//! original position.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::BrokerError;
use crate::message::MessageRef;

use super::consumer::{Consumer, ConsumerInfo, ConsumerSpec, FlowWaiter};
use warren_store::{QueueStore, Recovered, Storage};

use super::paging::{Paging, Stored, WINDOW_BYTES, WINDOW_LOW, WINDOW_MAX};
use super::{
    Answer, Ctx, Entry, Overflow, PublishOutcome, QueueConfig, QueueStats, QueueType, Reason, Settle, Ticket,
};

/// Ready messages above which a queue with consumers asks publishers to
/// pause, and below which it lets them go on. The backlog, and so the
/// latency of a consumer keeping up, stays around a few thousand messages
/// instead of growing while publishers outrun consumers.
const FLOW_HIGH: u64 = 2000;
const FLOW_LOW: u64 = 1000;

#[derive(Debug)]
pub struct ClassicQueue {
    /// One FIFO per priority level (a single one without x-max-priority),
    /// each ordered by `seq`: the in-memory window of ready messages.
    pub(super) ready: Vec<VecDeque<Entry>>,
    /// Messages and body bytes in `ready` (the store's tail comes on top).
    pub(super) ready_count: u64,
    pub(super) ready_bytes: u64,
    unacked: u64,
    pub(super) next_seq: u64,
    /// The message store: durable messages and the paged-out tail.
    pub(super) paging: Paging,
    consumers: Vec<Consumer>,
    /// Round-robin cursor among equal-priority consumers.
    rr: usize,
    /// Set once a consumer has existed (auto-delete needs one to have left).
    had_consumer: bool,
    last_used: Instant,
    flow_waiters: Vec<Arc<dyn FlowWaiter>>,
}

impl ClassicQueue {
    pub fn new(config: &QueueConfig, now: Instant, paging: Paging) -> ClassicQueue {
        let levels = config.max_priority.map(|p| p as usize + 1).unwrap_or(1);
        ClassicQueue {
            ready: (0..levels).map(|_| VecDeque::new()).collect(),
            ready_count: 0,
            ready_bytes: 0,
            unacked: 0,
            next_seq: 0,
            paging,
            consumers: Vec::new(),
            rr: 0,
            had_consumer: false,
            last_used: now,
            flow_waiters: Vec::new(),
        }
    }

    fn level(&self, priority: u8) -> usize {
        (priority as usize).min(self.ready.len() - 1)
    }

    pub(super) fn push_ready(&mut self, e: Entry) {
        self.ready_count += 1;
        self.ready_bytes += e.message.body_size() as u64;
        let l = self.level(e.message.priority);
        let q = &mut self.ready[l];
        // Requeued entries go back to their position; new ones at the tail.
        if q.back().is_none_or(|b| b.seq < e.seq) {
            q.push_back(e);
        } else {
            let at = q.partition_point(|x| x.seq < e.seq);
            q.insert(at, e);
        }
    }

    /// The level holding the next message to deliver: the highest non-empty.
    fn head_level(&self) -> Option<usize> {
        (0..self.ready.len()).rev().find(|&l| !self.ready[l].is_empty())
    }

    /// basic.get: the next ready message and how many remain.
    fn take_next(&mut self, ctx: &mut Ctx, no_ack: bool) -> Option<(Entry, u64)> {
        self.last_used = ctx.now;
        self.expire_heads(ctx);
        self.refill(ctx);
        let e = self.pop_ready()?;
        if no_ack {
            ctx.queue.memory.sub(e.message.memory_size());
            self.paging.forget(&e);
        } else {
            self.paging.delivered(&e);
            self.unacked += 1;
        }
        Some((e, self.total_ready()))
    }

    fn pop_ready(&mut self) -> Option<Entry> {
        let l = self.head_level()?;
        let e = self.ready[l].pop_front()?;
        self.ready_count -= 1;
        self.ready_bytes -= e.message.body_size() as u64;
        Some(e)
    }

    /// Ready messages, in memory and paged out.
    fn total_ready(&self) -> u64 {
        self.ready_count + self.paging.tail_len()
    }

    fn pop_oldest(&mut self, ctx: &mut Ctx) -> Option<Entry> {
        self.refill(ctx);
        // drop-head drops the oldest message, whatever its priority.
        let l = (0..self.ready.len())
            .filter(|&l| !self.ready[l].is_empty())
            .min_by_key(|&l| self.ready[l][0].seq)?;
        let e = self.ready[l].pop_front()?;
        self.ready_count -= 1;
        self.ready_bytes -= e.message.body_size() as u64;
        Some(e)
    }

    /// Dead-letter (or drop) expired messages at the head of every level
    /// (and, for a paged queue, of what comes back from the store).
    fn expire_heads(&mut self, ctx: &mut Ctx) {
        for l in 0..self.ready.len() {
            loop {
                while let Some(front) = self.ready[l].front() {
                    // Strictly past: a TTL-0 message may still go to a consumer
                    // waiting right now (see `publish`).
                    match front.expires_at {
                        Some(t) if t < ctx.now => {}
                        _ => break,
                    }
                    if let Some(e) = self.ready[l].pop_front() {
                        self.ready_count -= 1;
                        self.ready_bytes -= e.message.body_size() as u64;
                        ctx.queue.memory.sub(e.message.memory_size());
                        self.paging.forget(&e);
                        ctx.dead_letter(&e.message, Reason::Expired);
                    }
                }
                if self.ready[l].is_empty() && self.pages() && self.paging.tail_len() > 0 {
                    // The head expired away: the next messages are on disk.
                    self.refill(ctx);
                    if !self.ready[l].is_empty() {
                        continue;
                    }
                }
                break;
            }
        }
    }

    fn over_limit(&self, config: &QueueConfig, extra_count: u64, extra_bytes: u64) -> bool {
        config
            .max_length
            .is_some_and(|m| self.total_ready() + extra_count > m)
            || config
                .max_length_bytes
                .is_some_and(|m| self.ready_bytes + self.paging.tail_bytes() + extra_bytes > m)
    }

    /// Index of the consumer to serve next, if any has credit: the highest
    /// x-priority first, round-robin among equals; with single active
    /// consumer, only the first registered.
    fn pick_consumer(&mut self, ctx: &Ctx) -> Option<usize> {
        if self.consumers.is_empty() {
            return None;
        }
        if ctx.config().single_active_consumer {
            return self.usable(0, ctx).then_some(0);
        }
        let n = self.consumers.len();
        let mut start = 0;
        while start < n {
            let p = self.consumers[start].spec.priority;
            let end = (start..n)
                .find(|&i| self.consumers[i].spec.priority != p)
                .unwrap_or(n);
            let len = end - start;
            for k in 0..len {
                let i = start + (self.rr + k) % len;
                if self.usable(i, ctx) {
                    self.rr = self.rr.wrapping_add(k + 1);
                    return Some(i);
                }
            }
            start = end;
        }
        None
    }

    fn usable(&self, i: usize, ctx: &Ctx) -> bool {
        let c = &self.consumers[i];
        if !c.has_credit() {
            return false;
        }
        if !c.spec.sink.has_room() {
            c.spec.sink.wait_for_room(Arc::downgrade(ctx.queue));
            return false;
        }
        true
    }

    fn deliver_to(&mut self, ctx: &mut Ctx, i: usize, entry: Entry) {
        let c = &mut self.consumers[i];
        if c.spec.no_ack {
            ctx.queue.memory.sub(entry.message.memory_size());
            self.paging.forget(&entry);
        } else {
            self.paging.delivered(&entry);
            self.unacked += 1;
        }
        c.hand_over(ctx.queue, entry);
    }

    /// After an enqueue: trim to the length limits (drop-head) and ask
    /// publishers to slow down if consumers are falling behind.
    fn after_publish(&mut self, ctx: &mut Ctx, config: &QueueConfig) {
        if config.overflow == Overflow::DropHead {
            while self.over_limit(config, 0, 0) {
                let Some(e) = self.pop_oldest(ctx) else { break };
                ctx.queue.memory.sub(e.message.memory_size());
                self.paging.forget(&e);
                ctx.dead_letter(&e.message, Reason::MaxLen);
            }
        }
        if self.total_ready() > FLOW_HIGH && !self.consumers.is_empty() {
            ctx.effects.flow = true;
        }
    }

    /// Let paused publishers go once the backlog is low (or gone).
    fn resume_publishers(&mut self) {
        if !self.flow_waiters.is_empty() && (self.total_ready() <= FLOW_LOW || self.consumers.is_empty()) {
            for w in self.flow_waiters.drain(..) {
                w.resume();
            }
        }
    }

    fn release(&mut self, consumer_id: Option<u64>, n: u32) {
        self.unacked = self.unacked.saturating_sub(n as u64);
        if let Some(id) = consumer_id {
            if let Some(c) = self.consumers.iter_mut().find(|c| c.spec.id == id) {
                c.unacked = c.unacked.saturating_sub(n);
            }
        }
    }
}

impl QueueType for ClassicQueue {
    fn publish(&mut self, ctx: &mut Ctx, msg: MessageRef) -> PublishOutcome {
        let config = ctx.config();
        let body = msg.body_size() as u64;
        if matches!(
            config.overflow,
            Overflow::RejectPublish | Overflow::RejectPublishDlx
        ) && self.over_limit(config, 1, body)
        {
            // Consumers waiting with credit would take it at once; RabbitMQ
            // still refuses when the ready count is at the limit.
            if config.overflow == Overflow::RejectPublishDlx {
                ctx.dead_letter(&msg, Reason::MaxLen);
            }
            return PublishOutcome::Rejected;
        }
        let ttl = match (config.message_ttl_ms, msg.expiration_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if ttl == Some(0) && self.paging.tail_len() > 0 {
            // Behind a paged-out backlog no consumer can take it now.
            ctx.dead_letter(&msg, Reason::Expired);
            return PublishOutcome::Enqueued;
        }
        let seq = self.next_seq;
        let priority = msg.priority;
        self.next_seq += 1;
        let stored = match self.paging.store(ctx, seq, &msg, ttl, self.page_out()) {
            Stored::No => false,
            Stored::Failed => return PublishOutcome::Rejected,
            Stored::InWindow(ticket) => {
                ctx.effects.sync = ticket.map(Ticket::Disk);
                true
            }
            Stored::InTail(ticket) => {
                ctx.effects.sync = ticket.map(Ticket::Disk);
                self.after_publish(ctx, config);
                return PublishOutcome::Enqueued;
            }
        };
        if ttl.is_some() {
            ctx.effects.arm_timer = true;
        }
        ctx.queue.memory.add(msg.memory_size());
        self.push_ready(Entry {
            seq,
            message: msg,
            redelivered: false,
            delivery_count: 0,
            expires_at: ttl.map(|t| ctx.now + Duration::from_millis(t)),
            stored,
            annotated: false,
        });
        self.pump(ctx);
        // TTL 0: delivered only if a consumer took it at once; otherwise it
        // expires now (it is the newest message, at the tail of its level).
        if ttl == Some(0) {
            let l = self.level(priority);
            if self.ready[l].back().is_some_and(|e| e.seq == seq) {
                if let Some(e) = self.ready[l].pop_back() {
                    self.ready_count -= 1;
                    self.ready_bytes -= e.message.body_size() as u64;
                    ctx.queue.memory.sub(e.message.memory_size());
                    self.paging.forget(&e);
                    ctx.dead_letter(&e.message, Reason::Expired);
                }
            }
        }
        self.after_publish(ctx, config);
        PublishOutcome::Enqueued
    }

    fn consume(&mut self, ctx: &mut Ctx, spec: ConsumerSpec) -> Result<(), BrokerError> {
        let exclusive_taken = self.consumers.iter().any(|c| c.spec.exclusive);
        if exclusive_taken || (spec.exclusive && !self.consumers.is_empty()) {
            return Err(BrokerError::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                ctx.queue.name, ctx.queue.vhost
            )));
        }
        // Keep consumers sorted by priority, highest first; stable, so
        // registration order breaks ties (and picks the single active one).
        let at = self
            .consumers
            .partition_point(|c| c.spec.priority >= spec.priority);
        let at = if ctx.config().single_active_consumer {
            self.consumers.len()
        } else {
            at
        };
        self.consumers.insert(at, Consumer { spec, unacked: 0 });
        self.had_consumer = true;
        self.pump(ctx);
        Ok(())
    }

    fn cancel(&mut self, ctx: &mut Ctx, consumer_id: u64) -> bool {
        let Some(i) = self.consumers.iter().position(|c| c.spec.id == consumer_id) else {
            return false;
        };
        self.consumers.remove(i);
        if self.consumers.is_empty() {
            self.last_used = ctx.now;
            if ctx.queue.auto_delete && self.had_consumer {
                ctx.effects.delete_queue = true;
            }
        }
        // With a single active consumer, the next one takes over.
        self.pump(ctx);
        true
    }

    fn settle(&mut self, ctx: &mut Ctx, consumer_id: Option<u64>, entries: Vec<Entry>, how: Settle) {
        let n = entries.len() as u32;
        self.release(consumer_id, n);
        for e in entries {
            match how {
                Settle::Ack => {
                    ctx.queue.memory.sub(e.message.memory_size());
                    self.paging.forget(&e);
                }
                Settle::Discard => {
                    ctx.queue.memory.sub(e.message.memory_size());
                    self.paging.forget(&e);
                    ctx.dead_letter(&e.message, Reason::Rejected);
                }
                Settle::Requeue => {
                    let mut e = e;
                    e.redelivered = true;
                    self.push_ready(e);
                }
            }
        }
        self.pump(ctx);
    }

    fn get(&mut self, ctx: &mut Ctx, no_ack: bool) -> Answer<Option<(Entry, u64)>> {
        Answer::Now(self.take_next(ctx, no_ack))
    }

    fn pump(&mut self, ctx: &mut Ctx) {
        loop {
            self.refill(ctx);
            self.expire_heads(ctx);
            if self.ready_count == 0 {
                break;
            }
            let Some(i) = self.pick_consumer(ctx) else { break };
            let Some(e) = self.pop_ready() else { break };
            self.deliver_to(ctx, i, e);
        }
        self.resume_publishers();
    }

    fn wait_for_drain(&mut self, waiter: Arc<dyn FlowWaiter>) -> bool {
        if self.total_ready() <= FLOW_LOW || self.consumers.is_empty() {
            return false;
        }
        if !self.flow_waiters.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
            self.flow_waiters.push(waiter);
        }
        true
    }

    fn purge(&mut self, ctx: &mut Ctx) -> Answer<u64> {
        let mut n = self.ready_count;
        for level in &mut self.ready {
            for e in level.drain(..) {
                ctx.queue.memory.sub(e.message.memory_size());
                self.paging.forget(&e);
            }
        }
        n += self.paging.purge_tail(self.next_seq);
        self.ready_count = 0;
        self.ready_bytes = 0;
        self.resume_publishers();
        Answer::Now(n)
    }

    fn expire(&mut self, ctx: &mut Ctx) {
        self.expire_heads(ctx);
        // An expired head may have let a consumer's next message through.
        self.pump(ctx);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.ready
            .iter()
            .filter_map(|l| l.front().and_then(|e| e.expires_at))
            .min()
    }

    fn delete(&mut self, ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        self.purge(ctx);
        self.paging.destroy();
        self.consumers.drain(..).map(|c| c.spec).collect()
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.total_ready(),
            unacked: self.unacked,
            consumers: self.consumers.len() as u32,
            ready_bytes: self.ready_bytes + self.paging.tail_bytes(),
            ram_bytes: self.ready_bytes,
            ram_messages: self.ready_count,
            ..QueueStats::default()
        }
    }

    fn consumers(&self) -> Vec<ConsumerInfo> {
        self.consumers.iter().map(Consumer::info).collect()
    }

    /// A policy's new max-length drops (or dead-letters) the oldest at
    /// once, as RabbitMQ does when a policy changes.
    fn limits_changed(&mut self, ctx: &mut Ctx) {
        let config = ctx.config();
        self.after_publish(ctx, config);
    }

    fn idle_since(&self) -> Option<Instant> {
        self.consumers.is_empty().then_some(self.last_used)
    }

    fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }
}

/// The window of ready messages kept in memory, and paging beyond it.
impl ClassicQueue {
    /// Take over what recovery found in the queue's store.
    pub fn attach_recovered(&mut self, storage: Option<Arc<Storage>>, store: QueueStore, rec: &Recovered) {
        self.next_seq = self.next_seq.max(rec.next_seq);
        self.paging = Paging::recovered(storage, store);
    }

    /// May this queue page out (no priorities)?
    pub(super) fn pages(&self) -> bool {
        self.ready.len() == 1
    }

    /// Refill the window from the store when it runs low (a priority queue
    /// takes everything at once).
    pub(super) fn refill(&mut self, ctx: &mut Ctx) {
        if self.paging.tail_len() == 0 {
            return;
        }
        let (max, max_bytes) = if self.pages() {
            if self.ready_count >= WINDOW_LOW {
                return;
            }
            (
                WINDOW_MAX - self.ready_count,
                WINDOW_BYTES.saturating_sub(self.ready_bytes).max(1),
            )
        } else {
            (u64::MAX, u64::MAX)
        };
        let mut entries = Vec::new();
        self.paging.load(ctx, max, max_bytes, &mut entries);
        for e in entries {
            if e.expires_at.is_some() {
                ctx.effects.arm_timer = true;
            }
            ctx.queue.memory.add(e.message.memory_size());
            self.push_ready(e);
        }
    }

    /// Should a new message go to the tail rather than the window?
    pub(super) fn page_out(&self) -> bool {
        self.pages()
            && (self.paging.tail_len() > 0
                || self.ready_count >= WINDOW_MAX
                || self.ready_bytes >= WINDOW_BYTES)
    }
}
