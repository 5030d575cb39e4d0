//! An AMQP 1.0 connection: the handshake (SASL, open, one session), then
//! two tasks on the application's runtime, a reader that applies what
//! the broker sends to the session's state and a writer that writes what
//! the application's calls queued there, in one write when it can.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::sync::{watch, Notify};
use warren_amqp10::frame::{write_frame, write_heartbeat, FrameType};
use warren_amqp10::performative::{Begin, Close, Open};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};

use super::error::Error;
use super::session::Session;
use crate::socket::{ReadHalf, Socket, WriteHalf};
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// The largest frame we take (and offer).
const MAX_FRAME: u32 = 1 << 20;
/// How long the handshake and each call wait for the broker.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How the connection authenticates (SASL, spec 5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// The URI's user name and password (the default).
    #[default]
    Plain,
    /// No credentials (a broker that allows anonymous logins).
    Anonymous,
    /// The TLS client certificate names the user.
    External,
}

/// How to open a [`Connection`]: `Connection::builder(uri)...open()`.
#[derive(Clone)]
pub struct ConnectionBuilder {
    uri: String,
    sasl: SaslMechanism,
    tls: Option<TlsOptions>,
    container_id: Option<String>,
}

impl ConnectionBuilder {
    /// The SASL mechanism (PLAIN by default).
    pub fn sasl(mut self, mechanism: SaslMechanism) -> Self {
        self.sasl = mechanism;
        self
    }

    /// TLS with these options (an `amqps://` URI uses the system's roots
    /// without them).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The container id the broker shows for the connection.
    pub fn container_id(mut self, id: impl Into<String>) -> Self {
        self.container_id = Some(id.into());
        self
    }

    /// Connect, authenticate, open the connection and its session.
    pub async fn open(self) -> Result<Connection, Error> {
        let uri = AmqpUri::parse(&self.uri).map_err(|e| Error::Uri(e.to_string()))?;
        let container_id = self
            .container_id
            .unwrap_or_else(|| format!("warren-client-{}", std::process::id()));
        tokio::time::timeout(
            CALL_TIMEOUT,
            handshake(&uri, self.sasl, self.tls.as_ref(), container_id),
        )
        .await
        .map_err(|_| Error::Timeout(CALL_TIMEOUT))?
    }
}

/// A connection to a broker speaking AMQP 1.0 (RabbitMQ 4, Warren),
/// with one session its publishers, consumers and management share.
/// Cloning it shares it.
///
/// ```no_run
/// use warren_client::amqp::{Connection, Message, Outcome, QueueSpec};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let management = conn.management().await?;
/// management.declare_queue(&QueueSpec::quorum("orders")).await?;
/// let publisher = conn.publisher().queue("orders").build().await?;
/// let outcome = publisher.publish(Message::new("order 1")).await?.await?;
/// assert_eq!(outcome, Outcome::Accepted);
/// conn.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Connection {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) session: Mutex<Session>,
    /// The writer has something to write.
    pub(crate) queued: Notify,
    /// The session's state changed in a way a waiting call may care
    /// about (credit, window, an end).
    pub(crate) changed: Notify,
    /// The largest frame the broker takes.
    pub(crate) max_frame: u32,
    stop: watch::Sender<bool>,
    /// The reader saw the broker's close (or the socket end).
    closed: Notify,
    names: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// Change the session (queueing frames), then wake the writer.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        let r = {
            let mut s = self.session.lock();
            f(&mut s)
        };
        self.queued.notify_one();
        r
    }

    /// Wait until `ready` says yes (Ok(Some)) or fails, looking again
    /// whenever the session changes.
    pub(crate) async fn wait_for<T>(
        &self,
        mut ready: impl FnMut(&mut Session) -> Result<Option<T>, Error>,
    ) -> Result<T, Error> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(t) = ready(&mut self.session.lock())? {
                self.queued.notify_one();
                return Ok(t);
            }
            changed.await;
        }
    }

    /// Send encoded message `message` on sender link `handle` once its
    /// credit and the session's window allow; `waiter` hears its outcome
    /// (None: sent settled).
    pub(crate) async fn transfer(
        &self,
        handle: u32,
        message: &[u8],
        waiter: Option<super::session::Waiter>,
    ) -> Result<(), Error> {
        let frames = super::session::frames_for(message.len(), self.max_frame);
        let mut waiter = Some(waiter);
        self.wait_for(|s| {
            if !s.can_send(handle, frames)? {
                return Ok(None);
            }
            s.transfer(handle, message, self.max_frame, waiter.take().flatten());
            Ok(Some(()))
        })
        .await
    }

    /// A link name unique on this connection.
    pub(crate) fn link_name(&self, what: &str) -> String {
        let n = self.names.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{what}-{n}")
    }
}

impl Connection {
    /// Open a connection to `uri` (`amqp://user:pass@host:port/vhost` or
    /// `amqps://...`) with SASL PLAIN.
    pub async fn open(uri: &str) -> Result<Connection, Error> {
        Connection::builder(uri).open().await
    }

    /// A connection with options.
    pub fn builder(uri: &str) -> ConnectionBuilder {
        ConnectionBuilder {
            uri: uri.to_string(),
            sasl: SaslMechanism::default(),
            tls: None,
            container_id: None,
        }
    }

    /// A management client on this connection (its own link pair).
    pub async fn management(&self) -> Result<super::Management, Error> {
        super::Management::open(self.shared.clone()).await
    }

    /// A publisher: say where it sends, then `build()`.
    pub fn publisher(&self) -> super::PublisherBuilder {
        super::PublisherBuilder {
            shared: self.shared.clone(),
            address: None,
            max_in_flight: super::publisher::DEFAULT_MAX_IN_FLIGHT,
        }
    }

    /// A consumer: say from which queue, then `build()`.
    pub fn consumer(&self) -> super::ConsumerBuilder {
        super::ConsumerBuilder {
            shared: self.shared.clone(),
            address: None,
            credit: super::consumer::DEFAULT_INITIAL_CREDIT,
            pre_settled: false,
            offset: None,
            filter_values: Vec::new(),
            match_unfiltered: false,
        }
    }

    /// Whether the connection is still open.
    pub fn is_open(&self) -> bool {
        self.shared.session.lock().ended.is_none()
    }

    /// Close the connection (waiting briefly for the broker's close);
    /// publishers and consumers on it end.
    pub async fn close(&self) {
        let closed = self.shared.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        let open = self.shared.with(|s| {
            if s.ended.is_some() {
                return false;
            }
            s.send(&Performative::Close(Close { error: None }), &[]);
            true
        });
        if open {
            let _ = tokio::time::timeout(Duration::from_secs(2), closed).await;
        }
        self.shared
            .session
            .lock()
            .end(Error::ConnectionClosed("closed by the application".into()));
        self.shared.changed.notify_waiters();
        let _ = self.shared.stop.send(true);
    }
}

/// SASL, the AMQP header, open and begin; then the tasks.
async fn handshake(
    uri: &AmqpUri,
    mechanism: SaslMechanism,
    tls: Option<&TlsOptions>,
    container_id: String,
) -> Result<Connection, Error> {
    let socket = Socket::connect(uri, tls)
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
    let (name, response) = match mechanism {
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
    // RabbitMQ names the virtual host in the hostname: `vhost:<name>`.
    put(Performative::Open(Open {
        container_id,
        hostname: Some(format!("vhost:{}", uri.vhost)),
        max_frame_size: Some(MAX_FRAME),
        channel_max: Some(0),
        ..Default::default()
    }));
    put(Performative::Begin(Begin {
        next_outgoing_id: 0,
        incoming_window: super::session::INCOMING_WINDOW,
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
    let (stop, stopped) = watch::channel(false);
    let shared = Arc::new(Shared {
        session: Mutex::new(Session::new(begin.incoming_window, begin.next_outgoing_id)),
        queued: Notify::new(),
        changed: Notify::new(),
        max_frame: open.max_frame_size.unwrap_or(u32::MAX).clamp(512, MAX_FRAME),
        stop,
        closed: Notify::new(),
        names: Default::default(),
    });
    // The broker closes a connection silent for its idle time-out: an
    // empty frame at half of it.
    let beat = open
        .idle_time_out
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms as u64 / 2));
    tracing::debug!(host = %uri.host, port = uri.port, vhost = %uri.vhost, "AMQP 1.0 connection open");
    tokio::spawn(read_loop(shared.clone(), input, rbuf, stopped.clone()));
    tokio::spawn(write_loop(shared.clone(), output, beat, stopped));
    Ok(Connection { shared })
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
    rbuf.reserve(16 * 1024);
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

async fn read_loop(
    shared: Arc<Shared>,
    mut input: ReadHalf,
    mut rbuf: BytesMut,
    mut stopped: watch::Receiver<bool>,
) {
    let why = loop {
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
            break e;
        }
        tokio::select! {
            r = fill(&mut input, &mut rbuf) => if let Err(e) = r { break e },
            _ = stopped.changed() => return,
        }
    };
    tracing::debug!(reason = %why, "AMQP 1.0 connection ended");
    shared.session.lock().end(why);
    shared.closed.notify_waiters();
    shared.changed.notify_waiters();
    shared.queued.notify_one();
}

async fn write_loop(
    shared: Arc<Shared>,
    mut output: WriteHalf,
    beat: Option<Duration>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(beat.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = true;
    let mut buf = BytesMut::new();
    loop {
        tokio::select! {
            _ = shared.queued.notified() => {}
            _ = ticker.tick() => {
                if beat.is_some() && idle {
                    write_heartbeat(&mut shared.session.lock().out);
                }
                idle = true;
            }
            _ = stopped.changed() => {}
        }
        let ended = {
            let mut s = shared.session.lock();
            s.flush_accepts();
            std::mem::swap(&mut buf, &mut s.out);
            s.ended.is_some()
        };
        if !buf.is_empty() {
            idle = false;
            if output.write_all(&buf).await.is_err() {
                shared
                    .session
                    .lock()
                    .end(Error::ConnectionClosed("writing failed".into()));
                shared.changed.notify_waiters();
                break;
            }
            buf.clear();
        }
        if ended || *stopped.borrow() {
            break;
        }
    }
    let _ = output.shutdown().await;
}
