//! The environment: where the broker is and how to log in, the
//! connection its producers and consumers share, and stream management
//! (create, delete).

use std::sync::Arc;
use std::time::Duration;

use warren_stream::command::Command;

use super::connection::Connection;
use super::consumer::ConsumerBuilder;
use super::error::Error;
use super::producer::ProducerBuilder;
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

    fn arguments(&self) -> Vec<(String, String)> {
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
    uri: AmqpUri,
    tls: Option<TlsOptions>,
    name: String,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

/// An environment's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
pub struct EnvironmentBuilder {
    uri: String,
    tls: Option<TlsOptions>,
    name: String,
}

impl EnvironmentBuilder {
    /// The broker's URI (`rabbitmq-stream://` or `rabbitmq-stream+tls://`).
    pub fn uri(mut self, uri: impl Into<String>) -> EnvironmentBuilder {
        self.uri = uri.into();
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

    /// Connect (the connection is opened now, so a wrong address or
    /// password fails here).
    pub async fn build(self) -> Result<Environment, Error> {
        let uri = AmqpUri::parse_stream(&self.uri)?;
        let env = Environment {
            inner: Arc::new(Inner {
                uri,
                tls: self.tls,
                name: self.name,
                conn: tokio::sync::Mutex::new(None),
            }),
        };
        env.connection().await?;
        Ok(env)
    }
}

impl Environment {
    /// Settings for an environment.
    pub fn builder() -> EnvironmentBuilder {
        EnvironmentBuilder {
            uri: "rabbitmq-stream://guest:guest@localhost:5552/%2f".into(),
            tls: None,
            name: "warren-client".into(),
        }
    }

    /// Connect to `uri` with the default settings.
    pub async fn connect(uri: &str) -> Result<Environment, Error> {
        Environment::builder().uri(uri).build().await
    }

    /// The connection in use, opened again if it has ended.
    pub(crate) async fn connection(&self) -> Result<Arc<Connection>, Error> {
        let mut c = self.inner.conn.lock().await;
        if let Some(conn) = c.as_ref().filter(|c| !c.is_ended()) {
            return Ok(conn.clone());
        }
        let conn = Connection::open(&self.inner.uri, &self.inner.name, self.inner.tls.as_ref()).await?;
        *c = Some(conn.clone());
        Ok(conn)
    }

    /// Create a stream.
    pub async fn create_stream(&self, name: &str, options: &StreamOptions) -> Result<(), Error> {
        let conn = self.connection().await?;
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
        let conn = self.connection().await?;
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
        let conn = self.connection().await?;
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

    /// A producer's settings.
    pub fn producer(&self) -> ProducerBuilder {
        ProducerBuilder::new(self.clone())
    }

    /// A consumer's settings.
    pub fn consumer(&self) -> ConsumerBuilder {
        ConsumerBuilder::new(self.clone())
    }

    /// What the broker said of itself when the connection opened
    /// (`advertised_host`, `advertised_port`, ...).
    pub async fn server_properties(&self) -> Result<Vec<(String, String)>, Error> {
        Ok(self.connection().await?.server_properties.clone())
    }

    /// Close the connection: its producers' unconfirmed publishes and its
    /// consumers end with [`Error::Closed`].
    pub async fn close(&self) {
        let conn = self.inner.conn.lock().await.take();
        if let Some(c) = conn {
            c.close().await;
        }
    }
}
