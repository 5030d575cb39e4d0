//! The home side of the queue protocol (`warren_peer::queue`): what this
//! node does for other nodes' connections with the queues it hosts.
//!
//! - A publish is enqueued as a local one would be; its confirm goes back
//!   once the queue has it and, for a persistent message in a durable
//!   queue, once it is on disk here (the store's sync ticket). Confirms
//!   leave in publish order, merged into ranges, after each batch read
//!   from the link or after the sync round they waited for. A queue past
//!   its flow mark holds back the confirms of that link until it has
//!   drained, which pauses the publishers on the other node (they run out
//!   of credit) and no one else.
//! - A remote consumer is a consumer of the queue here whose sink
//!   ([`ProxySink`]) sends deliveries over the link while the other
//!   node's credit lasts; it keeps what it delivered unsettled, so a
//!   settle from the other node can name deliveries by sequence number.
//! - When the link goes down, the peer's consumers are cancelled and
//!   everything delivered to them or got by them and not settled goes
//!   back to its queue, as when a local connection closes.
//! - Every [`FIGURES_EVERY`], each peer is told the figures (ready,
//!   unacked, consumers, bytes) of the queues here that changed since it
//!   was last told (all of them after its link comes up), and the figures
//!   peers report are set on their queues here, so listings and
//!   declare-ok on any node show them, at most that old.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_amqp091::{FieldTable, ShortStr};
use warren_core::queue::QueueStats;
use warren_core::queue::{
    Answer, ConsumerSpec, Delivery, DeliverySink, Effects, Entry, FlowWaiter, PublishOutcome, Queue, Settle,
    SyncWaiter, Ticket, REMOTE_OWNER,
};
use warren_core::{Broker, BrokerError, VHost};
use warren_peer::queue::{settle, Figures, QueueMsg, View};
use warren_peer::Message;

use super::links::DataSender;
use super::queue_client::{from_wire, wire_message};
use crate::timers::Timers;

/// How often peers hear the figures of this node's queues.
pub const FIGURES_EVERY: Duration = Duration::from_secs(1);

/// A queue's figures as last reported: ready, unacked, consumers, bytes.
type Reported = (u64, u64, u32, u64, Option<View>);

/// A publish waiting to be confirmed.
struct Unconfirmed {
    id: u64,
    ok: bool,
    ticket: Option<Ticket>,
    /// Set while its queue is past its flow mark.
    gate: Option<Arc<Gate>>,
}

/// Opens when a queue has drained below its low mark.
struct Gate {
    open: AtomicBool,
    wake: Arc<Notify>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate({})", self.open.load(Ordering::Relaxed))
    }
}

impl FlowWaiter for Gate {
    fn resume(&self) {
        self.open.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// Wakes a peer's confirm task after a sync round.
struct Waker(Arc<Notify>);

impl SyncWaiter for Waker {
    fn synced(&self) {
        self.0.notify_one();
    }
}

/// A consumer of a queue here for a connection on another node.
struct Proxy {
    queue: Arc<Queue>,
    /// Its id among this node's consumers.
    local_id: u64,
    sink: Arc<ProxySink>,
}

/// Where a remote consumer's deliveries go: over the link.
pub struct ProxySink {
    /// The other node's id for the consumer.
    consumer: u64,
    link: DataSender,
    state: Mutex<SinkState>,
}

#[derive(Default)]
struct SinkState {
    credit: u32,
    /// Delivered and not settled, by sequence number.
    unsettled: HashMap<u64, Entry>,
    waiting: Option<Weak<Queue>>,
    cancelled: bool,
}

impl std::fmt::Debug for ProxySink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProxySink({})", self.consumer)
    }
}

impl DeliverySink for ProxySink {
    fn has_room(&self) -> bool {
        self.state.lock().credit > 0
    }

    fn deliver(&self, d: Delivery) {
        {
            let mut s = self.state.lock();
            s.credit = s.credit.saturating_sub(1);
            if !d.no_ack {
                s.unsettled.insert(d.entry.seq, d.entry.clone());
            }
        }
        let _ = self.link.send(Message::Queue(QueueMsg::Deliver {
            consumer: self.consumer,
            seq: d.entry.seq,
            redelivered: d.entry.redelivered,
            message: wire_message(&d.entry.message),
        }));
    }

    fn cancelled(&self, _channel: u16, _consumer_tag: ShortStr) {
        self.state.lock().cancelled = true;
        let _ = self.link.send(Message::Queue(QueueMsg::Cancelled {
            consumer: self.consumer,
        }));
    }

    fn wait_for_room(&self, queue: Weak<Queue>) {
        self.state.lock().waiting = Some(queue);
    }
}

/// This node's dealings with one peer's connections.
struct Peer {
    link: DataSender,
    unconfirmed: Mutex<VecDeque<Unconfirmed>>,
    proxies: Mutex<HashMap<u64, Proxy>>,
    /// Got and not settled, by handle.
    gets: Mutex<HashMap<u64, (Arc<Queue>, Entry)>>,
    next_handle: Mutex<u64>,
    wake: Arc<Notify>,
    /// Wakes `wake` after a sync round (one per peer, so the syncer keeps
    /// one registration for it).
    synced: Arc<dyn SyncWaiter>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// What this peer was last told of each queue here.
    reported: Mutex<HashMap<(String, bytes::Bytes), Reported>>,
}

pub struct QueueHost {
    broker: Arc<Broker>,
    timers: Arc<Timers>,
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    /// Itself, for answers given once a queue has them.
    me: Weak<QueueHost>,
}

impl QueueHost {
    pub fn new(broker: Arc<Broker>, timers: Arc<Timers>) -> Arc<QueueHost> {
        let host = Arc::new_cyclic(|me| QueueHost {
            broker,
            timers,
            peers: Mutex::new(HashMap::new()),
            me: me.clone(),
        });
        let me = Arc::downgrade(&host);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(FIGURES_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(me) = me.upgrade() else { return };
                me.report_figures();
            }
        });
        host
    }

    /// Tell each peer the figures of the queues here that changed since
    /// it last heard.
    fn report_figures(&self) {
        let peers: Vec<Arc<Peer>> = self.peers.lock().values().cloned().collect();
        if peers.is_empty() {
            return;
        }
        let mut now: Vec<((String, bytes::Bytes), Reported)> = Vec::new();
        for vh in self.broker.vhosts() {
            for q in vh.queues() {
                if q.home.is_some() {
                    continue;
                }
                let s: QueueStats = q.stats();
                let key = (vh.name.clone(), q.name.clone().into_bytes());
                let names = |v: &[ShortStr]| v.iter().map(|n| n.to_str_lossy().into_owned()).collect();
                let view = q.quorum_view().map(|v| View {
                    leader: v
                        .leader
                        .map(|l| l.to_str_lossy().into_owned())
                        .unwrap_or_default(),
                    members: names(&v.members),
                    online: names(&v.online),
                });
                now.push((key, (s.ready, s.unacked, s.consumers, s.ready_bytes, view)));
            }
        }
        for p in peers {
            let mut told = p.reported.lock();
            let changed: Vec<Figures> = now
                .iter()
                .filter(|(k, v)| told.get(k) != Some(v))
                .map(|((vhost, queue), v)| Figures {
                    vhost: vhost.clone(),
                    queue: queue.clone(),
                    ready: v.0,
                    unacked: v.1,
                    consumers: v.2,
                    ready_bytes: v.3,
                    view: v.4.clone(),
                })
                .collect();
            if changed.is_empty() {
                continue;
            }
            told.clear();
            told.extend(now.iter().cloned());
            drop(told);
            // Cut to fit frames comfortably.
            for chunk in changed.chunks(10_000) {
                Self::send(
                    &p,
                    QueueMsg::Figures {
                        queues: chunk.to_vec(),
                    },
                );
            }
        }
    }

    /// A peer's figures of its queues, onto them here.
    fn figures_from(&self, from: &str, queues: Vec<Figures>) {
        for f in queues {
            let Some(vh) = self.vhost(&f.vhost) else { continue };
            let Some(q) = vh.find_queue(&f.queue) else {
                continue;
            };
            if q.home.as_ref().is_some_and(|h| h.as_bytes() == from.as_bytes()) {
                q.set_figures(QueueStats {
                    ready: f.ready,
                    unacked: f.unacked,
                    consumers: f.consumers,
                    ready_bytes: f.ready_bytes,
                    ..QueueStats::default()
                });
                let names = |v: Vec<String>| v.into_iter().map(|n| ShortStr::from(n.as_str())).collect();
                q.set_remote_view(f.view.map(|v| warren_core::queue::QuorumView {
                    leader: (!v.leader.is_empty()).then(|| ShortStr::from(v.leader.as_str())),
                    members: names(v.members),
                    online: names(v.online),
                }));
            }
        }
    }

    fn peer(&self, node: &str) -> Option<Arc<Peer>> {
        self.peers.lock().get(node).cloned()
    }

    pub fn up(self: &Arc<Self>, node: &str, data: DataSender) {
        let wake = Arc::new(Notify::new());
        let peer = Arc::new(Peer {
            link: data,
            unconfirmed: Mutex::new(VecDeque::new()),
            proxies: Mutex::new(HashMap::new()),
            gets: Mutex::new(HashMap::new()),
            next_handle: Mutex::new(0),
            synced: Arc::new(Waker(wake.clone())),
            wake,
            task: Mutex::new(None),
            reported: Mutex::new(HashMap::new()),
        });
        let (me, p) = (Arc::downgrade(self), peer.clone());
        let task = tokio::spawn(async move {
            loop {
                p.wake.notified().await;
                let Some(me) = me.upgrade() else { return };
                me.flush(&p);
            }
        });
        *peer.task.lock() = Some(task);
        if let Some(old) = self.peers.lock().insert(node.to_string(), peer) {
            self.release(&old);
        }
    }

    pub fn down(&self, node: &str) {
        if let Some(p) = self.peers.lock().remove(node) {
            self.release(&p);
        }
    }

    /// A peer's link is gone: its consumers end, what they held goes back.
    fn release(&self, p: &Peer) {
        if let Some(t) = p.task.lock().take() {
            t.abort();
        }
        p.unconfirmed.lock().clear();
        let proxies: Vec<Proxy> = p.proxies.lock().drain().map(|(_, v)| v).collect();
        for proxy in proxies {
            let entries: Vec<Entry> = proxy
                .sink
                .state
                .lock()
                .unsettled
                .drain()
                .map(|(_, e)| e)
                .collect();
            let mut entries = entries;
            entries.sort_by_key(|e| e.seq);
            let e = proxy.queue.settle(Some(proxy.local_id), entries, Settle::Requeue);
            self.apply(&proxy.queue, e);
            let (_, e) = proxy.queue.cancel(proxy.local_id);
            self.apply(&proxy.queue, e);
        }
        let gets: Vec<(Arc<Queue>, Entry)> = p.gets.lock().drain().map(|(_, v)| v).collect();
        for (q, entry) in gets {
            let e = q.settle(None, vec![entry], Settle::Requeue);
            self.apply(&q, e);
        }
    }

    fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.broker.vhost(name)
    }

    /// A queue that lives here.
    fn local_queue(&self, vhost: &str, name: &[u8]) -> Result<(Arc<VHost>, Arc<Queue>), BrokerError> {
        let not_found = || {
            BrokerError::NotFound(format!(
                "no queue '{}' in vhost '{vhost}'",
                String::from_utf8_lossy(name)
            ))
        };
        let vh = self.vhost(vhost).ok_or_else(not_found)?;
        match vh.find_queue(name) {
            Some(q) if q.home.is_none() => Ok((vh, q)),
            _ => Err(not_found()),
        }
    }

    /// Carry out what a queue call asked for, as a connection here would.
    fn apply(&self, q: &Arc<Queue>, effects: Effects) {
        if effects.dead_letters.is_empty() && !effects.delete_queue && !effects.arm_timer {
            return;
        }
        let Some(vh) = self.vhost(&q.vhost) else { return };
        let timers = &self.timers;
        vh.apply(q, effects, &mut |q| timers.arm(&vh, q));
    }

    fn send(p: &Peer, m: QueueMsg) {
        let _ = p.link.send(Message::Queue(m));
    }

    fn answer(p: &Peer, req: u64, r: Result<u64, BrokerError>) {
        let (code, text, value) = match r {
            Ok(v) => (0, String::new(), v),
            Err(e) => (e.reply_code(), e.detail().to_string(), 0),
        };
        Self::send(
            p,
            QueueMsg::Answer {
                req,
                code,
                text,
                value,
            },
        );
    }

    pub fn received(&self, from: &str, m: QueueMsg) {
        let Some(p) = self.peer(from) else { return };
        match m {
            QueueMsg::Publish {
                id,
                vhost,
                queue,
                message,
            } => self.publish(&p, id, &vhost, &queue, message),
            QueueMsg::Consume {
                req,
                consumer,
                vhost,
                queue,
                tag,
                no_ack,
                exclusive,
                prefetch,
                priority,
                credit,
                arguments,
            } => {
                let r = (|| {
                    let (_, q) = self.local_queue(&vhost, &queue)?;
                    let arguments = FieldTable::decode_from(arguments)
                        .map_err(|e| BrokerError::CommandInvalid(format!("consumer arguments: {e}")))?;
                    let sink = Arc::new(ProxySink {
                        consumer,
                        link: p.link.clone(),
                        state: Mutex::new(SinkState {
                            credit,
                            ..SinkState::default()
                        }),
                    });
                    let local_id = self.broker.next_id();
                    let spec = ConsumerSpec {
                        id: local_id,
                        connection_id: REMOTE_OWNER,
                        channel: 0,
                        tag: ShortStr::from_bytes(tag),
                        no_ack,
                        exclusive,
                        prefetch,
                        priority,
                        sink: sink.clone(),
                        channel_limit: None,
                        link_credit: None,
                        arguments,
                        record_filter: None,
                    };
                    let effects = q.consume(spec)?;
                    p.proxies.lock().insert(
                        consumer,
                        Proxy {
                            queue: q.clone(),
                            local_id,
                            sink,
                        },
                    );
                    Ok((q, effects))
                })();
                match r {
                    Ok((q, effects)) => {
                        Self::answer(&p, req, Ok(0));
                        self.apply(&q, effects);
                    }
                    Err(e) => Self::answer(&p, req, Err(e)),
                }
            }
            QueueMsg::Cancel { consumer } => {
                let proxy = {
                    let mut ps = p.proxies.lock();
                    let Some(proxy) = ps.get(&consumer) else { return };
                    let (q, id) = (proxy.queue.clone(), proxy.local_id);
                    // Kept while deliveries wait for their settle.
                    if proxy.sink.state.lock().unsettled.is_empty() {
                        ps.remove(&consumer);
                    } else {
                        proxy.sink.state.lock().cancelled = true;
                    }
                    (q, id)
                };
                let (_, e) = proxy.0.cancel(proxy.1);
                self.apply(&proxy.0, e);
            }
            QueueMsg::Credit { consumer, credit } => {
                let waiting = {
                    let ps = p.proxies.lock();
                    let Some(proxy) = ps.get(&consumer) else { return };
                    let mut s = proxy.sink.state.lock();
                    s.credit = s.credit.saturating_add(credit);
                    s.waiting.take()
                };
                if let Some(q) = waiting.and_then(|w| w.upgrade()) {
                    let e = q.pump();
                    self.apply(&q, e);
                }
            }
            QueueMsg::Drain { consumer } => {
                // Deliver what there is within the credit granted (the
                // deliveries go on the link before the answer), then hold
                // none: the client node's link credit is used up.
                let queue = p.proxies.lock().get(&consumer).map(|x| x.queue.clone());
                if let Some(q) = queue {
                    let e = q.pump();
                    self.apply(&q, e);
                }
                if let Some(proxy) = p.proxies.lock().get(&consumer) {
                    proxy.sink.state.lock().credit = 0;
                }
                Self::send(&p, QueueMsg::Drained { consumer });
            }
            QueueMsg::Settle { consumer, how, seqs } => self.settle(&p, consumer, how, seqs),
            QueueMsg::Figures { queues } => self.figures_from(from, queues),
            QueueMsg::Get {
                req,
                vhost,
                queue,
                no_ack,
            } => match self.local_queue(&vhost, &queue) {
                Err(e) => Self::answer(&p, req, Err(e)),
                Ok((_, q)) => {
                    let (got, e) = q.get(no_ack);
                    self.apply(&q, e);
                    match got {
                        Answer::Now(got) => self.got(&p, req, &q, no_ack, got),
                        // A quorum queue's, once applied (the link's later
                        // messages are handled meanwhile: their commands
                        // are proposed after the get's).
                        later => {
                            let me = self.me.clone();
                            tokio::spawn(async move {
                                let got = later.wait().await.flatten();
                                if let Some(me) = me.upgrade() {
                                    me.got(&p, req, &q, no_ack, got);
                                }
                            });
                        }
                    }
                }
            },
            QueueMsg::Purge { req, vhost, queue } => match self.local_queue(&vhost, &queue) {
                Err(e) => Self::answer(&p, req, Err(e)),
                Ok((_, q)) => {
                    let (n, e) = q.purge();
                    self.apply(&q, e);
                    match n {
                        Answer::Now(n) => Self::answer(&p, req, Ok(n)),
                        later => {
                            tokio::spawn(async move {
                                Self::answer(&p, req, Ok(later.wait().await.unwrap_or(0)));
                            });
                        }
                    }
                }
            },
            other => {
                tracing::warn!(peer = %from, kind = other.kind(), "a client node's queue message sent to a home; ignored")
            }
        }
    }

    /// Answer a client node's basic.get. A message not no-ack is held for
    /// its settle; should the peer be gone, it goes back.
    fn got(&self, p: &Arc<Peer>, req: u64, q: &Arc<Queue>, no_ack: bool, got: Option<(Entry, u64)>) {
        let Some((entry, remaining)) = got else {
            Self::answer(p, req, Ok(0));
            return;
        };
        let handle = {
            let mut h = p.next_handle.lock();
            *h += 1;
            *h
        };
        let message = wire_message(&entry.message);
        let redelivered = entry.redelivered;
        if !no_ack {
            p.gets.lock().insert(handle, (q.clone(), entry));
        }
        let gone = p
            .link
            .send(Message::Queue(QueueMsg::Got {
                req,
                handle,
                redelivered,
                remaining,
                message,
            }))
            .is_err();
        let current = self.peers.lock().values().any(|x| Arc::ptr_eq(x, p));
        if gone || !current {
            if let Some((q, entry)) = p.gets.lock().remove(&handle) {
                let e = q.settle(None, vec![entry], Settle::Requeue);
                self.apply(&q, e);
            }
        }
    }

    fn publish(
        &self,
        p: &Peer,
        id: u64,
        vhost: &str,
        queue: &[u8],
        message: warren_peer::queue::WireMessage,
    ) {
        let mut u = Unconfirmed {
            id,
            ok: false,
            ticket: None,
            gate: None,
        };
        match (self.local_queue(vhost, queue), from_wire(message)) {
            (Ok((_, q)), Ok(msg)) => {
                let (outcome, mut effects) = q.publish(Arc::new(msg));
                u.ok = outcome == PublishOutcome::Enqueued;
                u.ticket = effects.sync.take();
                if effects.flow {
                    let gate = Arc::new(Gate {
                        open: AtomicBool::new(false),
                        wake: p.wake.clone(),
                    });
                    if q.wait_for_drain(gate.clone()) {
                        u.gate = Some(gate);
                    }
                }
                self.apply(&q, effects);
            }
            (Err(e), _) => tracing::debug!("a publish from another node refused: {e}"),
            (_, Err(e)) => tracing::warn!("a publish from another node does not parse: {e}"),
        }
        p.unconfirmed.lock().push_back(u);
    }

    fn settle(&self, p: &Peer, consumer: u64, how: u8, seqs: Vec<u64>) {
        let how = match how {
            settle::ACK => Settle::Ack,
            settle::REQUEUE => Settle::Requeue,
            _ => Settle::Discard,
        };
        if consumer == 0 {
            let taken: Vec<(Arc<Queue>, Entry)> = {
                let mut gets = p.gets.lock();
                seqs.iter().filter_map(|h| gets.remove(h)).collect()
            };
            for (q, entry) in taken {
                let e = q.settle(None, vec![entry], how);
                self.apply(&q, e);
            }
            return;
        }
        let (q, local_id, entries) = {
            let mut ps = p.proxies.lock();
            let Some(proxy) = ps.get(&consumer) else { return };
            let mut s = proxy.sink.state.lock();
            let entries: Vec<Entry> = seqs.iter().filter_map(|seq| s.unsettled.remove(seq)).collect();
            let done = s.cancelled && s.unsettled.is_empty();
            drop(s);
            let r = (proxy.queue.clone(), proxy.local_id, entries);
            if done {
                ps.remove(&consumer);
            }
            r
        };
        if !entries.is_empty() {
            let e = q.settle(Some(local_id), entries, how);
            self.apply(&q, e);
        }
    }

    /// After a batch from `from`: send the confirms that are due.
    pub fn batch_done(&self, from: &str) {
        if let Some(p) = self.peer(from) {
            self.flush(&p);
        }
    }

    /// Confirm, in order, the publishes that are done; wake later for the
    /// rest.
    ///
    /// Two flushes may run at once (the link's reader after a batch, the
    /// peer's task after an fsync), so the confirms are sent before the
    /// lock is let go: the publisher's node takes a range that arrives
    /// ahead of an earlier one as a refusal of the earlier publishes.
    fn flush(&self, p: &Peer) {
        let mut out: Vec<QueueMsg> = Vec::new();
        let mut wait: Option<Ticket> = None;
        {
            let mut u = p.unconfirmed.lock();
            while let Some(front) = u.front() {
                if front
                    .gate
                    .as_ref()
                    .is_some_and(|g| !g.open.load(Ordering::Acquire))
                {
                    break;
                }
                if let Some(t) = &front.ticket {
                    if !t.is_done() {
                        wait = Some(t.clone());
                        break;
                    }
                }
                let f = u.pop_front().expect("front exists");
                // A ticket can refuse (a quorum queue's leader nacks a
                // publish past reject-publish's limit, or one its term
                // lost): the publisher hears that refusal.
                let f_ok = f.ok && f.ticket.as_ref().is_none_or(Ticket::is_ok);
                match out.last_mut() {
                    Some(QueueMsg::Confirm { first, count, ok })
                        if *ok == f_ok && *first + *count as u64 == f.id =>
                    {
                        *count += 1
                    }
                    _ => out.push(QueueMsg::Confirm {
                        first: f.id,
                        count: 1,
                        ok: f_ok,
                    }),
                }
            }
            // An unbounded channel's send never waits.
            for m in out {
                Self::send(p, m);
            }
        }
        if let Some(t) = wait {
            let syncer = self.broker.config.storage.as_ref().map(|s| s.syncer());
            t.wake(syncer, &p.synced);
        }
    }
}
