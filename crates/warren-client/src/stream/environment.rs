//! The environment: where the brokers are and how to log in; a locator
//! connection for stream management and metadata; and a pool of
//! connections by node, which producers (on a stream's leader) and
//! consumers (on a replica, when there is one) share, up to 256 of each
//! per connection. Behind a load balancer, connections are opened to
//! its address until one lands on the node wanted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::seq::SliceRandom;

use warren_stream::command::Command;

use super::connection::Connection;
use super::error::Error;
use super::metadata::{Endpoint, Placement, Role};
use super::metrics::Metrics;
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// How a stream is created (RabbitMQ's `x-` arguments without the `x-`).
///
/// ```
/// use std::time::Duration;
/// use warren_client::stream::StreamOptions;
///
/// let o = StreamOptions::default().max_length_bytes(5_000_000_000).max_age(Duration::from_secs(86_400));
/// assert_eq!(o.max_length_bytes, Some(5_000_000_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Retention: the most bytes kept (`max-length-bytes`).
    pub max_length_bytes: Option<u64>,
    /// Retention: the oldest segment kept (`max-age`, whole seconds).
    pub max_age: Option<Duration>,
    /// Bytes per segment file (`stream-max-segment-size-bytes`).
    pub max_segment_size_bytes: Option<u64>,
    /// Members of a replicated stream (`initial-cluster-size`).
    pub initial_cluster_size: Option<u32>,
}

impl StreamOptions {
    /// With `max-length-bytes`.
    pub fn max_length_bytes(mut self, n: u64) -> StreamOptions {
        self.max_length_bytes = Some(n);
        self
    }

    /// With `max-age`.
    pub fn max_age(mut self, age: Duration) -> StreamOptions {
        self.max_age = Some(age);
        self
    }

    /// With `stream-max-segment-size-bytes`.
    pub fn max_segment_size_bytes(mut self, n: u64) -> StreamOptions {
        self.max_segment_size_bytes = Some(n);
        self
    }

    /// With `initial-cluster-size`.
    pub fn initial_cluster_size(mut self, n: u32) -> StreamOptions {
        self.initial_cluster_size = Some(n);
        self
    }

    pub(crate) fn arguments(&self) -> Vec<(String, String)> {
        let mut a = Vec::new();
        if let Some(n) = self.max_length_bytes {
            a.push(("max-length-bytes".into(), n.to_string()));
        }
        if let Some(d) = self.max_age {
            a.push(("max-age".into(), format!("{}s", d.as_secs())));
        }
        if let Some(n) = self.max_segment_size_bytes {
            a.push(("stream-max-segment-size-bytes".into(), n.to_string()));
        }
        if let Some(n) = self.initial_cluster_size {
            a.push(("initial-cluster-size".into(), n.to_string()));
        }
        a
    }
}

/// A stream's statistics, as the broker names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStats {
    values: Vec<(String, i64)>,
}

impl StreamStats {
    /// The first offset the stream holds (None while it is empty).
    pub fn first_offset(&self) -> Option<u64> {
        self.offset("first_chunk_id")
    }

    /// The id (first offset) of the last chunk a majority of its members
    /// hold: what consumers may read.
    pub fn committed_chunk_id(&self) -> Option<u64> {
        self.offset("committed_chunk_id")
    }

    /// The statistic `name` (-1 stands for none).
    pub fn get(&self, name: &str) -> Option<i64> {
        self.values.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// Every statistic, by name.
    pub fn all(&self) -> &[(String, i64)] {
        &self.values
    }

    fn offset(&self, name: &str) -> Option<u64> {
        self.get(name).and_then(|v| u64::try_from(v).ok())
    }
}

/// Where the broker is, and the connection its producers and consumers
/// share (opened again when it has ended). Cheap to clone.
///
/// ```no_run
/// use warren_client::stream::{Environment, StreamOptions};
///
/// # async fn run() -> Result<(), warren_client::stream::Error> {
/// let env = Environment::connect("rabbitmq-stream://guest:guest@localhost:5552/%2f").await?;
/// env.create_stream("orders", &StreamOptions::default()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Environment {
    inner: Arc<Inner>,
}

struct Inner {
    /// The addresses the locator tries, in turn.
    uris: Vec<AmqpUri>,
    tls: Option<TlsOptions>,
    name: String,
    load_balancer: bool,
    locator: tokio::sync::Mutex<Option<Arc<Connection>>>,
    pool: tokio::sync::Mutex<HashMap<Endpoint, Vec<Arc<Connection>>>>,
    metrics: Option<Arc<dyn Metrics>>,
}

/// Producers, or consumers, on one connection at most (the protocol's
/// one-byte ids).
const PER_CONNECTION: usize = 256;

/// Connections opened through a load balancer until one reaches the node
/// wanted.
const BALANCER_TRIES: usize = 10;

/// An environment's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
pub struct EnvironmentBuilder {
    uris: Vec<String>,
    tls: Option<TlsOptions>,
    name: String,
    load_balancer: bool,
    metrics: Option<Arc<dyn Metrics>>,
}

impl EnvironmentBuilder {
    /// Tell `metrics` what producers and consumers do (see [`Metrics`]).
    pub fn metrics<M: Metrics>(mut self, metrics: Arc<M>) -> EnvironmentBuilder {
        self.metrics = Some(metrics);
        self
    }

    /// The broker's URI (`rabbitmq-stream://` or `rabbitmq-stream+tls://`).
    pub fn uri(mut self, uri: impl Into<String>) -> EnvironmentBuilder {
        self.uris = vec![uri.into()];
        self
    }

    /// Several nodes' URIs: the locator connection goes to the first that
    /// answers, trying them in turn (from a random one), and again to the
    /// next when it is lost. Credentials, virtual host and TLS are taken
    /// from each.
    pub fn uris<I, S>(mut self, uris: I) -> EnvironmentBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.uris = uris.into_iter().map(Into::into).collect();
        self
    }

    /// TLS with these options (the URI's TLS parameters otherwise).
    pub fn tls(mut self, tls: TlsOptions) -> EnvironmentBuilder {
        self.tls = Some(tls);
        self
    }

    /// The name the broker's management shows for its connections.
    pub fn name(mut self, name: impl Into<String>) -> EnvironmentBuilder {
        self.name = name.into();
        self
    }

    /// The URI's address is a load balancer in front of the nodes (or a
    /// node whose advertised host this side cannot reach): every
    /// connection goes to it, and one is kept only once it has landed on
    /// the node a producer or consumer needs (the node's advertised host
    /// and port tell).
    pub fn load_balancer_mode(mut self, on: bool) -> EnvironmentBuilder {
        self.load_balancer = on;
        self
    }

    /// Connect (the locator connection is opened now, so a wrong address
    /// or password fails here).
    pub async fn build(self) -> Result<Environment, Error> {
        let uris = self
            .uris
            .iter()
            .map(|u| AmqpUri::parse_stream(u))
            .collect::<Result<Vec<_>, _>>()?;
        if uris.is_empty() {
            return Err(Error::Protocol("no URI to connect to".into()));
        }
        let env = Environment {
            inner: Arc::new(Inner {
                uris,
                tls: self.tls,
                name: self.name,
                load_balancer: self.load_balancer,
                locator: tokio::sync::Mutex::new(None),
                pool: tokio::sync::Mutex::new(HashMap::new()),
                metrics: self.metrics,
            }),
        };
        env.locator().await?;
        Ok(env)
    }
}

impl Environment {
    /// Settings for an environment.
    pub fn builder() -> EnvironmentBuilder {
        EnvironmentBuilder {
            uris: vec!["rabbitmq-stream://guest:guest@localhost:5552/%2f".into()],
            tls: None,
            name: "warren-client".into(),
            load_balancer: false,
            metrics: None,
        }
    }

    /// Connect to `uri` with the default settings.
    pub async fn connect(uri: &str) -> Result<Environment, Error> {
        Environment::builder().uri(uri).build().await
    }

    /// Where counts go, if anywhere.
    pub(crate) fn metrics(&self) -> Option<&Arc<dyn Metrics>> {
        self.inner.metrics.as_ref()
    }

    /// The locator connection (to the URI's address), opened again if it
    /// has ended.
    pub(crate) async fn locator(&self) -> Result<Arc<Connection>, Error> {
        let mut c = self.inner.locator.lock().await;
        if let Some(conn) = c.as_ref().filter(|c| !c.is_ended()) {
            return Ok(conn.clone());
        }
        let uris = &self.inner.uris;
        let first = rand::random::<usize>() % uris.len();
        let mut last = None;
        for k in 0..uris.len() {
            match self.open(&uris[(first + k) % uris.len()]).await {
                Ok(conn) => {
                    *c = Some(conn.clone());
                    return Ok(conn);
                }
                // A refusal (a wrong password, say) is the same on every
                // node: no use trying the others.
                Err(e @ Error::Refused { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one URI"))
    }

    async fn open(&self, uri: &AmqpUri) -> Result<Arc<Connection>, Error> {
        Connection::open(uri, &self.inner.name, self.inner.tls.as_ref()).await
    }

    /// Where `stream` lives.
    pub(crate) async fn placement(&self, stream: &str) -> Result<Placement, Error> {
        let mut m = self.locator().await?.metadata(&[stream]).await?;
        match m.remove(stream) {
            Some(Ok(p)) => Ok(p),
            Some(Err(code)) => Err(Error::Refused {
                operation: "metadata",
                code,
            }),
            None => Err(Error::Protocol(format!("no metadata for stream '{stream}'"))),
        }
    }

    /// A connection to `stream`'s member in `role`, with room for one more
    /// producer (or consumer): pooled by node.
    pub(crate) async fn connection_for(&self, stream: &str, role: Role) -> Result<Arc<Connection>, Error> {
        let p = self.placement(stream).await?;
        let wanted = match (role, p.replicas.choose(&mut rand::thread_rng())) {
            (Role::Replica, Some(r)) => Some(r.clone()),
            _ => p.leader.clone(),
        };
        let Some(wanted) = wanted else {
            return Err(Error::Refused {
                operation: "metadata",
                code: super::error::ResponseCode::StreamNotAvailable,
            });
        };
        let mut pool = self.inner.pool.lock().await;
        let conns = pool.entry(wanted.clone()).or_default();
        conns.retain(|c| !c.is_ended());
        if let Some(c) = conns.iter().find(|c| c.users(role) < PER_CONNECTION) {
            return Ok(c.clone());
        }
        let conn = match self.inner.load_balancer {
            false => {
                let mut uri = self.inner.uris[0].clone();
                uri.host = wanted.host.clone();
                uri.port = wanted.port;
                self.open(&uri).await?
            }
            true => self.open_through_balancer(&wanted).await?,
        };
        conns.push(conn.clone());
        Ok(conn)
    }

    /// Connections to the URI's address until one is on `wanted` (its
    /// advertised host and port); the last one if none is.
    async fn open_through_balancer(&self, wanted: &Endpoint) -> Result<Arc<Connection>, Error> {
        let mut last = None;
        for _ in 0..BALANCER_TRIES {
            let c = self.open(&self.inner.uris[0]).await?;
            if c.advertised().as_ref() == Some(wanted) {
                return Ok(c);
            }
            if let Some(old) = last.replace(c) {
                old.close().await;
            }
        }
        tracing::warn!(host = %wanted.host, port = wanted.port, "no connection through the load balancer reached the node wanted; using another");
        Ok(last.expect("at least one try"))
    }

    /// Create a stream.
    pub async fn create_stream(&self, name: &str, options: &StreamOptions) -> Result<(), Error> {
        let conn = self.locator().await?;
        let arguments = options.arguments();
        conn.call("create", |c| Command::Create {
            correlation_id: c,
            stream: name.to_string(),
            arguments,
        })
        .await
        .map(|_| ())
    }

    /// Delete a stream.
    pub async fn delete_stream(&self, name: &str) -> Result<(), Error> {
        let conn = self.locator().await?;
        conn.call("delete", |c| Command::Delete {
            correlation_id: c,
            stream: name.to_string(),
        })
        .await
        .map(|_| ())
    }

    /// The offset stored under `reference` for `stream` (None if none
    /// is).
    pub async fn query_offset(&self, reference: &str, stream: &str) -> Result<Option<u64>, Error> {
        let conn = self.locator().await?;
        let r = conn
            .call_any(|c| Command::QueryOffset {
                correlation_id: c,
                reference: reference.to_string(),
                stream: stream.to_string(),
            })
            .await?;
        match r.code {
            warren_stream::command::code::OK => Ok(Some(warren_stream::wire::Reader::new(r.rest).u64()?)),
            warren_stream::command::code::NO_OFFSET => Ok(None),
            c => Err(Error::Refused {
                operation: "query offset",
                code: super::error::ResponseCode::from_u16(c),
            }),
        }
    }

    /// A stream's statistics (RabbitMQ 3.11 and later, and Warren).
    ///
    /// ```no_run
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let stats = env.stream_stats("orders").await?;
    /// println!("first offset {:?}, committed chunk {:?}", stats.first_offset(), stats.committed_chunk_id());
    /// # Ok(()) }
    /// ```
    pub async fn stream_stats(&self, stream: &str) -> Result<StreamStats, Error> {
        let r = self
            .locator()
            .await?
            .request("stream stats", warren_stream::command::key::STREAM_STATS, |out| {
                warren_stream::wire::put_string(out, stream)
            })
            .await?;
        Ok(StreamStats {
            values: super::commands::stats(r.rest)?,
        })
    }

    /// Whether `stream` exists.
    pub async fn stream_exists(&self, stream: &str) -> Result<bool, Error> {
        match self.placement(stream).await {
            Ok(_) => Ok(true),
            Err(Error::Refused {
                code: super::error::ResponseCode::StreamDoesNotExist,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// What the broker said of itself when the locator connection opened
    /// (`advertised_host`, `advertised_port`, ...).
    pub async fn server_properties(&self) -> Result<Vec<(String, String)>, Error> {
        Ok(self.locator().await?.server_properties.clone())
    }

    /// Close every connection: producers' unconfirmed publishes and
    /// consumers end with [`Error::Closed`].
    pub async fn close(&self) {
        let locator = self.inner.locator.lock().await.take();
        let pooled: Vec<Arc<Connection>> = self
            .inner
            .pool
            .lock()
            .await
            .drain()
            .flat_map(|(_, v)| v)
            .collect();
        for c in locator.into_iter().chain(pooled) {
            c.close().await;
        }
    }
}
