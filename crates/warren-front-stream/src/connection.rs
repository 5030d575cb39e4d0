//! One stream protocol connection: a task that owns the socket, runs the
//! opening sequence (PeerProperties, SaslHandshake, SaslAuthenticate with
//! PLAIN, Tune, Open), then reads frames in batches, dispatches them, and
//! after each batch writes what publishers and subscriptions produced in
//! one write. Frames before Open are limited to 8 KiB, as in RabbitMQ.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use warren_core::{Access, Resource, VHost};
use warren_stream::command::{begin_frame, end_frame, key, parse_frame, Command};
use warren_stream::wire::{put_pairs, put_string, Reader};

use crate::conn::{response, Conn, Stop};
use crate::wake::Wake;
use warren_node::connections::Login;
use warren_node::ServerCtx;
use warren_stream::command::code;

/// Room made before each read: at least this much...
const READ_ROOM: usize = 64 << 10;
/// ...or the rest of the frame being read, up to this much.
const FRAME_ROOM_MAX: usize = 4 << 20;

/// Room to make in `rbuf` before reading, and whether the read stops
/// there. A frame larger than [`READ_ROOM`] (a publish of a hundred 1 KB
/// messages) spans several reads, and a read that found too little room
/// moved all the frame held so far into a larger buffer: 5 % of the
/// broker's CPU publishing 1 KB messages (perf). So room is made for
/// the rest of such a frame exactly, and the read stops at its end; and
/// at a frame's start, for one as large as the last large one
/// (`large`), since publishers send alike. Capped, so a size prefix
/// alone never allocates much (`parse_frame` has refused one above
/// frame_max).
fn read_room(rbuf: &BytesMut, large: usize) -> (usize, bool) {
    match rbuf.get(..4) {
        Some(p) => {
            let whole = 4 + u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize;
            if whole <= READ_ROOM {
                return (READ_ROOM, false);
            }
            // Exactly the rest, even when little is left: asking for more
            // would grow the buffer, moving all the frame holds.
            (whole.saturating_sub(rbuf.len()).clamp(1, FRAME_ROOM_MAX), true)
        }
        None => (large.clamp(READ_ROOM, FRAME_ROOM_MAX), false),
    }
}

/// Frames before Open may be at most this large.
const OPENING_FRAME_MAX: u32 = 8192;
/// How long the opening sequence may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub async fn serve(
    stream: warren_node::transport::Transport,
    peer: SocketAddr,
    ctx: Arc<ServerCtx>,
    shared: Arc<super::Shared>,
    mut shutdown: watch::Receiver<bool>,
    entry: Arc<warren_node::connections::Entry>,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let mut c = Conn {
        stream,
        peer,
        local,
        entry,
        ctx,
        shared,
        rbuf: BytesMut::with_capacity(8192),
        large_frame: 0,
        wbuf: BytesMut::new(),
        frame_max: OPENING_FRAME_MAX,
        frame_max_after_open: OPENING_FRAME_MAX,
        heartbeat: Duration::ZERO,
        last_recv: Instant::now(),
        last_sent: Instant::now(),
        vhost: None,
        user: None,
        grant: None,
        publishers: HashMap::new(),
        subscriptions: HashMap::new(),
        wake: Arc::new(Wake::default()),
        deliver_v2: false,
        id: 0,
        consumer_updates: HashMap::new(),
        next_correlation: 0,
        outstanding: 0,
        uncommitted: 0,
        pending_bytes: 0,
        arrivals: Default::default(),
    };
    // The registry's id, so the API and this connection agree on it.
    c.id = c.entry.id;
    let opened = tokio::time::timeout(HANDSHAKE_TIMEOUT, c.open()).await;
    let result = match opened {
        Ok(Ok(())) => c.run(&mut shutdown).await,
        Ok(Err(stop)) => Err(stop),
        Err(_) => Err(Stop::Gone),
    };
    if let Err(Stop::Close(code, reason)) = result {
        tracing::info!(peer = %c.peer, "closing stream connection: {code}: {reason}");
        c.send_close(code, &reason);
        let _ = tokio::time::timeout(Duration::from_secs(1), c.flush()).await;
    }
    c.teardown();
}

impl Conn {
    async fn read_more(&mut self) -> Result<(), Stop> {
        let (room, stop) = read_room(&self.rbuf, self.large_frame);
        if stop {
            self.large_frame = self.rbuf.len() + room;
        }
        self.rbuf.reserve(room);
        // The rest of a large frame, and no more: the next read then
        // starts a frame, with nothing of it to move.
        let read = if stop {
            self.stream.read_buf(&mut (&mut self.rbuf).limit(room)).await
        } else {
            self.stream.read_buf(&mut self.rbuf).await
        };
        match read {
            Ok(0) | Err(_) => Err(Stop::Gone),
            Ok(n) => {
                self.last_recv = Instant::now();
                self.entry.count_recv(n);
                Ok(())
            }
        }
    }

    async fn frame(&mut self) -> Result<Bytes, Stop> {
        loop {
            if let Some(f) = parse_frame(&mut self.rbuf, self.frame_max)? {
                return Ok(f);
            }
            self.read_more().await?;
        }
    }

    pub(super) async fn flush(&mut self) -> Result<(), Stop> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await.map_err(|_| Stop::Gone)?;
            // Over TLS the last records may still wait for the socket.
            self.stream.flush().await.map_err(|_| Stop::Gone)?;
            self.entry.count_send(self.wbuf.len());
            self.wbuf.clear();
            self.last_sent = Instant::now();
        }
        Ok(())
    }

    pub(super) fn respond(&mut self, k: u16, correlation_id: u32, code: u16) {
        response(&mut self.wbuf, k, correlation_id, code, &[]);
    }

    fn send_close(&mut self, code: u16, reason: &str) {
        Command::Close {
            correlation_id: 1,
            code,
            reason: reason.to_string(),
        }
        .encode(&mut self.wbuf);
    }

    /// The opening sequence (PROTOCOL.adoc, "Authentication").
    async fn open(&mut self) -> Result<(), Stop> {
        // What the client says of itself, for the management API.
        let mut client_properties = serde_json::Map::new();
        let mut auth_mechanism = String::from("PLAIN");
        loop {
            let f = self.frame().await?;
            match Command::decode(f)? {
                Command::PeerProperties {
                    correlation_id,
                    properties,
                } => {
                    client_properties = properties
                        .into_iter()
                        .map(|(k, v)| (k, serde_json::Value::String(v)))
                        .collect();
                    let props = server_properties();
                    let mut rest = BytesMut::new();
                    put_pairs(&mut rest, &props);
                    response(
                        &mut self.wbuf,
                        key::PEER_PROPERTIES,
                        correlation_id,
                        code::OK,
                        &rest,
                    );
                }
                Command::SaslHandshake { correlation_id } => {
                    let mechs = warren_node::login::offered(
                        &self.ctx,
                        warren_node::sasl::Proto::Stream,
                        self.entry.tls(),
                    );
                    let mut rest = BytesMut::new();
                    rest.put_i32(mechs.len() as i32);
                    for m in mechs {
                        put_string(&mut rest, m);
                    }
                    response(
                        &mut self.wbuf,
                        key::SASL_HANDSHAKE,
                        correlation_id,
                        code::OK,
                        &rest,
                    );
                }
                Command::SaslAuthenticate {
                    correlation_id,
                    mechanism,
                    data,
                } => {
                    let proto = warren_node::sasl::Proto::Stream;
                    match warren_node::login::login(
                        &self.ctx,
                        proto,
                        &mechanism,
                        &data,
                        self.peer,
                        self.entry.tls(),
                    ) {
                        Ok(u) => {
                            self.user = Some(u);
                            auth_mechanism = mechanism;
                            self.respond(key::SASL_AUTHENTICATE, correlation_id, code::OK);
                            Command::Tune {
                                frame_max: self.ctx.config.stream_frame_max,
                                heartbeat: self.ctx.config.heartbeat as u32,
                            }
                            .encode(&mut self.wbuf);
                        }
                        Err(e) => {
                            let c = if e.unsupported {
                                code::SASL_MECHANISM_NOT_SUPPORTED
                            } else if e.why.contains("via localhost") {
                                code::AUTHENTICATION_FAILURE_LOOPBACK
                            } else {
                                code::AUTHENTICATION_FAILURE
                            };
                            self.respond(key::SASL_AUTHENTICATE, correlation_id, c);
                            self.flush().await?;
                            return Err(Stop::Gone);
                        }
                    }
                }
                Command::Tune { frame_max, heartbeat } => {
                    // Each side's 0 means "no limit": take the other's.
                    let ours = self.ctx.config.stream_frame_max;
                    self.frame_max = match (frame_max, ours) {
                        (0, o) => o,
                        (t, 0) => t,
                        (t, o) => t.min(o),
                    };
                    let hb = match (heartbeat, self.ctx.config.heartbeat as u32) {
                        (0, _) | (_, 0) => 0,
                        (t, o) => t.min(o),
                    };
                    self.heartbeat = Duration::from_secs(hb as u64);
                    // Frames up to frame_max are taken from now on only
                    // after Open; keep the opening limit until then.
                    let negotiated = self.frame_max;
                    self.frame_max = OPENING_FRAME_MAX;
                    self.frame_max_after_open = negotiated;
                }
                Command::Open {
                    correlation_id,
                    vhost,
                } => {
                    let Some(user) = self.user.clone() else {
                        return Err(Stop::Close(code::SASL_ERROR, "open before authentication".into()));
                    };
                    // RabbitMQ 3.10's stream reader leaves the connection
                    // limits unchecked (a FIXME); Warren checks them here as
                    // on every other protocol.
                    let opened = self
                        .ctx
                        .broker
                        .open_vhost(&user, &vhost, None)
                        .map_err(|e| e.to_string());
                    let opened = opened.and_then(|(vh, grant)| {
                        let login = Login {
                            protocol: "RabbitMQ Stream",
                            user: user.name.clone(),
                            vhost: vhost.clone(),
                            auth_mechanism: auth_mechanism.clone(),
                            client_properties: std::mem::take(&mut client_properties),
                            frame_max: self.frame_max_after_open,
                            channel_max: 0,
                            timeout: self.heartbeat.as_secs() as u32,
                            container_id: None,
                        };
                        self.entry
                            .logged_in(login, &vh.limits(), &self.ctx.broker.user_limits(&user.name))
                            .map(|()| (vh, grant))
                            .map_err(|l| l.text(&user.name, &vhost))
                    });
                    match opened {
                        Ok((vh, grant)) => {
                            self.entry.set_expiry(user.token.as_ref().map(|t| t.expires_at));
                            self.vhost = Some(vh);
                            self.grant = Some(grant);
                            let (host, port) = self.advertised();
                            let mut rest = BytesMut::new();
                            put_pairs(
                                &mut rest,
                                &[
                                    ("advertised_host".into(), host),
                                    ("advertised_port".into(), port.to_string()),
                                ],
                            );
                            response(&mut self.wbuf, key::OPEN, correlation_id, code::OK, &rest);
                            self.frame_max = if self.frame_max_after_open == 0 {
                                u32::MAX
                            } else {
                                self.frame_max_after_open
                            };
                            self.flush().await?;
                            return Ok(());
                        }
                        Err(e) => {
                            tracing::info!(peer = %self.peer, "stream open refused: {e}");
                            self.respond(key::OPEN, correlation_id, code::VIRTUAL_HOST_ACCESS_FAILURE);
                            self.flush().await?;
                            return Err(Stop::Gone);
                        }
                    }
                }
                Command::Heartbeat => {}
                Command::Close { correlation_id, .. } => {
                    self.respond(key::CLOSE, correlation_id, code::OK);
                    self.flush().await?;
                    return Err(Stop::Gone);
                }
                _ => {
                    return Err(Stop::Close(
                        code::UNKNOWN_FRAME,
                        "unexpected frame before open".into(),
                    ))
                }
            }
            self.flush().await?;
        }
    }

    async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), Stop> {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            // Everything already read, in one batch.
            while let Some(f) = parse_frame(&mut self.rbuf, self.frame_max)? {
                if !self.dispatch(f)? {
                    self.flush().await?;
                    return Ok(());
                }
            }
            self.after_batch();
            self.flush().await?;
            let wake = self.wake.clone();
            let more = self.wants_to_deliver();
            // While the writer holds too many of our chunks, read no more.
            let may_read = self.outstanding < super::writer::MAX_OUTSTANDING
                && self.uncommitted < super::publish::MAX_UNCOMMITTED
                && self.pending_bytes < super::publish::MAX_PENDING_BYTES;
            tokio::select! {
                r = self.read_more(), if may_read => r?,
                _ = wake.notify.notified() => {}
                _ = std::future::ready(()), if more => {}
                _ = shutdown.changed() => {
                    let reason = self.entry.close_reason().unwrap_or_else(|| "broker shutdown".into());
                    return Err(Stop::Close(code::INTERNAL_ERROR, reason));
                }
                _ = tick.tick() => {
                    if !self.heartbeat.is_zero() {
                        if self.last_recv.elapsed() > self.heartbeat * 2 {
                            return Err(Stop::Gone);
                        }
                        if self.last_sent.elapsed() >= self.heartbeat / 2 {
                            Command::Heartbeat.encode(&mut self.wbuf);
                        }
                    }
                }
            }
        }
    }

    /// After a batch of frames: write out publishers' chunks and confirm
    /// them, tell subscriptions that became active, then deliver what
    /// subscriptions may.
    fn after_batch(&mut self) {
        // Completions first: their publishers may write their next chunk.
        self.write_completions();
        self.flush_publishers(false);
        for (id, active) in self.wake.take_activations() {
            if !active {
                self.step_down(id);
            }
            self.send_consumer_update(id, active);
        }
        self.pump_subscriptions();
    }

    /// SaslAuthenticate after Open: the client logs in again, as the same
    /// user, typically with a fresh OAuth 2 token before the old one
    /// expires; the new login's expiry and permissions replace the old.
    fn reauthenticate(&mut self, mechanism: &str, data: &[u8]) -> u16 {
        let proto = warren_node::sasl::Proto::Stream;
        let (Some(current), Some(vh)) = (self.user.as_ref(), self.vhost.as_ref()) else {
            return code::AUTHENTICATION_FAILURE;
        };
        let (name, vhost) = (current.name.clone(), vh.name.clone());
        let fresh = match warren_node::login::login(
            &self.ctx,
            proto,
            mechanism,
            data,
            self.peer,
            self.entry.tls(),
        ) {
            Ok(u) if u.name == name => u,
            Ok(u) => {
                tracing::warn!(peer = %self.peer, "re-authentication as '{}' refused: the connection is '{name}'s", u.name);
                return code::AUTHENTICATION_FAILURE;
            }
            Err(_) => return code::AUTHENTICATION_FAILURE,
        };
        match warren_node::login::renew(&self.ctx, &self.entry, &fresh, &vhost) {
            Ok(grant) => {
                self.grant = Some(grant);
                self.user = Some(fresh);
                code::OK
            }
            Err(e) => {
                tracing::warn!(peer = %self.peer, "re-authentication refused: {e}");
                code::AUTHENTICATION_FAILURE
            }
        }
    }

    /// Handle one frame; false once the connection is closed.
    fn dispatch(&mut self, f: Bytes) -> Result<bool, Stop> {
        if f.len() < 4 {
            return Err(Stop::Close(code::UNKNOWN_FRAME, "a frame without a key".into()));
        }
        let k = u16::from_be_bytes([f[0], f[1]]);
        match k {
            key::PUBLISH => {
                self.publish(f);
                return Ok(true);
            }
            key::ROUTE
            | key::PARTITIONS
            | key::EXCHANGE_COMMAND_VERSIONS
            | key::STREAM_STATS
            | key::CREATE_SUPER_STREAM
            | key::DELETE_SUPER_STREAM
            | key::METADATA => {
                self.extended(k, f)?;
                return Ok(true);
            }
            k if k == key::CONSUMER_UPDATE | key::RESPONSE => {
                self.consumer_update_reply(f)?;
                return Ok(true);
            }
            _ => {}
        }
        match Command::decode(f)? {
            Command::Heartbeat => {}
            Command::SaslAuthenticate {
                correlation_id,
                mechanism,
                data,
            } => {
                let c = self.reauthenticate(&mechanism, &data);
                self.respond(key::SASL_AUTHENTICATE, correlation_id, c);
            }
            Command::Close { correlation_id, .. } => {
                self.respond(key::CLOSE, correlation_id, code::OK);
                return Ok(false);
            }
            Command::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                if self.allowed(key::DECLARE_PUBLISHER, correlation_id, Access::Write, &stream) {
                    self.declare_publisher(correlation_id, publisher_id, reference, &stream)
                }
            }
            Command::DeletePublisher {
                correlation_id,
                publisher_id,
            } => self.delete_publisher(correlation_id, publisher_id),
            Command::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            } => {
                if self.allowed(
                    key::QUERY_PUBLISHER_SEQUENCE,
                    correlation_id,
                    Access::Read,
                    &stream,
                ) {
                    self.query_publisher_sequence(correlation_id, &reference, &stream)
                }
            }
            Command::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                if self.allowed(key::SUBSCRIBE, correlation_id, Access::Read, &stream) {
                    self.subscribe(
                        correlation_id,
                        subscription_id,
                        &stream,
                        offset,
                        credit,
                        &properties,
                    )
                }
            }
            Command::Unsubscribe {
                correlation_id,
                subscription_id,
            } => self.unsubscribe(correlation_id, subscription_id),
            Command::Credit {
                subscription_id,
                credit,
            } => self.credit(subscription_id, credit),
            Command::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                // Storing a consumer's offset needs read, what the
                // consumer has (as RabbitMQ checks); no response to refuse
                // with, so a refused one is dropped, as RabbitMQ does.
                match self.check(Access::Read, Resource::Queue, &stream) {
                    Ok(()) => self.store_offset(&reference, &stream, offset),
                    Err(e) => tracing::warn!(peer = %self.peer, "store_offset refused: {e}"),
                }
            }
            Command::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                if self.allowed(key::QUERY_OFFSET, correlation_id, Access::Read, &stream) {
                    self.query_offset(correlation_id, &reference, &stream)
                }
            }
            Command::Create {
                correlation_id,
                stream,
                arguments,
            } => {
                if self.allowed(key::CREATE, correlation_id, Access::Configure, &stream) {
                    self.create(correlation_id, &stream, &arguments)
                }
            }
            Command::Delete {
                correlation_id,
                stream,
            } => {
                if self.allowed(key::DELETE, correlation_id, Access::Configure, &stream) {
                    self.delete(correlation_id, &stream)
                }
            }
            Command::Tune { .. } | Command::PeerProperties { .. } => {}
            // The client's answers to what we sent (none expected).
            Command::Response(_) | Command::CreditError { .. } => {}
            other => {
                return Err(Stop::Close(
                    code::UNKNOWN_FRAME,
                    format!("unexpected frame from a client: {other:?}"),
                ))
            }
        }
        Ok(true)
    }

    /// Commands the codec does not decode: read with the wire reader.
    fn extended(&mut self, k: u16, f: Bytes) -> Result<(), Stop> {
        let mut r = Reader::new(f);
        r.u16()?;
        r.u16()?;
        let correlation_id = r.u32()?;
        match k {
            key::METADATA => {
                let n = r.count(2)?;
                let mut streams = Vec::with_capacity(n);
                for _ in 0..n {
                    streams.push(r.string()?);
                }
                self.metadata(correlation_id, &streams);
            }
            key::EXCHANGE_COMMAND_VERSIONS => {
                let n = r.count(6)?;
                for _ in 0..n {
                    let (k, _min, max) = (r.u16()?, r.u16()?, r.u16()?);
                    if k == key::DELIVER && max >= 2 {
                        self.deliver_v2 = true;
                    }
                }
                let mut rest = BytesMut::new();
                let versions = command_versions();
                rest.put_i32(versions.len() as i32);
                for (k, min, max) in versions {
                    rest.put_u16(k);
                    rest.put_u16(min);
                    rest.put_u16(max);
                }
                response(&mut self.wbuf, k, correlation_id, code::OK, &rest);
            }
            key::STREAM_STATS => {
                let stream = r.string()?;
                self.stream_stats(correlation_id, &stream);
            }
            key::ROUTE => {
                let routing_key = r.string()?;
                let super_stream = r.string()?;
                self.route(correlation_id, &routing_key, &super_stream);
            }
            key::PARTITIONS => {
                let super_stream = r.string()?;
                self.partitions(correlation_id, &super_stream);
            }
            key::CREATE_SUPER_STREAM => {
                let name = r.string()?;
                let n = r.count(2)?;
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push(r.string()?);
                }
                let n = r.count(2)?;
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    keys.push(r.string()?);
                }
                let args = if r.remaining() > 0 { r.pairs()? } else { Vec::new() };
                // Configure on the super stream (an exchange) and on each
                // partition stream.
                let allowed = self.check(Access::Configure, Resource::Exchange, &name).is_ok()
                    && partitions
                        .iter()
                        .all(|p| self.check(Access::Configure, Resource::Queue, p).is_ok());
                if allowed {
                    self.create_super_stream(correlation_id, &name, &partitions, &keys, &args);
                } else {
                    self.respond(k, correlation_id, code::ACCESS_REFUSED);
                }
            }
            key::DELETE_SUPER_STREAM => {
                let name = r.string()?;
                if self.check(Access::Configure, Resource::Exchange, &name).is_ok() {
                    self.delete_super_stream(correlation_id, &name);
                } else {
                    self.respond(k, correlation_id, code::ACCESS_REFUSED);
                }
            }
            _ => unreachable!("dispatched by key"),
        }
        Ok(())
    }

    /// The permission check for a command: streams are queues to
    /// permissions, super streams exchanges.
    fn check(&self, access: Access, kind: Resource, name: &str) -> Result<(), warren_core::BrokerError> {
        match &self.grant {
            Some(g) => g.check(access, kind, name),
            None => Err(warren_core::BrokerError::AccessRefused(
                "connection not open".into(),
            )),
        }
    }

    /// [`Self::check`], answering a refusal with ACCESS_REFUSED (0x10).
    fn allowed(&mut self, k: u16, correlation_id: u32, access: Access, stream: &str) -> bool {
        match self.check(access, Resource::Queue, stream) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(peer = %self.peer, "{e}");
                // The two query responses carry a u64 even on error.
                let rest: &[u8] = match k {
                    key::QUERY_OFFSET | key::QUERY_PUBLISHER_SEQUENCE => &[0; 8],
                    _ => &[],
                };
                response(&mut self.wbuf, k, correlation_id, code::ACCESS_REFUSED, rest);
                false
            }
        }
    }

    /// A frame of `key` whose content `fill` writes (server-initiated
    /// commands the codec does not know).
    pub(super) fn command(&mut self, k: u16, fill: impl FnOnce(&mut BytesMut)) {
        let at = begin_frame(&mut self.wbuf);
        self.wbuf.put_u16(k);
        self.wbuf.put_u16(1);
        fill(&mut self.wbuf);
        end_frame(&mut self.wbuf, at);
    }

    pub(super) fn vhost(&self) -> &Arc<VHost> {
        self.vhost.as_ref().expect("open before any command")
    }

    fn teardown(&mut self) {
        let subs: Vec<u8> = self.subscriptions.keys().copied().collect();
        for id in subs {
            self.remove_subscription(id);
        }
        self.publishers.clear();
        self.arrivals.clear();
    }
}

/// What we tell peers about ourselves. Stream clients check `version` for
/// features (super streams, single active consumer need 3.11; filtering
/// 3.13): Warren names the RabbitMQ release whose behaviour it follows.
fn server_properties() -> Vec<(String, String)> {
    vec![
        ("product".into(), "RabbitMQ".into()),
        ("version".into(), warren_node::version::RABBITMQ_VERSION.into()),
        ("platform".into(), warren_node::version::PLATFORM.into()),
        ("cluster_name".into(), "warren".into()),
        ("copyright".into(), "Warren contributors".into()),
        (
            "information".into(),
            "Warren: a RabbitMQ-compatible broker, Apache-2.0".into(),
        ),
    ]
}

/// The command versions we serve (as RabbitMQ 4 answers; deliver v2 is
/// used when a client asks for it).
fn command_versions() -> Vec<(u16, u16, u16)> {
    let mut v: Vec<(u16, u16, u16)> = [
        1u16, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 22, 23, 24, 25, 28, 29, 30,
    ]
    .iter()
    .map(|&k| (k, 1, 1))
    .collect();
    v.push((key::PUBLISH, 1, 2));
    v.push((key::DELIVER, 1, 2));
    v.sort_unstable();
    v
}

#[cfg(test)]
mod read_room_tests {
    use super::*;

    fn buf(prefix: u32, have: usize) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u32(prefix);
        b.resize(have, 0);
        b
    }

    #[test]
    fn room_for_the_rest_of_a_large_frame_exactly_and_capped() {
        assert_eq!(read_room(&BytesMut::new(), 0), (READ_ROOM, false));
        assert_eq!(read_room(&buf(100, 10), 0), (READ_ROOM, false));
        assert_eq!(read_room(&buf(200_000, 50_004), 0), (150_000, true));
        assert_eq!(
            read_room(&buf(200_000, 199_994), 0),
            (10, true),
            "the rest, though little"
        );
        assert_eq!(read_room(&buf(u32::MAX, 4), 0), (FRAME_ROOM_MAX, true));
    }

    #[test]
    fn room_at_a_frames_start_for_one_like_the_last_large_one() {
        assert_eq!(read_room(&BytesMut::new(), 200_004), (200_004, false));
        assert_eq!(read_room(&buf(100, 10), 200_004), (READ_ROOM, false));
        assert_eq!(read_room(&BytesMut::new(), usize::MAX), (FRAME_ROOM_MAX, false));
    }
}
