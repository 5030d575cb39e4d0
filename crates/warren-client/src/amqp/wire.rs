//! One socket of a connection: the handshake (SASL, the AMQP header,
//! open, begin), then two tasks on the application's runtime, a reader
//! that applies what the broker sends to the session's state and a
//! writer that writes what the application's calls queued there, in one
//! write when it can. A wire ends when either side fails, the broker
//! closes, or the broker is silent past the idle time-out; its
//! [`Wire::ended`] then says why. A connection has one wire at a time
//! and a new one after each recovery.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::{oneshot, watch};
use warren_amqp10::frame::{write_frame, write_heartbeat, FrameType};
use warren_amqp10::performative::{Begin, Close, Open};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};

use super::connection::{Settings, Shared};
use super::error::Error;
use super::session::{ACCEPT_DELAY, INCOMING_WINDOW};
use super::SaslMechanism;
use crate::socket::{ReadHalf, Socket, WriteHalf};
use crate::uri::AmqpUri;

/// The largest frame we take (and offer).
pub(crate) const MAX_FRAME: u32 = 1 << 20;

/// A socket that finished its handshake, its tasks not yet started.
pub(crate) struct Opened {
    input: ReadHalf,
    output: WriteHalf,
    rbuf: BytesMut,
    /// The broker's begin: its incoming window and next outgoing id.
    pub(crate) remote_incoming_window: u32,
    pub(crate) next_incoming_id: u32,
    /// The largest frame the broker takes.
    pub(crate) max_frame: u32,
    /// How often we must send something (half the broker's idle
    /// time-out), if it has one.
    beat: Option<Duration>,
}

/// A running wire: dropping it stops its tasks.
pub(crate) struct Wire {
    pub(crate) ended: oneshot::Receiver<Error>,
    _dead: watch::Sender<bool>,
}

/// Connect to `uri` and go through the handshake, within the URI's
/// connection time-out.
pub(crate) async fn connect(settings: &Settings, uri: &AmqpUri) -> Result<Opened, Error> {
    let limit = uri.connection_timeout;
    tokio::time::timeout(limit, handshake(settings, uri))
        .await
        .map_err(|_| Error::Timeout(limit))?
}

/// Start the reader and writer of `opened` for `shared`.
pub(crate) fn start(shared: &Arc<Shared>, opened: Opened) -> Wire {
    let (dead, dead_rx) = watch::channel(false);
    let (tell, ended) = oneshot::channel();
    if let Some(m) = &shared.settings.metrics {
        m.connection_opened();
    }
    let idle = shared.settings.idle_timeout;
    tokio::spawn(write_loop(
        shared.clone(),
        opened.output,
        opened.beat,
        dead_rx.clone(),
        dead.clone(),
    ));
    let reading = read_loop(shared.clone(), opened.input, opened.rbuf, dead_rx, idle);
    let dead_on_end = dead.clone();
    let shared = shared.clone();
    tokio::spawn(async move {
        let why = reading.await;
        tracing::debug!(reason = %why, "AMQP 1.0 wire ended");
        let _ = dead_on_end.send(true);
        if let Some(m) = &shared.settings.metrics {
            m.connection_closed();
        }
        shared.closed.notify_waiters();
        shared.changed.notify_waiters();
        let _ = tell.send(why);
    });
    Wire { ended, _dead: dead }
}

async fn handshake(settings: &Settings, uri: &AmqpUri) -> Result<Opened, Error> {
    let socket = Socket::connect(uri, settings.tls.as_ref())
        .await
        .map_err(|e| Error::Connect(e.to_string()))?;
    let (mut input, mut output) = socket.split();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let io = |e: std::io::Error| Error::Connect(e.to_string());

    output.write_all(SASL_HEADER).await.map_err(io)?;
    expect_header(&mut input, &mut rbuf, SASL_HEADER).await?;
    let offered = match sasl_frame(&mut input, &mut rbuf).await? {
        Sasl::Mechanisms(m) => m,
        other => {
            return Err(Error::Protocol(format!(
                "expected sasl-mechanisms, got {other:?}"
            )))
        }
    };
    let (name, response) = match settings.sasl {
        SaslMechanism::Plain => (
            "PLAIN",
            Some(Bytes::from(format!("\0{}\0{}", uri.user, uri.password))),
        ),
        SaslMechanism::Anonymous => ("ANONYMOUS", Some(Bytes::new())),
        SaslMechanism::External => ("EXTERNAL", Some(Bytes::new())),
    };
    if !offered.iter().any(|m| m == name) {
        return Err(Error::Authentication(format!(
            "the broker offers {offered:?}, not {name}"
        )));
    }
    let init = Sasl::Init {
        mechanism: name.into(),
        initial_response: response,
        hostname: Some(uri.host.clone()),
    };
    let mut out = BytesMut::new();
    write_frame(&mut out, FrameType::Sasl, 0, &[&init.to_value().to_bytes()]);
    output.write_all(&out).await.map_err(io)?;
    match sasl_frame(&mut input, &mut rbuf).await? {
        Sasl::Outcome { code: sasl::OK } => {}
        Sasl::Outcome { code } => return Err(Error::Authentication(format!("SASL outcome code {code}"))),
        other => return Err(Error::Protocol(format!("expected sasl-outcome, got {other:?}"))),
    }

    output.write_all(AMQP_HEADER).await.map_err(io)?;
    expect_header(&mut input, &mut rbuf, AMQP_HEADER).await?;
    let mut out = BytesMut::new();
    let mut put = |p: Performative| {
        let mut perf = BytesMut::new();
        p.encode(&mut perf);
        write_frame(&mut out, FrameType::Amqp, 0, &[&perf]);
    };
    let idle = settings.idle_timeout.as_millis().min(u32::MAX as u128) as u32;
    // RabbitMQ names the virtual host in the hostname: `vhost:<name>`.
    put(Performative::Open(Open {
        container_id: settings.container_id.clone(),
        hostname: Some(format!("vhost:{}", uri.vhost)),
        max_frame_size: Some(MAX_FRAME),
        channel_max: Some(0),
        // The broker sends something at least every half of it, so a
        // silent broker is noticed.
        idle_time_out: (idle > 0).then_some(idle),
        ..Default::default()
    }));
    put(Performative::Begin(Begin {
        next_outgoing_id: 0,
        incoming_window: INCOMING_WINDOW,
        outgoing_window: u32::MAX,
        handle_max: Some(u32::MAX),
        ..Default::default()
    }));
    output.write_all(&out).await.map_err(io)?;
    let open = match performative(&mut input, &mut rbuf).await? {
        Performative::Open(o) => o,
        Performative::Close(c) => return Err(refused(c, "open")),
        other => return Err(Error::Protocol(format!("expected open, got {}", other.name()))),
    };
    let begin = match performative(&mut input, &mut rbuf).await? {
        Performative::Begin(b) => b,
        Performative::Close(c) => return Err(refused(c, "begin")),
        other => return Err(Error::Protocol(format!("expected begin, got {}", other.name()))),
    };
    tracing::debug!(host = %uri.host, port = uri.port, vhost = %uri.vhost, "AMQP 1.0 connection open");
    Ok(Opened {
        input,
        output,
        rbuf,
        remote_incoming_window: begin.incoming_window,
        next_incoming_id: begin.next_outgoing_id,
        max_frame: open.max_frame_size.unwrap_or(u32::MAX).clamp(512, MAX_FRAME),
        // The broker closes a connection silent for its idle time-out:
        // an empty frame at half of it.
        beat: open
            .idle_time_out
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms as u64 / 2)),
    })
}

/// The broker's close in answer to our `what`.
fn refused(c: Close, what: &str) -> Error {
    match c.error {
        Some(e) => Error::Closed(e.into()),
        None => Error::ConnectionClosed(format!("refused at {what}")),
    }
}

async fn expect_header(input: &mut ReadHalf, rbuf: &mut BytesMut, want: &[u8; 8]) -> Result<(), Error> {
    while rbuf.len() < 8 {
        fill(input, rbuf).await?;
    }
    let got = rbuf.split_to(8);
    if &got[..] != want {
        return Err(Error::Protocol(format!(
            "the broker answered with header {:?}",
            &got[..]
        )));
    }
    Ok(())
}

async fn fill(input: &mut ReadHalf, rbuf: &mut BytesMut) -> Result<(), Error> {
    rbuf.reserve(64 * 1024);
    match input.read_buf(rbuf).await {
        Ok(0) => Err(Error::ConnectionClosed("the broker closed the socket".into())),
        Ok(_) => Ok(()),
        Err(e) => Err(Error::ConnectionClosed(format!("reading: {e}"))),
    }
}

/// The next frame with a body (heartbeats skipped).
async fn frame(input: &mut ReadHalf, rbuf: &mut BytesMut) -> Result<Frame, Error> {
    loop {
        match Frame::parse(rbuf, MAX_FRAME)? {
            Some(f) if f.body.is_empty() => continue,
            Some(f) => return Ok(f),
            None => fill(input, rbuf).await?,
        }
    }
}

async fn sasl_frame(input: &mut ReadHalf, rbuf: &mut BytesMut) -> Result<Sasl, Error> {
    let f = frame(input, rbuf).await?;
    let mut body = &f.body[..];
    Ok(Sasl::from_value(&Value::decode(&mut body)?)?)
}

async fn performative(input: &mut ReadHalf, rbuf: &mut BytesMut) -> Result<Performative, Error> {
    let f = frame(input, rbuf).await?;
    Ok(Performative::decode(&f.body)?.0)
}

/// Read and apply frames until the wire ends; why it did.
async fn read_loop(
    shared: Arc<Shared>,
    mut input: ReadHalf,
    mut rbuf: BytesMut,
    mut dead: watch::Receiver<bool>,
    idle: Duration,
) -> Error {
    let mut stopped = shared.stop.subscribe();
    loop {
        // Everything read so far, under one lock.
        let step = {
            let mut s = shared.session.lock();
            let mut step = Ok(());
            loop {
                match Frame::parse(&mut rbuf, MAX_FRAME) {
                    Ok(Some(f)) if f.body.is_empty() => continue,
                    Ok(Some(f)) => {
                        if f.kind != FrameType::Amqp || f.channel != 0 {
                            step = Err(Error::Protocol(format!("a frame on channel {}", f.channel)));
                            break;
                        }
                        let handled = Performative::decode(&f.body)
                            .map_err(Error::from)
                            .and_then(|(p, payload)| s.handle(p, payload));
                        if let Err(e) = handled {
                            step = Err(e);
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        step = Err(e.into());
                        break;
                    }
                }
            }
            step
        };
        shared.changed.notify_waiters();
        shared.queued.notify_one();
        if let Err(e) = step {
            return e;
        }
        // Let what this read woke (consumers, and the writer with the
        // credit they give back) run before reading more: on a runtime of
        // one thread the reader would otherwise take in everything the
        // broker sent, then the consumer, then the writer, each in turn,
        // and the broker would wait for credit in between.
        tokio::task::yield_now().await;
        let before = rbuf.len();
        let reading = async {
            if idle.is_zero() {
                fill(&mut input, &mut rbuf).await
            } else {
                // The broker sends at least every half of it.
                tokio::time::timeout(idle, fill(&mut input, &mut rbuf))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::ConnectionClosed(format!(
                            "nothing from the broker within the idle time-out ({idle:?})"
                        )))
                    })
            }
        };
        tokio::select! {
            r = reading => {
                if let Err(e) = r {
                    return e;
                }
                if let Some(m) = &shared.settings.metrics {
                    m.read((rbuf.len() - before) as u64);
                }
            }
            _ = dead.wait_for(|d| *d) => {
                return Error::ConnectionClosed("writing failed".into());
            }
            _ = stopped.wait_for(|s| *s) => return Error::ConnectionClosed("closed by the application".into()),
        }
    }
}

async fn write_loop(
    shared: Arc<Shared>,
    mut output: WriteHalf,
    beat: Option<Duration>,
    mut dead_rx: watch::Receiver<bool>,
    dead: watch::Sender<bool>,
) {
    let mut ticker = tokio::time::interval(beat.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = true;
    let mut buf = BytesMut::new();
    let mut stopped = shared.stop.subscribe();
    // Frames queued after this wire was lost are the next one's.
    let epoch = shared.epoch();
    // When accepts waiting to grow into one disposition must go.
    let mut accepts_due: Option<tokio::time::Instant> = None;
    let far = || tokio::time::Instant::now() + Duration::from_secs(3600);
    loop {
        tokio::select! {
            biased;
            _ = dead_rx.wait_for(|d| *d) => {}
            _ = shared.queued.notified() => {}
            _ = shared.accepts_begun.notified(), if accepts_due.is_none() => {
                accepts_due = Some(tokio::time::Instant::now() + ACCEPT_DELAY);
                continue;
            }
            _ = tokio::time::sleep_until(accepts_due.unwrap_or_else(far)), if accepts_due.is_some() => {}
            _ = ticker.tick() => {
                if beat.is_some() && idle {
                    write_heartbeat(&mut shared.session.lock().out);
                }
                idle = true;
            }
            _ = stopped.wait_for(|s| *s) => {}
        }
        if dead_rx.borrow().to_owned() || dead_rx.has_changed().is_err() {
            // What is queued now is the next wire's: its writer is woken
            // in case this one took the wake meant for it.
            shared.queued.notify_one();
            break;
        }
        let ended = {
            let mut s = shared.session.lock();
            if s.epoch != epoch {
                drop(s);
                shared.queued.notify_one();
                break;
            }
            s.flush_accepts();
            accepts_due = None;
            std::mem::swap(&mut buf, &mut s.out);
            shared.urgent.store(false, Ordering::Relaxed);
            s.ended.is_some()
        };
        if !buf.is_empty() {
            idle = false;
            if output.write_all(&buf).await.is_err() {
                let _ = dead.send(true);
                break;
            }
            if let Some(m) = &shared.settings.metrics {
                m.written(buf.len() as u64);
            }
            buf.clear();
        }
        if ended || *stopped.borrow() {
            break;
        }
    }
    let _ = output.shutdown().await;
}
