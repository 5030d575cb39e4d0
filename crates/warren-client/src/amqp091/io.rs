//! The connection's two tasks. The writer drains the queue of encoded
//! frames into one write per wake-up (frames of many channels batched),
//! and sends heartbeats when idle. The reader parses frames, assembles
//! content (method, header, body frames) and routes each to its channel.
//! [`start`] puts a wire on an opened socket and runs both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use warren_amqp091::frame::{write_heartbeat, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{ContentHeader, Frame, FrameType, Method};

use super::channel_state::{ChannelState, Content};
use super::deferral::{Tick, TickState, TICK};
use super::delivery::{check_properties, Delivery};
use super::error::Error;
use super::events::{Event, Signals};
use super::handshake::Opened;
use super::outbound::Outbound;
use super::publish::Settle;
use super::wire::{ChannelMap, Wire};
use crate::socket::ReadHalf;

/// The writer keeps a buffer of at most this much between writes.
const KEEP_CAPACITY: usize = 4 << 20;

/// Start the reader and writer tasks on an opened socket.
pub(crate) fn start(opened: Opened, signals: Arc<Signals>, busy_poll: Option<Duration>) -> Arc<Wire> {
    let Opened { stream, rbuf, tuned } = opened;
    let (read, write) = stream.split();
    let outbound = Outbound::new(write, tuned.frame_max, tuned.channel_max, signals);
    let stopped = outbound.stopped();
    let wire = Arc::new(Wire::new(outbound));
    let beat = (tuned.heartbeat > 0).then(|| Duration::from_secs(tuned.heartbeat as u64));
    tokio::spawn(write_loop(beat.map(|b| b / 2), stopped, wire.clone()));
    tokio::spawn(read_loop(
        read,
        rbuf,
        beat.map(|b| b * 2),
        busy_poll,
        wire.clone(),
    ));
    wire
}

pub(crate) async fn write_loop(
    heartbeat_every: Option<Duration>,
    mut stopped: watch::Receiver<bool>,
    wire: Arc<Wire>,
) {
    // What the writer writes: the outbox's frames, swapped in whole.
    let mut taken = BytesMut::with_capacity(64 * 1024);
    let idle = heartbeat_every.unwrap_or(Duration::from_secs(3600));
    // Checked on a tick rather than a fresh timer per batch.
    let mut beat = tokio::time::interval(idle / 2);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The deferred publishes' fallback, while armed (see `deferral`).
    let mut fallback: Option<(tokio::time::Interval, TickState)> = None;
    loop {
        tokio::select! {
            biased;
            _ = wire.outbox_filled.notified() => {}
            _ = stopped.changed() => {}
            _ = async { fallback.as_mut().expect("armed").0.tick().await }, if fallback.is_some() => {
                let (_, seen) = fallback.as_mut().expect("armed");
                match wire.deferral_tick(seen) {
                    // Written below; a wire late too often defers no more.
                    Tick::Late { off } => {
                        if off {
                            fallback = None;
                        }
                    }
                    Tick::Disarm => {
                        fallback = None;
                        continue;
                    }
                    // What is queued is a publishing task's to write.
                    Tick::Keep => continue,
                }
            }
            _ = beat.tick(), if heartbeat_every.is_some() => {
                if wire.since_last_write() >= idle {
                    // Behind whatever is queued; a full outbox means
                    // frames are going out anyway.
                    let _ = wire.try_send_with(&mut Some(write_heartbeat));
                }
            }
        }
        if fallback.is_none() && wire.deferral.arm() {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            fallback = Some((tick, TickState::default()));
        }
        // Holding the socket while writing what was taken: a sender
        // writes directly only with the socket free, so nothing it
        // writes overtakes frames queued before its own.
        let mut out = wire.out.lock().await;
        while wire.take_outbox(&mut taken) {
            wire.wrote();
            if let Err(e) = out.write_all(&taken).await {
                drop(out);
                wire.end(Error::ConnectionLost(format!("writing: {e}")));
                let _ = wire.out.lock().await.shutdown().await;
                return;
            }
            taken.clear();
            // One huge message leaves no huge buffer behind.
            if taken.capacity() > KEEP_CAPACITY {
                taken = BytesMut::with_capacity(64 * 1024);
            }
        }
        drop(out);
        if *stopped.borrow() {
            break;
        }
    }
    let _ = wire.out.lock().await.shutdown().await;
}

/// A delivery, return or get-ok whose header and body are still arriving.
struct Partial {
    method: Method,
    size: u64,
    /// As they came (checked, not decoded).
    properties: Option<Bytes>,
    body: BytesMut,
    /// The body when it came as one frame (no copy).
    whole: Option<Bytes>,
    /// Body bytes so far.
    received: u64,
    /// The channel it is for, looked up once; none for a channel not
    /// open here (one this side just closed, say): its frames are read
    /// past, not kept.
    channel: Option<Arc<ChannelState>>,
}

/// What the reader keeps between frames: the messages being assembled,
/// by channel, the publishes confirmed and the channels whose confirms
/// freed in-flight room, told once the read is routed.
/// Content frames of one message come together, so usually one message
/// is under way: it is kept in a slot of its own, and only messages of
/// several channels interleaved go to the map (no hashing, or moving
/// into and out of a table, for the common case).
#[derive(Default)]
struct Partials {
    one: Option<(u16, Partial)>,
    more: ChannelMap<Partial>,
    /// Publishes confirmed in this read, their futures not yet told.
    settled: Vec<Settle>,
    /// Channels whose confirms freed in-flight room in this read.
    freed: Vec<Arc<ChannelState>>,
}

impl Partials {
    /// Tell the publishes this read confirmed, then the publishers
    /// waiting for room on the channels whose confirms freed some (before
    /// the reader waits for anything). Told together, a publisher woken
    /// on another thread finds every confirm of the read, as a publisher
    /// told one by one would not: it would wake, publish, and sleep again
    /// for the next while the reader was still routing.
    fn tell(&mut self) {
        self.settled.drain(..).for_each(Settle::tell);
        for ch in self.freed.drain(..) {
            ch.slot_freed.notify_waiters();
        }
    }

    fn insert(&mut self, channel: u16, p: Partial) {
        match &mut self.one {
            Some((c, slot)) if *c == channel => *slot = p,
            Some(_) => {
                self.more.insert(channel, p);
            }
            None => {
                self.more.remove(&channel);
                self.one = Some((channel, p));
            }
        }
    }

    fn get_mut(&mut self, channel: u16) -> Option<&mut Partial> {
        match &mut self.one {
            Some((c, p)) if *c == channel => Some(p),
            _ => self.more.get_mut(&channel),
        }
    }

    fn remove(&mut self, channel: u16) -> Option<Partial> {
        match &self.one {
            Some((c, _)) if *c == channel => self.one.take().map(|(_, p)| p),
            _ => self.more.remove(&channel),
        }
    }
}

impl Drop for Partials {
    /// The reader stopped (the wire ended): what the broker confirmed is
    /// still told as confirmed, not lost with the wire.
    fn drop(&mut self) {
        self.tell();
    }
}

/// What the reader asks the socket for at once, at most (deliveries'
/// bodies are slices of this buffer: a new one is taken when they still
/// hold the old).
const READ_CHUNK: usize = 64 * 1024;

/// The largest body accepted: RabbitMQ's own limit (max_message_size
/// cannot be set above 512 MiB). A broker announcing more is refused
/// before anything is buffered.
const MAX_BODY: u64 = 512 << 20;

pub(crate) async fn read_loop(
    mut input: ReadHalf,
    mut rbuf: BytesMut,
    silence_limit: Option<Duration>,
    busy_poll: Option<Duration>,
    wire: Arc<Wire>,
) {
    let mut partial = Partials::default();
    let mut stopped = wire.stopped();
    let mut check = tokio::time::interval(silence_limit.unwrap_or(Duration::from_secs(3600)) / 4);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_read = Instant::now();
    let why = loop {
        loop {
            let frame = match Frame::parse(&mut rbuf, wire.frame_max) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return fail(&wire, Error::from(e)),
            };
            // Most frames are handled without waiting; the few steps that
            // wait are taken here, keeping `route` a plain function (an
            // async one would build and move its future for every frame).
            let step = route(&wire, &mut partial, frame);
            if !matches!(step, Ok(Step::Next)) {
                // A step that may wait: publishers are not kept waiting
                // on it for room already freed.
                partial.tell();
            }
            match step {
                Ok(Step::Next) => {}
                Ok(Step::Answer(ch, m)) => {
                    if matches!(m, Method::ChannelClose(_)) {
                        // Closed by the broker: frames for its number
                        // from now on belong to whoever opens it next.
                        wire.unregister(ch.id);
                    }
                    ch.answer_method(&wire, m).await
                }
                Ok(Step::Deliver(tx, d)) => {
                    // Bounded: waiting here holds the socket back (TCP
                    // flow control) rather than buffering without limit.
                    let _ = tx.send(d).await;
                }
                Ok(Step::Connection(m)) => match connection_method(&wire, m).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => return fail(&wire, e),
                },
                Err(e) => return fail(&wire, e),
            }
        }
        partial.tell();
        if *stopped.borrow() {
            return;
        }
        // Room for a good read: without it the buffer keeps the 4 KiB it
        // came with, and a stream of 1 KB deliveries took a recv call
        // for every three or four of them.
        if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
            rbuf.reserve(READ_CHUNK);
        }
        let polled = match busy_poll {
            Some(budget) => poll_for(&input, &mut rbuf, budget).await,
            None => None,
        };
        // One interval for the silence check and one watch receiver for
        // the whole life of the loop: no timer or subscription per read.
        let n = if let Some(n) = polled {
            Ok(n)
        } else {
            tokio::select! {
                n = input.read_buf(&mut rbuf) => Ok(n),
                // Ended from this side (a close, or the writer failed).
                _ = stopped.changed() => return,
                _ = check.tick(), if silence_limit.is_some() => {
                    let limit = silence_limit.expect("checked");
                    if last_read.elapsed() > limit {
                        Err(Error::ConnectionLost(format!("no heartbeat from the broker in {limit:?}")))
                    } else {
                        continue;
                    }
                }
            }
        };
        last_read = Instant::now();
        match n {
            Err(e) => break e,
            Ok(Ok(0)) => break Error::ConnectionLost("the broker closed the socket".into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => break Error::ConnectionLost(format!("reading: {e}")),
        }
    };
    wire.end(why);
}

/// Poll the socket for up to `budget`, yielding between tries so the
/// tasks this reader woke (a publisher whose confirm came) run on this
/// thread meanwhile; the thread stays awake, and what the broker sends
/// next is read without the wait for a sleeping thread to be woken.
/// `None` when nothing came (or over TLS): the caller waits as usual.
async fn poll_for(input: &ReadHalf, rbuf: &mut BytesMut, budget: Duration) -> Option<std::io::Result<usize>> {
    if matches!(input, ReadHalf::Tls(_)) {
        return None;
    }
    let until = Instant::now() + budget;
    loop {
        match input.try_read_buf(rbuf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return None;
                }
                tokio::task::yield_now().await;
            }
            r => return Some(r),
        }
    }
}

/// A frame that makes no sense: log it and end the connection (the
/// writer stops, which closes the socket).
fn fail(wire: &Arc<Wire>, e: Error) {
    tracing::warn!("AMQP 0-9-1 connection failed: {e}");
    wire.end(e);
}

/// What is left to do for a frame after [`route`], which does not wait.
enum Step {
    Next,
    /// A channel method answered before anything else (channel.close).
    Answer(Arc<ChannelState>, Method),
    /// A delivery for a consumer whose buffer is full.
    Deliver(mpsc::Sender<Delivery>, Delivery),
    /// A method on channel 0.
    Connection(Method),
}

/// Handle one frame as far as can be done without waiting.
fn route(wire: &Arc<Wire>, partial: &mut Partials, f: Frame) -> Result<Step, Error> {
    match f.kind {
        FrameType::Heartbeat => Ok(Step::Next),
        FrameType::Method => {
            let m = Method::decode(f.payload)?;
            if f.channel == 0 {
                return Ok(Step::Connection(m));
            }
            match m {
                Method::BasicDeliver(_) | Method::BasicReturn(_) | Method::BasicGetOk(_) => {
                    let channel = wire.channel(f.channel);
                    partial.insert(
                        f.channel,
                        Partial {
                            method: m,
                            size: 0,
                            properties: None,
                            body: BytesMut::new(),
                            whole: None,
                            received: 0,
                            channel,
                        },
                    );
                    Ok(Step::Next)
                }
                m => {
                    let Some(ch) = wire.channel(f.channel) else {
                        return Ok(Step::Next);
                    };
                    // Publishers waiting for in-flight room are told once
                    // the whole read is routed: they then find all the
                    // room its confirms freed, and publish it in one go.
                    if let Some(freed) = ch.confirm(&m, &mut partial.settled) {
                        if freed && !partial.freed.iter().any(|c| Arc::ptr_eq(c, &ch)) {
                            partial.freed.push(ch);
                        }
                        return Ok(Step::Next);
                    }
                    Ok(match ch.method(m) {
                        Some(m) => Step::Answer(ch, m),
                        None => Step::Next,
                    })
                }
            }
        }
        FrameType::Header => {
            let Some(p) = partial.get_mut(f.channel) else {
                return Err(Error::Protocol(
                    "a content header with no method before it".into(),
                ));
            };
            if p.properties.is_some() {
                return Err(Error::Protocol("a second content header for one message".into()));
            }
            let h = ContentHeader::decode(f.payload)?;
            if h.body_size > MAX_BODY {
                return Err(Error::Protocol(format!(
                    "a body of {} bytes, over the {MAX_BODY} accepted",
                    h.body_size
                )));
            }
            p.size = h.body_size;
            check_properties(&h.raw_properties)?;
            p.properties = Some(h.raw_properties);
            if p.size == 0 {
                return Ok(deliver(wire, f.channel, partial));
            }
            Ok(Step::Next)
        }
        FrameType::Body => {
            let Some(p) = partial.get_mut(f.channel) else {
                return Err(Error::Protocol("a body frame with no method before it".into()));
            };
            if p.properties.is_none() {
                return Err(Error::Protocol("a body frame before its content header".into()));
            }
            p.received += f.payload.len() as u64;
            if p.received > p.size {
                return Err(Error::Protocol("a body longer than its header said".into()));
            }
            if p.channel.is_none() {
                // Read past, kept nowhere.
            } else if p.whole.is_none() && p.body.is_empty() && f.payload.len() as u64 == p.size {
                p.whole = Some(f.payload);
            } else {
                p.body.extend_from_slice(&f.payload);
            }
            if p.received == p.size {
                return Ok(deliver(wire, f.channel, partial));
            }
            Ok(Step::Next)
        }
    }
}

/// A whole message has arrived on `channel`: hand it on.
fn deliver(wire: &Arc<Wire>, channel: u16, partial: &mut Partials) -> Step {
    let Some(p) = partial.remove(channel) else {
        return Step::Next;
    };
    let Some(ch) = p.channel else { return Step::Next };
    let body = p.whole.unwrap_or_else(|| p.body.freeze());
    let content = Content {
        method: p.method,
        properties: p.properties.unwrap_or_default(),
        body,
    };
    match ch.content(&wire.outbound, content) {
        Some((tx, d)) => Step::Deliver(tx, d),
        None => Step::Next,
    }
}

/// A method on channel 0.
async fn connection_method(wire: &Arc<Wire>, m: Method) -> Result<bool, Error> {
    match m {
        Method::ConnectionClose(c) => {
            let mut buf = BytesMut::new();
            write_method(&mut buf, 0, &Method::ConnectionCloseOk(ConnectionCloseOk {}));
            let _ = wire.send(buf.freeze()).await;
            wire.end(Error::ConnectionClosed {
                code: c.reply_code,
                text: c.reply_text.to_str_lossy().into_owned(),
            });
            Ok(false)
        }
        Method::ConnectionCloseOk(_) => {
            wire.end(Error::ClosedByClient);
            Ok(false)
        }
        Method::ConnectionUpdateSecretOk(_) => {
            if let Some(tx) = wire.update_secret_ok.lock().take() {
                let _ = tx.send(());
            }
            Ok(true)
        }
        Method::ConnectionBlocked(b) => {
            let reason = b.reason.to_str_lossy().into_owned();
            tracing::info!("the broker blocked publishing: {reason}");
            wire.signals.blocked.send_replace(true);
            wire.signals.emit(Event::Blocked { reason });
            Ok(true)
        }
        Method::ConnectionUnblocked(_) => {
            tracing::info!("the broker unblocked publishing");
            wire.signals.blocked.send_replace(false);
            wire.signals.emit(Event::Unblocked);
            Ok(true)
        }
        other => Err(Error::Protocol(format!("unexpected on channel 0: {other:?}"))),
    }
}
