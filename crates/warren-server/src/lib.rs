//! The Warren broker as a library: [`start`] builds a node from its
//! [`Config`], binds the listeners and wires the front ends
//! (`warren-front-*`) and the management API (`warren-management`) to a
//! [`warren_core::Broker`]. `main.rs` is a thin shell over it; tests start
//! brokers in-process the same way.

pub mod listener;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use warren_core::{Broker, BrokerConfig, User};
use warren_front_amqp10 as amqp10;
use warren_front_stream as stream;
use warren_node::{
    cluster, config, connections, definitions, disk_monitor, oauth2, quorum, reply_to, sasl, stats_sampler,
    stream_replicas, timers, tls, Listeners, ServerCtx,
};
use warren_store::Storage;

pub use warren_node::{Cli, Config, LogFormat};

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
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("OAuth 2: {0}")]
    OAuth2(#[from] oauth2::TokenError),
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("quorum queues: {0}")]
    Quorum(String),
}

/// A running broker: its listeners' addresses, and how to stop it.
pub struct Running {
    /// The plain AMQP listener (None when turned off).
    pub amqp_addr: Option<SocketAddr>,
    pub stream_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub prometheus_addr: Option<SocketAddr>,
    /// Every listener, the TLS ones included.
    pub listeners: Listeners,
    pub ctx: Arc<ServerCtx>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    storage: Arc<Storage>,
    quorum: Arc<quorum::Quorum>,
}

impl Running {
    /// Resolves when the node asks to be started again (it joined a
    /// cluster): the caller shuts it down and starts it anew.
    pub async fn restart_requested(&self) {
        self.ctx.restart.notified().await
    }

    /// Close every connection with 320 CONNECTION_FORCED and stop listening.
    pub async fn shutdown(self) {
        if let Some(c) = &self.ctx.cluster {
            c.leave().await;
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(m) = self.ctx.meta.clone() {
            let _ = tokio::task::spawn_blocking(move || m.stop()).await;
        }
        let q = self.quorum.clone();
        let _ = tokio::task::spawn_blocking(move || q.stop()).await;
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

/// Bind a configured listener (None when turned off), with the address
/// it got.
fn bind(
    what: &str,
    at: config::Listen,
    clamp: bool,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, StartError> {
    let Some(addr) = at.0 else { return Ok(None) };
    let err = |source| StartError::Listen { addr, source };
    let l = if clamp {
        listen(addr).map_err(err)?
    } else {
        let std = std::net::TcpListener::bind(addr).map_err(err)?;
        std.set_nonblocking(true).map_err(err)?;
        tokio::net::TcpListener::from_std(std).map_err(err)?
    };
    let got = l.local_addr().map_err(err)?;
    tracing::info!("{what} on {got}");
    Ok(Some((l, got)))
}

/// Build the broker from `config` (restoring stored definitions), bind the
/// listener and start accepting connections.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let data_err = |source| StartError::DataDir {
        path: config.data_dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&config.data_dir).map_err(data_err)?;
    // A node that has just joined a cluster starts from nothing of its
    // own (as RabbitMQ's reset before join_cluster).
    let joined = match &config.cluster {
        Some(_) => cluster::nodes::Joined::load(&config.data_dir).map_err(StartError::Cluster)?,
        None => None,
    };
    if let Some(j) = joined.as_ref().filter(|j| j.reset) {
        tracing::info!("joined a cluster as Raft id {}: this node's own data goes", j.id);
        cluster::nodes::Joined::reset_data(&config.data_dir).map_err(data_err)?;
        let j = cluster::nodes::Joined {
            reset: false,
            ..j.clone()
        };
        j.save(&config.data_dir).map_err(data_err)?;
    }
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
    // On a cluster, queue removals the broker decides go through the
    // metadata group; set before restoring, since a clustered node keeps
    // more of its topology (see warren_core::vhost).
    let removals = config.cluster.as_ref().map(|_| {
        let r = Arc::new(cluster::removals::Removals::default());
        let client = cluster::queue_client::QueueClient::new(&config.node_name);
        broker.replication.set(Arc::new(cluster::queues::Hook {
            removals: r.clone(),
            client: client.clone(),
        }));
        (r, client)
    });
    let timers = timers::Timers::new();
    // Quorum queues' Raft groups: opened before the queues are restored
    // (each finds its group and checkpoint), driven once they are.
    // This node's Raft id in its groups: 1 alone; on a cluster, as the
    // node table numbers it (the join's answer, or the sorted names).
    let raft_id = match (&config.cluster, &joined) {
        (None, _) => 1,
        (Some(_), Some(j)) => j.id,
        (Some(settings), None) => {
            let names: Vec<String> = settings.peers.iter().map(|p| p.node.clone()).collect();
            cluster::meta::node_ids(&config.node_name, &names)
                .get(&config.node_name)
                .copied()
                .unwrap_or(1)
        }
    };
    let quorum = quorum::Quorum::open(
        &config.data_dir.join("quorum"),
        raft_id,
        &config.node_name,
        broker.clone(),
        timers.clone(),
    )
    .map_err(StartError::Quorum)?;
    broker.quorum.set(quorum.clone());
    // Replicated streams (clusters only): placements known before the
    // streams are restored, so each member opens its log in its role.
    let stream_replicas = match &config.cluster {
        Some(_) => {
            let s = stream_replicas::Streams::open(&config.data_dir, &config.node_name).map_err(data_err)?;
            broker.streams.set(s.clone());
            Some(s)
        }
        None => None,
    };
    // Restoring records every object again; they are written once, as the
    // new snapshot below.
    let batch = store.batch();
    // How far this node had applied the cluster's metadata log: kept with
    // the definitions, and kept through the compaction below.
    let meta_applied = stored.as_ref().and_then(|d| d.warren_meta_applied).unwrap_or(0);
    if meta_applied > 0 {
        store.record_meta_applied(meta_applied);
    }
    match &stored {
        Some(d) => definitions::restore_at(&broker, d, None, &config.node_name),
        None => {
            broker.add_vhost(&config.default_vhost);
            broker.put_user(User {
                name: config.default_user.clone(),
                password_hash: User::hash_password(&config.default_pass),
                tags: vec!["administrator".into()],
                permissions: [(config.default_vhost.clone(), warren_core::Permission::full())].into(),
                topic_permissions: Default::default(),
                limits: Default::default(),
                token: None,
            });
        }
    }
    // Stores of queues that are gone (non-durable ones, deleted ones).
    storage.discard_unclaimed();
    disk_monitor::check(&broker, &config.data_dir);
    store.compact().map_err(data_err)?;
    drop(batch);
    quorum.run().map_err(StartError::Quorum)?;

    for vh in broker.vhosts() {
        for q in vh.queues() {
            if q.needs_timer() {
                timers.arm(&vh, &q);
            }
        }
    }
    let tls = if config.ssl_options.enabled() {
        Some(Arc::new(tls::Tls::load(&config.ssl_options)?))
    } else {
        None
    };
    // HTTPS: management.ssl.* when given, else the same certificate
    // without asking browsers and tools for one of theirs.
    let https_opts = config
        .management_ssl_options
        .clone()
        .unwrap_or_else(|| tls::SslOptions {
            verify: tls::Verify::VerifyNone,
            fail_if_no_peer_cert: false,
            ..config.ssl_options.clone()
        });
    let https_tls = if https_opts.enabled() {
        Some(Arc::new(tls::Tls::load(&https_opts)?))
    } else {
        None
    };
    let oauth2 = match (
        &config.auth_oauth2,
        config.auth_backends.iter().any(|b| b == "oauth2"),
    ) {
        (Some(settings), true) => Some(Arc::new(oauth2::Verifier::new(settings.clone())?)),
        _ => None,
    };
    let amqp = bind("AMQP 0-9-1 and 1.0 listener", config.amqp_listen, true)?;
    let stream_plain = bind("stream protocol listener", config.stream_listen, true)?;
    let http = bind("management HTTP API", config.http_listen, false)?;
    let prom = bind("Prometheus metrics", config.prometheus_listen, false)?;
    let off = config::Listen::NONE;
    let on = |l: config::Listen, t: &Option<Arc<tls::Tls>>| if t.is_some() { l } else { off };
    let amqps = bind("AMQP 0-9-1 and 1.0 over TLS", on(config.amqps_listen, &tls), true)?;
    let stream_tls = bind(
        "stream protocol over TLS",
        on(config.stream_tls_listen, &tls),
        true,
    )?;
    let https = bind(
        "management HTTP API over TLS",
        on(config.https_listen, &https_tls),
        false,
    )?;
    let prom_tls = bind(
        "Prometheus metrics over TLS",
        on(config.prometheus_tls_listen, &https_tls),
        false,
    )?;
    let (tx, rx) = watch::channel(false);
    let replies = Arc::new(reply_to::Registry::default());
    let cluster = match &config.cluster {
        None => None,
        Some(settings) => {
            let secret = settings.load_secret().map_err(StartError::Cluster)?;
            let (tcp, listen_at) = bind("inter-node listener", settings.listen, false)?
                .expect("cluster.listen is validated not to be none");
            // The nodes: configured, told when this node joined, joined
            // since (the definitions store keeps those); all are peers.
            let stored_nodes = stored
                .as_ref()
                .map(|d| d.warren_cluster_nodes.clone())
                .unwrap_or_default();
            let table = Arc::new(cluster::nodes::at_start(
                &config.node_name,
                &listen_at.to_string(),
                &settings.peers,
                joined.as_ref(),
                &stored_nodes,
            ));
            let mut settings = settings.clone();
            for n in table.all() {
                if n.name != config.node_name && !settings.peers.iter().any(|p| p.node == n.name) {
                    settings.peers.push(config::cluster::PeerConfig {
                        node: n.name,
                        address: n.address,
                    });
                }
            }
            let (_, client) = removals.as_ref().expect("made for a cluster");
            replies.set_node(&config.node_name);
            let queues = Arc::new(cluster::queues::Queues {
                client: client.clone(),
                host: cluster::queue_host::QueueHost::new(broker.clone(), timers.clone()),
                replies: replies.clone(),
                streams: stream_replicas.clone().expect("made for a cluster"),
            });
            let c = cluster::Cluster::start(
                broker.clone(),
                &config.node_name,
                settings,
                &secret,
                tcp,
                queues.clone(),
                rx.clone(),
            )
            .map_err(|e| StartError::Cluster(e.to_string()))?;
            // Stream clients of other nodes are sent here for the streams
            // that live here (the stream protocol's metadata).
            let at = |b: &Option<(tokio::net::TcpListener, SocketAddr)>| b.as_ref().map(|(_, a)| *a);
            let (plain, secure) = (at(&stream_plain), at(&stream_tls));
            let host = config.stream_advertised_host.clone().or_else(|| {
                plain
                    .or(secure)
                    .map(|a| a.ip())
                    .filter(|ip| !ip.is_unspecified())
                    .map(|ip| ip.to_string())
            });
            c.set_stream_endpoint(
                host,
                config.stream_advertised_port.or(plain.map(|a| a.port())),
                config.stream_advertised_tls_port.or(secure.map(|a| a.port())),
            );
            let applier = cluster::command::Applier {
                broker: broker.clone(),
                timers: timers.clone(),
                definitions: store.clone(),
                node: config.node_name.clone(),
                table: table.clone(),
                quorum: quorum.clone(),
                streams: stream_replicas
                    .clone()
                    .map(|s| s as Arc<dyn cluster::replicas::StreamReplicas>),
            };
            quorum.set_links(c.clone(), table.clone());
            let apply: cluster::meta::ApplyFn =
                Arc::new(move |entries| cluster::command::Command::apply_entries(&applier, entries));
            let (b, me) = (broker.clone(), config.node_name.clone());
            let t = table.clone();
            let sr = stream_replicas.clone();
            let take: cluster::meta::TakeFn =
                Arc::new(move || cluster::snapshot::take(&b, &me, &t, sr.as_deref().map(|s| s as _)));
            let dir = config.data_dir.join("raft");
            let interval = config.cluster.as_ref().map_or(4096, |s| s.snapshot_interval);
            let meta = cluster::meta::Meta::start(
                &dir,
                c.clone(),
                table.clone(),
                apply,
                take,
                meta_applied,
                interval,
            )
            .map_err(StartError::Cluster)?;
            let _ = meta.quorum.set(quorum.clone());
            if let Some(s) = &stream_replicas {
                s.start_coordinating(meta.clone(), rx.clone());
            }
            c.set_events(meta.clone());
            if let Some((r, _)) = &removals {
                r.start(meta.clone());
            }
            cluster::removals::announce_start(meta.clone(), config.node_name.clone(), rx.clone());
            let grace = Duration::from_millis(2 * config.cluster.as_ref().map_or(3000, |s| s.down_after));
            cluster::removals::watch_downs(meta.clone(), c.clone(), broker.clone(), grace, rx.clone());
            Some((c, meta, table))
        }
    };
    let (cluster, meta, node_table) = match cluster {
        Some((c, m, t)) => (Some(c), Some(m), Some(t)),
        None => (None, None, None),
    };
    let addr = |b: &Option<(tokio::net::TcpListener, SocketAddr)>| b.as_ref().map(|(_, a)| *a);
    let listeners = Listeners {
        amqp: addr(&amqp),
        amqps: addr(&amqps),
        stream: addr(&stream_plain),
        stream_tls: addr(&stream_tls),
        http: addr(&http),
        https: addr(&https),
        prometheus: addr(&prom),
        prometheus_tls: addr(&prom_tls),
        clustering: cluster.as_ref().map(|c| c.listen),
    };
    let ctx = Arc::new(ServerCtx {
        broker,
        config: Arc::new(config.clone()),
        timers,
        replies,
        connections: connections::Registry::default(),
        definitions: store.clone(),
        listeners,
        tls: tls.clone(),
        https_tls: https_tls.clone(),
        auth: sasl::AuthStats::default(),
        oauth2,
        cluster,
        meta,
        queue_client: removals.map(|(_, c)| c),
        node_table,
        restart: Arc::new(tokio::sync::Notify::new()),
        started: std::time::Instant::now(),
        quorum: quorum.clone(),
        stream_replicas: stream_replicas.clone(),
    });
    if let Some(s) = &stream_replicas {
        s.start_ticking(rx.clone());
    }
    disk_monitor::spawn(ctx.broker.clone(), config.data_dir.clone(), rx.clone());
    stream::upkeep::spawn(ctx.broker.clone(), rx.clone());
    stats_sampler::spawn(
        ctx.broker.clone(),
        ctx.connections.clone(),
        Duration::from_millis(config.collect_statistics_interval),
        rx.clone(),
    );
    if ctx.oauth2.is_some() {
        oauth2::spawn_expiry(ctx.connections.clone(), rx.clone());
    }
    let mut tasks = Vec::new();
    // The stream front end's node-wide parts, for its listeners.
    let streams = Arc::new(stream::Shared::default());
    let handshake = Duration::from_millis(config.ssl_handshake_timeout);
    let http_listener = |tcp: tokio::net::TcpListener, with_tls: bool| {
        let l = match (&https_tls, with_tls) {
            (Some(t), true) => warren_management::listener::HttpListener::tls(tcp, t.clone(), handshake),
            _ => warren_management::listener::HttpListener::plain(tcp),
        };
        l.expect("a bound listener has an address")
    };
    for (bound, with_tls) in [(http, false), (https, true)] {
        if let Some((tcp, _)) = bound {
            tasks.push(tokio::spawn(warren_management::serve(
                http_listener(tcp, with_tls),
                ctx.clone(),
                rx.clone(),
            )));
        }
    }
    for (bound, with_tls) in [(prom, false), (prom_tls, true)] {
        if let Some((tcp, _)) = bound {
            tasks.push(tokio::spawn(warren_management::metrics::serve(
                http_listener(tcp, with_tls),
                ctx.clone(),
                rx.clone(),
            )));
        }
    }
    for (bound, port, with_tls) in [
        (amqp, listener::Port::Amqp, false),
        (amqps, listener::Port::Amqp, true),
        (stream_plain, listener::Port::Stream, false),
        (stream_tls, listener::Port::Stream, true),
    ] {
        if let Some((tcp, _)) = bound {
            let tls = if with_tls { tls.clone() } else { None };
            tasks.push(tokio::spawn(listener::accept_loop(
                tcp,
                ctx.clone(),
                streams.clone(),
                rx.clone(),
                port,
                tls,
            )));
        }
    }
    Ok(Running {
        amqp_addr: listeners.amqp,
        stream_addr: listeners.stream,
        http_addr: listeners.http,
        prometheus_addr: listeners.prometheus,
        listeners,
        ctx,
        shutdown: tx,
        tasks,
        storage,
        quorum,
    })
}
