//! Queues. [`Queue`] is the handle every front end holds: name, flags,
//! arguments, and the queue type's state behind one lock. Queue types
//! implement [`QueueType`]; their calls never block and never touch a
//! socket: deliveries go into consumers' [`DeliverySink`]s and everything
//! else the caller must do (route dead letters, delete the queue) comes back
//! as [`Effects`].
//!
//! Lock order: a queue's lock may be held while calling a sink (which takes
//! its own small lock); nothing holding a sink's lock calls a queue, and no
//! code holds two queue locks at once.

mod answer;
pub(crate) mod args;
mod classic;
mod consumer;
pub mod dead_letter;
mod paging;
pub mod quorum;
mod quorum_bodies;
mod quorum_dlx;
mod remote;
pub mod stream;
mod stream_cache;
pub mod stream_log;
pub mod stream_member;
#[cfg(test)]
mod tests;
mod ticket;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use warren_amqp091::{FieldTable, ShortStr};

use crate::error::BrokerError;
use crate::message::MessageRef;
use crate::policy::{effective_arguments, Policy};
use crate::stats::{MessageCounters, Stat};

pub use answer::{promise, Answer, Later, Promise};
pub use args::{
    leader_locator_balanced, parse_max_age, Overflow, QueueConfig, QueueKind, QuorumArgs, StreamArgs,
    EQUIVALENCE_ARGS,
};
pub use classic::ClassicQueue;
pub use consumer::{
    ChannelLimit, ConsumerInfo, ConsumerSpec, Delivery, DeliverySink, FlowWaiter, LinkCredit, RecordFilter,
};
pub use dead_letter::{DeadLetter, Reason};
pub use paging::{WINDOW_BYTES, WINDOW_MAX};
pub use quorum::{QuorumQueue, QuorumSlot, QuorumSystem, QuorumView, Role};
pub use remote::RemoteQueue;
pub use stream::StreamQueue;
pub use stream_log::{now_ms, StreamCodec, StreamLog, StreamSlot, StreamSystem, StreamWaiter};
pub use stream_member::StreamRole;
pub use ticket::{RemoteConfirm, Ticket};
pub use warren_store::{Storage, SyncTicket, SyncWaiter};

/// The exclusive owner of a queue whose owning connection is on another
/// node: no connection of this node has this id.
pub const REMOTE_OWNER: u64 = u64::MAX;

/// A message in a queue: its position (`seq`, so a requeued message goes
/// back where it was), whether it was delivered before, and when it expires.
#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: u64,
    pub message: MessageRef,
    pub redelivered: bool,
    /// Failed delivery attempts the consumer reported (AMQP 1.0's
    /// modified outcome with delivery-failed); kept in memory only.
    pub delivery_count: u32,
    pub expires_at: Option<Instant>,
    /// Written to the queue's store (so leaving the queue is recorded there).
    pub stored: bool,
    /// A modified outcome merged annotations into `message`: a queue
    /// that keeps its messages apart from the entry (a quorum queue's
    /// members) stores the new properties when it takes it back.
    pub annotated: bool,
}

/// How a delivery is settled (0-9-1 basic.ack / basic.reject / basic.nack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    Ack,
    Requeue,
    /// Rejected without requeue: dead-lettered if the queue has a DLX.
    Discard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    Enqueued,
    /// Refused by x-overflow reject-publish(-dlx): nack it under confirms.
    Rejected,
}

/// What the caller must do after a queue call.
#[derive(Debug, Default)]
pub struct Effects {
    pub dead_letters: Vec<DeadLetter>,
    /// The queue asks to be deleted (auto-delete after the last consumer).
    pub delete_queue: bool,
    /// A message with a deadline (TTL) became the head: the queue's timer
    /// must run.
    pub arm_timer: bool,
    /// The queue's backlog passed its flow mark while it has consumers: the
    /// publisher should pause until it drains (see [`Queue::wait_for_drain`]).
    pub flow: bool,
    /// The message was written to disk, or sent to the queue's node:
    /// confirm it once this is done.
    pub sync: Option<Ticket>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub ready: u64,
    pub unacked: u64,
    pub consumers: u32,
    /// Body bytes of the ready messages, in memory and paged out.
    pub ready_bytes: u64,
    /// Body bytes of ready messages held in memory (the rest are on disk).
    pub ram_bytes: u64,
    /// Ready messages held in memory.
    pub ram_messages: u64,
    /// A quorum queue's dead letters waiting for their targets
    /// (at-least-once), and their bytes.
    pub dlx: u64,
    pub dlx_bytes: u64,
    /// A quorum queue's returns waiting for their delayed retry.
    pub delayed: u64,
}

/// Bytes held by messages in all queues, for the memory alarm.
#[derive(Debug, Default)]
pub struct MemoryGauge(AtomicI64);

impl MemoryGauge {
    pub fn add(&self, n: usize) {
        self.0.fetch_add(n as i64, Ordering::Relaxed);
    }
    pub fn sub(&self, n: usize) {
        self.0.fetch_sub(n as i64, Ordering::Relaxed);
    }
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed).max(0) as u64
    }
}

/// What every queue of a broker shares: the memory gauge and the store.
#[derive(Debug, Clone, Default)]
pub struct QueueEnv {
    pub memory: Arc<MemoryGauge>,
    /// None keeps every message in memory (no data directory).
    pub storage: Option<Arc<Storage>>,
    /// Where streams keep their logs; None: no streams.
    pub streams_dir: Option<std::path::PathBuf>,
    /// How a message routed to a stream is stored (AMQP 1.0 encoding).
    pub stream_codec: Option<stream_log::StreamCodec>,
    /// Bytes of each stream's newest data kept in the page cache once
    /// synced (0: no limit).
    pub stream_cache_bytes: u64,
    /// The broker-wide message counters (deliveries, gets, acks and
    /// redeliveries are counted there too).
    pub messages: Arc<MessageCounters>,
    /// On a cluster, where removals the broker decides itself are sent.
    pub replication: crate::replication::ReplicationSlot,
    /// The node's quorum queues' Raft groups (None: no data directory).
    pub quorum: QuorumSlot,
    /// The node's stream replication (clusters only).
    pub streams: StreamSlot,
}

/// What a queue type's calls may use besides its own state.
pub struct Ctx<'a> {
    pub now: Instant,
    pub queue: &'a Arc<Queue>,
    pub effects: &'a mut Effects,
    config: &'a QueueConfig,
}

impl<'a> Ctx<'a> {
    /// The queue's settings as they are now (arguments and policy).
    pub fn config(&self) -> &'a QueueConfig {
        self.config
    }

    /// Dead-letter `msg` if the queue has a dead-letter exchange.
    pub fn dead_letter(&mut self, msg: &MessageRef, reason: Reason) {
        if let Some(dlx) = &self.config.dead_letter_exchange {
            let dl = dead_letter::dead_letter(
                msg,
                &self.queue.name,
                reason,
                dlx,
                self.config.dead_letter_routing_key.as_ref(),
            );
            self.effects.dead_letters.push(dl);
        }
    }
}

/// The interface every queue type implements (after RabbitMQ's
/// rabbit_queue_type): enqueue, consume, cancel, settle, get, purge, expire.
pub trait QueueType: Send + std::fmt::Debug {
    fn publish(&mut self, ctx: &mut Ctx, msg: MessageRef) -> PublishOutcome;
    fn consume(&mut self, ctx: &mut Ctx, spec: ConsumerSpec) -> Result<(), BrokerError>;
    /// Remove a consumer; true if it was there.
    fn cancel(&mut self, ctx: &mut Ctx, consumer_id: u64) -> bool;
    /// Settle deliveries made to `consumer_id` (None for basic.get).
    fn settle(&mut self, ctx: &mut Ctx, consumer_id: Option<u64>, entries: Vec<Entry>, how: Settle);
    /// basic.get: the next message and how many remain ready (a quorum
    /// queue's comes once its dequeue is applied).
    fn get(&mut self, ctx: &mut Ctx, no_ack: bool) -> Answer<Option<(Entry, u64)>>;
    /// Deliver what can be delivered (after credit or sink room frees up).
    fn pump(&mut self, ctx: &mut Ctx);
    /// An AMQP 1.0 drain of `consumer_id` that another node must answer
    /// (its sink hears [`DeliverySink::drained`] after the deliveries):
    /// true if sent there; false when answering after a pump is right.
    /// Called after a pump, so the credit that granted goes first.
    fn drain(&mut self, _ctx: &mut Ctx, _consumer_id: u64) -> bool {
        false
    }
    /// Drop all ready messages; how many went.
    fn purge(&mut self, ctx: &mut Ctx) -> Answer<u64>;
    /// Expire what is due at `ctx.now`.
    fn expire(&mut self, ctx: &mut Ctx);
    /// When `expire` next has something to do.
    fn next_deadline(&self) -> Option<Instant>;
    /// The queue is being deleted: drop its messages, return its consumers.
    fn delete(&mut self, ctx: &mut Ctx) -> Vec<ConsumerSpec>;
    fn stats(&self) -> QueueStats;
    /// Its consumers, in the order they are served.
    fn consumers(&self) -> Vec<ConsumerInfo>;
    /// The settings changed (a policy): apply new length limits now.
    fn limits_changed(&mut self, _ctx: &mut Ctx) {}
    /// Register a publisher to be resumed once the backlog is back under
    /// the low mark; false (and no registration) if it already is.
    fn wait_for_drain(&mut self, waiter: Arc<dyn FlowWaiter>) -> bool;
    /// When the queue was last used, for x-expires (None while in use).
    fn idle_since(&self) -> Option<Instant>;
    fn touch(&mut self, now: Instant);
    /// A queue of another node: its figures as its home last reported
    /// them (what `stats` gives from then on).
    fn set_figures(&mut self, _figures: QueueStats) {}

    /// A quorum queue of another node: its leader and members as its home
    /// last reported them.
    fn set_remote_view(&mut self, _view: Option<QuorumView>) {}

    /// What the API shows of a quorum queue (None for other types).
    fn quorum_view(&mut self) -> Option<QuorumView> {
        self.as_quorum().map(|q| q.view())
    }
    /// A quorum queue's member state (the Raft thread applies to it).
    fn as_quorum(&mut self) -> Option<&mut QuorumQueue> {
        None
    }
}

#[derive(Debug)]
pub struct Queue {
    pub name: ShortStr,
    pub vhost: String,
    pub durable: bool,
    pub auto_delete: bool,
    /// The connection that declared an exclusive queue ([`REMOTE_OWNER`]
    /// when that connection is on another node).
    pub exclusive_owner: Option<u64>,
    /// The node the queue lives on, when that is another node of the
    /// cluster (its type is then [`RemoteQueue`]); None: this node.
    pub home: Option<ShortStr>,
    /// The arguments it was declared with (a policy's are not in here).
    pub arguments: FieldTable,
    pub memory: Arc<MemoryGauge>,
    /// A stream's log (x-queue-type: stream).
    stream: Option<Arc<StreamLog>>,
    state: Mutex<Locked>,
    /// This queue's message counters (`message_stats`).
    pub counters: MessageCounters,
    global: Arc<MessageCounters>,
    /// Declared durable though exclusive: kept as transient (it dies
    /// with its connection), reported as declared, as RabbitMQ does.
    asked_durable: std::sync::atomic::AtomicBool,
}

/// What sits behind a queue's lock: its type's state and its settings,
/// which a policy can change while it runs.
#[derive(Debug)]
struct Locked {
    ty: Box<dyn QueueType>,
    config: Arc<QueueConfig>,
    policy: Option<Arc<Policy>>,
    /// The vhost's policy version `policy` was chosen at; an older choice
    /// arriving late is ignored.
    policy_version: u64,
}

impl Locked {
    fn new(ty: Box<dyn QueueType>, config: QueueConfig, policy: AppliedPolicy) -> Mutex<Locked> {
        Mutex::new(Locked {
            ty,
            config: Arc::new(config),
            policy: policy.0,
            policy_version: policy.1,
        })
    }
}

/// A stream's log settings from its queue settings.
fn log_config(config: &QueueConfig) -> warren_log::Config {
    let defaults = warren_log::Config::default();
    warren_log::Config {
        max_segment_bytes: config
            .stream
            .max_segment_bytes
            .unwrap_or(defaults.max_segment_bytes),
        max_bytes: config.max_length_bytes,
        max_age_ms: config.stream.max_age_ms,
        filter_size: config.stream.filter_size.unwrap_or(defaults.filter_size),
        ..defaults
    }
}

/// Streams and quorum queues are durable, and neither auto-delete nor
/// exclusive: RabbitMQ's refusal, checked in its order (auto-delete,
/// exclusive, non-durable: an exclusive queue is refused as such even
/// when it is also non-durable).
fn durable_only(
    name: &ShortStr,
    vhost: &str,
    durable: bool,
    auto_delete: bool,
    exclusive_owner: Option<u64>,
) -> Result<(), BrokerError> {
    let what = if auto_delete {
        "auto-delete"
    } else if exclusive_owner.is_some() {
        "exclusive-owner"
    } else if !durable {
        "non-durable"
    } else {
        return Ok(());
    };
    Err(BrokerError::PreconditionFailed(format!(
        "invalid property '{what}' for queue '{name}' in vhost '{vhost}'"
    )))
}

/// A constructor of a queue type with its own rules (streams, quorum
/// queues), from what `Queue::new` has parsed.
type MakeQueue = fn(
    ShortStr,
    &str,
    bool,
    bool,
    Option<u64>,
    FieldTable,
    QueueConfig,
    AppliedPolicy,
    &QueueEnv,
) -> Result<Arc<Queue>, BrokerError>;

/// A policy (or none) as chosen at a vhost's policy version.
pub type AppliedPolicy = (Option<Arc<Policy>>, u64);

/// The queue's settings: its arguments with `policy` merged in. A merge
/// that does not parse (a policy's dead-letter-routing-key with no
/// exchange anywhere, say) leaves the policy out.
fn settings(
    arguments: &FieldTable,
    policy: Option<&Policy>,
    name: &ShortStr,
    vhost: &str,
) -> Result<QueueConfig, BrokerError> {
    let own = QueueConfig::from_arguments(arguments, name, vhost)?;
    let Some(p) = policy else { return Ok(own) };
    QueueConfig::from_arguments(&effective_arguments(arguments, Some(p)), name, vhost).or_else(|e| {
        tracing::warn!(
            "policy '{}' not applied to queue '{name}' in vhost '{vhost}': {e}",
            p.name
        );
        Ok(own)
    })
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: ShortStr,
        vhost: &str,
        durable: bool,
        auto_delete: bool,
        exclusive_owner: Option<u64>,
        arguments: FieldTable,
        policy: AppliedPolicy,
        env: &QueueEnv,
    ) -> Result<Arc<Queue>, BrokerError> {
        let config = settings(&arguments, policy.0.as_deref(), &name, vhost)?;
        // Streams and quorum queues are made by their own constructors
        // (same arguments, same rules on the flags).
        let special: Option<MakeQueue> = match config.kind {
            QueueKind::Quorum => Some(Self::new_quorum),
            QueueKind::Stream => Some(Self::new_stream),
            QueueKind::Classic => None,
        };
        if let Some(make) = special {
            return make(
                name,
                vhost,
                durable,
                auto_delete,
                exclusive_owner,
                arguments,
                config,
                policy,
                env,
            );
        }
        let mut classic =
            ClassicQueue::new(&config, Instant::now(), paging::Paging::new(env.storage.clone()));
        let mut recovered = false;
        if let (true, Some(storage)) = (durable, &env.storage) {
            match storage.recover(vhost, &name) {
                Ok(Some((store, rec))) => {
                    tracing::info!(
                        "queue '{name}' in vhost '{vhost}': recovered {} message(s), {} bytes, from {} segment(s) in {:.3}s",
                        rec.messages,
                        rec.bytes,
                        rec.segments,
                        rec.took.as_secs_f64()
                    );
                    classic.attach_recovered(Some(storage.clone()), store, &rec);
                    recovered = rec.messages > 0;
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(BrokerError::Internal(format!(
                        "cannot recover the messages of queue '{name}' in vhost '{vhost}': {e}"
                    )))
                }
            }
        }
        let memory = env.memory.clone();
        let state: Box<dyn QueueType> = Box::new(classic);
        let q = Arc::new(Queue {
            name,
            vhost: vhost.to_string(),
            durable,
            auto_delete,
            exclusive_owner,
            home: None,
            arguments,
            memory,
            stream: None,
            state: Locked::new(state, config, policy),
            counters: MessageCounters::default(),
            global: env.messages.clone(),
            asked_durable: std::sync::atomic::AtomicBool::new(false),
        });
        if recovered {
            // Bring the head of the backlog into memory, so TTLs run on it.
            q.pump();
        }
        Ok(q)
    }

    /// A stream (x-queue-type: stream): durable, neither exclusive nor
    /// auto-delete, as RabbitMQ requires; its log is opened (recovered)
    /// from the streams directory.
    #[allow(clippy::too_many_arguments)]
    fn new_stream(
        name: ShortStr,
        vhost: &str,
        durable: bool,
        auto_delete: bool,
        exclusive_owner: Option<u64>,
        arguments: FieldTable,
        config: QueueConfig,
        policy: AppliedPolicy,
        env: &QueueEnv,
    ) -> Result<Arc<Queue>, BrokerError> {
        durable_only(&name, vhost, durable, auto_delete, exclusive_owner)?;
        let Some(root) = &env.streams_dir else {
            return Err(BrokerError::NotImplemented(
                "streams need a data directory".into(),
            ));
        };
        let log_config = log_config(&config);
        let log = StreamLog::open(
            root,
            vhost,
            &name.to_str_lossy(),
            log_config,
            env.stream_cache_bytes,
        )
        .map_err(|e| BrokerError::Internal(format!("cannot open stream '{name}' in vhost '{vhost}': {e}")))?;
        if let Some(s) = env.streams.get() {
            s.attach(&log);
        }
        let state: Box<dyn QueueType> = Box::new(StreamQueue::new(
            log.clone(),
            env.stream_codec,
            env.replication.clone(),
        ));
        Ok(Arc::new(Queue {
            name,
            vhost: vhost.to_string(),
            durable,
            auto_delete,
            exclusive_owner,
            home: None,
            arguments,
            memory: env.memory.clone(),
            stream: Some(log),
            state: Locked::new(state, config, policy),
            counters: MessageCounters::default(),
            global: env.messages.clone(),
            asked_durable: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// A quorum queue (x-queue-type: quorum): durable, neither exclusive
    /// nor auto-delete, as RabbitMQ requires; its state is its Raft
    /// group's, found after a restart (a checkpoint, then the log's later
    /// entries) or made.
    #[allow(clippy::too_many_arguments)]
    fn new_quorum(
        name: ShortStr,
        vhost: &str,
        durable: bool,
        auto_delete: bool,
        exclusive_owner: Option<u64>,
        arguments: FieldTable,
        config: QueueConfig,
        policy: AppliedPolicy,
        env: &QueueEnv,
    ) -> Result<Arc<Queue>, BrokerError> {
        durable_only(&name, vhost, durable, auto_delete, exclusive_owner)?;
        let Some(system) = env.quorum.get() else {
            return Err(BrokerError::NotImplemented(
                "quorum queues need a data directory".into(),
            ));
        };
        let (group, checkpoint) = system
            .open(vhost, &name)
            .map_err(|e| BrokerError::Internal(format!("quorum queue '{name}' in vhost '{vhost}': {e}")))?;
        let mut qq = QuorumQueue::new(
            group,
            system.clone(),
            &config,
            env.memory.clone(),
            env.replication.clone(),
        );
        if let Some(data) = checkpoint {
            qq.install(&data).map_err(|e| {
                BrokerError::Internal(format!(
                    "quorum queue '{name}' in vhost '{vhost}': its checkpoint: {e}"
                ))
            })?;
        }
        qq.sweep();
        let state: Box<dyn QueueType> = Box::new(qq);
        let q = Arc::new(Queue {
            name,
            vhost: vhost.to_string(),
            durable,
            auto_delete,
            exclusive_owner,
            home: None,
            arguments,
            memory: env.memory.clone(),
            stream: None,
            state: Locked::new(state, config, policy),
            counters: MessageCounters::default(),
            global: env.messages.clone(),
            asked_durable: std::sync::atomic::AtomicBool::new(false),
        });
        system.attach(group, Arc::downgrade(&q));
        Ok(q)
    }

    /// Where clients' gets and purges of this queue go: its home for a
    /// queue of another node, the leader's node for a quorum queue led
    /// elsewhere; None when this node answers them.
    pub fn forward_home(&self) -> Option<ShortStr> {
        if let Some(h) = &self.home {
            return Some(h.clone());
        }
        self.state.lock().ty.as_quorum().and_then(|q| q.forward_home())
    }

    /// A quorum queue's leader and members (None for other types, and
    /// for a quorum queue this node is not a member of).
    pub fn quorum_view(&self) -> Option<QuorumView> {
        self.state.lock().ty.quorum_view()
    }

    /// Run `f` on this quorum queue's member state (None for other
    /// types); the effects are the caller's to carry out.
    pub fn with_quorum<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut QuorumQueue, &mut Ctx) -> R,
    ) -> (Option<R>, Effects) {
        self.with(|q, ctx| q.as_quorum().map(|qq| f(qq, ctx)))
    }

    /// A queue that lives on node `home` of the cluster, as this node
    /// holds it (see [`RemoteQueue`]): no store, no log, no timer.
    #[allow(clippy::too_many_arguments)]
    pub fn remote(
        name: ShortStr,
        vhost: &str,
        durable: bool,
        auto_delete: bool,
        exclusive: bool,
        arguments: FieldTable,
        policy: AppliedPolicy,
        env: &QueueEnv,
        home: ShortStr,
    ) -> Result<Arc<Queue>, BrokerError> {
        let config = settings(&arguments, policy.0.as_deref(), &name, vhost)?;
        let state: Box<dyn QueueType> = Box::new(RemoteQueue::new(home.clone(), env.replication.clone()));
        Ok(Arc::new(Queue {
            name,
            vhost: vhost.to_string(),
            durable,
            auto_delete,
            exclusive_owner: exclusive.then_some(REMOTE_OWNER),
            home: Some(home),
            arguments,
            memory: env.memory.clone(),
            stream: None,
            state: Locked::new(state, config, policy),
            counters: MessageCounters::default(),
            global: env.messages.clone(),
            asked_durable: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn kind(&self) -> QueueKind {
        if self.stream.is_some() {
            QueueKind::Stream
        } else {
            // Its arguments say (for a queue of another node: what it is
            // at home).
            self.config().kind
        }
    }

    /// Is this queue a stream? Its log, if so.
    pub fn stream(&self) -> Option<&Arc<StreamLog>> {
        self.stream.as_ref()
    }

    fn with<R>(self: &Arc<Self>, f: impl FnOnce(&mut dyn QueueType, &mut Ctx) -> R) -> (R, Effects) {
        let mut effects = Effects::default();
        let mut state = self.state.lock();
        let Locked { ty, config, .. } = &mut *state;
        let mut ctx = Ctx {
            now: Instant::now(),
            queue: self,
            effects: &mut effects,
            config,
        };
        let r = f(&mut **ty, &mut ctx);
        drop(state);
        (r, effects)
    }

    /// Its settings now: declared arguments with its policy merged in.
    pub fn config(&self) -> Arc<QueueConfig> {
        self.state.lock().config.clone()
    }

    /// The policy that applies to it, if any.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.state.lock().policy.clone()
    }

    /// Apply `policy` (chosen at a vhost policy version): new settings at
    /// once, new length limits enforced now (what they drop comes back as
    /// dead letters; a stream drops whole old segments past its new
    /// retention). TTLs apply to messages published from now on. False if
    /// nothing changed (the same policy, or a newer choice already
    /// applied).
    pub fn set_policy(self: &Arc<Self>, policy: AppliedPolicy) -> (bool, Effects) {
        let (p, version) = policy;
        let mut state = self.state.lock();
        if version < state.policy_version {
            return (false, Effects::default());
        }
        state.policy_version = version;
        let same = match (&state.policy, &p) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if same {
            return (false, Effects::default());
        }
        let config = match settings(&self.arguments, p.as_deref(), &self.name, &self.vhost) {
            Ok(c) => c,
            // The arguments parsed when it was declared; keep what it has.
            Err(_) => return (false, Effects::default()),
        };
        if let Some(log) = &self.stream {
            if let Err(e) = log.set_config(log_config(&config)) {
                tracing::warn!(
                    "stream '{}' in vhost '{}': retention after a policy change failed: {e}",
                    self.name,
                    self.vhost
                );
            }
        }
        state.policy = p;
        state.config = Arc::new(config);
        drop(state);
        (true, self.with(|q, ctx| q.limits_changed(ctx)).1)
    }

    pub fn publish(self: &Arc<Self>, msg: MessageRef) -> (PublishOutcome, Effects) {
        let r = self.with(|q, ctx| q.publish(ctx, msg));
        if r.0 == PublishOutcome::Enqueued {
            // Per queue only: the broker counts a message once when it
            // is received, however many queues it reaches.
            self.counters.add(Stat::Publish, 1);
        }
        r
    }

    /// Count a delivery, get, ack or redelivery here and broker-wide.
    pub fn count(&self, stat: Stat, n: u64) {
        self.counters.add(stat, n);
        self.global.add(stat, n);
    }

    pub fn consume(self: &Arc<Self>, spec: ConsumerSpec) -> Result<Effects, BrokerError> {
        let (r, e) = self.with(|q, ctx| q.consume(ctx, spec));
        r.map(|_| e)
    }

    pub fn cancel(self: &Arc<Self>, consumer_id: u64) -> (bool, Effects) {
        self.with(|q, ctx| q.cancel(ctx, consumer_id))
    }

    pub fn settle(self: &Arc<Self>, consumer_id: Option<u64>, entries: Vec<Entry>, how: Settle) -> Effects {
        if how == Settle::Ack {
            self.count(Stat::Ack, entries.len() as u64);
        }
        self.with(|q, ctx| q.settle(ctx, consumer_id, entries, how)).1
    }

    /// basic.get (counted once answered; see [`QueueType::get`]).
    pub fn get(self: &Arc<Self>, no_ack: bool) -> (Answer<Option<(Entry, u64)>>, Effects) {
        let r = self.with(|q, ctx| q.get(ctx, no_ack));
        if let Answer::Now(Some((e, _))) = &r.0 {
            self.count_get(e, no_ack);
        }
        r
    }

    /// A get answered: counted here and broker-wide.
    pub fn count_get(&self, e: &Entry, no_ack: bool) {
        self.count(if no_ack { Stat::GetNoAck } else { Stat::Get }, 1);
        if e.redelivered {
            self.count(Stat::Redeliver, 1);
        }
    }

    pub fn pump(self: &Arc<Self>) -> Effects {
        self.with(|q, ctx| q.pump(ctx)).1
    }

    /// See [`QueueType::drain`].
    pub fn drain(self: &Arc<Self>, consumer_id: u64) -> bool {
        self.with(|q, ctx| q.drain(ctx, consumer_id)).0
    }

    pub fn purge(self: &Arc<Self>) -> (Answer<u64>, Effects) {
        self.with(|q, ctx| q.purge(ctx))
    }

    pub fn expire(self: &Arc<Self>) -> Effects {
        self.with(|q, ctx| q.expire(ctx)).1
    }

    pub fn delete_contents(self: &Arc<Self>) -> (Vec<ConsumerSpec>, Effects) {
        self.with(|q, ctx| q.delete(ctx))
    }

    /// A publisher told to pause (`Effects::flow`) waits here; false if the
    /// backlog is already low again.
    pub fn wait_for_drain(&self, waiter: Arc<dyn FlowWaiter>) -> bool {
        self.state.lock().ty.wait_for_drain(waiter)
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.state.lock().ty.next_deadline()
    }

    pub fn stats(&self) -> QueueStats {
        self.state.lock().ty.stats()
    }

    /// Its consumers; with single active consumer only the first is
    /// active.
    pub fn consumers(&self) -> Vec<ConsumerInfo> {
        let state = self.state.lock();
        let mut v = state.ty.consumers();
        if state.config.single_active_consumer {
            for c in v.iter_mut().skip(1) {
                c.active = false;
            }
        }
        v
    }

    pub fn idle_since(&self) -> Option<Instant> {
        self.state.lock().ty.idle_since()
    }

    /// A queue of another node: the figures its home reported.
    pub fn set_figures(&self, figures: QueueStats) {
        self.state.lock().ty.set_figures(figures)
    }

    /// See [`QueueType::set_remote_view`].
    pub fn set_remote_view(&self, view: Option<QuorumView>) {
        self.state.lock().ty.set_remote_view(view)
    }

    /// Durable as its declaration said (an exclusive queue declared
    /// durable says so, though it is kept as transient).
    pub fn declared_durable(&self) -> bool {
        self.durable || self.asked_durable.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// It was declared durable (and exclusive).
    pub fn set_declared_durable(&self) {
        self.asked_durable
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count a redeclare or basic.get as use (x-expires).
    pub fn touch(&self) {
        self.state.lock().ty.touch(Instant::now())
    }

    /// Does this queue need a timer (TTLs, x-expires, or recovered
    /// messages with an expiration)?
    pub fn needs_timer(&self) -> bool {
        let state = self.state.lock();
        state.config.message_ttl_ms.is_some()
            || state.config.expires_ms.is_some()
            || state.ty.next_deadline().is_some()
    }
}
