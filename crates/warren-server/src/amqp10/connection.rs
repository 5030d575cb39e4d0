//! One AMQP 1.0 connection: a task that owns the socket, runs the SASL
//! layer (PLAIN; ANONYMOUS when configured), the connection (open, close,
//! idle time-out with empty frames) and its sessions (begin, end).
//!
//! Links are not served yet: an attach is answered, as the spec requires,
//! with an attach carrying no terminus followed by a detach with
//! `amqp:not-implemented`, so a client learns at once and clearly. Issue 5
//! adds sending and receiving links on the queue types.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use warren_amqp10::frame::{write_frame, write_heartbeat, FrameType, MIN_MAX_FRAME_SIZE};
use warren_amqp10::performative::{AmqpError, Attach, Begin, Close, Detach, End, Open, Role};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{CodecError, Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};
use warren_core::User;

use crate::ServerCtx;

/// Largest frame we accept (and announce in open).
const MAX_FRAME: u32 = 131_072;
/// How long the opening sequence may take (RabbitMQ's handshake_timeout).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Conditions (AMQP 1.0 §2.8.15-2.8.17).
mod condition {
    pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
    pub const FORCED: &str = "amqp:connection:forced";
    pub const DECODE_ERROR: &str = "amqp:decode-error";
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
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

struct Session {
    /// The channel we send on for this session.
    outgoing: u16,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
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
}

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<ServerCtx>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut c = Conn {
        stream,
        peer,
        ctx,
        rbuf: BytesMut::with_capacity(4096),
        wbuf: BytesMut::new(),
        peer_max_frame: MIN_MAX_FRAME_SIZE,
        channel_max: 0,
        send_idle: None,
        last_sent: Instant::now(),
        last_recv: Instant::now(),
        sessions: HashMap::new(),
    };
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

    /// SASL (§5.3), then the AMQP header and open. Returns the user, or
    /// None when the peer gave up or failed to authenticate (already told).
    async fn handshake(&mut self) -> Result<Option<User>, Fatal> {
        let Ok(h) = self.header().await else {
            return Ok(None);
        };
        let anonymous = self.ctx.config.amqp10_anonymous;
        let loopback = self.peer.ip().is_loopback();
        let user = if &h == SASL_HEADER {
            self.wbuf.extend_from_slice(SASL_HEADER);
            let mut mechs = vec!["PLAIN".to_string()];
            if anonymous {
                mechs.push("ANONYMOUS".into());
            }
            let m = Sasl::Mechanisms(mechs).to_value().to_bytes();
            write_frame(&mut self.wbuf, FrameType::Sasl, 0, &[&m]);
            if self.flush().await.is_err() {
                return Ok(None);
            }
            let Some(f) = self.frame(MIN_MAX_FRAME_SIZE * 8).await? else {
                return Ok(None);
            };
            let mut s = &f.body[..];
            let init = Sasl::from_value(&Value::decode(&mut s)?)?;
            let user = match init {
                Sasl::Init {
                    mechanism,
                    initial_response,
                    ..
                } => self.authenticate(&mechanism, initial_response.as_deref(), loopback),
                _ => None,
            };
            let code = if user.is_some() { sasl::OK } else { sasl::AUTH };
            let o = Sasl::Outcome { code }.to_value().to_bytes();
            write_frame(&mut self.wbuf, FrameType::Sasl, 0, &[&o]);
            if self.flush().await.is_err() {
                return Ok(None);
            }
            let Some(user) = user else {
                tracing::info!(peer = %self.peer, "AMQP 1.0 login refused");
                return Ok(None);
            };
            let Ok(h) = self.header().await else {
                return Ok(None);
            };
            if &h != AMQP_HEADER {
                self.wbuf.extend_from_slice(AMQP_HEADER);
                let _ = self.flush().await;
                return Ok(None);
            }
            user
        } else if anonymous {
            // No SASL layer: allowed only where anonymous logins are.
            match self.authenticate("ANONYMOUS", None, loopback) {
                Some(u) => u,
                None => return Ok(None),
            }
        } else {
            // §5.3.1: a server that requires SASL answers with its header.
            self.wbuf.extend_from_slice(SASL_HEADER);
            let _ = self.flush().await;
            return Ok(None);
        };
        self.wbuf.extend_from_slice(AMQP_HEADER);
        if self.flush().await.is_err() {
            return Ok(None);
        }
        let Some(f) = self.frame(MIN_MAX_FRAME_SIZE * 8).await? else {
            return Ok(None);
        };
        let (p, _) = Performative::decode(&f.body)?;
        let Performative::Open(open) = p else {
            return Err(Fatal(AmqpError::new(condition::ILLEGAL_STATE, "expected open")));
        };
        let vhost = open
            .hostname
            .as_deref()
            .and_then(|h| h.strip_prefix("vhost:"))
            .unwrap_or(&self.ctx.config.default_vhost)
            .to_string();
        if let Err(e) = self.ctx.broker.open_vhost(&user, &vhost) {
            return Err(Fatal(AmqpError::new(condition::UNAUTHORIZED, e.to_string())));
        }
        self.peer_max_frame = open.max_frame_size.unwrap_or(u32::MAX).max(MIN_MAX_FRAME_SIZE);
        self.channel_max = open
            .channel_max
            .unwrap_or(u16::MAX)
            .min(self.ctx.config.channel_max);
        self.send_idle = open
            .idle_time_out
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(ms as u64 / 2));
        let idle = self.ctx.config.heartbeat as u32 * 1000;
        self.send(
            0,
            &Performative::Open(Open {
                container_id: "warren".into(),
                max_frame_size: Some(MAX_FRAME),
                channel_max: Some(self.channel_max),
                idle_time_out: (idle > 0).then_some(idle),
                properties: Some(Value::Map(vec![
                    (Value::symbol("product"), Value::string("Warren")),
                    (Value::symbol("version"), Value::string(env!("CARGO_PKG_VERSION"))),
                ])),
                ..Default::default()
            }),
        );
        if self.flush().await.is_err() {
            return Ok(None);
        }
        Ok(Some(user))
    }

    fn authenticate(&self, mechanism: &str, response: Option<&[u8]>, loopback: bool) -> Option<User> {
        let broker = &self.ctx.broker;
        match mechanism {
            "PLAIN" => {
                // RFC 4616: authzid NUL authcid NUL passwd.
                let r = response?;
                let mut parts = r.split(|&b| b == 0);
                let _authzid = parts.next()?;
                let user = std::str::from_utf8(parts.next()?).ok()?;
                let pass = std::str::from_utf8(parts.next()?).ok()?;
                broker.authenticate(user, pass, loopback).ok()
            }
            "ANONYMOUS" if self.ctx.config.amqp10_anonymous => broker
                .users()
                .into_iter()
                .find(|u| u.name == self.ctx.config.default_user),
            _ => None,
        }
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
            if self.flush().await.is_err() {
                return Ok(());
            }
            tokio::select! {
                _ = shutdown.changed() => {
                    return Err(Fatal(AmqpError::new(condition::FORCED, "broker forced connection closure with reason 'shutdown'")));
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
                }
            }
        }
    }

    /// Handle one performative; true once the connection is closed.
    fn handle(&mut self, channel: u16, body: Bytes) -> Result<bool, Fatal> {
        let (p, _payload) = Performative::decode(&body)?;
        match p {
            Performative::Close(_) => {
                self.send(0, &Performative::Close(Close::default()));
                return Ok(true);
            }
            Performative::Begin(b) => {
                if self.sessions.contains_key(&channel) || channel > self.channel_max {
                    return Err(Fatal(AmqpError::new(
                        condition::ILLEGAL_STATE,
                        format!("begin on channel {channel}, which is in use or above channel-max"),
                    )));
                }
                // We answer on the same channel number the peer used.
                self.sessions.insert(channel, Session { outgoing: channel });
                self.send(
                    channel,
                    &Performative::Begin(Begin {
                        remote_channel: Some(channel),
                        next_outgoing_id: 0,
                        incoming_window: 65_535,
                        outgoing_window: 65_535,
                        handle_max: Some(b.handle_max.unwrap_or(u32::MAX).min(255)),
                        ..Default::default()
                    }),
                );
            }
            Performative::End(_) => {
                if let Some(s) = self.sessions.remove(&channel) {
                    self.send(s.outgoing, &Performative::End(End::default()));
                }
            }
            Performative::Attach(a) => {
                let Some(s) = self.sessions.get(&channel) else {
                    return Err(Fatal(AmqpError::new(
                        condition::ILLEGAL_STATE,
                        "attach outside a session",
                    )));
                };
                let out = s.outgoing;
                // §2.6.3: a refused link is attached with no terminus, then
                // detached with the reason.
                let role = if a.role == Role::Sender {
                    Role::Receiver
                } else {
                    Role::Sender
                };
                self.send(
                    out,
                    &Performative::Attach(Attach {
                        name: a.name,
                        handle: a.handle,
                        role,
                        initial_delivery_count: (role == Role::Sender).then_some(0),
                        ..Default::default()
                    }),
                );
                self.send(
                    out,
                    &Performative::Detach(Detach {
                        handle: a.handle,
                        closed: true,
                        error: Some(AmqpError::new(
                            condition::NOT_IMPLEMENTED,
                            "links are not served yet: use AMQP 0-9-1 on this port",
                        )),
                    }),
                );
            }
            Performative::Detach(d) => {
                if let Some(s) = self.sessions.get(&channel) {
                    let out = s.outgoing;
                    self.send(
                        out,
                        &Performative::Detach(Detach {
                            handle: d.handle,
                            closed: d.closed,
                            error: None,
                        }),
                    );
                }
            }
            Performative::Open(_) => {
                return Err(Fatal(AmqpError::new(condition::ILLEGAL_STATE, "a second open")));
            }
            // Flow, transfer and disposition need links; with none attached
            // they name a handle that does not exist.
            Performative::Flow(_) | Performative::Transfer(_) | Performative::Disposition(_) => {
                if !self.sessions.contains_key(&channel) {
                    return Err(Fatal(AmqpError::new(
                        condition::ILLEGAL_STATE,
                        "frame outside a session",
                    )));
                }
            }
        }
        Ok(false)
    }

    async fn close_with(&mut self, error: Option<AmqpError>) {
        self.send(0, &Performative::Close(Close { error }));
        let _ = tokio::time::timeout(Duration::from_secs(1), self.flush()).await;
    }
}
