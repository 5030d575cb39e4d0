//! A connection: what its builder set, the session its links share, the
//! topology its managements declared, and the wire it runs on now
//! (`wire.rs`), replaced by `recovery.rs` when the socket is lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch, Notify};
use warren_amqp10::performative::Close;
use warren_amqp10::Performative;

use super::error::Error;
use super::events::{Event, Events};
use super::metrics::Metrics;
use super::session::{Session, Wake};
use super::topology::Topology;
use crate::recovery::RecoveryOptions;
use crate::tls::TlsOptions;
use crate::token::{Token, TokenSource};
use crate::uri::AmqpUri;

/// How long each call waits for the broker.
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
    uris: Vec<String>,
    sasl: SaslMechanism,
    tls: Option<TlsOptions>,
    container_id: Option<String>,
    recovery: RecoveryOptions,
    idle_timeout: Duration,
    token_source: Option<TokenSource>,
    metrics: Option<Arc<dyn Metrics>>,
}

impl ConnectionBuilder {
    /// Another broker of the same cluster: opening tries the addresses in
    /// order, and recovery goes round them.
    pub fn address(mut self, uri: &str) -> Self {
        self.uris.push(uri.to_string());
        self
    }

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

    /// How a lost connection recovers (on by default: pauses from 100 ms
    /// doubling to 5 s, for ever).
    pub fn recovery(mut self, recovery: RecoveryOptions) -> Self {
        self.recovery = recovery;
        self
    }

    /// The idle time-out we ask for (60 s by default; zero: none): the
    /// broker sends something at least every half of it, and a broker
    /// silent for all of it is taken for lost.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Log in with OAuth 2 access tokens from `source` (as the password,
    /// SASL PLAIN): the first at open, each next one fetched at 80 % of
    /// the last one's life and handed to the broker with `PUT
    /// /auth/tokens`, so the connection outlives its first token;
    /// recoveries log in with the latest. A failed refresh is reported
    /// ([`Event::TokenRefreshFailed`]) and tried again a second later.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use warren_client::amqp::{Connection, Token};
    ///
    /// # async fn fetch_from_the_identity_provider() -> Result<String, String> { Ok(String::new()) }
    /// # async fn run() -> Result<(), warren_client::amqp::Error> {
    /// let conn = Connection::builder("amqp://client@broker:5672/%2f")
    ///     .token_source(|| async {
    ///         let token = fetch_from_the_identity_provider().await?;
    ///         Ok(Token::new(token, Duration::from_secs(300)))
    ///     })
    ///     .open()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn token_source<F, Fut>(mut self, source: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Token, String>> + Send + 'static,
    {
        self.token_source = Some(TokenSource::new(source));
        self
    }

    /// Tell `metrics` what the connection, its publishers and its
    /// consumers do (see [`Metrics`]).
    pub fn metrics<M: Metrics>(mut self, metrics: Arc<M>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Connect (to the first address that answers), authenticate, open
    /// the connection and its session.
    pub async fn open(self) -> Result<Connection, Error> {
        let mut uris = self
            .uris
            .iter()
            .map(|u| AmqpUri::parse(u).map_err(|e| Error::Uri(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let token = match &self.token_source {
            Some(source) => Some(source.fetch().await.map_err(Error::TokenSource)?),
            None => None,
        };
        if let Some(t) = &token {
            for uri in &mut uris {
                uri.password = t.secret.clone();
            }
        }
        let settings = Settings {
            uris,
            sasl: self.sasl,
            tls: self.tls,
            container_id: self
                .container_id
                .unwrap_or_else(|| format!("warren-client-{}", std::process::id())),
            recovery: self.recovery,
            idle_timeout: self.idle_timeout,
            metrics: self.metrics,
        };
        let mut last = None;
        for uri in &settings.uris {
            match super::wire::connect(&settings, uri).await {
                Ok(opened) => {
                    let session = Session::new(
                        opened.remote_incoming_window,
                        opened.next_incoming_id,
                        opened.max_frame,
                    )
                    .with_metrics(settings.metrics.clone());
                    let shared = Arc::new(Shared::new(settings, session));
                    let wire = super::wire::start(&shared, opened);
                    tokio::spawn(super::recovery::supervise(shared.clone(), wire));
                    if let (Some(source), Some(t)) = (self.token_source.clone(), &token) {
                        *shared.secret.lock() = Some(t.secret.clone());
                        let weak = Arc::downgrade(&shared);
                        tokio::spawn(super::refresh::keep_fresh(weak, source, t.expires_in));
                    }
                    return Ok(Connection { shared });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Uri("no address".into())))
    }
}

/// What a builder set, kept for the recoveries.
pub(crate) struct Settings {
    pub(crate) uris: Vec<AmqpUri>,
    pub(crate) sasl: SaslMechanism,
    pub(crate) tls: Option<TlsOptions>,
    pub(crate) container_id: String,
    pub(crate) recovery: RecoveryOptions,
    pub(crate) idle_timeout: Duration,
    pub(crate) metrics: Option<Arc<dyn Metrics>>,
}

/// A connection to a broker speaking AMQP 1.0 (RabbitMQ 4, Warren),
/// with one session its publishers, consumers and management share.
/// Cloning it shares it. When the socket is lost it connects again by
/// itself ([`ConnectionBuilder::recovery`]): the queues, exchanges and
/// bindings its managements declared are declared again, then its
/// publishers and consumers attached again; [`Connection::events`] tells.
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
    /// A run of accepts began: the writer writes it within
    /// [`ACCEPT_DELAY`](super::session::ACCEPT_DELAY) unless woken first.
    pub(crate) accepts_begun: Notify,
    /// The session's state changed in a way a waiting call may care
    /// about (credit, window, an end, a lost wire).
    pub(crate) changed: Notify,
    pub(crate) settings: Settings,
    pub(crate) topology: Mutex<Topology>,
    events: broadcast::Sender<Event>,
    /// The session's epoch, read without its lock.
    epoch: AtomicU64,
    /// The application closed the connection: no recovery.
    closing: AtomicBool,
    /// The latest OAuth 2 token, which recoveries log in with.
    pub(crate) secret: Mutex<Option<String>>,
    /// Stops the wire's tasks and recovery for good.
    pub(crate) stop: watch::Sender<bool>,
    /// A wire's reader ended (after the broker's close, or not).
    pub(crate) closed: Notify,
    names: AtomicU64,
    /// Frames that should go at once (credit, a disposition that could
    /// not wait) are queued and the writer has not taken them yet. A
    /// consumer taking deliveries one after another yields while it is
    /// set: on a runtime of one thread the writer otherwise waits for the
    /// whole burst, and the broker for its credit.
    pub(crate) urgent: AtomicBool,
}

impl Shared {
    fn new(settings: Settings, session: Session) -> Shared {
        Shared {
            session: Mutex::new(session),
            queued: Notify::new(),
            accepts_begun: Notify::new(),
            changed: Notify::new(),
            settings,
            topology: Mutex::default(),
            events: broadcast::channel(256).0,
            epoch: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            secret: Mutex::new(None),
            stop: watch::channel(false).0,
            closed: Notify::new(),
            names: Default::default(),
            urgent: AtomicBool::new(false),
        }
    }

    /// Change the session (queueing frames), then wake the writer.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        let r = {
            let mut s = self.session.lock();
            f(&mut s)
        };
        self.queued.notify_one();
        r
    }

    /// Wake the writer as a settle or a credit top-up asks.
    pub(crate) fn wake(&self, wake: Wake) {
        match wake {
            Wake::Now => {
                self.urgent.store(true, Ordering::Relaxed);
                self.queued.notify_one()
            }
            Wake::Soon => self.accepts_begun.notify_one(),
            Wake::No => {}
        }
    }

    /// Wait until `ready` says yes (Ok(Some)) or fails, looking again
    /// whenever the session changes.
    pub(crate) async fn wait_for<T>(
        &self,
        mut ready: impl FnMut(&mut Session) -> Result<Option<T>, Error>,
    ) -> Result<T, Error> {
        // Ready at once, the usual case: no waiter registered.
        if let Some(t) = ready(&mut self.session.lock())? {
            self.queued.notify_one();
            return Ok(t);
        }
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

    /// Send `message` on sender link `handle` once its credit and the
    /// session's window allow, encoded under the session's lock into a
    /// buffer the session keeps (no allocation per message); `waiter`
    /// hears its outcome (None: sent settled).
    pub(crate) async fn transfer_message(
        &self,
        handle: u32,
        message: &super::Message,
        waiter: Option<super::session::Waiter>,
    ) -> Result<(), Error> {
        let mut waiter = Some(waiter);
        self.wait_for(|s| {
            let mut encoded = std::mem::take(&mut s.encoded);
            encoded.clear();
            message.encode(&mut encoded);
            let sent = s.can_send(handle, encoded.len()).map(|ok| {
                if ok {
                    s.transfer(handle, &encoded, waiter.take().flatten());
                }
                ok.then_some(())
            });
            s.encoded = encoded;
            sent
        })
        .await
    }

    /// A link name unique on this connection.
    pub(crate) fn link_name(&self, what: &str) -> String {
        let n = self.names.fetch_add(1, Ordering::Relaxed);
        format!("{what}-{n}")
    }

    /// Which wire the connection is on (how many were lost before it).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The wire was lost: the session forgets it (see [`Session::lost`]).
    pub(crate) fn lost(&self, why: &Error) {
        self.with(|s| {
            s.lost(why);
            self.epoch.store(s.epoch, Ordering::Release);
        });
        self.changed.notify_waiters();
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn emit(&self, e: Event) {
        // Nobody listening is fine.
        let _ = self.events.send(e);
    }

    /// The connection is over: every call and waiter is told `why`.
    pub(crate) fn end(&self, why: Error) {
        self.session.lock().end(why);
        let _ = self.stop.send(true);
        self.closed.notify_waiters();
        self.changed.notify_waiters();
        self.queued.notify_one();
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
            uris: vec![uri.to_string()],
            sasl: SaslMechanism::default(),
            tls: None,
            container_id: None,
            recovery: RecoveryOptions::default(),
            idle_timeout: Duration::from_secs(60),
            token_source: None,
            metrics: None,
        }
    }

    /// A management client on this connection (its own link pair).
    pub async fn management(&self) -> Result<super::Management, Error> {
        super::Management::open(self.shared.clone(), false).await
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
            properties: Vec::new(),
            application_properties: Vec::new(),
            sql: None,
            on_active_changed: None,
        }
    }

    /// A client sending requests to queue `request_queue` and waiting
    /// for replies by direct reply-to where the broker serves it, else on
    /// an exclusive queue of its own.
    pub async fn rpc_client(&self, request_queue: &str) -> Result<super::RpcClient, Error> {
        self.rpc_client_builder(request_queue).build().await
    }

    /// An RPC client with options: where replies come, the time-out.
    pub fn rpc_client_builder(&self, request_queue: &str) -> super::RpcClientBuilder {
        super::RpcClientBuilder {
            conn: self.clone(),
            request_queue: request_queue.to_string(),
            reply_to: super::ReplyTo::default(),
            timeout: super::rpc::DEFAULT_RPC_TIMEOUT,
        }
    }

    /// A server answering the requests in queue `request_queue` with
    /// `handler` (an `Err` discards the request: dead-lettered if the
    /// queue says where).
    pub async fn rpc_server<F, Fut>(&self, request_queue: &str, handler: F) -> Result<super::RpcServer, Error>
    where
        F: Fn(super::Message) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<super::Message, String>> + Send + 'static,
    {
        super::RpcServer::start(self, request_queue, handler).await
    }

    /// What happens to the connection from now on: losses, recoveries.
    pub fn events(&self) -> Events {
        Events {
            rx: self.shared.events.subscribe(),
        }
    }

    /// Whether the connection is still open (or recovering).
    pub fn is_open(&self) -> bool {
        self.shared.session.lock().ended.is_none()
    }

    /// Close the connection (waiting briefly for the broker's close);
    /// publishers and consumers on it end.
    pub async fn close(&self) {
        self.shared.closing.store(true, Ordering::Release);
        let closed = self.shared.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        let on_wire = self.shared.with(|s| {
            if s.ended.is_some() || s.recovering {
                return false;
            }
            s.send(&Performative::Close(Close { error: None }), &[]);
            true
        });
        if on_wire {
            let _ = tokio::time::timeout(Duration::from_secs(2), closed).await;
        }
        self.shared
            .end(Error::ConnectionClosed("closed by the application".into()));
    }
}
