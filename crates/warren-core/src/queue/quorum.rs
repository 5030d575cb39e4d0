//! A quorum queue (x-queue-type: quorum) as one member of its Raft group
//! holds it: the state machine ([`warren_fifo::Fifo`]) every member
//! applies alike, the bodies of the messages still in the queue, the
//! consumers attached on this node and its publishes waiting to commit.
//!
//! Nothing changes the state but a committed entry: a publish, a consume,
//! an ack are proposed to the group ([`QuorumSystem::propose`]) and take
//! effect when the entry is applied ([`QuorumQueue::apply`], called by the
//! system's Raft thread on every member in log order). So a publish is
//! confirmed once a majority has it on disk and this node has applied it;
//! deliveries are the effects of applied entries, handed over by the
//! consumer's own node; dead letters are sent by the leader (at most once,
//! as RabbitMQ's default, or at least once, see `quorum_dlx.rs`).
//!
//! An entry is a tag (the proposing node's Raft id and a sequence number
//! its publishes are confirmed by; 0 when nothing waits) followed by a
//! `warren_fifo::codec` command; an enqueue's message follows its command
//! (exchange and routing key with a u8 length each, the 0-9-1 property
//! list with a u32 length, then the body).
//!
//! Consumers: every member serves the consumers attached on its own node.
//! A consumer's id in the state is its node's Raft id in the top 16 bits
//! and, below, the broker's consumer id offset by this run's salt (so a
//! consumer of a run before a restart is never taken for one of this
//! run), so every member knows whose it is. Its commands are proposed
//! like any other (a follower's driver forwards them to the leader), and
//! its deliveries are the effects of applied entries, which every member
//! computes alike: the consumer's own node hands them over, with the body
//! from its own copy. So a consumer outlives a change of leader, as in
//! RabbitMQ; the leader lets go of the consumers of a node that is down
//! (what they held is delivered again), and a consumer that finds itself
//! let go while still attached asks to be served again.
//!
//! A consumer with a prefetch gets credit back as it settles (the state
//! machine counts it); others (no-ack, AMQP 1.0 link credit, no prefetch)
//! get credit in windows its node proposes as their sink takes
//! deliveries. Deliveries the sink has no room for wait here, in order;
//! they are bounded by that credit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use warren_amqp091::{FieldTable, FieldValue, ShortStr};
use warren_fifo::codec;
use warren_fifo::{Command, DeadLetterReason, Effect, Fifo, MsgId};

use super::consumer::Consumer;
use super::{Ctx, Entry, FlowWaiter, RemoteConfirm, Settle};
use crate::message::MessageRef;
use crate::queue::dead_letter::Reason;
pub use crate::queue::quorum_bodies::ToSync;
use crate::queue::quorum_bodies::{encode_message, Bodies};
use crate::replication::ReplicationSlot;

mod answers;
mod effects;
mod queue_type;

use answers::Waiting;

/// Credit proposed at a time for consumers without a prefetch.
const WINDOW: u32 = 256;
/// The bit of a consumer id in the state that marks a node's basic.get
/// holder (not a consumer), and the bits below it.
const GETTER: u64 = 1 << 47;
const LOW: u64 = GETTER - 1;

/// The node (Raft id) whose consumer `consumer` is.
fn node_of(consumer: u64) -> u64 {
    consumer >> 48
}

fn is_getter(consumer: u64) -> bool {
    consumer & GETTER != 0
}
/// Publishes proposed here and not yet applied past which publishers are
/// asked to pause, and below which they resume; and the same for ready
/// messages of a queue with consumers, as a classic queue's brake (at
/// 10,000 publishes in flight, a backlog grew without one by 50,000
/// messages a second, paged out, and its consumer fell to 9,000 a
/// second: its acks waited behind passes of thousands of publishes).
const FLOW_HIGH: usize = 2000;
const FLOW_LOW: usize = 1000;

/// What runs a node's quorum queues' Raft groups (the server's). Calls are
/// made with a queue's lock held: they must not block or call a queue.
pub trait QuorumSystem: Send + Sync {
    /// This node's Raft id (consumer ids and entry tags carry it).
    fn node_id(&self) -> u64;
    /// The group of queue `name` in `vhost` here: found (after a restart,
    /// with the checkpoint to install before its later entries) or made.
    fn open(&self, vhost: &str, name: &ShortStr) -> Result<(u64, Option<Vec<u8>>), String>;
    /// The queue exists: the group's entries are applied to it from now.
    fn attach(&self, group: u64, queue: std::sync::Weak<super::Queue>);
    /// Is this node a member of the group of queue `name` in `vhost` (so
    /// the queue is held here as a member, not as another node's queue)?
    fn is_member(&self, vhost: &str, name: &ShortStr) -> bool;
    /// The node whose Raft id is `id` (a cluster's node table).
    fn node_name(&self, id: u64) -> Option<ShortStr>;
    /// `group`'s members (Raft ids) as this node knows them.
    fn members(&self, group: u64) -> Vec<u64>;
    /// Is node `id` reachable from here (this node, or a peer whose link
    /// is up)?
    fn is_up(&self, id: u64) -> bool;
    /// Hand `entry` to `group`'s leader (here), to append and replicate.
    fn propose(&self, group: u64, entry: Vec<u8>);
    /// The queue is deleted: its group goes from this node.
    fn remove(&self, group: u64);
    /// Where `group`'s paged bodies go (None: they stay in memory).
    fn body_dir(&self, _group: u64) -> Option<std::path::PathBuf> {
        None
    }
    /// The bodies all this node's quorum queues hold in memory.
    fn body_gauge(&self) -> Arc<super::MemoryGauge>;
}

/// Set once when the server starts its quorum system; every vhost shares it.
#[derive(Clone, Default)]
pub struct QuorumSlot(Arc<OnceLock<Arc<dyn QuorumSystem>>>);

impl QuorumSlot {
    pub fn set(&self, s: Arc<dyn QuorumSystem>) {
        let _ = self.0.set(s);
    }

    pub fn get(&self) -> Option<&Arc<dyn QuorumSystem>> {
        self.0.get()
    }
}

impl std::fmt::Debug for QuorumSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QuorumSlot({})",
            if self.get().is_some() { "set" } else { "none" }
        )
    }
}

/// What the management API shows of a quorum queue (RabbitMQ's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumView {
    pub leader: Option<ShortStr>,
    pub members: Vec<ShortStr>,
    pub online: Vec<ShortStr>,
}

/// This member's part in its group, as the Raft thread last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No leader known yet (just made, or electing): operations are
    /// proposed as if leading; the Raft thread holds them until a leader
    /// is known.
    Unknown,
    Leader,
    /// Another member leads (its Raft id).
    Follower(u64),
}

#[derive(Debug)]
struct Local {
    consumer: Consumer,
    /// Delivered by the state, waiting for room in the sink.
    waiting: VecDeque<Entry>,
    /// Credit proposed and not yet applied (no-prefetch consumers).
    asked: u32,
    /// The consumer's id in the state.
    cid: u64,
    /// Settlements proposed and not yet applied, by message: proposed
    /// again when a new leader is known (the old one may have lost them;
    /// one lost would hold its message, and the credit it frees, for
    /// ever). Bounded by what the consumer holds.
    settling: BTreeMap<MsgId, Settling>,
    /// With a single active consumer: whether its sink was last told it
    /// is the active one (None: not told yet).
    told_active: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settling {
    Ack,
    Return { failed: bool },
    Discard,
}

pub struct QuorumQueue {
    group: u64,
    system: Arc<dyn QuorumSystem>,
    fifo: Fifo,
    bodies: Bodies,
    role: Role,
    /// Consumers attached here, by the broker's consumer id.
    locals: BTreeMap<u64, Local>,
    /// This node's publishes waiting to be applied, by sequence number.
    confirms: HashMap<u64, (Arc<RemoteConfirm>, Instant)>,
    next_seq: u64,
    flow_waiters: Vec<Arc<dyn FlowWaiter>>,
    /// The expiry a Tick was proposed for (so it is proposed once).
    tick_asked: Option<u64>,
    idle_since: Option<Instant>,
    /// A follower hands clients' publishes and gets to the leader's node
    /// through the cluster's queue protocol, as for a queue of another
    /// node.
    replication: ReplicationSlot,
    /// This run's offset of consumer ids in the state.
    salt: u64,
    /// Publishes handed to the leader's node through `replication` whose
    /// answer may still be to come, oldest first (answered ones leave
    /// from the front as more are sent).
    sent: VecDeque<Arc<RemoteConfirm>>,
    /// This node's gets and purges waiting to be applied, by the sequence
    /// number their entries are tagged with.
    answers: HashMap<u64, Waiting>,
    /// At-least-once dead-lettering, while this member leads.
    dlx: super::quorum_dlx::DlxWorker,
    /// Settings this leader proposed (`SetConfig`) and has yet to apply.
    config_asked: Option<warren_fifo::Config>,
}

impl std::fmt::Debug for QuorumQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumQueue")
            .field("group", &self.group)
            .field("role", &self.role)
            .field("ready", &self.fifo.ready())
            .finish()
    }
}

impl QuorumQueue {
    pub fn new(
        group: u64,
        system: Arc<dyn QuorumSystem>,
        config: &super::QueueConfig,
        memory: Arc<super::MemoryGauge>,
        replication: ReplicationSlot,
    ) -> QuorumQueue {
        let body_dir = system.body_dir(group);
        let bodies = Bodies::new(body_dir, memory, system.body_gauge());
        QuorumQueue {
            group,
            system,
            fifo: Fifo::new(fifo_config(config)),
            bodies,
            role: Role::Unknown,
            locals: BTreeMap::new(),
            confirms: HashMap::new(),
            // From the clock, so this run's numbers never match entries an
            // earlier run proposed (replayed from the log).
            next_seq: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            flow_waiters: Vec::new(),
            tick_asked: None,
            idle_since: Some(Instant::now()),
            replication,
            salt: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15),
            sent: VecDeque::new(),
            answers: HashMap::new(),
            dlx: Default::default(),
            config_asked: None,
        }
    }

    /// Where clients' gets and purges go when another member leads.
    pub fn forward_home(&self) -> Option<ShortStr> {
        self.leader_node()
    }

    /// The id this node's basic.gets hold their messages under.
    fn getter(&self) -> u64 {
        (self.system.node_id() << 48) | GETTER | (self.salt & LOW)
    }

    /// The leader's node, when another member leads.
    fn leader_node(&self) -> Option<ShortStr> {
        match self.role {
            Role::Follower(id) => self.system.node_name(id),
            _ => None,
        }
    }

    pub fn group(&self) -> u64 {
        self.group
    }

    /// About how many bytes a checkpoint writes (so the Raft thread can
    /// space them by that).
    pub fn checkpoint_bytes(&self) -> u64 {
        // A waiting or held message's header in the state.
        const HEADER: u64 = 40;
        self.bodies.checkpoint_bytes() + HEADER * (self.fifo.ready() + self.fifo.checked_out()) as u64
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Leader, members and the members reachable from here.
    pub fn view(&self) -> QuorumView {
        let me = self.system.node_id();
        let ids = self.system.members(self.group);
        let name = |id: u64| self.system.node_name(id);
        let leader = match self.role {
            Role::Leader => name(me),
            Role::Follower(id) => name(id),
            Role::Unknown => None,
        };
        QuorumView {
            leader,
            members: ids.iter().filter_map(|i| name(*i)).collect(),
            online: ids
                .iter()
                .filter(|i| self.system.is_up(**i))
                .filter_map(|i| name(*i))
                .collect(),
        }
    }

    /// Leading, or no leader known yet (operations are proposed, and
    /// undone by `set_role` should another member turn out to lead).
    fn leads(&self) -> bool {
        !matches!(self.role, Role::Follower(_))
    }

    fn cid(&self, consumer_id: u64) -> u64 {
        (self.system.node_id() << 48) | (self.salt.wrapping_add(consumer_id) & LOW)
    }

    /// Is `consumer` in the state served by no one: this node's but not
    /// attached here (of a run before a restart), or a node's that is
    /// down, or another node's basic.gets (answered by a leader before:
    /// their acks now come here, under this node's getter)?
    fn unserved(&self, consumer: u64) -> bool {
        let me = self.system.node_id();
        if node_of(consumer) == me {
            consumer != self.getter() && !self.locals.values().any(|l| l.cid == consumer)
        } else {
            is_getter(consumer) || !self.system.is_up(node_of(consumer))
        }
    }

    fn consume_command(l: &Local) -> Command {
        let spec = &l.consumer.spec;
        let prefetch = if spec.no_ack || spec.link_credit.is_some() {
            0
        } else {
            spec.prefetch
        };
        Command::Consume {
            consumer: l.cid,
            prefetch,
            auto_settle: spec.no_ack,
            priority: spec.priority,
        }
    }

    /// A leader is known (another, maybe): what this node's consumers
    /// asked of one that may have lost it is proposed again. A consumer
    /// the state lacks is added (its Consume may be lost), credit asked
    /// for is asked again, settlements not applied are sent again (each
    /// does nothing if the first was applied after all).
    fn reattach(&mut self) {
        let mut commands = Vec::new();
        for l in self.locals.values_mut() {
            l.asked = 0;
            if self.fifo.consumer(l.cid).is_none() {
                commands.push(Self::consume_command(l));
            }
            let settling: Vec<(MsgId, Settling)> = l.settling.iter().map(|(i, h)| (*i, *h)).collect();
            commands.extend(settle_commands(l.cid, &settling));
        }
        for c in commands {
            self.propose(0, &c);
        }
    }

    /// `node` is down (the failure detector says): if this member leads,
    /// its consumers are let go, so what they hold is delivered again.
    pub fn node_down(&mut self, node: u64) {
        if self.role != Role::Leader || node == self.system.node_id() {
            return;
        }
        let gone: Vec<u64> = self
            .fifo
            .consumers()
            .keys()
            .copied()
            .filter(|c| node_of(*c) == node)
            .collect();
        for consumer in gone {
            self.propose(0, &Command::Cancel { consumer });
        }
    }

    fn propose(&mut self, seq: u64, c: &Command) {
        let mut e = Vec::with_capacity(32);
        e.extend_from_slice(&self.system.node_id().to_le_bytes());
        e.extend_from_slice(&seq.to_le_bytes());
        codec::encode(c, &mut e);
        self.system.propose(self.group, e);
    }

    /// The state machine and bodies as a snapshot's data for another
    /// member: the state, then each body inline (id, length, then the
    /// message as an enqueue carries it; paged bodies read back).
    pub fn snapshot(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        codec::encode_state(&self.fifo, &mut out);
        self.bodies.encode_inline(&mut out);
        out
    }

    /// This member's checkpoint: the state, the bodies in memory inline,
    /// and where each paged body lies; with the segments to sync before it
    /// is written and those to hand [`checkpointed`](Self::checkpointed)
    /// once it is on disk.
    pub fn checkpoint(&mut self) -> Result<(Vec<u8>, ToSync), String> {
        let mut out = Vec::new();
        codec::encode_state(&self.fifo, &mut out);
        let to_sync = self
            .bodies
            .encode_checkpoint(&mut out)
            .map_err(|e| format!("writing paged bodies: {e}"))?;
        Ok((out, to_sync))
    }

    /// A checkpoint is on disk: segments it does not name go.
    pub fn checkpointed(&mut self, doomed: &[u32]) {
        self.bodies.checkpointed(doomed);
    }

    /// After an applied batch: write the paged bodies it gathered, and
    /// let publishers go if what held them back is gone.
    pub fn batch_applied(&mut self) {
        self.bodies.flush();
        self.resume_publishers();
    }

    /// Should this node's publishers pause: too many of its publishes
    /// waiting to apply, or consumers falling behind?
    pub(crate) fn backlogged(&self) -> bool {
        self.confirms.len() > FLOW_HIGH
            || (self.fifo.ready() > FLOW_HIGH && !self.fifo.consumers().is_empty())
    }

    /// Both under their low marks (or no consumer to wait for).
    pub(crate) fn drained(&self) -> bool {
        self.confirms.len() < FLOW_LOW && (self.fifo.ready() < FLOW_LOW || self.fifo.consumers().is_empty())
    }

    /// After a restart's checkpoint (if any) is installed: segment files
    /// it does not name go.
    pub fn sweep(&mut self) {
        self.bodies.sweep();
    }

    /// Replace the state by a snapshot's (a restart's checkpoint, or the
    /// leader's when this member was too far behind).
    pub fn install(&mut self, data: &[u8]) -> Result<(), String> {
        let (fifo, rest) = codec::decode_state(data).map_err(|e| e.to_string())?;
        self.bodies.install(rest)?;
        // Entries the snapshot covers are not applied one by one here:
        // this node's publishes among them would never be confirmed, and
        // deliveries to its consumers among them never made. Those
        // consumers are let go (what they hold goes back) and, seeing
        // themselves let go, attach again.
        self.nack_all();
        let asked = !self.answers.is_empty();
        // Their entries may be in the snapshot: not answered here. What a
        // get among them took goes back with the getter.
        self.answers.clear();
        self.fifo = fifo;
        if asked {
            let getter = self.getter();
            self.propose(0, &Command::Cancel { consumer: getter });
        }
        if self.role == Role::Leader {
            self.dlx.clear();
            let now = Instant::now();
            for (h, _) in self.fifo.discards() {
                self.dlx.discarded(h.id, now);
            }
        }
        let ours: Vec<u64> = self
            .locals
            .values_mut()
            .map(|l| {
                l.waiting.clear();
                l.settling.clear();
                l.cid
            })
            .collect();
        for consumer in ours {
            self.propose(0, &Command::Cancel { consumer });
        }
        Ok(())
    }

    /// The Raft thread's view of this member changed. `held`: the
    /// sequence numbers of this node's publishes its driver still holds
    /// (never sent to any leader: they go to the next).
    pub fn set_role(&mut self, ctx: &mut Ctx, role: Role, held: &std::collections::HashSet<u64>) {
        let was = self.role;
        tracing::debug!(queue = %ctx.queue.name, group = self.group, ?was, ?role, "quorum queue role");
        self.role = role;
        if was != role && was != Role::Unknown {
            // The leader this member knew (itself, or another) is no
            // longer known to lead: publishes proposed to it and not yet
            // applied may or may not commit (they may be lost with it, a
            // node paused or cut off without a reset among them); the
            // publisher hears a nack and may send again (a duplicate at
            // worst, never a loss). So are those handed to its node
            // through the queue protocol. (What the driver still holds
            // goes to the next leader: not nacked, or its publisher would
            // send it twice.)
            let gone: Vec<u64> = self
                .confirms
                .keys()
                .filter(|s| !held.contains(s))
                .copied()
                .collect();
            for s in gone {
                if let Some((c, _)) = self.confirms.remove(&s) {
                    c.resolve(false);
                }
            }
            self.resume_publishers();
            for c in self.sent.drain(..) {
                c.resolve(false);
            }
        }
        if role != Role::Leader {
            self.dlx.clear();
        } else if was != Role::Leader {
            // A new leader sends every discard again (at least once).
            let now = Instant::now();
            for (h, _) in self.fifo.discards() {
                self.dlx.discarded(h.id, now);
            }
            if !self.dlx.is_idle() {
                ctx.effects.arm_timer = true;
            }
        }
        if role == Role::Unknown {
            // Wait for a leader: what is proposed meanwhile is held.
            return;
        }
        // Consumers the state holds that no one serves are let go: what
        // they hold goes back. The leader judges every node's (a down
        // node's consumers); a follower only its own.
        let me = self.system.node_id();
        let gone: Vec<u64> = self
            .fifo
            .consumers()
            .keys()
            .copied()
            .filter(|c| (role == Role::Leader || node_of(*c) == me) && self.unserved(*c))
            .collect();
        for consumer in gone {
            self.propose(0, &Command::Cancel { consumer });
        }
        self.reattach();
        self.top_up();
        self.deliver(ctx);
        if role == Role::Leader {
            self.config_asked = None;
            self.reconcile_config(ctx);
        }
    }

    /// The leader makes the replicated state's settings the queue's (a
    /// policy changed, or it has just become leader and the last one's
    /// proposal may be lost): proposed, so every member changes at the
    /// same point of the log, as RabbitMQ's quorum queues do.
    fn reconcile_config(&mut self, ctx: &mut Ctx) {
        if self.role != Role::Leader {
            return;
        }
        let want = fifo_config(ctx.config());
        if &want != self.fifo.config() && self.config_asked.as_ref() != Some(&want) {
            self.config_asked = Some(want.clone());
            self.propose(0, &Command::SetConfig(want));
        }
    }

    /// Apply one committed entry (every member, in log order).
    pub fn apply(&mut self, ctx: &mut Ctx, index: u64, data: Bytes) {
        if data.len() < 16 {
            tracing::error!(group = self.group, index, "a quorum queue entry without its tag");
            return;
        }
        let node = u64::from_le_bytes(data[..8].try_into().expect("8"));
        let seq = u64::from_le_bytes(data[8..16].try_into().expect("8"));
        let (command, rest) = match codec::decode(index, &data[16..]) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    group = self.group,
                    index,
                    "a quorum queue entry that does not decode: {e}"
                );
                return;
            }
        };
        let me = self.system.node_id();
        if let Command::Enqueue { id, .. } = &command {
            let at = data.len() - rest.len();
            if let Err(e) = self.bodies.insert(*id, data.slice(at..)) {
                tracing::error!(
                    group = self.group,
                    index,
                    "an enqueued message that does not decode: {e}"
                );
            }
        }
        // This node's consumers: settlements applied are no longer
        // pending; a Cancel they did not ask for (the leader let them go)
        // is answered by attaching again.
        let mut let_go = None;
        let mut ghost = None;
        match &command {
            Command::Credit { consumer, credit } if node_of(*consumer) == me => {
                match self.locals.values_mut().find(|l| l.cid == *consumer) {
                    Some(l) => l.asked = l.asked.saturating_sub(*credit),
                    // Credit brings a consumer into the state; one no
                    // longer attached here (its credit committed after
                    // its Cancel) is let go again, so it holds nothing.
                    None if self.role != Role::Unknown => ghost = Some(*consumer),
                    None => {}
                }
            }
            Command::Settle { consumer, ids }
            | Command::Return { consumer, ids, .. }
            | Command::Discard { consumer, ids }
                if node_of(*consumer) == me =>
            {
                if let Some(l) = self.locals.values_mut().find(|l| l.cid == *consumer) {
                    for id in ids {
                        l.settling.remove(id);
                    }
                }
            }
            Command::Cancel { consumer } if node_of(*consumer) == me => {
                let_go = self
                    .locals
                    .iter()
                    .find(|(_, l)| l.cid == *consumer)
                    .map(|(k, _)| *k);
            }
            _ => {}
        }
        if let (Command::Return { consumer, ids, .. } | Command::Discard { consumer, ids }, false) =
            (&command, rest.is_empty())
        {
            // A return or discard with new properties (a modified
            // outcome's annotations): every member stores the message
            // anew, and it goes back or is dead-lettered with them.
            let held = self
                .fifo
                .consumer(*consumer)
                .is_some_and(|c| ids.iter().all(|id| c.checked_out.contains_key(id)));
            if held {
                for id in ids {
                    self.reannotate(*id, Bytes::copy_from_slice(rest));
                }
            }
        }
        let consumers_changed = matches!(command, Command::Consume { .. } | Command::Cancel { .. });
        let mut effects = self.fifo.apply(command);
        if consumers_changed {
            // x-expires counts from when the last consumer went.
            let any = self.fifo.consumers().keys().any(|c| !is_getter(*c));
            match (any, self.idle_since) {
                (true, _) => self.idle_since = None,
                (false, None) => self.idle_since = Some(Instant::now()),
                (false, Some(_)) => {}
            }
        }
        if let Some(consumer) = ghost {
            self.propose(0, &Command::Cancel { consumer });
        }
        if let Some(l) = let_go.and_then(|k| self.locals.get_mut(&k)) {
            // What waited for room went back with the Cancel.
            l.waiting.clear();
            l.settling.clear();
            l.asked = 0;
            let c = Self::consume_command(l);
            tracing::debug!(
                group = self.group,
                consumer = l.cid,
                "a consumer let go while attached: attached again"
            );
            self.propose(0, &c);
        }
        // A refused enqueue (reject-publish, full): its body goes, and its
        // publisher hears a nack.
        let refused = effects.iter().any(|e| matches!(e, Effect::Rejected(_)));
        if node == me && seq != 0 {
            if let Some((c, _)) = self.confirms.remove(&seq) {
                c.resolve(!refused);
                self.resume_publishers();
            } else if let Some(w) = self.answers.remove(&seq) {
                self.answer(ctx, w, &mut effects);
            }
        }
        // Told before the deliveries this entry led to, as RabbitMQ
        // tells a newly active consumer before its first message.
        self.tell_activity();
        self.effects(ctx, effects);
    }

    /// With a single active consumer, tell each of this node's consumers
    /// in the state whether it is the active one: once it is in the
    /// state, then on each change (RabbitMQ 4.3 tells AMQP 1.0 receivers
    /// of quorum queues with the link's flow, `rabbitmq:active`).
    fn tell_activity(&mut self) {
        if !self.fifo.config().single_active {
            return;
        }
        let active = self.fifo.service().front().copied();
        for l in self.locals.values_mut() {
            if !self.fifo.consumers().contains_key(&l.cid) {
                continue;
            }
            let now = active == Some(l.cid);
            if l.told_active != Some(now) {
                l.told_active = Some(now);
                l.consumer.spec.sink.activity(l.consumer.spec.id, now);
            }
        }
    }

    fn nack_all(&mut self) {
        for (_, (c, _)) in self.confirms.drain() {
            c.resolve(false);
        }
        self.resume_publishers();
    }

    /// Nack publishes proposed more than `after` ago and not applied (a
    /// forward or proposal lost on the way, with no leader change to say
    /// so); the Raft thread calls this now and then.
    pub fn expire_confirms(&mut self, after: Duration) {
        let old: Vec<u64> = self
            .confirms
            .iter()
            .filter(|(_, (_, at))| at.elapsed() > after)
            .map(|(s, _)| *s)
            .collect();
        for s in old {
            if let Some((c, _)) = self.confirms.remove(&s) {
                c.resolve(false);
            }
        }
        self.resume_publishers();
        // Gets and purges too: their askers hear nothing was done (a get
        // applied later gives its message back).
        self.answers.retain(|_, w| w.at().elapsed() <= after);
    }

    /// Are publishes, gets or purges of this node waiting to apply?
    pub fn has_pending(&self) -> bool {
        !self.confirms.is_empty() || !self.answers.is_empty()
    }

    /// Let paused publishers go once nothing holds them back.
    fn resume_publishers(&mut self) {
        if self.flow_waiters.is_empty() || !self.drained() {
            return;
        }
        for w in self.flow_waiters.drain(..) {
            w.resume();
        }
    }

    /// Hand waiting deliveries to sinks with room (and link credit).
    fn deliver(&mut self, ctx: &mut Ctx) {
        for l in self.locals.values_mut() {
            while !l.waiting.is_empty() {
                let sink = &l.consumer.spec.sink;
                if let Some(c) = &l.consumer.spec.link_credit {
                    if c.get().1 == 0 {
                        break;
                    }
                }
                if !sink.has_room() {
                    sink.wait_for_room(Arc::downgrade(ctx.queue));
                    break;
                }
                let e = l.waiting.pop_front().expect("not empty");
                l.consumer.hand_over(ctx.queue, e);
            }
        }
    }

    /// Propose credit for consumers without a prefetch whose credit (in
    /// the state, asked for, or delivered and waiting) is under half a
    /// window.
    fn top_up(&mut self) {
        let mut asks = Vec::new();
        for l in self.locals.values_mut() {
            let Some(state) = self.fifo.consumer(l.cid) else {
                continue;
            };
            if state.prefetch > 0 {
                continue;
            }
            let mut want = WINDOW;
            if let Some(c) = &l.consumer.spec.link_credit {
                want = want.min(c.get().1);
            }
            let have = state.credit + l.asked + l.waiting.len() as u32;
            if have < want.div_ceil(2) || (have == 0 && want > 0) {
                let n = want - have.min(want);
                if n > 0 {
                    l.asked += n;
                    asks.push(Command::Credit {
                        consumer: l.cid,
                        credit: n,
                    });
                }
            }
        }
        for c in asks {
            self.propose(0, &c);
        }
    }

    fn ids_command(&mut self, consumer_id: Option<u64>, entries: &[Entry], how: Settle) {
        // Gets are held by this node's getter.
        let consumer = match consumer_id {
            Some(id) => self.cid(id),
            None => self.getter(),
        };
        // A failed attempt (basic.reject, AMQP 1.0's modified with
        // delivery-failed) shows as a delivery count above the one the
        // state gave; a plain requeue (basic.nack, released) does not
        // count, as in RabbitMQ 4.3.
        let held = self.fifo.consumer(consumer);
        let settling: Vec<(MsgId, Settling)> = entries
            .iter()
            .map(|e| {
                let how = match how {
                    Settle::Ack => Settling::Ack,
                    Settle::Requeue => {
                        let given = held
                            .and_then(|c| c.checked_out.get(&e.seq))
                            .map_or(e.delivery_count, |h| h.delivery_count);
                        Settling::Return {
                            failed: e.delivery_count > given,
                        }
                    }
                    Settle::Discard => Settling::Discard,
                };
                (e.seq, how)
            })
            .collect();
        if let Some(l) = consumer_id.and_then(|id| self.locals.get_mut(&id)) {
            l.settling.extend(settling.iter().copied());
        }
        // Requeued or discarded with annotations merged in: each goes
        // with its new properties, for every member to store (RabbitMQ 4
        // keeps a modified outcome's x- annotations on the message,
        // dead-lettered too).
        let mut plain = Vec::with_capacity(settling.len());
        for (e, s) in entries.iter().zip(settling) {
            match s {
                (_, Settling::Return { failed }) if e.annotated => {
                    let mut c = Vec::with_capacity(64 + e.message.raw_properties.len());
                    c.extend_from_slice(&self.system.node_id().to_le_bytes());
                    c.extend_from_slice(&0u64.to_le_bytes());
                    let r = codec::ReturnAs {
                        consumer,
                        id: e.seq,
                        failed,
                        now: super::now_ms().max(0) as u64,
                        until: delivery_time(&e.message).unwrap_or(0),
                    };
                    codec::encode_return_as(r, &e.message.raw_properties, &mut c);
                    self.system.propose(self.group, c);
                }
                (_, Settling::Discard) if e.annotated => {
                    let mut c = Vec::with_capacity(48 + e.message.raw_properties.len());
                    c.extend_from_slice(&self.system.node_id().to_le_bytes());
                    c.extend_from_slice(&0u64.to_le_bytes());
                    codec::encode_discard_as(consumer, e.seq, &e.message.raw_properties, &mut c);
                    self.system.propose(self.group, c);
                }
                s => plain.push(s),
            }
        }
        for c in settle_commands(consumer, &plain) {
            self.propose(0, &c);
        }
    }
}

/// The commands that settle `settling` for `consumer`: one per kind.
/// Returns carry this node's time (`now`), from which a delayed retry
/// waits.
fn settle_commands(consumer: u64, settling: &[(MsgId, Settling)]) -> Vec<Command> {
    let now = super::now_ms().max(0) as u64;
    let mut by: BTreeMap<(u8, bool), Vec<MsgId>> = BTreeMap::new();
    for (id, how) in settling {
        let key = match how {
            Settling::Ack => (0, false),
            Settling::Return { failed } => (1, *failed),
            Settling::Discard => (2, false),
        };
        by.entry(key).or_default().push(*id);
    }
    by.into_iter()
        .map(|((kind, failed), ids)| match kind {
            0 => Command::Settle { consumer, ids },
            1 => Command::Return {
                consumer,
                ids,
                failed,
                now,
                until: 0,
            },
            _ => Command::Discard { consumer, ids },
        })
        .collect()
}

/// The state machine's settings from the queue's (its arguments and the
/// policy it was declared under; every member makes the queue from the
/// same declaration, so all agree).
fn dead_letter_reason(r: DeadLetterReason) -> Reason {
    match r {
        DeadLetterReason::Rejected => Reason::Rejected,
        DeadLetterReason::Expired => Reason::Expired,
        DeadLetterReason::DeliveryLimit => Reason::DeliveryLimit,
        DeadLetterReason::MaxLen => Reason::MaxLen,
    }
}

fn fifo_config(c: &super::QueueConfig) -> warren_fifo::Config {
    warren_fifo::Config {
        delivery_limit: c.quorum.delivery_limit(),
        max_length: c.max_length,
        max_bytes: c.max_length_bytes,
        reject_publish: c.overflow != super::Overflow::DropHead,
        single_active: c.single_active_consumer,
        // RabbitMQ 4.3: strict priorities, 0 to 31 (a higher
        // x-max-priority keeps 32 levels).
        max_priority: c.max_priority.unwrap_or(0).min(warren_fifo::MAX_PRIORITY),
        dedup_window: c.quorum.dedup_window(),
        dedup_ttl: c.quorum.dedup_ttl,
        dlx_at_least_once: c.dlx_at_least_once(),
        delayed_retry: c.quorum.delayed_retry(),
    }
}

/// When a modified outcome asked for the message to come back
/// (`x-opt-delivery-time`, milliseconds since the epoch, RabbitMQ 4.3):
/// not before then, whatever the queue's delayed retry says.
fn delivery_time(m: &MessageRef) -> Option<u64> {
    match m.headers()?.get("x-opt-delivery-time")? {
        FieldValue::Timestamp(s) => s.checked_mul(1000),
        v => v.as_i64().and_then(|ms| u64::try_from(ms).ok()),
    }
}

/// The message with `x-delivery-count` in its headers (RabbitMQ's quorum
/// queues add it to messages whose delivery failed before).
fn with_delivery_count(m: &MessageRef, count: u32) -> MessageRef {
    let Ok(mut p) = m.properties() else {
        return m.clone();
    };
    let mut h = p.headers.take().unwrap_or_else(FieldTable::new);
    h.insert("x-delivery-count", FieldValue::I64(count as i64));
    p.headers = Some(h);
    Arc::new(m.with_properties(&p))
}
