//! The state, its commands and what applying them gives.

use std::collections::{BTreeMap, VecDeque};

/// A message's id: the Raft index of its enqueue (so ids only grow).
pub type MsgId = u64;
/// A consumer's id, chosen by the node that proposes its first credit.
pub type ConsumerId = u64;

/// What the queue was declared with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// `x-delivery-limit`: a message whose delivery count passes it is
    /// dead-lettered instead of returned (None: no limit).
    pub delivery_limit: Option<u32>,
    /// `x-max-length` and `x-max-length-bytes`: limits on the waiting
    /// messages (as RabbitMQ's quorum queues count them: what consumers
    /// hold is not counted).
    pub max_length: Option<u64>,
    pub max_bytes: Option<u64>,
    /// `x-overflow: reject-publish`: a message that would pass a limit is
    /// refused (the publisher hears a nack); otherwise (`drop-head`) the
    /// oldest waiting messages are dead-lettered to make room.
    pub reject_publish: bool,
    /// `x-single-active-consumer`: only the consumer that attached first
    /// (of those still there) is served; the next takes over when it goes.
    pub single_active: bool,
    /// `x-max-priority`: messages are served strictly by priority, from
    /// this (the highest; a message's above it counts as it) down to 0,
    /// as RabbitMQ 4.3's quorum queues do; 0 (or none): no priorities.
    pub max_priority: u8,
    /// `x-message-deduplication` with `x-cache-size`: an enqueue whose
    /// key is among the last this many keys enqueued is a duplicate (its
    /// publisher is confirmed, nothing is stored); 0: no deduplication.
    pub dedup_window: u32,
    /// `x-cache-ttl`: a key is forgotten this many milliseconds (leader
    /// time) after its enqueue; None: only the window forgets.
    pub dedup_ttl: Option<u64>,
    /// `x-dead-letter-strategy: at-least-once` in force (RabbitMQ's
    /// conditions: `reject-publish` and a dead-letter exchange, judged by
    /// the member): a dead-lettered message stays here, as a discard,
    /// until the leader has it in every target queue (`SettleDlx`).
    pub dlx_at_least_once: bool,
    /// RabbitMQ 4.3's delayed retry (`x-delayed-retry-*`): returned
    /// messages wait before they are served again.
    pub delayed_retry: Option<DelayedRetry>,
}

/// Which returns a delayed retry holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// Every return.
    All,
    /// Failed deliveries (basic.reject, modified with delivery-failed).
    Failed,
    /// The others (basic.nack, released, modified without it).
    Returned,
}

/// A delayed retry's settings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayedRetry {
    pub kind: RetryKind,
    pub min_ms: u64,
    pub max_ms: u64,
}

impl DelayedRetry {
    /// How long a return waits (RabbitMQ 4.3's rule: the minimum times
    /// the delivery count, at least once, up to the maximum), if it does.
    pub fn delay(&self, failed: bool, delivery_count: u32) -> Option<u64> {
        let applies = match self.kind {
            RetryKind::All => true,
            RetryKind::Failed => failed,
            RetryKind::Returned => !failed,
        };
        applies.then(|| {
            self.min_ms
                .saturating_mul(delivery_count.max(1) as u64)
                .min(self.max_ms.max(self.min_ms))
        })
    }
}

/// The highest `x-max-priority` a quorum queue keeps levels for (RabbitMQ
/// 4.3: 32 levels, 0 to 31).
pub const MAX_PRIORITY: u8 = 31;

impl Config {
    /// The waiting lines' levels.
    fn levels(&self) -> usize {
        self.max_priority.min(MAX_PRIORITY) as usize + 1
    }

    /// Past a limit with `ready` messages of `bytes` (with at-least-once
    /// dead-lettering, the discards count too, as rabbit_fifo's
    /// is_over_limit counts them).
    fn over(&self, ready: u64, bytes: u64) -> bool {
        self.max_length.is_some_and(|m| ready > m) || self.max_bytes.is_some_and(|m| bytes > m)
    }
}

/// What the state keeps of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub id: MsgId,
    pub size: u32,
    /// When it expires (per-message or queue TTL, in the leader's
    /// milliseconds when it was enqueued): None, never.
    pub expires_at: Option<u64>,
    /// Failed deliveries so far (`x-delivery-count`): returns that say the
    /// delivery failed, and consumers that went away holding it.
    pub delivery_count: u32,
    /// Times a consumer took it (`x-acquired-count`).
    pub acquired_count: u32,
    /// Its priority level (0 in a queue without priorities).
    pub priority: u8,
}

/// A consumer: how many more messages it may take, and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumer {
    pub credit: u32,
    pub checked_out: BTreeMap<MsgId, Header>,
    /// Prefetch (0-9-1 basic.qos): each message it settles, returns or
    /// discards gives back its credit, so it holds at most this many
    /// (rabbit_fifo's simple_prefetch). 0: credit only comes from
    /// `Credit` commands (AMQP 1.0 link credit, windows for no-ack).
    pub prefetch: u32,
    /// No-ack: a delivery settles the message at once.
    pub auto_settle: bool,
    /// Its `x-priority`: consumers of a higher priority are served first
    /// while they have credit; those of one priority take turns.
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A message (its body is the log entry at `id`), enqueued at the
    /// leader's time `now`, expiring at `expires_at`, of the message's
    /// `priority` (0-9-1's property; 0 if it has none).
    Enqueue {
        id: MsgId,
        size: u32,
        now: u64,
        expires_at: Option<u64>,
        priority: u8,
        /// Its deduplication key (a header's value, or its message id),
        /// when the queue deduplicates and the message has one.
        key: Option<Vec<u8>>,
    },
    /// The leader's clock reads `now`: messages waiting past their
    /// expiry go (proposed by the leader when the head's is due).
    Tick { now: u64 },
    /// A consumer attaches (see [`Consumer`] for the two modes); with a
    /// prefetch its credit starts at that. Consumers are served in the
    /// order they attached, in turn. Again for a known one: its mode
    /// changes and its credit starts again (what it holds stays).
    Consume {
        consumer: ConsumerId,
        prefetch: u32,
        auto_settle: bool,
        priority: i32,
    },
    /// `consumer` may take `credit` more messages (an unknown consumer is
    /// attached by it, with no prefetch; a prefetch consumer ignores it).
    Credit { consumer: ConsumerId, credit: u32 },
    /// Acked: gone.
    Settle { consumer: ConsumerId, ids: Vec<MsgId> },
    /// Requeued. `failed`: the delivery counts as failed (AMQP 1.0's
    /// modified with delivery-failed), raising its delivery count. `now`:
    /// the proposer's time, from which a delayed retry waits (0: the
    /// latest time seen). `until`: not served before then (a modified
    /// outcome's `x-opt-delivery-time`, RabbitMQ 4.3), whatever the
    /// queue's delayed retry; 0 or a time past: as the queue says.
    Return {
        consumer: ConsumerId,
        ids: Vec<MsgId>,
        failed: bool,
        now: u64,
        until: u64,
    },
    /// Rejected without requeue: dead-lettered (or dropped, as the leader
    /// decides from the queue's dead-letter settings).
    Discard { consumer: ConsumerId, ids: Vec<MsgId> },
    /// The consumer is gone (cancelled, its channel or node gone): what it
    /// held goes back (its delivery count unchanged; its acquired count
    /// says it was taken).
    Cancel { consumer: ConsumerId },
    /// Drop every waiting message.
    Purge,
    /// At-least-once dead-lettering: every target queue has these
    /// discards; they go.
    SettleDlx { ids: Vec<MsgId> },
    /// The queue's settings changed (a policy): the leader proposes them
    /// so every member changes at the same point of the log (RabbitMQ's
    /// rabbit_fifo update_config). Discards left when at-least-once is
    /// no longer in force are deleted (as rabbit_fifo's switch_from does).
    SetConfig(Config),
    /// basic.get: message `id`, if it still waits, goes to `consumer`
    /// (the getting node's, which is not served otherwise) or, `settled`
    /// (no-ack), leaves the queue. The leader picked `id` from the head
    /// when it answered the get.
    Dequeue {
        consumer: ConsumerId,
        id: MsgId,
        settled: bool,
    },
    /// basic.get as RabbitMQ's quorum queues apply it: the next message
    /// to serve, if any, goes to `consumer` (the getting node's) or,
    /// `settled` (no-ack), leaves the queue; [`Effect::Dequeued`] names
    /// it. Applied in log order, a get sees what the same client did
    /// before it (its publishes, its requeues).
    DequeueNext { consumer: ConsumerId, settled: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterReason {
    Rejected,
    DeliveryLimit,
    Expired,
    /// Dropped from the head to keep the queue within its length limits.
    MaxLen,
}

/// What applying a command asks of the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Send message `id` to `consumer`. `redelivered`: a consumer took it
    /// before. `settled`: the consumer is no-ack, so the message has left
    /// the queue (its body goes once sent).
    Deliver {
        consumer: ConsumerId,
        header: Header,
        redelivered: bool,
        settled: bool,
    },
    DeadLetter {
        header: Header,
        reason: DeadLetterReason,
    },
    /// At-least-once: the message is dead-lettered and kept as a discard
    /// until the leader settles it (`SettleDlx`); its body stays.
    Discarded {
        header: Header,
        reason: DeadLetterReason,
    },
    /// A purge dropped this many messages.
    Purged(u64),
    /// A `DequeueNext` took this message for `consumer` (`settled`: it
    /// has left the queue; its body goes once answered).
    Dequeued {
        consumer: ConsumerId,
        header: Header,
        settled: bool,
    },
    /// These messages left the queue with nothing for the leader to do
    /// (settled, purged): every member drops their bodies.
    Dropped(Vec<MsgId>),
    /// The enqueue of this message was refused (the queue is full and
    /// overflows by rejecting): its publisher is nacked.
    Rejected(MsgId),
    /// This message's key was seen within the deduplication window: it
    /// is not stored (every member drops its body), and its publisher is
    /// confirmed (it is in the queue already, or was).
    Duplicate(MsgId),
}

/// The deduplication window: keys of recent enqueues, oldest first, with
/// the leader time of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    order: VecDeque<(Vec<u8>, u64)>,
    seen: std::collections::HashSet<Vec<u8>>,
}

impl Keys {
    pub(crate) fn from_order(order: VecDeque<(Vec<u8>, u64)>) -> Keys {
        let seen = order.iter().map(|(k, _)| k.clone()).collect();
        Keys { order, seen }
    }

    /// The keys, oldest first, with their times.
    pub fn order(&self) -> &VecDeque<(Vec<u8>, u64)> {
        &self.order
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.seen.contains(key)
    }

    /// Forget keys past `window` or older than `ttl` at `now`.
    fn forget(&mut self, window: usize, ttl: Option<u64>, now: u64) {
        while let Some((k, at)) = self.order.front() {
            let old = ttl.is_some_and(|t| now.saturating_sub(*at) >= t);
            if self.order.len() <= window && !old {
                break;
            }
            self.seen.remove(k);
            self.order.pop_front();
        }
    }

    fn remember(&mut self, key: Vec<u8>, now: u64, window: usize) {
        if self.seen.insert(key.clone()) {
            self.order.push_back((key, now));
        }
        self.forget(window, None, now);
    }
}

/// One priority level's waiting messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    /// Returned messages, in id order, served before `waiting`.
    pub returns: VecDeque<Header>,
    /// The rest, in the order they came.
    pub waiting: VecDeque<Header>,
}

impl Level {
    fn is_empty(&self) -> bool {
        self.returns.is_empty() && self.waiting.is_empty()
    }

    fn pop_front(&mut self) -> Option<Header> {
        self.returns.pop_front().or_else(|| self.waiting.pop_front())
    }

    fn served(&self) -> impl Iterator<Item = &Header> {
        self.returns.iter().chain(self.waiting.iter())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fifo {
    config: Config,
    /// Waiting messages by priority level (one level without
    /// priorities); the highest that has any is served first.
    levels: Vec<Level>,
    /// Messages in `levels`.
    ready: usize,
    /// Recent deduplication keys (empty without deduplication).
    keys: Keys,
    consumers: BTreeMap<ConsumerId, Consumer>,
    /// Consumers in the order they are served next.
    service: VecDeque<ConsumerId>,
    ready_bytes: u64,
    /// The latest leader time a command carried (time never goes back
    /// here, whatever a new leader's clock says).
    now: u64,
    /// At-least-once dead letters not yet in every target, oldest first.
    discards: VecDeque<(Header, DeadLetterReason)>,
    discard_bytes: u64,
    /// Returns waiting for their delayed retry, by (ready at, id).
    delayed: BTreeMap<(u64, MsgId), Header>,
}

impl Default for Fifo {
    fn default() -> Fifo {
        Fifo::new(Config::default())
    }
}

impl Fifo {
    pub fn new(config: Config) -> Fifo {
        Fifo::from_parts(
            config,
            0,
            Vec::new(),
            BTreeMap::new(),
            VecDeque::new(),
            Keys::default(),
        )
    }

    /// A state as a snapshot held it (see `codec`); `ready` and
    /// `ready_bytes` are counted again. Levels are one per priority up to
    /// the config's (those given, then empty ones).
    pub(crate) fn from_parts(
        config: Config,
        now: u64,
        mut levels: Vec<Level>,
        consumers: BTreeMap<ConsumerId, Consumer>,
        service: VecDeque<ConsumerId>,
        keys: Keys,
    ) -> Fifo {
        levels.resize(levels.len().max(config.levels()), Level::default());
        let ready = levels.iter().map(|l| l.returns.len() + l.waiting.len()).sum();
        let ready_bytes = levels.iter().flat_map(Level::served).map(|h| h.size as u64).sum();
        Fifo {
            config,
            levels,
            ready,
            keys,
            consumers,
            service,
            ready_bytes,
            now,
            discards: VecDeque::new(),
            discard_bytes: 0,
            delayed: BTreeMap::new(),
        }
    }

    /// A snapshot's delayed returns (see `codec`).
    pub(crate) fn with_delayed(mut self, delayed: Vec<(u64, Header)>) -> Fifo {
        self.delayed = delayed.into_iter().map(|(at, h)| ((at, h.id), h)).collect();
        self
    }

    /// Returns waiting for their delayed retry, by (ready at, id).
    pub fn delayed(&self) -> &BTreeMap<(u64, MsgId), Header> {
        &self.delayed
    }

    /// A snapshot's discards (see `codec`).
    pub(crate) fn with_discards(mut self, discards: VecDeque<(Header, DeadLetterReason)>) -> Fifo {
        self.discard_bytes = discards.iter().map(|(h, _)| h.size as u64).sum();
        self.discards = discards;
        self
    }

    /// At-least-once dead letters not yet settled, oldest first.
    pub fn discards(&self) -> &VecDeque<(Header, DeadLetterReason)> {
        &self.discards
    }

    pub fn discard_bytes(&self) -> u64 {
        self.discard_bytes
    }

    /// Dead-letter `header`: handed to the leader (at most once), or kept
    /// as a discard until the leader settles it (at least once).
    fn dead_letter(&mut self, header: Header, reason: DeadLetterReason, out: &mut Vec<Effect>) {
        if self.config.dlx_at_least_once {
            self.discard_bytes += header.size as u64;
            self.discards.push_back((header.clone(), reason));
            out.push(Effect::Discarded { header, reason });
        } else {
            out.push(Effect::DeadLetter { header, reason });
        }
    }

    /// Waiting messages and bytes as the limits count them.
    fn counted(&self) -> (u64, u64) {
        (
            (self.ready + self.discards.len()) as u64,
            self.ready_bytes + self.discard_bytes,
        )
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The settings changed (a policy): they count from the next command.
    /// Discards left when at-least-once is no longer in force are the
    /// caller's to dead-letter at most once (`take_discards`).
    pub fn set_config(&mut self, config: Config) {
        // Levels are never taken away (messages wait in them).
        let n = self.levels.len().max(config.levels());
        self.levels.resize(n, Level::default());
        self.config = config;
    }

    /// The latest leader time applied.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The deduplication window.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The priority levels, lowest first.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Every waiting message, in the order they are served.
    pub fn served(&self) -> impl Iterator<Item = &Header> {
        self.levels.iter().rev().flat_map(Level::served)
    }

    /// The level a message of `priority` waits in.
    fn level(&self, priority: u8) -> usize {
        (priority as usize).min(self.levels.len().saturating_sub(1))
    }

    /// Take the next message to serve (the highest level's head).
    fn pop_next(&mut self) -> Option<Header> {
        let h = self
            .levels
            .iter_mut()
            .rev()
            .find(|l| !l.is_empty())?
            .pop_front()?;
        self.ready -= 1;
        self.ready_bytes -= h.size as u64;
        Some(h)
    }

    pub fn consumers(&self) -> &BTreeMap<ConsumerId, Consumer> {
        &self.consumers
    }

    /// Consumers in the order they are served next.
    pub fn service(&self) -> &VecDeque<ConsumerId> {
        &self.service
    }

    /// The lowest id still in the queue (waiting or held): entries before
    /// it are no longer needed for a body.
    pub fn oldest(&self) -> Option<MsgId> {
        let held = self
            .consumers
            .values()
            .filter_map(|c| c.checked_out.keys().next().copied());
        let discarded = self.discards.iter().map(|(h, _)| h.id).min();
        self.levels
            .iter()
            .flat_map(|l| [l.returns.front(), l.waiting.front()])
            .flatten()
            .map(|h| h.id)
            .chain(held)
            .chain(discarded)
            .min()
    }

    /// Messages waiting for a consumer.
    pub fn ready(&self) -> usize {
        self.ready
    }

    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Messages consumers hold.
    pub fn checked_out(&self) -> usize {
        self.consumers.values().map(|c| c.checked_out.len()).sum()
    }

    pub fn consumer(&self, id: ConsumerId) -> Option<&Consumer> {
        self.consumers.get(&id)
    }

    /// The ids of every waiting message, in the order they are served.
    pub fn waiting_ids(&self) -> impl Iterator<Item = MsgId> + '_ {
        self.served().map(|h| h.id)
    }

    /// Apply one committed command; what it asks of the leader.
    pub fn apply(&mut self, c: Command) -> Vec<Effect> {
        let mut out = Vec::new();
        match c {
            Command::Enqueue {
                id,
                size,
                now,
                expires_at,
                priority,
                key,
            } => {
                self.now = self.now.max(now);
                let window = self.config.dedup_window as usize;
                let key = key.filter(|_| window > 0);
                if let Some(k) = &key {
                    self.keys.forget(window, self.config.dedup_ttl, self.now);
                    if self.keys.contains(k) {
                        out.push(Effect::Duplicate(id));
                        self.serve(&mut out);
                        return out;
                    }
                }
                // Refused when full (reject-publish); the time it carried
                // still counts (heads may expire by it).
                let (n, bytes) = self.counted();
                let full = self.config.reject_publish && self.config.over(n + 1, bytes + size as u64);
                if full {
                    out.push(Effect::Rejected(id));
                } else {
                    self.ready_bytes += size as u64;
                    self.ready += 1;
                    let priority = self.level(priority) as u8;
                    self.levels[priority as usize].waiting.push_back(Header {
                        id,
                        size,
                        expires_at,
                        delivery_count: 0,
                        acquired_count: 0,
                        priority,
                    });
                    // Remembered once stored (a refused one may be sent
                    // again).
                    if let Some(k) = key {
                        self.keys.remember(k, self.now, window);
                    }
                }
            }
            Command::Tick { now } => self.now = self.now.max(now),
            Command::Consume {
                consumer,
                prefetch,
                auto_settle,
                priority,
            } => {
                let c = self.consumers.entry(consumer).or_insert_with(|| {
                    self.service.push_back(consumer);
                    Consumer::default()
                });
                c.prefetch = prefetch;
                c.auto_settle = auto_settle;
                c.priority = priority;
                c.credit = prefetch.saturating_sub(c.checked_out.len() as u32);
            }
            Command::Credit { consumer, credit } => {
                let c = self.consumers.entry(consumer).or_insert_with(|| {
                    self.service.push_back(consumer);
                    Consumer::default()
                });
                if c.prefetch == 0 {
                    c.credit = c.credit.saturating_add(credit);
                }
            }
            Command::Settle { consumer, ids } => {
                let gone: Vec<MsgId> = self.take(consumer, &ids).into_iter().map(|h| h.id).collect();
                if !gone.is_empty() {
                    out.push(Effect::Dropped(gone));
                }
            }
            Command::Return {
                consumer,
                ids,
                failed,
                now,
                until,
            } => {
                self.now = self.now.max(now);
                for h in self.take(consumer, &ids) {
                    self.back_or_delay(h, failed, until, &mut out);
                }
            }
            Command::Discard { consumer, ids } => {
                for header in self.take(consumer, &ids) {
                    self.dead_letter(header, DeadLetterReason::Rejected, &mut out);
                }
            }
            Command::SetConfig(config) => {
                if !config.dlx_at_least_once && !self.discards.is_empty() {
                    let ids = std::mem::take(&mut self.discards)
                        .into_iter()
                        .map(|(h, _)| h.id)
                        .collect();
                    self.discard_bytes = 0;
                    out.push(Effect::Dropped(ids));
                }
                self.set_config(config);
            }
            Command::SettleDlx { ids } => {
                let want: std::collections::BTreeSet<MsgId> = ids.into_iter().collect();
                let mut gone = Vec::new();
                let mut bytes = 0;
                self.discards.retain(|(h, _)| {
                    let hit = want.contains(&h.id);
                    if hit {
                        gone.push(h.id);
                        bytes += h.size as u64;
                    }
                    !hit
                });
                self.discard_bytes -= bytes;
                if !gone.is_empty() {
                    out.push(Effect::Dropped(gone));
                }
            }
            Command::Cancel { consumer } => {
                if let Some(c) = self.consumers.remove(&consumer) {
                    self.service.retain(|x| *x != consumer);
                    // In id order, so they keep their relative order. Not
                    // a failed delivery: the consumer went, it did not say
                    // processing failed (RabbitMQ 4.3).
                    for (_, h) in c.checked_out {
                        self.back(h, false, &mut out);
                    }
                }
            }
            Command::Dequeue {
                consumer,
                id,
                settled,
            } => {
                let found = self.levels.iter_mut().find_map(|l| {
                    [&mut l.returns, &mut l.waiting].into_iter().find_map(|line| {
                        line.iter()
                            .position(|h| h.id == id)
                            .and_then(|at| line.remove(at))
                    })
                });
                if let Some(h) = found {
                    self.ready -= 1;
                    self.ready_bytes -= h.size as u64;
                    self.got(consumer, h, settled, &mut out);
                }
            }
            Command::DequeueNext { consumer, settled } => {
                if let Some(h) = self.pop_next() {
                    // As it is once taken (acquired once more).
                    let mut header = h.clone();
                    header.acquired_count += 1;
                    out.push(Effect::Dequeued {
                        consumer,
                        header,
                        settled,
                    });
                    self.got(consumer, h, settled, &mut out);
                }
            }
            Command::Purge => {
                // What waits (delayed returns too), and (as RabbitMQ's
                // purge) the dead letters waiting for their targets; the
                // count is of the former.
                let n = (self.ready() + self.delayed.len()) as u64;
                let mut ids: Vec<MsgId> = self.waiting_ids().collect();
                ids.extend(std::mem::take(&mut self.delayed).into_values().map(|h| h.id));
                ids.extend(self.discards.drain(..).map(|(h, _)| h.id));
                self.discard_bytes = 0;
                for l in &mut self.levels {
                    *l = Level::default();
                }
                self.ready = 0;
                self.ready_bytes = 0;
                out.push(Effect::Purged(n));
                if !ids.is_empty() {
                    out.push(Effect::Dropped(ids));
                }
            }
        }
        self.serve(&mut out);
        out
    }

    /// Take `ids` out of what `consumer` holds (unknown ones, or another
    /// consumer's, are ignored: a settle can race with a cancel). A
    /// prefetch consumer gets their credit back.
    fn take(&mut self, consumer: ConsumerId, ids: &[MsgId]) -> Vec<Header> {
        let Some(c) = self.consumers.get_mut(&consumer) else {
            return Vec::new();
        };
        let taken: Vec<Header> = ids.iter().filter_map(|id| c.checked_out.remove(id)).collect();
        if c.prefetch > 0 {
            c.credit = c
                .credit
                .saturating_add(taken.len() as u32)
                .min(c.prefetch.saturating_sub(c.checked_out.len() as u32));
        }
        taken
    }

    /// A message goes back to wait, or past its delivery limit is
    /// dead-lettered.
    fn back(&mut self, mut h: Header, failed: bool, out: &mut Vec<Effect>) {
        if failed {
            h.delivery_count += 1;
        }
        if self.config.delivery_limit.is_some_and(|l| h.delivery_count > l) {
            self.dead_letter(h, DeadLetterReason::DeliveryLimit, out);
            return;
        }
        self.ready_bytes += h.size as u64;
        self.ready += 1;
        // Returns are served in id order among themselves, in their own
        // priority's level.
        let level = self.level(h.priority);
        let returns = &mut self.levels[level].returns;
        let at = returns.partition_point(|x| x.id < h.id);
        returns.insert(at, h);
    }

    /// The earliest expiry among the messages at the heads of the
    /// waiting lines, two a level (when the leader should propose a `Tick`). Only
    /// heads expire, as RabbitMQ's queues do: a message behind one that
    /// lives longer waits its turn.
    pub fn next_expiry(&self) -> Option<u64> {
        let delayed = self.delayed.keys().next().map(|(at, _)| *at);
        self.levels
            .iter()
            .flat_map(|l| [l.returns.front(), l.waiting.front()])
            .flatten()
            .filter_map(|h| h.expires_at)
            .chain(delayed)
            .min()
    }

    /// A basic.get took `h`: held for `consumer` like a consumer's
    /// delivery but not served (it is not in the service order), or,
    /// `settled`, gone.
    fn got(&mut self, consumer: ConsumerId, mut h: Header, settled: bool, out: &mut Vec<Effect>) {
        h.acquired_count += 1;
        if settled {
            out.push(Effect::Dropped(vec![h.id]));
        } else {
            self.consumers
                .entry(consumer)
                .or_default()
                .checked_out
                .insert(h.id, h);
        }
    }

    /// A returned message goes back, or waits for its delayed retry (its
    /// delivery limit is judged first, as RabbitMQ 4.3 judges it).
    fn back_or_delay(&mut self, mut h: Header, failed: bool, until: u64, out: &mut Vec<Effect>) {
        if self.config.delayed_retry.is_none() && until <= self.now {
            return self.back(h, failed, out);
        }
        if failed {
            h.delivery_count += 1;
        }
        if self.config.delivery_limit.is_some_and(|l| h.delivery_count > l) {
            self.dead_letter(h, DeadLetterReason::DeliveryLimit, out);
            return;
        }
        let at = if until > self.now {
            Some(until)
        } else {
            self.config
                .delayed_retry
                .and_then(|r| r.delay(failed, h.delivery_count))
                .map(|d| self.now.saturating_add(d))
        };
        match at {
            Some(at) => {
                self.delayed.insert((at, h.id), h);
            }
            None => self.back(h, false, out),
        }
    }

    /// Delayed returns whose time has come go back (RabbitMQ moves them
    /// to the returns, to be served first).
    fn release_delayed(&mut self, out: &mut Vec<Effect>) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let h = entry.remove();
            self.back(h, false, out);
        }
    }

    /// Dead-letter the messages at the heads whose time has come.
    fn expire(&mut self, out: &mut Vec<Effect>) {
        let now = self.now;
        let mut expired = Vec::new();
        let lines = self
            .levels
            .iter_mut()
            .flat_map(|l| [&mut l.returns, &mut l.waiting]);
        for line in lines {
            while line
                .front()
                .is_some_and(|h| h.expires_at.is_some_and(|t| t <= now))
            {
                expired.push(line.pop_front().expect("a front"));
            }
        }
        for header in expired {
            self.ready -= 1;
            self.ready_bytes -= header.size as u64;
            self.dead_letter(header, DeadLetterReason::Expired, out);
        }
    }

    /// Hand waiting messages to consumers with credit, in turn.
    fn serve(&mut self, out: &mut Vec<Effect>) {
        self.release_delayed(out);
        self.expire(out);
        while self.ready() > 0 {
            // With a single active consumer only the first in the service
            // order is served, and the order does not turn. Otherwise the
            // first in the order of the highest priority with credit is,
            // and goes to the back.
            let consumer = if self.config.single_active {
                match self.service.front() {
                    Some(c) if self.consumers[c].credit > 0 => *c,
                    _ => break,
                }
            } else {
                let with_credit = |c: &ConsumerId| Some(&self.consumers[c]).filter(|s| s.credit > 0);
                let Some(best) = self
                    .service
                    .iter()
                    .filter_map(with_credit)
                    .map(|s| s.priority)
                    .max()
                else {
                    break;
                };
                let at = self
                    .service
                    .iter()
                    .position(|c| with_credit(c).is_some_and(|s| s.priority == best))
                    .expect("one has it");
                let c = self.service.remove(at).expect("in range");
                self.service.push_back(c);
                c
            };
            let mut h = self.pop_next().expect("ready > 0");
            let c = self.consumers.get_mut(&consumer).expect("served consumers exist");
            let redelivered = h.acquired_count > 0;
            h.acquired_count += 1;
            c.credit -= 1;
            if !c.auto_settle {
                c.checked_out.insert(h.id, h.clone());
            }
            out.push(Effect::Deliver {
                consumer,
                header: h,
                redelivered,
                settled: c.auto_settle,
            });
            // The next head may be past its time.
            self.expire(out);
        }
        self.drop_heads(out);
        // A new head may be past its time.
        self.expire(out);
    }

    /// Past a length limit (drop-head): the oldest waiting messages go,
    /// returned ones first (they are at the head), as dead letters.
    fn drop_heads(&mut self, out: &mut Vec<Effect>) {
        if self.config.reject_publish {
            return;
        }
        while self.config.over(self.ready() as u64, self.ready_bytes) {
            // The head: the next to be served (rabbit_fifo's drop-head).
            let Some(header) = self.pop_next() else {
                return;
            };
            self.dead_letter(header, DeadLetterReason::MaxLen, out);
        }
    }
}

#[cfg(test)]
mod tests;
