//! The links between this node and the others: one TCP connection per
//! node pair, dialled by the node whose name sorts first (so a pair never
//! has two), authenticated by `link.rs`'s handshake, then carrying
//! `warren_peer` messages both ways. Each link pings every
//! `ping_interval`; a peer silent for `down_after` is down, its link is
//! closed and the dialler tries again. This is the node-pair failure
//! detector the Raft groups rely on instead of heartbeats of their own.
//!
//! A link's outgoing messages go through two channels to its writer task,
//! which sends whatever has queued in one write: a bounded one for Raft,
//! pings and requests (a sender finding it full drops the message; Raft
//! resends), and one for the queue protocol, which must not drop. That one
//! has no bound of its own because its senders are bounded by credit
//! (`queue_client.rs`, `queue_host.rs`): unconfirmed publishes per node
//! pair, undelivered deliveries per remote consumer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use warren_peer::message::RaftEnvelope;
use warren_peer::queue::QueueMsg;
use warren_peer::{parse_frame, Message, FRAME_MAX};

use super::link::{accept, dial, Identity, LinkError};
use super::link_tls::{LinkStream, LinkTls};
use crate::config::cluster::ClusterSettings;

/// Messages queued for a link's writer before senders wait.
const LINK_QUEUE: usize = 1024;
/// Most bytes one write gathers from the queue.
const WRITE_BATCH: usize = 256 << 10;
/// A handshake not done by then is dropped (as a client's TLS handshake).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Between attempts to dial a peer that is down: doubling from the first
/// to the last, back to the first once a link has been up.
const REDIAL_FIRST: Duration = Duration::from_millis(250);
const REDIAL_MAX: Duration = Duration::from_secs(8);

/// Request bodies on the links start with what they are.
pub mod request {
    /// A metadata proposal forwarded to the leader.
    pub const PROPOSE: u8 = 1;
    /// A node's figures and alarms (JSON), sent unasked every few pings;
    /// never answered.
    pub const STATUS: u8 = 2;
    /// Forget a node (its name follows): to the metadata leader, which
    /// proposes removing it; answered only if it cannot.
    pub const FORGET: u8 = 3;
    /// A node not in the cluster (its secret proven) asks to join, on a
    /// connection that carries only this request and its answer (see
    /// `join.rs`).
    pub const JOIN: u8 = 4;
    /// A quorum queue entry (its group, u64 big-endian, then the entry)
    /// proposed on a member before it knew its group's leader, forwarded
    /// to the leader; never answered (the proposer hears of it when it
    /// applies the entry).
    pub const QUORUM_PROPOSE: u8 = 5;
    /// A call on a quorum queue's group (`quorum::call`: its members, a
    /// change of them, its leadership), to a member; answered with a
    /// Reply whose id has [`CALL_ID_BIT`].
    pub const QUORUM_CALL: u8 = 6;

    /// Replies to this node's quorum calls carry ids with this bit (the
    /// metadata group's forwarded proposals use the rest).
    pub const CALL_ID_BIT: u64 = 1 << 63;
}

/// Pings between two status reports on a link.
const STATUS_EVERY: u64 = 5;

/// What this node knows of another.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerStatus {
    pub node: String,
    pub address: String,
    /// A link is up and the peer answered within `down_after`.
    pub running: bool,
    /// Why the last link ended or the last attempt failed.
    pub last_error: Option<String>,
    /// The peer's last status report (memory, alarms, uptime...).
    pub status: Option<serde_json::Value>,
}

/// Where the queue protocol's messages for a peer go (see the module
/// docs for its bound).
pub type DataSender = mpsc::UnboundedSender<Message>;

struct Peer {
    address: String,
    /// The link in use: its id and its writer's queues.
    link: Option<(u64, mpsc::Sender<Message>, DataSender)>,
    last_error: Option<String>,
    status: Option<serde_json::Value>,
}

/// What the links report to the layer above (the metadata Raft group).
pub trait LinkEvents: Send + Sync {
    fn up(&self, node: &str);
    fn down(&self, node: &str);
    fn raft(&self, from: &str, batch: Vec<RaftEnvelope>);
    fn request(&self, from: &str, id: u64, body: bytes::Bytes);
    fn reply(&self, from: &str, id: u64, ok: bool, body: bytes::Bytes);
    /// A node that is not a peer (its secret proven) asks to join.
    fn join_request<'a>(
        &'a self,
        node: &'a str,
        address: &'a str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Vec<u8>, super::meta::JoinRefusal>> + Send + 'a>,
    >;
}

/// What the links report to the queue protocol.
pub trait QueueEvents: Send + Sync {
    /// A link to `node` is up; `data` sends on it.
    fn up(&self, node: &str, data: DataSender);
    fn down(&self, node: &str);
    fn received(&self, from: &str, m: QueueMsg);
    /// A stream replication message (`warren_peer::stream`).
    fn stream(&self, from: &str, m: warren_peer::stream::StreamMsg);
    /// Everything read from `from` so far is handled (a point to send
    /// what was gathered, such as confirms).
    fn batch_done(&self, from: &str);
}

pub struct Cluster {
    pub(super) me: Identity,
    broker: Arc<warren_core::Broker>,
    started: Instant,
    pub(super) events: OnceLock<Arc<dyn LinkEvents>>,
    /// The queue protocol's two sides.
    queues: Arc<dyn QueueEvents>,
    /// Where stream clients reach this node (host, plain port, TLS port),
    /// as its status reports tell the others.
    stream_endpoint: OnceLock<serde_json::Value>,
    settings: ClusterSettings,
    /// TLS around every link, when configured.
    pub(super) tls: Option<LinkTls>,
    peers: Mutex<HashMap<String, Peer>>,
    /// Ends the dial loops of peers added after start.
    shutdown: watch::Receiver<bool>,
    next_link: AtomicU64,
    /// Where the inter-node listener is bound.
    pub listen: SocketAddr,
}

impl Cluster {
    /// Bind nothing (the caller bound `listener`); start accepting peers
    /// and dialling those this node dials, until `shutdown`.
    pub fn start(
        broker: Arc<warren_core::Broker>,
        node: &str,
        settings: ClusterSettings,
        secret: &[u8],
        listener: TcpListener,
        queues: Arc<dyn QueueEvents>,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<Arc<Cluster>> {
        let listen = listener.local_addr()?;
        let tls = match &settings.tls {
            Some(t) => Some(LinkTls::load(t).map_err(std::io::Error::other)?),
            None => None,
        };
        let peers = settings
            .peers
            .iter()
            .map(|p| {
                let peer = Peer {
                    address: p.address.clone(),
                    link: None,
                    last_error: None,
                    status: None,
                };
                (p.node.clone(), peer)
            })
            .collect();
        let c = Arc::new(Cluster {
            me: Identity::new(&settings.name, node, secret),
            broker,
            started: Instant::now(),
            events: OnceLock::new(),
            queues,
            stream_endpoint: OnceLock::new(),
            settings,
            tls,
            peers: Mutex::new(peers),
            shutdown: shutdown.clone(),
            next_link: AtomicU64::new(1),
            listen,
        });
        tokio::spawn(c.clone().accept_loop(listener, shutdown.clone()));
        for p in &c.settings.peers {
            if c.me.node < p.node {
                tokio::spawn(
                    c.clone()
                        .dial_loop(p.node.clone(), p.address.clone(), shutdown.clone()),
                );
            }
        }
        tracing::info!(node = %c.me.node, cluster = %c.me.cluster, %listen, peers = c.settings.peers.len(), "inter-node listener started");
        Ok(c)
    }

    pub fn node(&self) -> &str {
        &self.me.node
    }

    /// Who hears of links going up and down and of Raft messages (once).
    pub fn set_events(&self, e: Arc<dyn LinkEvents>) {
        let _ = self.events.set(e);
    }

    /// Where stream clients reach this node: the advertised host (None:
    /// the host of this node's inter-node address, as peers know it) and
    /// ports. Set once, after the listeners are bound.
    pub fn set_stream_endpoint(&self, host: Option<String>, port: Option<u16>, tls_port: Option<u16>) {
        let _ = self.stream_endpoint.set(serde_json::json!({
            "host": host,
            "port": port,
            "tls_port": tls_port,
        }));
    }

    /// Where stream clients reach `node`, if it is up and has said so:
    /// (host, port), the TLS port when `tls`.
    pub fn stream_endpoint_of(&self, node: &str, tls: bool) -> Option<(String, u16)> {
        let peers = self.peers.lock();
        let p = peers.get(node)?;
        p.link.as_ref()?;
        let e = &p.status.as_ref()?["stream"];
        let port = e[if tls { "tls_port" } else { "port" }].as_u64()? as u16;
        let host = match e["host"].as_str() {
            Some(h) => h.to_string(),
            None => p.address.rsplit_once(':').map(|(h, _)| h.to_string())?,
        };
        Some((host, port))
    }

    /// Queue `m` for `node`; false (and dropped) when there is no link or
    /// its queue is full. Raft resends what is lost.
    pub fn send(&self, node: &str, m: Message) -> bool {
        let tx = self
            .peers
            .lock()
            .get(node)
            .and_then(|p| p.link.as_ref().map(|(_, tx, _)| tx.clone()));
        tx.is_some_and(|tx| tx.try_send(m).is_ok())
    }

    /// `node` is no longer of the cluster (forgotten): no link to it, no
    /// dialling it, not listed; a link it still has ends at its next ping.
    pub fn forget(&self, node: &str) {
        if self.peers.lock().remove(node).is_some() {
            tracing::info!(peer = %node, "node forgotten: no longer a member of the cluster");
        }
    }

    /// `node` joined the cluster (or was learnt of from the node table):
    /// a peer from now on, dialled if this node dials it.
    pub fn add_peer(self: &Arc<Self>, node: &str, address: &str) {
        {
            let mut peers = self.peers.lock();
            if peers.contains_key(node) {
                return;
            }
            peers.insert(
                node.to_string(),
                Peer {
                    address: address.to_string(),
                    link: None,
                    last_error: None,
                    status: None,
                },
            );
        }
        tracing::info!(peer = %node, %address, "a new cluster member: linking to it");
        if self.me.node.as_str() < node {
            tokio::spawn(self.clone().dial_loop(
                node.to_string(),
                address.to_string(),
                self.shutdown.clone(),
            ));
        }
    }

    /// Is there a link to `node` now?
    pub fn is_up(&self, node: &str) -> bool {
        self.peers.lock().get(node).is_some_and(|p| p.link.is_some())
    }

    /// A direct reply-to reply for a consumer on `node`; false when it
    /// cannot go (no link, its queue full, too large for a frame).
    pub fn send_reply(&self, node: &str, name: &[u8], message: &warren_core::message::Message) -> bool {
        if !super::queue_client::fits_a_frame(message) {
            return false;
        }
        let m = QueueMsg::Reply {
            name: bytes::Bytes::copy_from_slice(name),
            message: super::queue_client::wire_message(message),
        };
        self.send(node, Message::Queue(m))
    }

    /// Every other node: the configured ones in configuration order, then
    /// those that joined, by name.
    pub fn peers(&self) -> Vec<PeerStatus> {
        let peers = self.peers.lock();
        let mut all: Vec<PeerStatus> = peers
            .iter()
            .map(|(node, s)| PeerStatus {
                node: node.clone(),
                address: s.address.clone(),
                running: s.link.is_some(),
                last_error: s.last_error.clone(),
                status: s.status.clone(),
            })
            .collect();
        let at = |n: &str| {
            self.settings
                .peers
                .iter()
                .position(|p| p.node == n)
                .unwrap_or(usize::MAX)
        };
        all.sort_by(|a, b| (at(&a.node), &a.node).cmp(&(at(&b.node), &b.node)));
        all
    }

    /// Say goodbye on every link, so peers see this node leave at once
    /// rather than after `down_after`.
    pub async fn leave(&self) {
        let links: Vec<_> = self
            .peers
            .lock()
            .values()
            .filter_map(|p| p.link.as_ref().map(|(_, tx, _)| tx.clone()))
            .collect();
        for tx in links {
            let bye = Message::Goodbye {
                reason: "shutdown".into(),
            };
            let _ = tokio::time::timeout(Duration::from_millis(200), tx.send(bye)).await;
        }
        // Let the writers put it on the wire.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// This node's figures and alarms, as peers show them in /api/nodes.
    pub fn status(&self) -> serde_json::Value {
        let b = &self.broker;
        b.publishing_blocked();
        serde_json::json!({
            "mem_used": b.memory.bytes(),
            "mem_limit": b.alarms.memory_limit(),
            "mem_alarm": b.alarms.memory_alarm(),
            "disk_free_limit": b.alarms.disk_free_limit(),
            "disk_free_alarm": b.alarms.disk_alarm(),
            "uptime": self.started.elapsed().as_millis() as u64,
            "processors": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "stream": self.stream_endpoint.get(),
            "links_up": self.linked(),
            "partitions": self.partitions(),
        })
    }

    /// The peers this node has a link to.
    fn linked(&self) -> Vec<String> {
        let peers = self.peers.lock();
        let mut v: Vec<String> = peers
            .iter()
            .filter(|(_, p)| p.link.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// The peers this node is partitioned from: it has no link to them,
    /// yet a node it does reach last reported a link to them (so they are
    /// up, and the network between here and there is what failed). As
    /// RabbitMQ's `partitions` in `/api/nodes`, but it empties by itself
    /// once the link is back: the metadata group needs no operator to heal.
    pub fn partitions(&self) -> Vec<String> {
        let peers = self.peers.lock();
        let mut v: Vec<String> = peers
            .iter()
            .filter(|(name, p)| {
                p.link.is_none()
                    && peers.values().any(|q| {
                        q.link.is_some()
                            && q.status.as_ref().is_some_and(|s| {
                                s["links_up"]
                                    .as_array()
                                    .is_some_and(|up| up.iter().any(|n| n == name.as_str()))
                            })
                    })
            })
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    fn status_message(&self) -> Message {
        let mut body = vec![request::STATUS];
        body.extend_from_slice(self.status().to_string().as_bytes());
        Message::Request {
            id: 0,
            body: body.into(),
        }
    }

    /// A peer's status report: kept for /api/nodes, and its alarms count
    /// here (RabbitMQ's alarms are cluster-wide).
    fn status_from(&self, node: &str, body: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
            tracing::warn!(peer = %node, "a status report that is not JSON");
            return;
        };
        if let Some(p) = self.peers.lock().get_mut(node) {
            p.status = Some(v);
        }
        self.recompute_alarms();
    }

    /// Other running nodes' alarms into this node's.
    fn recompute_alarms(&self) {
        let (mut memory, mut disk) = (false, false);
        for p in self.peers.lock().values() {
            if let (Some(_), Some(s)) = (&p.link, &p.status) {
                memory |= s["mem_alarm"] == true;
                disk |= s["disk_free_alarm"] == true;
            }
        }
        self.broker.alarms.set_remote(memory, disk);
    }

    fn failed(&self, node: &str, e: String) {
        if let Some(p) = self.peers.lock().get_mut(node) {
            if p.last_error.as_deref() != Some(&e) {
                tracing::warn!(peer = %node, "inter-node link: {e}");
            }
            p.last_error = Some(e);
        }
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
        loop {
            let (tcp, addr) = tokio::select! {
                _ = shutdown.changed() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("inter-node accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let c = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let Some(tls) = &c.tls else {
                    return c.clone().accepted(tcp, addr, shutdown).await;
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                    Ok(Ok(s)) => c.clone().accepted(s, addr, shutdown).await,
                    Ok(Err(e)) => tracing::warn!(%addr, "inter-node TLS handshake failed: {e}"),
                    Err(_) => tracing::warn!(%addr, "inter-node TLS handshake timed out"),
                }
            });
        }
    }

    /// A peer's connection, in TLS if configured: prove each other and
    /// serve the link.
    async fn accepted(
        self: Arc<Self>,
        mut stream: impl LinkStream,
        addr: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut buf = BytesMut::new();
        let r = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept(&mut stream, &self.me, &mut buf)).await;
        let peer = match r {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::warn!(%addr, "inter-node handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!(%addr, "inter-node handshake timed out");
                return;
            }
        };
        if !self.peers.lock().contains_key(&peer.node) {
            // A node that is not a member yet may ask to join: the first
            // message of such a connection says so.
            if let Some((id, body)) = super::join::first_request(&mut stream, &mut buf).await {
                if let Some((&request::JOIN, ask)) = body.split_first() {
                    return super::join::serve(&self, stream, &peer.node, id, ask).await;
                }
            }
            tracing::warn!(%addr, peer = %peer.node, "inter-node link refused: not a configured peer");
            let mut out = BytesMut::new();
            Message::Goodbye {
                reason: format!("'{}' is not a peer of '{}'", peer.node, self.me.node),
            }
            .encode(&mut out);
            let _ = stream.write_all(&out).await;
            return;
        }
        let e = self.clone().run(peer.node.clone(), stream, buf, shutdown).await;
        self.failed(&peer.node, e);
    }

    async fn dial_loop(self: Arc<Self>, node: String, address: String, mut shutdown: watch::Receiver<bool>) {
        let mut pause = REDIAL_FIRST;
        loop {
            if *shutdown.borrow() || !self.peers.lock().contains_key(&node) {
                return;
            }
            let attempt = async {
                let tcp = TcpStream::connect(&address).await.map_err(LinkError::from)?;
                let _ = tcp.set_nodelay(true);
                let mut stream: Box<dyn LinkStream> = match &self.tls {
                    Some(tls) => Box::new(tls.connect(&address, tcp).await.map_err(LinkError::from)?),
                    None => Box::new(tcp),
                };
                let mut buf = BytesMut::new();
                let peer = dial(&mut stream, &self.me, &mut buf).await?;
                Ok::<_, LinkError>((stream, buf, peer))
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, attempt).await {
                Ok(Ok((tcp, buf, peer))) if peer.node == node => {
                    let e = self.clone().run(node.clone(), tcp, buf, shutdown.clone()).await;
                    self.failed(&node, e);
                    pause = REDIAL_FIRST;
                }
                Ok(Ok((_, _, peer))) => {
                    self.failed(&node, format!("{address} is node '{}', not '{node}'", peer.node))
                }
                Ok(Err(e)) => self.failed(&node, e.to_string()),
                Err(_) => self.failed(&node, "handshake timed out".into()),
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(REDIAL_MAX);
        }
    }

    /// Serve a link until it fails; returns why it ended.
    async fn run(
        self: Arc<Self>,
        node: String,
        stream: impl LinkStream,
        mut buf: BytesMut,
        mut shutdown: watch::Receiver<bool>,
    ) -> String {
        let (mut rd, wr) = tokio::io::split(stream);
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        let (data, data_rx) = mpsc::unbounded_channel();
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        {
            let mut peers = self.peers.lock();
            let Some(p) = peers.get_mut(&node) else {
                return "not a configured peer".into();
            };
            p.link = Some((id, tx.clone(), data.clone()));
            p.last_error = None;
        }
        tracing::info!(peer = %node, "inter-node link up");
        if let Some(e) = self.events.get() {
            e.up(&node);
        }
        self.queues.up(&node, data);
        let writer = tokio::spawn(write_loop(wr, rx, data_rx));
        let _ = tx.try_send(self.status_message());
        let ping_every = Duration::from_millis(self.settings.ping_interval);
        let down_after = Duration::from_millis(self.settings.down_after);
        let mut ping = tokio::time::interval(ping_every);
        let mut seq = 0u64;
        let mut last_heard = Instant::now();
        let why = loop {
            // Whole frames already read first.
            match parse_frame(&mut buf, FRAME_MAX) {
                Ok(Some(f)) => {
                    last_heard = Instant::now();
                    match Message::decode(f) {
                        Ok(Message::Ping { seq }) => {
                            if tx.try_send(Message::Pong { seq }).is_err() {
                                break "the link's queue is full".to_string();
                            }
                        }
                        Ok(Message::Pong { .. }) => {}
                        Ok(Message::Raft { batch }) => {
                            if let Some(e) = self.events.get() {
                                e.raft(&node, batch);
                            }
                        }
                        Ok(Message::Request { body, .. }) if body.first() == Some(&request::STATUS) => {
                            self.status_from(&node, &body[1..]);
                        }
                        Ok(Message::Request { id, body }) => {
                            if let Some(e) = self.events.get() {
                                e.request(&node, id, body);
                            }
                        }
                        Ok(Message::Reply { id, ok, body }) => {
                            if let Some(e) = self.events.get() {
                                e.reply(&node, id, ok, body);
                            }
                        }
                        Ok(Message::Queue(m)) => {
                            self.queues.received(&node, m);
                        }
                        Ok(Message::Stream(m)) => {
                            self.queues.stream(&node, m);
                        }
                        Ok(Message::Goodbye { reason }) => break format!("the peer left: {reason}"),
                        Ok(m) if m.is_handshake() => break "a handshake message on an open link".into(),
                        Ok(m) => {
                            tracing::debug!(peer = %node, kind = m.kind(), "inter-node message not handled yet")
                        }
                        Err(e) => break format!("bad message: {e}"),
                    }
                    continue;
                }
                Ok(None) => {
                    self.queues.batch_done(&node);
                }
                Err(e) => break format!("bad frame: {e}"),
            }
            tokio::select! {
                r = rd.read_buf(&mut buf) => match r {
                    Ok(0) => break "the peer closed the link".into(),
                    Ok(_) => {}
                    Err(e) => break format!("read: {e}"),
                },
                _ = ping.tick() => {
                    if !self.peers.lock().contains_key(&node) {
                        break "the node was forgotten".into();
                    }
                    if last_heard.elapsed() > down_after {
                        break format!("no answer for {} ms", down_after.as_millis());
                    }
                    seq += 1;
                    let _ = tx.try_send(Message::Ping { seq });
                    if seq.is_multiple_of(STATUS_EVERY) {
                        let _ = tx.try_send(self.status_message());
                    }
                }
                _ = shutdown.changed() => break "shutdown".into(),
            }
        };
        writer.abort();
        let current = {
            let mut peers = self.peers.lock();
            match peers.get_mut(&node) {
                Some(p) if p.link.as_ref().is_some_and(|(l, _, _)| *l == id) => {
                    p.link = None;
                    true
                }
                _ => false,
            }
        };
        if current {
            // A node that is down has no alarms here.
            self.recompute_alarms();
            if let Some(e) = self.events.get() {
                e.down(&node);
            }
            self.queues.down(&node);
        }
        tracing::info!(peer = %node, "inter-node link down: {why}");
        why
    }
}

/// Send what the link's queues hold, as few writes as it takes; Raft and
/// pings first, so a busy queue protocol cannot delay an election.
/// Replicated chunk bytes are written from their own buffers (vectored),
/// not copied into the batch first.
async fn write_loop(
    mut wr: impl tokio::io::AsyncWrite + Unpin,
    mut rx: mpsc::Receiver<Message>,
    mut data: mpsc::UnboundedReceiver<Message>,
) {
    let mut out = BytesMut::new();
    let mut parts: Vec<bytes::Bytes> = Vec::new();
    loop {
        let m = tokio::select! {
            biased;
            m = rx.recv() => m,
            m = data.recv() => m,
        };
        let Some(m) = m else { return };
        // Bytes queued in `parts` (bodies and the heads before them).
        let mut size = add(m, &mut out, &mut parts);
        while out.len() + size < WRITE_BATCH {
            if let Ok(m) = rx.try_recv() {
                size += add(m, &mut out, &mut parts);
            } else if let Ok(m) = data.try_recv() {
                size += add(m, &mut out, &mut parts);
            } else {
                break;
            }
        }
        if !out.is_empty() {
            parts.push(out.split().freeze());
        }
        if write_parts(&mut wr, &mut parts).await.is_err() {
            return;
        }
    }
}

/// Encode `m` into `out`, or, for a large body sent as it is, move what
/// `out` holds and then the body to `parts`; the bytes moved.
fn add(m: Message, out: &mut BytesMut, parts: &mut Vec<bytes::Bytes>) -> usize {
    match m.encode_split(out) {
        Some(body) => {
            let head = out.split().freeze();
            let n = head.len() + body.len();
            parts.push(head);
            parts.push(body);
            n
        }
        None => 0,
    }
}

/// Write every part, in order, with as few (vectored) writes as it takes.
async fn write_parts(
    wr: &mut (impl tokio::io::AsyncWrite + Unpin),
    parts: &mut Vec<bytes::Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<std::io::IoSlice> = parts[first..]
            .iter()
            .take(64)
            .map(|p| std::io::IoSlice::new(p))
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let p = &mut parts[first];
            let k = n.min(p.len());
            p.advance(k);
            n -= k;
            if p.is_empty() {
                first += 1;
            }
        }
        while first < parts.len() && parts[first].is_empty() {
            first += 1;
        }
    }
    parts.clear();
    Ok(())
}
