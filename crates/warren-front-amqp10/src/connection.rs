//! One AMQP 1.0 connection: a task that owns the socket, runs the SASL
//! layer (PLAIN; ANONYMOUS when configured), the connection (open, close,
//! idle time-out with empty frames) and its sessions (begin, end).
//!
//! Links: a client's sending link publishes (see [`super::publish`]); a
//! client's receiving link consumes from a queue, with link credit that
//! the queue itself counts (`LinkCredit`), so deliveries in flight can
//! never exceed what the receiver granted; drain and echo are answered
//! after the deliveries already counted have gone out.
//!
//! The connection's parts, each an `impl Conn` of its own: the opening
//! ([`handshake`]: SASL, header, open), sending links ([`publishing`]),
//! receiving links ([`receive`]), the management node's link pair
//! ([`management`]) and direct reply-to ([`reply`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Notify};
use warren_amqp10::frame::{write_frame, write_heartbeat, FrameType, MIN_MAX_FRAME_SIZE};
use warren_amqp10::messaging::{self, Outcome};
use warren_amqp10::performative::{AmqpError, Attach, Begin, Close, Detach, Disposition, End, Flow, Role};
use warren_amqp10::{CodecError, Frame, Performative};
use warren_core::queue::{Delivery, Entry, FlowWaiter, LinkCredit, Queue, Ticket};
use warren_core::{Grant, VHost};
use warren_store::SyncWaiter;

use super::publish::{self, Publisher};
use warren_node::outbox::Outbox;

use warren_node::ServerCtx;

mod handshake;
mod management;
mod publishing;
mod receive;
mod reply;

/// The close a connection ended by an operator (the API's reason) or by
/// the node's shutdown gets: RabbitMQ 4's words, which clients match on
/// ("Connection forced") to tell it from other closes.
fn forced_close(reason: Option<String>) -> AmqpError {
    let description = match reason {
        Some(r) => format!("Connection forced: \"{r}\""),
        None => "Connection forced: shutdown".to_string(),
    };
    AmqpError::new(condition::INTERNAL_ERROR, description)
}

fn second_not_supported() -> AmqpError {
    AmqpError::new(condition::NOT_IMPLEMENTED, "rcv-settle-mode second not supported")
}

/// Largest frame we accept (and announce in open).
const MAX_FRAME: u32 = 131_072;
/// How long the opening sequence may take (RabbitMQ's handshake_timeout).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Conditions (AMQP 1.0 §2.8.15-2.8.17).
mod condition {
    pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
    pub const INTERNAL_ERROR: &str = "amqp:internal-error";
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    pub const DECODE_ERROR: &str = "amqp:decode-error";
    pub const UNAUTHORIZED: &str = "amqp:unauthorized-access";
    pub const RESOURCE_LIMIT: &str = "amqp:resource-limit-exceeded";
    pub const ILLEGAL_STATE: &str = "amqp:illegal-state";
}

#[derive(Debug)]
struct Fatal(AmqpError);

impl From<CodecError> for Fatal {
    fn from(e: CodecError) -> Fatal {
        Fatal(AmqpError::new(condition::DECODE_ERROR, e.to_string()))
    }
}

/// An error, scoped as AMQP 1.0 scopes them (§2.8.15-2.8.17): a link
/// error detaches that link, a session error ends that session, anything
/// else closes the connection. Other links and sessions go on.
#[derive(Debug)]
enum Failure {
    Link(u32, AmqpError),
    Session(AmqpError),
    Connection(Fatal),
}

impl From<Fatal> for Failure {
    fn from(f: Fatal) -> Failure {
        Failure::Connection(f)
    }
}

impl From<CodecError> for Failure {
    fn from(e: CodecError) -> Failure {
        Failure::Connection(e.into())
    }
}

struct Session {
    /// The channel we send on for this session.
    outgoing: u16,
    /// Session flow control (§2.5.6): the next transfer id we expect and
    /// how many more we take before widening the window.
    next_incoming_id: u32,
    incoming_window: u32,
    publishers: HashMap<u32, Publisher>,
    receivers: HashMap<u32, Receiver>,
    /// Outgoing (§2.5.6): our next transfer id and delivery-id, and how
    /// many transfers the peer still takes.
    next_outgoing_id: u32,
    next_delivery_id: u32,
    remote_incoming_window: u32,
    /// Deliveries waiting for the peer's window to open.
    held: VecDeque<Delivery>,
    /// Our unsettled deliveries by delivery-id, for dispositions and
    /// requeue on detach.
    unsettled: BTreeMap<u32, Unsettled>,
    /// Response links of the management node, by handle.
    responders: HashMap<u32, management::Responder>,
    /// Direct reply-to links (dynamic sources), by handle.
    reply_links: HashMap<u32, reply::ReplyLink>,
    /// The highest handle we said we take (§2.7.1 handle-max).
    handle_max: u32,
    /// Handles we detached, waiting for the peer's detach: frames on them
    /// are dropped meanwhile (§2.6.5), they are not reused yet.
    detached: HashSet<u32>,
    /// The last handle whose detach exchange finished after we refused
    /// or ended its link. Some clients (fe2o3-amqp) both answer our
    /// detach and send one of their own for a refused attach; the second
    /// is dropped rather than ending the session over it.
    just_closed: Option<u32>,
}

impl Session {
    fn in_use(&self, handle: u32) -> bool {
        self.publishers.contains_key(&handle)
            || self.receivers.contains_key(&handle)
            || self.responders.contains_key(&handle)
            || self.reply_links.contains_key(&handle)
            || self.detached.contains(&handle)
    }
}

/// A delivery sent on a receiving link and not settled yet.
struct Unsettled {
    handle: u32,
    queue: Arc<Queue>,
    consumer_id: u64,
    entry: Entry,
}

/// A client's receiving link: a consumer on a queue whose credit the
/// queue counts.
struct Receiver {
    queue: Arc<Queue>,
    consumer_id: u64,
    credit: Arc<LinkCredit>,
}

/// Our incoming window per session, reopened when half is used.
const INCOMING_WINDOW: u32 = 65_535;
/// The most links a session may hold (handles 0..=HANDLE_MAX).
const HANDLE_MAX: u32 = 255;

/// Wakes the connection after an fsync round (settlements of persistent
/// messages wait for it).
#[derive(Default)]
struct SyncWake {
    notify: Notify,
}

impl SyncWaiter for SyncWake {
    fn synced(&self) {
        self.notify.notify_one();
    }
}

struct Conn {
    stream: warren_node::transport::Transport,
    peer: SocketAddr,
    /// Its entry in the connection registry (management API).
    entry: Arc<warren_node::connections::Entry>,
    ctx: Arc<ServerCtx>,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// The largest frame the peer takes.
    peer_max_frame: u32,
    channel_max: u16,
    /// Send an empty frame when idle this long (half the peer's time-out).
    send_idle: Option<Duration>,
    last_sent: Instant,
    last_recv: Instant,
    /// Sessions by the peer's channel.
    sessions: HashMap<u16, Session>,
    id: u64,
    vhost: Option<Arc<VHost>>,
    /// What the user may do in `vhost` (checked at attach, per message for
    /// the anonymous terminus, and by management requests).
    grant: Option<Grant>,
    /// The login was an OAuth 2 token (refreshed by `PUT /auth/tokens`).
    token_login: bool,
    /// Settlements decided in this batch: (our channel, delivery-id, outcome).
    settles: Vec<(u16, u32, Outcome)>,
    /// Settlements waiting for fsync, in order.
    unsynced: VecDeque<(u16, u32, Outcome, Vec<Ticket>)>,
    wake: Arc<SyncWake>,
    /// Management responses wait for an answer (a purge's).
    replies_waiting: bool,
    /// A resource alarm closed our incoming windows.
    blocked: bool,
    /// Where queues leave deliveries for this connection's receivers.
    outbox: Arc<Outbox>,
    /// Receiving links by consumer id: (peer's channel, handle).
    consumers: HashMap<u64, (u16, u32)>,
    /// Flows to answer for receiving links: (channel, handle, drain).
    link_replies: Vec<(u16, u32, bool)>,
    /// Exclusive queues this connection declared (through the management
    /// node): deleted when it closes.
    exclusive: Vec<Arc<Queue>>,
    /// Sessions we ended with an error, waiting for the peer's end:
    /// frames on them are dropped meanwhile (§2.5.5).
    ending: HashSet<u16>,
}

pub async fn serve(
    stream: warren_node::transport::Transport,
    peer: SocketAddr,
    ctx: Arc<ServerCtx>,
    mut shutdown: watch::Receiver<bool>,
    entry: Arc<warren_node::connections::Entry>,
) {
    let _ = stream.set_nodelay(true);
    let mut c = Conn {
        stream,
        peer,
        entry,
        ctx,
        rbuf: BytesMut::with_capacity(4096),
        wbuf: BytesMut::new(),
        peer_max_frame: MIN_MAX_FRAME_SIZE,
        channel_max: 0,
        send_idle: None,
        last_sent: Instant::now(),
        last_recv: Instant::now(),
        sessions: HashMap::new(),
        id: 0,
        vhost: None,
        grant: None,
        token_login: false,
        settles: Vec::new(),
        unsynced: VecDeque::new(),
        wake: Arc::new(SyncWake::default()),
        replies_waiting: false,
        blocked: false,
        outbox: Outbox::new(),
        consumers: HashMap::new(),
        link_replies: Vec::new(),
        ending: HashSet::new(),
        exclusive: Vec::new(),
    };
    // The registry's id, so consumers name the connection the API lists.
    c.id = c.entry.id;
    let opened = tokio::time::timeout(HANDSHAKE_TIMEOUT, c.handshake()).await;
    let user = match opened {
        Ok(Ok(Some(u))) => u,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(Fatal(e))) => {
            c.close_with(Some(e)).await;
            return;
        }
    };
    tracing::debug!(peer = %c.peer, user = %user.name, "AMQP 1.0 connection open");
    let result = c.run(&mut shutdown).await;
    c.teardown();
    match result {
        Ok(()) => {}
        Err(Fatal(e)) => {
            tracing::info!(peer = %c.peer, "closing AMQP 1.0 connection: {}: {:?}", e.condition, e.description);
            c.close_with(Some(e)).await;
        }
    }
}

impl Conn {
    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.rbuf.reserve(16 << 10);
        let n = self.stream.read_buf(&mut self.rbuf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.last_recv = Instant::now();
        self.entry.count_recv(n);
        Ok(n)
    }

    async fn header(&mut self) -> std::io::Result<[u8; 8]> {
        while self.rbuf.len() < 8 {
            self.read_more().await?;
        }
        let mut h = [0u8; 8];
        h.copy_from_slice(&self.rbuf.split_to(8));
        Ok(h)
    }

    async fn frame(&mut self, max: u32) -> Result<Option<Frame>, Fatal> {
        loop {
            match Frame::parse(&mut self.rbuf, max) {
                Ok(Some(f)) if f.body.is_empty() => continue, // heartbeat
                Ok(Some(f)) => return Ok(Some(f)),
                Ok(None) => {}
                Err(e) => return Err(Fatal(AmqpError::new(condition::FRAMING_ERROR, e.to_string()))),
            }
            if self.read_more().await.is_err() {
                return Ok(None);
            }
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            // Over TLS the last records may still wait for the socket.
            self.stream.flush().await?;
            self.entry.count_send(self.wbuf.len());
            self.wbuf.clear();
            self.last_sent = Instant::now();
        }
        Ok(())
    }

    fn send(&mut self, channel: u16, p: &Performative) {
        let mut body = BytesMut::new();
        p.encode(&mut body);
        write_frame(&mut self.wbuf, FrameType::Amqp, channel, &[&body]);
    }

    async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), Fatal> {
        let timeout = Duration::from_secs(self.ctx.config.heartbeat as u64 * 2);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            while let Some(f) = match Frame::parse(&mut self.rbuf, MAX_FRAME) {
                Ok(f) => f,
                Err(e) => return Err(Fatal(AmqpError::new(condition::FRAMING_ERROR, e.to_string()))),
            } {
                if f.body.is_empty() {
                    continue;
                }
                if f.kind != FrameType::Amqp {
                    return Err(Fatal(AmqpError::new(
                        condition::FRAMING_ERROR,
                        "SASL frame after open",
                    )));
                }
                if self.handle(f.channel, f.body)? {
                    let _ = self.flush().await;
                    return Ok(());
                }
            }
            self.after_batch();
            if self.flush().await.is_err() {
                return Ok(());
            }
            let wake = self.wake.clone();
            let outbox = self.outbox.clone();
            tokio::select! {
                _ = wake.notify.notified() => {}
                _ = outbox.notify.notified() => {}
                _ = shutdown.changed() => {
                    return Err(Fatal(forced_close(self.entry.close_reason())));
                }
                r = self.read_more() => {
                    if r.is_err() {
                        return Ok(());
                    }
                }
                _ = tick.tick() => {
                    if self.ctx.config.heartbeat > 0 && self.last_recv.elapsed() > timeout {
                        return Err(Fatal(AmqpError::new(condition::RESOURCE_LIMIT, "idle time-out: no frames from the peer")));
                    }
                    if self.send_idle.is_some_and(|d| self.last_sent.elapsed() >= d) {
                        write_heartbeat(&mut self.wbuf);
                    }
                    self.check_alarm();
                }
            }
        }
    }

    /// Handle one performative; true once the connection is closed.
    fn handle(&mut self, channel: u16, body: Bytes) -> Result<bool, Fatal> {
        let (p, payload) = Performative::decode(&body)?;
        // A close is connection-wide whatever channel it came on, even one
        // whose session we are ending: the peer waits for its answer.
        if self.ending.contains(&channel) && !matches!(p, Performative::Close(_)) {
            // We ended this session with an error: drop what the peer
            // sent before it saw our end, until its end arrives.
            if matches!(p, Performative::End(_)) {
                self.ending.remove(&channel);
            }
            return Ok(false);
        }
        let result = match p {
            Performative::Close(_) => {
                self.send(0, &Performative::Close(Close::default()));
                return Ok(true);
            }
            Performative::Open(_) => {
                return Err(Fatal(AmqpError::new(condition::ILLEGAL_STATE, "a second open")));
            }
            Performative::Begin(b) => {
                self.begin(channel, b)?;
                Ok(())
            }
            Performative::End(_) => {
                if self.close_session(channel) {
                    self.send(channel, &Performative::End(End::default()));
                }
                Ok(())
            }
            p if !self.sessions.contains_key(&channel) => {
                return Err(Fatal(AmqpError::new(
                    condition::ILLEGAL_STATE,
                    format!("{} on channel {channel}, where no session is begun", p.name()),
                )));
            }
            Performative::Attach(a) => self.attach(channel, a),
            Performative::Detach(d) => self.detach(channel, d),
            Performative::Transfer(t) => self.transfer(channel, t, payload),
            Performative::Flow(f) => self.flow(channel, f),
            Performative::Disposition(d) => {
                self.disposition(channel, d);
                Ok(())
            }
        };
        match result {
            Ok(()) => {}
            Err(Failure::Connection(f)) => return Err(f),
            Err(Failure::Session(e)) => {
                tracing::info!(peer = %self.peer, channel, "ending AMQP 1.0 session: {}: {:?}", e.condition, e.description);
                self.close_session(channel);
                self.send(channel, &Performative::End(End { error: Some(e) }));
                self.ending.insert(channel);
            }
            Err(Failure::Link(handle, e)) => {
                tracing::debug!(peer = %self.peer, channel, handle, "detaching AMQP 1.0 link: {}: {:?}", e.condition, e.description);
                self.detach_link(channel, handle, Some(e));
            }
        }
        Ok(false)
    }

    /// A session begins (§2.5.4); we answer on the channel the peer used.
    fn begin(&mut self, channel: u16, b: Begin) -> Result<(), Fatal> {
        if self.sessions.contains_key(&channel) || channel > self.channel_max {
            return Err(Fatal(AmqpError::new(
                condition::ILLEGAL_STATE,
                format!("begin on channel {channel}, which is in use or above channel-max"),
            )));
        }
        if b.remote_channel.is_some() {
            return Err(Fatal(AmqpError::new(
                condition::ILLEGAL_STATE,
                "begin with a remote-channel: Warren does not begin sessions",
            )));
        }
        let user = self.grant.as_ref().map_or("", |g| g.user.as_str());
        self.entry
            .open_session(&self.ctx.broker.user_limits(user))
            .map_err(|l| Fatal(AmqpError::new(condition::RESOURCE_LIMIT, l.text(user, ""))))?;
        let handle_max = b.handle_max.unwrap_or(u32::MAX).min(HANDLE_MAX);
        self.sessions.insert(
            channel,
            Session {
                outgoing: channel,
                next_incoming_id: b.next_outgoing_id,
                incoming_window: INCOMING_WINDOW,
                publishers: HashMap::new(),
                receivers: HashMap::new(),
                next_outgoing_id: 0,
                next_delivery_id: 0,
                remote_incoming_window: b.incoming_window,
                held: VecDeque::new(),
                unsettled: BTreeMap::new(),
                responders: HashMap::new(),
                reply_links: HashMap::new(),
                handle_max,
                detached: HashSet::new(),
                just_closed: None,
            },
        );
        self.send(
            channel,
            &Performative::Begin(Begin {
                remote_channel: Some(channel),
                next_outgoing_id: 0,
                incoming_window: if self.blocked { 0 } else { INCOMING_WINDOW },
                outgoing_window: 65_535,
                handle_max: Some(handle_max),
                ..Default::default()
            }),
        );
        Ok(())
    }

    /// The session on `channel` goes: its receiving links give back what
    /// they hold. False if there was none.
    fn close_session(&mut self, channel: u16) -> bool {
        let handles: Vec<u32> = match self.sessions.get(&channel) {
            Some(s) => s.receivers.keys().copied().collect(),
            None => return false,
        };
        for h in handles {
            self.stop_receiver(channel, h);
        }
        let replies: Vec<u32> = self
            .sessions
            .get(&channel)
            .map(|s| s.reply_links.keys().copied().collect())
            .unwrap_or_default();
        for h in replies {
            self.stop_reply_link(channel, h);
        }
        self.sessions.remove(&channel);
        self.entry.close_session();
        true
    }

    /// Attach (§2.6.3): the handle must be free and within handle-max.
    fn attach(&mut self, channel: u16, a: Attach) -> Result<(), Failure> {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        if a.handle > s.handle_max {
            // §2.7.1: a handle beyond handle-max is a framing error.
            return Err(Fatal(AmqpError::new(
                condition::FRAMING_ERROR,
                format!("attach on handle {} above handle-max {}", a.handle, s.handle_max),
            ))
            .into());
        }
        if s.just_closed == Some(a.handle) {
            s.just_closed = None;
        }
        // A peer that attaches on a handle we detached and it never
        // answered (fe2o3-amqp does, after a refused attach) takes it as
        // free: so do we, rather than end the session.
        if s.detached.remove(&a.handle) {
            tracing::debug!(peer = %self.peer, channel, handle = a.handle, "handle reused before our detach was answered");
        }
        if s.in_use(a.handle) {
            return Err(Failure::Session(AmqpError::new(
                "amqp:session:handle-in-use",
                format!("handle {} is already attached", a.handle),
            )));
        }
        if a.rcv_settle_mode == Some(1) && a.snd_settle_mode != Some(1) {
            // RabbitMQ 4 settles in mode first only: second is refused
            // unless nothing is ever unsettled (snd-settle-mode settled).
            self.refuse_attach(channel, a, second_not_supported());
            return Ok(());
        }
        let node = match a.role {
            Role::Sender => a.target.as_ref(),
            Role::Receiver => a.source.as_ref(),
        }
        .and_then(messaging::address);
        match a.role {
            Role::Sender if management::is_node(node.as_deref()) => {
                self.attach_management_requests(channel, a)
            }
            Role::Sender => self.attach_publisher(channel, a),
            Role::Receiver if management::is_node(node.as_deref()) => {
                self.attach_management_responses(channel, a)
            }
            Role::Receiver if reply::is_dynamic(a.source.as_ref()) => self.attach_reply_receiver(channel, a),
            Role::Receiver => self.attach_receiver(channel, a),
        }
        Ok(())
    }

    /// The peer detaches a link, or answers our detach.
    fn detach(&mut self, channel: u16, d: Detach) -> Result<(), Failure> {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        if s.detached.remove(&d.handle) {
            s.just_closed = Some(d.handle);
            return Ok(()); // the answer to ours
        }
        if s.just_closed == Some(d.handle) {
            s.just_closed = None;
            return Ok(());
        }
        if !s.in_use(d.handle) {
            return Err(Failure::Session(AmqpError::new(
                "amqp:session:unattached-handle",
                format!("detach of handle {}, which is not attached", d.handle),
            )));
        }
        if let Some(e) = &d.error {
            tracing::debug!(peer = %self.peer, channel, handle = d.handle, "peer detached a link: {}: {:?}", e.condition, e.description);
        }
        self.detach_link(channel, d.handle, None);
        // Our detach was the answer: the handle is free again.
        if let Some(s) = self.sessions.get_mut(&channel) {
            s.detached.remove(&d.handle);
        }
        Ok(())
    }

    /// End a link from our side (or answer the peer's detach): a
    /// receiving link gives back what it holds.
    fn detach_link(&mut self, channel: u16, handle: u32, error: Option<AmqpError>) {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        s.publishers.remove(&handle);
        s.responders.remove(&handle);
        if s.reply_links.contains_key(&handle) {
            self.stop_reply_link(channel, handle);
        }
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let receiver = s.receivers.contains_key(&handle);
        if receiver {
            self.stop_receiver(channel, handle);
        }
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        s.detached.insert(handle);
        let out = s.outgoing;
        self.send(
            out,
            &Performative::Detach(Detach {
                handle,
                closed: true,
                error,
            }),
        );
    }

    /// Refuse a link (§2.6.3): an attach with a null terminus, then at
    /// once a detach with the error.
    pub(super) fn refuse_attach(&mut self, channel: u16, a: Attach, e: AmqpError) {
        let out = self.sessions.get(&channel).map_or(channel, |s| s.outgoing);
        let (role, source, target) = match a.role {
            Role::Sender => (Role::Receiver, a.source, None),
            Role::Receiver => (Role::Sender, None, a.target),
        };
        self.send(
            out,
            &Performative::Attach(Attach {
                name: a.name,
                handle: a.handle,
                role,
                source,
                target,
                initial_delivery_count: (role == Role::Sender).then_some(0),
                ..Default::default()
            }),
        );
        self.detach_link(channel, a.handle, Some(e));
    }

    /// A flow for the session on `channel`, with a link's (handle,
    /// delivery-count, credit) if given.
    fn send_flow(&mut self, channel: u16, link: Option<(u32, u32, u32)>) {
        let Some(s) = self.sessions.get(&channel) else {
            return;
        };
        let f = Flow {
            next_incoming_id: Some(s.next_incoming_id),
            incoming_window: if self.blocked { 0 } else { s.incoming_window },
            next_outgoing_id: s.next_outgoing_id,
            outgoing_window: 65_535,
            handle: link.map(|l| l.0),
            delivery_count: link.map(|l| l.1),
            link_credit: link.map(|l| l.2),
            ..Default::default()
        };
        let out = s.outgoing;
        self.send(out, &Performative::Flow(f));
    }

    /// After a batch of frames: settle what is on disk, merged into
    /// dispositions over contiguous ids; top up credit and windows.
    fn after_batch(&mut self) {
        self.drain_outbox();
        self.send_waiting_replies();
        while let Some((out, id, outcome, tickets)) = self.unsynced.front() {
            if let Some(t) = tickets.iter().find(|t| !t.is_done()) {
                // Woken when it may be done (next sync round, or the
                // queue's node answering).
                let syncer = self.ctx.broker.config.storage.as_ref().map(|s| s.syncer());
                let me: Arc<dyn SyncWaiter> = self.wake.clone();
                t.wake(syncer, &me);
                break;
            }
            // A queue on another node that could not take it: the
            // message was not delivered anywhere it was meant to be.
            let outcome = if *outcome == Outcome::Accepted && !tickets.iter().all(|t| t.is_ok()) {
                Outcome::Released
            } else {
                *outcome
            };
            self.settles.push((*out, *id, outcome));
            self.unsynced.pop_front();
        }
        let settles = std::mem::take(&mut self.settles);
        let mut i = 0;
        while i < settles.len() {
            let (out, first, outcome) = settles[i];
            let mut last = first;
            let mut j = i + 1;
            while j < settles.len()
                && settles[j].0 == out
                && settles[j].2 == outcome
                && settles[j].1 == last.wrapping_add(1)
            {
                last = settles[j].1;
                j += 1;
            }
            self.send(
                out,
                &Performative::Disposition(Disposition {
                    role: Role::Receiver,
                    first,
                    last: (last != first).then_some(last),
                    settled: true,
                    state: Some(publish::state(outcome)),
                    batchable: false,
                }),
            );
            i = j;
        }
        self.check_alarm();
        if self.blocked {
            return;
        }
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for ch in channels {
            let mut flows = Vec::new();
            let mut window = false;
            if let Some(s) = self.sessions.get_mut(&ch) {
                if s.incoming_window < INCOMING_WINDOW / 2 {
                    s.incoming_window = INCOMING_WINDOW;
                    window = true;
                }
                let backlog: usize = s.responders.values().map(|r| r.pending.len()).sum();
                for (h, p) in s.publishers.iter_mut() {
                    if p.management.is_some() {
                        // Requests wait for their responses to be read.
                        if backlog < management::BACKLOG && p.credit < management::CREDIT / 2 {
                            p.credit = management::CREDIT;
                            flows.push((*h, p.delivery_count, p.credit));
                        }
                        continue;
                    }
                    // Still throttled by a queue over its mark? (It wakes
                    // us through the outbox when it drains.)
                    let waiter: Arc<dyn FlowWaiter> = self.outbox.clone();
                    p.throttled_by.retain(|q| q.wait_for_drain(waiter.clone()));
                    if !p.throttled_by.is_empty() {
                        continue;
                    }
                    if p.credit < publish::LINK_CREDIT / 2 {
                        p.credit = publish::LINK_CREDIT;
                        flows.push((*h, p.delivery_count, p.credit));
                    }
                }
            }
            if window && flows.is_empty() {
                self.send_flow(ch, None);
            }
            for f in flows {
                self.send_flow(ch, Some(f));
            }
        }
    }

    /// Resource alarms close every session's incoming window (a flow with
    /// incoming-window 0, seed 000 point 22) and stop topping up the
    /// publishing links' credit; consuming goes on. A peer that sends on
    /// past what it had been granted is disconnected (see `transfer`).
    /// When the alarm clears, every session gets its full window again.
    fn check_alarm(&mut self) {
        let blocked = self.ctx.broker.publishing_blocked().is_some();
        if blocked == self.blocked {
            return;
        }
        self.blocked = blocked;
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for ch in channels {
            if !blocked {
                if let Some(s) = self.sessions.get_mut(&ch) {
                    s.incoming_window = INCOMING_WINDOW;
                }
            }
            self.send_flow(ch, None);
        }
    }

    async fn close_with(&mut self, error: Option<AmqpError>) {
        self.send(0, &Performative::Close(Close { error }));
        let _ = tokio::time::timeout(Duration::from_secs(1), self.flush()).await;
    }
}
