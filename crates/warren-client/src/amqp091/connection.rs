//! The application's handle on a connection: opening one (from a URI,
//! or a builder with more addresses and recovery options), its channels,
//! its events, and closing it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{broadcast, oneshot, watch};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::Method;

use super::channel::Channel;
use super::channel_state::ChannelState;
use super::core::{Core, Link};
use super::error::Error;
use super::events::{Events, Signals};
use super::handshake;
use super::io;
use super::options::RecoveryOptions;
use super::recovery::supervise;
use super::refresh::keep_fresh;
use super::settings::Settings;
use crate::tls::TlsOptions;
use crate::token::{Token, TokenSource};
use crate::uri::AmqpUri;

/// How long a close waits for the broker's close-ok.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Events kept for a reader that falls behind.
const EVENTS_KEPT: usize = 256;

/// An AMQP 0-9-1 connection. It recovers by itself when the broker goes
/// away ([`RecoveryOptions`]): its channels, consumers and what was
/// declared through it come back. [`Connection::close`] ends it with the
/// broker's agreement; dropping it ends it too (a connection.close is
/// sent, not waited for), and its channels with it.
pub struct Connection {
    core: Arc<Core>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

/// Options beyond one URI: more addresses to try (the nodes of a
/// cluster) and how to recover.
///
/// ```no_run
/// use warren_client::amqp091::{Connection, RecoveryOptions};
///
/// # async fn run() -> Result<(), warren_client::amqp091::Error> {
/// let conn = Connection::builder("amqp://guest:guest@node1:5672/%2f")
///     .address("amqp://guest:guest@node2:5672/%2f")
///     .recovery(RecoveryOptions::default().max_attempts(20))
///     .open()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ConnectionBuilder {
    uris: Vec<String>,
    settings: Settings,
}

impl ConnectionBuilder {
    /// Another address to connect to, after those before it.
    pub fn address(mut self, uri: &str) -> Self {
        self.uris.push(uri.to_string());
        self
    }

    /// A name for the connection, which the broker's management UI and
    /// API show (RabbitMQ's `user_provided_name`).
    pub fn name(mut self, name: &str) -> Self {
        self.settings.name = Some(name.to_string());
        self
    }

    /// How many deliveries [`super::Consumer::run`] hands to its handler
    /// at once on this connection's consumers (1, in order, by default).
    pub fn consumer_concurrency(mut self, n: usize) -> Self {
        self.settings.consumer_concurrency = n.max(1);
        self
    }

    /// TLS with these options (certificate authorities, a client
    /// certificate, or a rustls configuration of the application's),
    /// whatever the URIs say; without it an `amqps://` URI uses its own
    /// `cacertfile`, `certfile` and `keyfile` parameters.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.settings.tls = Some(tls);
        self
    }

    /// How to recover (on by default).
    pub fn recovery(mut self, recovery: RecoveryOptions) -> Self {
        self.settings.recovery = recovery;
        self
    }

    /// Whether a publish made inside a [`TraceContext`](crate::trace::TraceContext) scope carries a
    /// child of it in its `traceparent` header (on by default; a message
    /// that has one already keeps it).
    pub fn trace_propagation(mut self, on: bool) -> Self {
        self.settings.trace_propagation = on;
        self
    }

    /// After each read, keep polling the socket for up to `budget` before
    /// the reader sleeps (off by default; plain TCP only, TLS ignores it).
    ///
    /// A sleeping thread takes time to wake when the broker's answer
    /// arrives: tens of microseconds on a virtual machine, a large share
    /// of a confirm's round trip when one or a few publishes are in
    /// flight, or of an RPC. Polling instead answers sooner, at the cost
    /// of up to `budget` of CPU per read; it yields between polls, so
    /// the connection's other tasks run meanwhile. Worth it for latency
    /// at low concurrency; at high throughput reads rarely find the
    /// socket empty and it changes little.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use warren_client::amqp091::Connection;
    ///
    /// # async fn run() -> Result<(), warren_client::amqp091::Error> {
    /// let conn = Connection::builder("amqp://guest:guest@localhost:5672/%2f")
    ///     .busy_poll(Duration::from_micros(100))
    ///     .open()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn busy_poll(mut self, budget: Duration) -> Self {
        self.settings.busy_poll = (!budget.is_zero()).then_some(budget);
        self
    }

    /// Log in with OAuth 2 access tokens from `source`, and keep the
    /// connection's token fresh: the next one is fetched at 80 % of the
    /// current one's life and handed to the broker with
    /// connection.update-secret; recoveries log in with the latest. A
    /// failed fetch or refusal is an [`Event::TokenRefreshFailed`] and
    /// is tried again a second later. The URIs' passwords are not used.
    ///
    /// [`Event::TokenRefreshFailed`]: super::Event::TokenRefreshFailed
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use warren_client::amqp091::{Connection, Token};
    ///
    /// # async fn fetch_from_the_identity_provider() -> Result<String, String> { Ok(String::new()) }
    /// # async fn run() -> Result<(), warren_client::amqp091::Error> {
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
        Fut: Future<Output = Result<Token, String>> + Send + 'static,
    {
        self.settings.token_source = Some(TokenSource::new(source));
        self
    }

    /// Connect to the first address that answers, log in and open the
    /// virtual host.
    pub async fn open(self) -> Result<Connection, Error> {
        let mut uris = self
            .uris
            .iter()
            .map(|u| AmqpUri::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let settings = self.settings;
        let token = match &settings.token_source {
            Some(source) => Some(source.fetch().await.map_err(Error::TokenSource)?),
            None => None,
        };
        if let Some(t) = &token {
            for uri in &mut uris {
                uri.password = t.secret.clone();
            }
        }
        let mut last = None;
        for uri in &uris {
            match handshake::open(uri, settings.name.as_deref(), settings.tls.as_ref()).await {
                Ok(opened) => {
                    let signals = Arc::new(Signals {
                        blocked: watch::Sender::new(false),
                        events: broadcast::Sender::new(EVENTS_KEPT),
                    });
                    let wire = io::start(opened, signals, settings.busy_poll);
                    let source = settings.token_source.clone();
                    let secret = token.as_ref().map(|t| t.secret.clone());
                    let core = Core::new(uris.clone(), settings, secret, wire.clone());
                    tokio::spawn(supervise(core.clone(), wire));
                    if let (Some(source), Some(t)) = (source, token) {
                        tokio::spawn(keep_fresh(Arc::downgrade(&core), source, t.expires_in));
                    }
                    return Ok(Connection { core });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("no address to connect to".into())))
    }
}

impl Connection {
    /// Connect to `uri` (`amqp://user:pass@host:port/vhost`), log in with
    /// PLAIN and open the virtual host, with recovery on.
    pub async fn open(uri: &str) -> Result<Connection, Error> {
        Connection::builder(uri).open().await
    }

    /// A connection with more addresses or other recovery options.
    pub fn builder(uri: &str) -> ConnectionBuilder {
        ConnectionBuilder {
            uris: vec![uri.to_string()],
            settings: Settings::default(),
        }
    }

    /// Open a channel (waiting out a recovery).
    pub async fn channel(&self) -> Result<Channel, Error> {
        loop {
            let wire = self.core.wire().await?;
            let state = {
                let mut chans = self.core.channels.lock();
                let id = (1..=wire.channel_max)
                    .find(|id| !chans.contains_key(id))
                    .ok_or_else(|| Error::Protocol("every channel number is in use".into()))?;
                let state = Arc::new(ChannelState::new(id));
                state.republish.store(
                    self.core.settings.recovery.enabled && self.core.settings.recovery.republish_unconfirmed,
                    std::sync::atomic::Ordering::Relaxed,
                );
                chans.insert(id, state.clone());
                state
            };
            let ch = Channel::new(state.clone(), self.core.clone());
            let opened = match wire.register(state.clone()) {
                true => ch.open(&wire).await,
                false => Err(wire.ended_error()),
            };
            match opened {
                Ok(()) => return Ok(ch),
                Err(e) => {
                    // Ended first, so a recovery under way skips it.
                    state.closed(e.clone());
                    self.core.channels.lock().remove(&state.id);
                    wire.unregister(state.id);
                    // Lost on the way: try again on the next wire.
                    if wire.is_ended() && self.core.closed().is_none() && self.core.settings.recovery.enabled
                    {
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// What happens to this connection from now on: losses, recoveries,
    /// blocked publishing.
    pub fn events(&self) -> Events {
        Events {
            rx: self.core.signals.events.subscribe(),
        }
    }

    /// Close the connection (reply code 200) and wait for the broker's
    /// answer. Its channels end with [`Error::ClosedByClient`].
    pub async fn close(&self) -> Result<(), Error> {
        let wire = match &*self.core.link.borrow() {
            Link::Open(w) => Some(w.clone()),
            Link::Recovering => None,
            Link::Closed(e) => return Err(e.clone()),
        };
        self.core.close_for_good(Error::ClosedByClient);
        if let Some(wire) = wire {
            let (tx, rx) = oneshot::channel();
            *wire.close_ok.lock() = Some(tx);
            if wire.send(close_frame("closed by the application")).await.is_ok() {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, rx).await;
            }
            wire.end(Error::ClosedByClient);
        }
        Ok(())
    }

    /// connection.update-secret: hand the broker a fresh secret (an OAuth 2
    /// access token about to replace one that expires) without
    /// reconnecting. Once the broker accepts it, recoveries log in with
    /// it too. A refusal is the broker closing the connection (530).
    ///
    /// ```no_run
    /// # async fn refresh(conn: &warren_client::amqp091::Connection, token: &str) -> Result<(), warren_client::amqp091::Error> {
    /// conn.update_secret(token, "token refreshed").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_secret(&self, secret: &str, reason: &str) -> Result<(), Error> {
        self.core.update_secret(secret, reason).await
    }

    /// Whether the connection has ended for good (not while recovering).
    pub fn is_closed(&self) -> bool {
        self.core.closed().is_some()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let wire = match &*self.core.link.borrow() {
            Link::Open(w) => Some(w.clone()),
            Link::Recovering => None,
            Link::Closed(_) => return,
        };
        self.core.close_for_good(Error::ClosedByClient);
        if let Some(wire) = wire {
            let _ = wire.try_send(close_frame("connection dropped by the application"));
            wire.end(Error::ClosedByClient);
        }
    }
}

/// A connection.close with reply code 200.
fn close_frame(text: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let close = ConnectionClose {
        reply_code: 200,
        reply_text: text.into(),
        class_id: 0,
        method_id: 0,
    };
    write_method(&mut buf, 0, &Method::ConnectionClose(close));
    buf.freeze()
}
