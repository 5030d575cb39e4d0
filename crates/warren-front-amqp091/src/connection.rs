//! One AMQP 0-9-1 connection: a single task that owns the socket, reads and
//! parses frames, runs the handshake and every channel, drains the outbox
//! into deliveries, and writes everything it produced in one batch per
//! wakeup (so confirms, deliveries and replies from many channels share a
//! write). Reading pauses while the write buffer is over its high-water mark
//! or the memory alarm holds publishers, so a connection never buffers
//! without bound.

use ahash::AHashMap as HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::watch;
use warren_amqp091::constants::PRECONDITION_FAILED;
use warren_amqp091::frame::write_heartbeat;
use warren_amqp091::methods::*;
use warren_amqp091::{CodecError, Frame, FrameType, Method, PROTOCOL_HEADER};
use warren_core::BrokerError;

use super::channel::{Channel, ChannelState, Unacked};
use super::conn::{ClientCaps, Conn, Finish, Pending, Phase};
use super::error::{AmqpError, Result};
use super::{consume, dispatch, handshake, publish};
use warren_node::outbox::Outbox;
use warren_node::transport::Transport;
use warren_node::ServerCtx;

/// Stop reading while this much output waits for the socket.
const WBUF_HIGH: usize = 256 << 10;
/// Read at most this much per wakeup, so one busy peer cannot starve others.
const READ_CHUNK: usize = 256 << 10;
/// Longest a publisher pauses for a queue's backlog before reading again:
/// flow control is a brake, not a stop (a connection that also consumes
/// must get to read its own acks).
const FLOW_PAUSE: Duration = Duration::from_millis(5);
/// How much a connection reads ahead, unparsed, while its input is paused.
const PAUSED_READ_MAX: usize = 1 << 20;
/// Yield to the scheduler after a read of at least this much.
const YIELD_AFTER: usize = 32 << 10;
/// How long to wait for close-ok after sending connection.close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

struct Driver {
    conn: Conn,
    channels: HashMap<u16, Channel>,
    stream: Transport,
    rbuf: BytesMut,
    /// How much room the next read offers: grows while reads fill it, so an
    /// idle connection keeps small buffers and a busy one reads in bulk.
    read_size: usize,
    /// Bytes read while input was paused, not yet handled.
    unprocessed: bool,
    /// After a framing error the input can no longer be parsed: ignore it.
    discard_input: bool,
    last_recv: Instant,
    sent_since_tick: bool,
    close_deadline: Option<Instant>,
    /// Paused by a queue's backlog until drained, or this instant at most.
    flow_until: Option<tokio::time::Instant>,
    /// Input was handled or deliveries drained since the channels' numbers
    /// were last stored for the management API.
    info_stale: bool,
}

pub async fn serve(
    stream: Transport,
    peer: SocketAddr,
    ctx: Arc<ServerCtx>,
    mut shutdown: watch::Receiver<bool>,
    entry: Arc<warren_node::connections::Entry>,
) {
    let _ = stream.set_nodelay(true);

    // The registry's id, so consumers and exclusive queues name the
    // connection the management API lists.
    let id = entry.id;
    let frame_max = ctx.config.frame_max;
    let mut d = Driver {
        conn: Conn {
            id,
            entry,
            ctx,
            peer,
            wbuf: BytesMut::new(),
            phase: Phase::Header,
            frame_max,
            channel_max: 0,
            heartbeat: 0,
            shortest_timeout: None,
            vhost: None,
            user: None,
            grant: None,
            outbox: Outbox::new(),
            caps: ClientCaps::default(),
            exclusive: Vec::new(),
            exclusive_pending: 0,
            published: false,
            blocked: false,
            confirm_dirty: Vec::new(),
            sync_channels: Vec::new(),
            flow_queues: Vec::new(),
            hello: None,
            pending: None,
        },
        channels: HashMap::new(),
        stream,
        rbuf: BytesMut::new(),
        read_size: 4096,
        unprocessed: false,
        discard_input: false,
        last_recv: Instant::now(),
        sent_since_tick: false,
        close_deadline: None,
        flow_until: None,
        info_stale: false,
    };
    if let Err(e) = d.run(&mut shutdown).await {
        tracing::debug!(peer = %peer, "connection ended: {e}");
    }
    d.teardown();
}

/// The pending method's work, or never when there is none.
async fn wait_pending(pending: &mut Option<Pending>) -> Finish {
    match pending {
        Some(p) => p.work.as_mut().await,
        None => std::future::pending().await,
    }
}

impl Driver {
    async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> std::io::Result<()> {
        // A peer that never completes the handshake is dropped, as RabbitMQ
        // does after its handshake_timeout (10 s).
        self.close_deadline = Some(Instant::now() + Duration::from_secs(10));
        let mut tick = self.new_tick();
        let mut tick_period = self.tick_period();
        let mut deliveries_tick = self.new_deliveries_tick();
        let mut timeouts_for = self.conn.shortest_timeout;
        loop {
            if self.conn.phase == Phase::Done {
                self.flush_all().await?;
                return Ok(());
            }
            if self.conn.wbuf.len() < WBUF_HIGH && self.conn.outbox.is_pending() {
                consume::drain_outbox(&mut self.conn, &mut self.channels);
                self.info_stale = true;
            }
            if self.conn.outbox.take_synced() {
                publish::release_synced(&mut self.conn, &mut self.channels);
                publish::flush_confirms(&mut self.conn, &mut self.channels);
            }
            if !self.conn.wbuf.is_empty() {
                self.try_write()?;
            }
            if self.conn.phase == Phase::Running && self.close_deadline.is_some() {
                self.close_deadline = None; // the handshake finished in time
            }
            if self.tick_period() != tick_period {
                tick_period = self.tick_period();
                tick = self.new_tick();
            }
            if self.conn.shortest_timeout != timeouts_for {
                timeouts_for = self.conn.shortest_timeout;
                deliveries_tick = self.new_deliveries_tick();
            }
            if self.flow_until.is_some() && self.conn.outbox.take_flow_resumed() {
                self.flow_until = None;
            }
            let flow_deadline = self.flow_until;
            // Once per wakeup that changed them, not per message: the API
            // reads these.
            if std::mem::take(&mut self.info_stale) {
                for ch in self.channels.values() {
                    ch.publish_info();
                }
            }
            if self.unprocessed && !self.input_paused() {
                self.unprocessed = false;
                self.process_input(0);
                continue;
            }
            // While input is paused we still move bytes from the socket into
            // our buffer (up to a bound) without parsing them: a peer that
            // sends many small segments would otherwise fill the kernel's
            // receive queue, which then drops and retransmits after 200 ms.
            let can_read = !self.input_paused() || self.rbuf.len() < PAUSED_READ_MAX;
            tokio::select! {
                biased;
                _ = shutdown.changed(), if self.conn.phase < Phase::Closing => {
                    self.force_close();
                }
                r = self.stream.readable(), if can_read => {
                    r?;
                    if self.read_and_handle()? >= YIELD_AFTER {
                        // A peer that keeps us busy must not keep the
                        // worker: yielding lets the scheduler poll the I/O
                        // driver, so other connections (even new ones
                        // waiting to be accepted) are served meanwhile.
                        // Without it one flooding publisher delayed another
                        // connection's handshake by seconds.
                        tokio::task::yield_now().await;
                    }
                }
                w = self.stream.writable(), if !self.conn.wbuf.is_empty() || self.stream.wants_write() => {
                    w?;
                    self.try_write()?;
                }
                _ = self.conn.outbox.notify.notified() => {}
                _ = tokio::time::sleep_until(flow_deadline.unwrap_or_else(tokio::time::Instant::now)), if flow_deadline.is_some() => {
                    self.flow_until = None;
                }
                _ = tick.tick() => self.on_tick(),
                _ = deliveries_tick.tick() => self.consumer_timeout(),
                finish = wait_pending(&mut self.conn.pending) => self.finish_pending(finish),
            }
        }
    }

    /// The cluster answered the pending method: finish it, then go on
    /// with the input that waited.
    fn finish_pending(&mut self, finish: Finish) {
        let Some(p) = self.conn.pending.take() else { return };
        if self.conn.phase >= Phase::Closing {
            return;
        }
        if let Some(ch) = self.channels.get_mut(&p.channel) {
            let r = finish(&mut self.conn, ch);
            if let Err(e) = self.channel_result(p.channel, r) {
                self.connection_error(e);
            }
        }
        self.unprocessed = true;
    }

    fn tick_period(&self) -> Duration {
        if self.conn.blocked || self.close_deadline.is_some() {
            Duration::from_millis(100)
        } else if self.conn.heartbeat > 0 {
            Duration::from_millis(self.conn.heartbeat as u64 * 500)
        } else {
            Duration::from_secs(3600)
        }
    }

    fn new_tick(&self) -> tokio::time::Interval {
        let p = self.tick_period();
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    }

    /// How often unacknowledged deliveries are looked at: a quarter of the
    /// consumer timeout, between 100 ms and a minute (never, disabled).
    fn new_deliveries_tick(&self) -> tokio::time::Interval {
        let global = self.conn.ctx.config.consumer_timeout;
        let t = match (global, self.conn.shortest_timeout) {
            (0, None) => 0,
            (0, Some(s)) => s.max(1),
            (g, s) => s.map_or(g, |s| s.max(1).min(g)),
        };
        let p = if t == 0 {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(t / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
        };
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    }

    /// A channel whose oldest unacknowledged delivery is older than the
    /// consumer timeout is closed (PRECONDITION_FAILED, RabbitMQ 3.10's
    /// words), so what it holds goes back to its queues.
    fn consumer_timeout(&mut self) {
        let global = self.conn.ctx.config.consumer_timeout;
        if global == 0 && self.conn.shortest_timeout.is_none() {
            return;
        }
        let now = Instant::now();
        // A delivery past its timeout (its queue's, else the broker's; 0:
        // none), and that timeout.
        let past = |u: &Unacked| {
            let t = u.timeout.unwrap_or(global);
            (t > 0 && now.duration_since(u.delivered_at) > Duration::from_millis(t)).then_some(t)
        };
        let late: Vec<(u16, u64)> = self
            .channels
            .iter()
            .filter(|(_, ch)| ch.state == ChannelState::Open)
            .filter_map(|(id, ch)| {
                let t = if ch.custom_timeouts {
                    ch.unacked.iter().find_map(past)
                } else {
                    // The oldest is at the front (deliveries are appended).
                    ch.unacked.front().and_then(past)
                };
                t.map(|t| (*id, t))
            })
            .collect();
        for (id, t) in late {
            tracing::info!(peer = %self.conn.peer, channel = id, "consumer timeout: {t} ms");
            let e = AmqpError::new(
                PRECONDITION_FAILED,
                format!(
                    "delivery acknowledgement on channel {id} timed out. Timeout value used: {t} ms. \
                     This timeout value can be configured, see consumers doc guide to learn more"
                ),
            );
            let _ = self.channel_result(id, Err(e));
        }
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        if let Some(deadline) = self.close_deadline {
            if now >= deadline {
                self.conn.phase = Phase::Done;
                return;
            }
        }
        if self.conn.heartbeat > 0 && self.conn.phase == Phase::Running {
            let hb = Duration::from_secs(self.conn.heartbeat as u64);
            // 0-9-1 §4.2.7: a peer silent for two intervals is gone.
            if now.duration_since(self.last_recv) > hb * 2 {
                tracing::info!(peer = %self.conn.peer, "missed heartbeats from client, timeout: {}s", hb.as_secs());
                self.conn.phase = Phase::Done;
                self.conn.wbuf.clear();
                return;
            }
            if !self.sent_since_tick {
                write_heartbeat(&mut self.conn.wbuf);
            }
            self.sent_since_tick = false;
        }
        if self.conn.blocked && self.conn.ctx.broker.publishing_blocked().is_none() {
            self.conn.blocked = false;
            if self.conn.caps.connection_blocked {
                self.conn.send(0, ConnectionUnblocked {});
            }
        }
    }

    fn try_write(&mut self) -> std::io::Result<()> {
        // TLS records of earlier writes go first.
        match self.stream.flush_pending() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            r => r?,
        }
        while !self.conn.wbuf.is_empty() {
            match self.stream.try_write(&self.conn.wbuf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    let _ = self.conn.wbuf.split_to(n);
                    self.conn.entry.count_send(n);
                    self.sent_since_tick = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.conn.wbuf.is_empty() && self.conn.wbuf.capacity() > (64 << 10) {
            // Give back the memory of a burst.
            self.conn.wbuf = BytesMut::new();
        }
        Ok(())
    }

    async fn flush_all(&mut self) -> std::io::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while !self.conn.wbuf.is_empty() || self.stream.wants_write() {
            match tokio::time::timeout_at(deadline, self.stream.writable()).await {
                Ok(r) => r?,
                Err(_) => break,
            }
            self.try_write()?;
        }
        Ok(())
    }

    /// Read and handle input; returns how many bytes were read.
    fn read_and_handle(&mut self) -> std::io::Result<usize> {
        // Read until a read comes back short of the space offered: another
        // read now would mostly find a trickle (or EAGAIN), and each one is
        // a syscall; whatever arrives meanwhile waits for the next wakeup.
        let mut total = 0;
        loop {
            self.rbuf.reserve(self.read_size);
            let room = self.rbuf.capacity() - self.rbuf.len();
            match self.stream.try_read_buf(&mut self.rbuf) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    total += n;
                    if n == room {
                        self.read_size = (self.read_size * 2).min(64 << 10);
                    }
                    if n < room || total >= READ_CHUNK {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if total == 0 {
                        return Ok(0);
                    }
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        self.last_recv = Instant::now();
        self.conn.entry.count_recv(total);
        if self.discard_input {
            self.rbuf.clear();
            return Ok(total);
        }
        if self.input_paused() {
            self.unprocessed = true;
            return Ok(total);
        }
        self.process_input(total);
        Ok(total)
    }

    /// Is handling input on hold (memory alarm, flow control, or a write
    /// buffer over its high-water mark)?
    fn input_paused(&self) -> bool {
        self.conn.blocked
            || self.flow_until.is_some()
            || self.conn.wbuf.len() >= WBUF_HIGH
            || self.conn.pending.is_some()
    }

    /// Handle the frames buffered so far and what follows from them.
    fn process_input(&mut self, just_read: usize) {
        self.handle_input();
        self.info_stale = true;
        if self.rbuf.is_empty() && self.rbuf.capacity() > 4096 && just_read < 1024 {
            // Quiet again: give the buffer back, start small next time.
            self.rbuf = BytesMut::new();
            self.read_size = 4096;
        }
        publish::release_synced(&mut self.conn, &mut self.channels);
        publish::flush_confirms(&mut self.conn, &mut self.channels);
        self.check_alarm();
        self.check_flow();
    }

    /// Pause reading if a queue we published into is over its backlog mark
    /// (until it drains, or FLOW_PAUSE at most).
    fn check_flow(&mut self) {
        if self.conn.flow_queues.is_empty() {
            return;
        }
        let waiter: Arc<dyn warren_core::queue::FlowWaiter> = self.conn.outbox.clone();
        // Forget a resume from before this pause.
        self.conn.outbox.take_flow_resumed();
        let mut wait = false;
        for q in self.conn.flow_queues.drain(..) {
            wait |= q.wait_for_drain(waiter.clone());
        }
        if wait {
            self.flow_until = Some(tokio::time::Instant::now() + FLOW_PAUSE);
        }
    }

    /// Resource alarms (memory, disk) block connections that publish
    /// (RabbitMQ's connection.blocked): they stop being read until the
    /// alarm clears.
    fn check_alarm(&mut self) {
        if !self.conn.published || self.conn.blocked {
            return;
        }
        if let Some(reason) = self.conn.ctx.broker.publishing_blocked() {
            self.conn.blocked = true;
            if self.conn.caps.connection_blocked {
                self.conn.send(
                    0,
                    ConnectionBlocked {
                        reason: reason.into(),
                    },
                );
            }
        }
    }

    fn handle_input(&mut self) {
        loop {
            if self.conn.phase == Phase::Header {
                if self.rbuf.len() < 8 {
                    return;
                }
                let header = self.rbuf.split_to(8);
                if &header[..] != PROTOCOL_HEADER {
                    // 0-9-1 §4.2.2: answer with the header we speak, close.
                    self.conn.wbuf.extend_from_slice(PROTOCOL_HEADER);
                    self.conn.phase = Phase::Done;
                    return;
                }
                handshake::send_start(&mut self.conn);
                continue;
            }
            if self.conn.phase == Phase::Done || self.discard_input {
                return;
            }
            let frame = match Frame::parse(&mut self.rbuf, self.conn.inbound_frame_max()) {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => {
                    self.discard_input = true;
                    self.rbuf.clear();
                    let text = match e {
                        CodecError::FrameTooLarge { size, max } => {
                            format!("frame size {size} exceeds the negotiated frame_max {max}")
                        }
                        other => other.to_string(),
                    };
                    self.connection_error(AmqpError::new(501, text));
                    return;
                }
            };
            if let Err(e) = self.handle_frame(frame) {
                self.connection_error(e);
            }
            if self.conn.pending.is_some() {
                // The rest waits for the cluster's answer.
                self.unprocessed = true;
                return;
            }
        }
    }

    fn handle_frame(&mut self, f: Frame) -> Result<()> {
        if self.conn.phase == Phase::Closing {
            // Only close-ok (or a crossing close) matters now.
            if f.kind == FrameType::Method && f.channel == 0 {
                match Method::decode(f.payload) {
                    Ok(Method::ConnectionCloseOk(_)) => self.conn.phase = Phase::Done,
                    Ok(Method::ConnectionClose(_)) => {
                        self.conn.send(0, ConnectionCloseOk {});
                        self.conn.phase = Phase::Done;
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        match f.kind {
            FrameType::Heartbeat => {
                if f.channel != 0 {
                    return Err(AmqpError::new(505, "heartbeat frame on a channel other than 0"));
                }
                Ok(())
            }
            FrameType::Method => {
                let m = Method::decode(f.payload).map_err(|e| match e {
                    CodecError::UnknownMethod { class_id, method_id } => {
                        AmqpError::new(540, format!("unknown method class {class_id} method {method_id}"))
                            .on(class_id, method_id)
                    }
                    other => AmqpError::new(502, format!("cannot decode method: {other}")),
                })?;
                if f.channel == 0 {
                    handshake::connection_method(&mut self.conn, m)?;
                    if self.conn.phase == Phase::Done {
                        self.teardown_channels();
                    }
                    Ok(())
                } else {
                    if self.conn.phase != Phase::Running {
                        return Err(AmqpError::new(
                            504,
                            "channel method before the connection is open",
                        ));
                    }
                    self.channel_method(f.channel, m)
                }
            }
            FrameType::Header | FrameType::Body => {
                if f.channel == 0 || self.conn.phase != Phase::Running {
                    return Err(AmqpError::new(
                        505,
                        "expected method frame, got non method frame instead",
                    ));
                }
                let Some(ch) = self.channels.get_mut(&f.channel) else {
                    return Err(AmqpError::new(504, "expected 'channel.open'"));
                };
                if ch.state == ChannelState::Closing {
                    return Ok(());
                }
                let r = if f.kind == FrameType::Header {
                    publish::content_header(&mut self.conn, ch, f.payload)
                } else {
                    publish::content_body(&mut self.conn, ch, f.payload)
                };
                self.channel_result(f.channel, r)
            }
        }
    }

    fn channel_method(&mut self, id: u16, m: Method) -> Result<()> {
        let Some(ch) = self.channels.get_mut(&id) else {
            return match m {
                Method::ChannelOpen(_) => {
                    if id > self.conn.channel_max {
                        return Err(AmqpError::new(
                            504,
                            format!(
                                "channel {id} is above the negotiated channel_max ({})",
                                self.conn.channel_max
                            ),
                        )
                        .on(20, 10));
                    }
                    if self.channels.len() >= self.conn.channel_max as usize {
                        return Err(AmqpError::new(
                            530,
                            format!(
                                "number of channels opened ({}) has reached the negotiated channel_max ({})",
                                self.channels.len(),
                                self.conn.channel_max
                            ),
                        )
                        .on(20, 10));
                    }
                    let user = self.conn.grant.as_ref().map_or("", |g| g.user.as_str());
                    let info = self
                        .conn
                        .entry
                        .open_channel(id, &self.conn.ctx.broker.user_limits(user))
                        .map_err(|l| {
                            // A connection error, as RabbitMQ's channel limit is.
                            AmqpError::from(BrokerError::NotAllowed(l.text(user, "")))
                        })?;
                    self.channels.insert(id, Channel::new(id, info));
                    self.conn.send(id, ChannelOpenOk::default());
                    Ok(())
                }
                other => {
                    Err(AmqpError::new(504, "expected 'channel.open'")
                        .on(other.class_id(), other.method_id()))
                }
            };
        };
        if ch.state == ChannelState::Closing {
            // 0-9-1 §4.2.6 / the channel.close rule: after sending close we
            // discard everything but close and close-ok. A close that
            // crossed ours is answered, and the channel stays until the
            // peer's close-ok to ours arrives (removing it now made that
            // close-ok a frame on an unknown channel: a 504 connection
            // error that killed the client's other channels).
            match m {
                Method::ChannelCloseOk(_) => {
                    self.remove_channel(id);
                }
                Method::ChannelClose(_) => {
                    self.conn.send(id, ChannelCloseOk {});
                }
                // A client that took our close-ok as the end of the
                // channel may open its number again; RabbitMQ would ignore
                // this and leave the client waiting, so be kinder.
                Method::ChannelOpen(_) => {
                    self.remove_channel(id);
                    return self.channel_method(id, m);
                }
                _ => {}
            }
            return Ok(());
        }
        match m {
            Method::ChannelClose(_) => {
                if let Some(mut ch) = self.remove_channel(id) {
                    dispatch::cleanup(&mut self.conn, &mut ch);
                }
                self.conn.send(id, ChannelCloseOk {});
                Ok(())
            }
            Method::ChannelCloseOk(_) => Ok(()),
            m => {
                let r = dispatch::dispatch(&mut self.conn, ch, m);
                self.channel_result(id, r)
            }
        }
    }

    fn remove_channel(&mut self, id: u16) -> Option<Channel> {
        self.conn.entry.close_channel(id);
        self.channels.remove(&id)
    }

    /// A channel-level error closes the channel; a connection-level one is
    /// passed up.
    fn channel_result(&mut self, id: u16, r: Result<()>) -> Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.is_connection_level() => Err(e),
            Err(e) => {
                tracing::debug!(peer = %self.conn.peer, channel = id, "channel error: {}", e.text);
                if let Some(ch) = self.channels.get_mut(&id) {
                    dispatch::cleanup(&mut self.conn, ch);
                    ch.state = ChannelState::Closing;
                }
                self.conn.send(
                    id,
                    ChannelClose {
                        reply_code: e.code,
                        reply_text: e.text.into(),
                        class_id: e.class_id,
                        method_id: e.method_id,
                    },
                );
                Ok(())
            }
        }
    }

    /// Close the connection with an error (0-9-1 §4.2.6 hard errors).
    fn connection_error(&mut self, e: AmqpError) {
        if self.conn.phase >= Phase::Closing {
            return;
        }
        tracing::info!(peer = %self.conn.peer, "closing connection: {}", e.text);
        if self.conn.phase < Phase::TuneOk {
            // Before tune there is no agreed way to talk: just hang up.
            self.conn.phase = Phase::Done;
            return;
        }
        self.teardown_channels();
        self.conn.send(
            0,
            ConnectionClose {
                reply_code: e.code,
                reply_text: e.text.into(),
                class_id: e.class_id,
                method_id: e.method_id,
            },
        );
        self.conn.phase = Phase::Closing;
        self.close_deadline = Some(Instant::now() + CLOSE_TIMEOUT);
    }

    fn force_close(&mut self) {
        if self.conn.phase == Phase::Running {
            let reason = self
                .conn
                .entry
                .close_reason()
                .unwrap_or_else(|| "shutdown".into());
            self.connection_error(AmqpError::new(
                320,
                format!("broker forced connection closure with reason '{reason}'"),
            ));
        } else {
            self.conn.phase = Phase::Done;
        }
    }

    fn teardown_channels(&mut self) {
        let mut channels: Vec<Channel> = self.channels.drain().map(|(_, c)| c).collect();
        for ch in &mut channels {
            dispatch::cleanup(&mut self.conn, ch);
        }
    }

    /// Everything a connection leaves behind goes: channels' consumers and
    /// unacked messages (requeued), exclusive queues (deleted).
    fn teardown(&mut self) {
        // Before looking for its exclusive queues: a declare applied after
        // this sees the connection ended and removes its queue itself.
        self.conn.entry.end();
        // A change the cluster is agreeing on for it goes on to the end
        // (it may commit anyway), so what follows it runs: an exclusive
        // queue made for this connection is then removed.
        if let Some(p) = self.conn.pending.take() {
            tokio::spawn(async move {
                drop(p.work.await);
            });
        }
        self.teardown_channels();
        // Deliveries that raced with the close go back to their queues.
        consume::drain_outbox(&mut self.conn, &mut self.channels);
        if let Some(vh) = self.conn.vhost.clone() {
            for q in self.conn.exclusive.drain(..) {
                vh.discard_queue(&q);
            }
            // Declares the cluster applied before the end, unanswered.
            if self.conn.exclusive_pending > 0 {
                for q in vh.queues() {
                    if q.exclusive_owner == Some(self.conn.id) {
                        vh.discard_queue(&q);
                    }
                }
            }
        }
    }
}
