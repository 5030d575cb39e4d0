//! The Warren broker as a library: configuration, the listener and the
//! protocol front ends, wired to a [`warren_core::Broker`]. `main.rs` is a
//! thin shell over [`start`]; tests start brokers in-process the same way.

pub mod amqp091;
pub mod amqp10;
pub mod config;
pub mod connections;
pub mod definitions;
pub mod disk_monitor;
pub mod http;
pub mod listener;
pub mod reply_to;
pub mod sniff;
pub mod stats_sampler;
pub mod stream;
pub mod timers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use warren_core::{Broker, BrokerConfig, User};
use warren_store::Storage;

pub use config::{Cli, Config, LogFormat};

/// What every connection task shares.
pub struct ServerCtx {
    pub broker: Arc<Broker>,
    pub config: Arc<Config>,
    pub timers: Arc<timers::Timers>,
    pub replies: reply_to::Registry,
    /// Single-active-consumer groups of stream subscriptions.
    pub stream_sac: stream::sac::Coordinator,
    /// Appends publishers' chunks off their connections' tasks.
    pub stream_writer: stream::writer::Writer,
    /// Open client connections, every protocol.
    pub connections: connections::Registry,
    /// Where definitions are kept (imports batch their saves through it).
    pub definitions: Arc<definitions::Store>,
    /// The addresses the listeners are bound to (a configured port 0 is
    /// the one the OS chose).
    pub listeners: Listeners,
}

/// Where each listener is bound.
#[derive(Debug, Clone, Copy)]
pub struct Listeners {
    pub amqp: SocketAddr,
    pub stream: SocketAddr,
    pub http: SocketAddr,
    pub prometheus: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot use data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error("cannot open the message store: {0}")]
    Store(#[from] warren_store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running broker: its AMQP and stream addresses, and how to stop it.
pub struct Running {
    pub amqp_addr: SocketAddr,
    pub stream_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub prometheus_addr: SocketAddr,
    pub ctx: Arc<ServerCtx>,
    shutdown: watch::Sender<bool>,
    listener: tokio::task::JoinHandle<()>,
    stream_listener: tokio::task::JoinHandle<()>,
    http_listener: tokio::task::JoinHandle<()>,
    prometheus_listener: tokio::task::JoinHandle<()>,
    storage: Arc<Storage>,
}

impl Running {
    /// Close every connection with 320 CONNECTION_FORCED and stop listening.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.listener.await;
        let _ = self.stream_listener.await;
        let _ = self.http_listener.await;
        let _ = self.prometheus_listener.await;
        // Acks and pages still in buffers go to disk, and fsync covers them.
        let storage = self.storage.clone();
        let _ = tokio::task::spawn_blocking(move || storage.shutdown()).await;
    }
}

/// Largest TCP segment the broker sends. Loopback's MSS is ~64 KiB; a
/// client with a small fixed receive buffer (the Java client asks for
/// 128 KiB) then gets segments whose memory cost outruns its window, the
/// kernel drops them, and the retransmission waits out a 200 ms timeout.
/// 16 KiB segments stay inside such windows; real networks' MSS is smaller
/// anyway.
const MAX_SEGMENT: u32 = 16 << 10;

/// A listening socket (SO_REUSEADDR, as RabbitMQ's listeners set it, and
/// the MSS clamp above, inherited by accepted connections).
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    let _ = s.set_mss(MAX_SEGMENT);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    tokio::net::TcpListener::from_std(s.into())
}

/// A plain listener for an HTTP endpoint, and the address it got.
async fn listen_http(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Listen { addr, source };
    let l = tokio::net::TcpListener::bind(addr).await.map_err(err)?;
    let got = l.local_addr().map_err(err)?;
    Ok((l, got))
}

/// Build the broker from `config` (restoring stored definitions), bind the
/// listener and start accepting connections.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let data_err = |source| StartError::DataDir {
        path: config.data_dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&config.data_dir).map_err(data_err)?;
    let (store, stored) = definitions::Store::open(&config.data_dir).map_err(data_err)?;
    let store = Arc::new(store);
    let storage = Storage::open(&config.data_dir.join("queues"))?;

    let broker = Broker::new(
        BrokerConfig {
            loopback_users: config.loopback_users.clone(),
            memory_high_watermark: config.memory_limit(),
            disk_free_limit: config.disk_free_limit_bytes,
            storage: Some(storage.clone()),
            streams_dir: Some(config.data_dir.join("streams")),
            stream_codec: Some(amqp10::convert::STREAM_CODEC),
            stream_cache_bytes: config.stream_cache_bytes,
        },
        store.clone(),
    );
    // Restoring records every object again; they are written once, as the
    // new snapshot below.
    let batch = store.batch();
    match &stored {
        Some(d) => definitions::restore(&broker, d),
        None => {
            broker.add_vhost(&config.default_vhost);
            broker.put_user(User {
                name: config.default_user.clone(),
                password_hash: User::hash_password(&config.default_pass),
                tags: vec!["administrator".into()],
                permissions: [(config.default_vhost.clone(), warren_core::Permission::full())].into(),
                topic_permissions: Default::default(),
            });
        }
    }
    // Stores of queues that are gone (non-durable ones, deleted ones).
    storage.discard_unclaimed();
    disk_monitor::check(&broker, &config.data_dir);
    store.compact().map_err(data_err)?;
    drop(batch);

    let timers = timers::Timers::new();
    for vh in broker.vhosts() {
        for q in vh.queues() {
            if q.needs_timer() {
                timers.arm(&vh, &q);
            }
        }
    }
    let tcp = listen(config.amqp_listen).map_err(|source| StartError::Listen {
        addr: config.amqp_listen,
        source,
    })?;
    let amqp_addr = tcp.local_addr().map_err(|source| StartError::Listen {
        addr: config.amqp_listen,
        source,
    })?;
    tracing::info!("AMQP 0-9-1 and 1.0 listener on {amqp_addr}");
    let stcp = listen(config.stream_listen).map_err(|source| StartError::Listen {
        addr: config.stream_listen,
        source,
    })?;
    let stream_addr = stcp.local_addr().map_err(|source| StartError::Listen {
        addr: config.stream_listen,
        source,
    })?;
    tracing::info!("stream protocol listener on {stream_addr}");
    let (http, http_addr) = listen_http(config.http_listen).await?;
    tracing::info!("management HTTP API on {http_addr}");
    let (prom, prometheus_addr) = listen_http(config.prometheus_listen).await?;
    tracing::info!("Prometheus metrics on {prometheus_addr}");
    let ctx = Arc::new(ServerCtx {
        broker,
        config: Arc::new(config.clone()),
        timers,
        replies: reply_to::Registry::default(),
        stream_sac: stream::sac::Coordinator::default(),
        stream_writer: stream::writer::Writer::start(),
        connections: connections::Registry::default(),
        definitions: store.clone(),
        listeners: Listeners {
            amqp: amqp_addr,
            stream: stream_addr,
            http: http_addr,
            prometheus: prometheus_addr,
        },
    });
    let (tx, rx) = watch::channel(false);
    disk_monitor::spawn(ctx.broker.clone(), config.data_dir.clone(), rx.clone());
    stream::upkeep::spawn(ctx.broker.clone(), rx.clone());
    stats_sampler::spawn(
        ctx.broker.clone(),
        ctx.connections.clone(),
        Duration::from_millis(config.collect_statistics_interval),
        rx.clone(),
    );
    let http_listener = tokio::spawn(http::serve(http, ctx.clone(), rx.clone()));
    let prometheus_listener = tokio::spawn(http::metrics::serve(prom, ctx.clone(), rx.clone()));
    let listener = tokio::spawn(listener::accept_loop(
        tcp,
        ctx.clone(),
        rx.clone(),
        listener::Port::Amqp,
    ));
    let stream_listener = tokio::spawn(listener::accept_loop(
        stcp,
        ctx.clone(),
        rx,
        listener::Port::Stream,
    ));
    Ok(Running {
        amqp_addr,
        stream_addr,
        http_addr,
        http_listener,
        prometheus_addr,
        prometheus_listener,
        stream_listener,
        ctx,
        shutdown: tx,
        listener,
        storage,
    })
}
