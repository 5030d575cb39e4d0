//! [`ServerCtx`]: what every connection task and listener of the node
//! shares, built once when the node starts; and where the listeners are
//! bound ([`Listeners`]). The modules above it (login, topology,
//! membership) act on the whole node through it; the modules below it
//! never name it, each holding only the parts it needs.

use std::net::SocketAddr;
use std::sync::Arc;

use warren_core::message::MessageRef;
use warren_core::Broker;

use crate::config::Config;
use crate::reply_to::Whose;
use crate::{
    cluster, connections, definitions, oauth2, quorum, reply_to, sasl, stream_replicas, timers, tls,
};

/// What every connection task shares.
pub struct ServerCtx {
    pub broker: Arc<Broker>,
    pub config: Arc<Config>,
    pub timers: Arc<timers::Timers>,
    pub replies: Arc<reply_to::Registry>,
    /// Open client connections, every protocol.
    pub connections: connections::Registry,
    /// Where definitions are kept (imports batch their saves through it).
    pub definitions: Arc<definitions::Store>,
    /// The addresses the listeners are bound to (a configured port 0 is
    /// the one the OS chose).
    pub listeners: Listeners,
    /// The TLS configuration of the AMQP and stream TLS listeners.
    pub tls: Option<Arc<tls::Tls>>,
    /// The HTTPS listeners' (management API and Prometheus).
    pub https_tls: Option<Arc<tls::Tls>>,
    /// Login attempts, every protocol (Prometheus).
    pub auth: sasl::AuthStats,
    /// OAuth 2 token checks, when `auth_backends` names oauth2.
    pub oauth2: Option<Arc<oauth2::Verifier>>,
    /// The other nodes and the links to them, on a node with `[cluster]`
    /// settings.
    pub cluster: Option<Arc<cluster::Cluster>>,
    /// The metadata Raft group, with `cluster`.
    pub meta: Option<Arc<cluster::meta::Meta>>,
    /// This node's side of queues whose home is another node, with
    /// `cluster` (gets, purges and consume answers wait on it).
    pub queue_client: Option<Arc<cluster::queue_client::QueueClient>>,
    /// The cluster's nodes and their Raft ids, with `cluster`.
    pub node_table: Option<Arc<cluster::nodes::NodeTable>>,
    /// Notified when the node must start again (it joined a cluster, see
    /// `cluster::join`); the binary restarts it in place.
    pub restart: Arc<tokio::sync::Notify>,
    /// When this node started (its uptime in `/api/nodes`).
    pub started: std::time::Instant,
    /// The node's quorum queue groups.
    pub quorum: Arc<quorum::Quorum>,
    /// Replicated streams' placements and replication, with `cluster`.
    pub stream_replicas: Option<Arc<stream_replicas::Streams>>,
}

impl ServerCtx {
    /// What this node applies metadata commands with.
    pub fn applier(&self) -> cluster::command::Applier {
        cluster::command::Applier {
            broker: self.broker.clone(),
            timers: self.timers.clone(),
            definitions: self.definitions.clone(),
            node: self.config.node_name.clone(),
            table: self.node_table.clone().unwrap_or_default(),
            quorum: self.quorum.clone(),
            streams: self
                .stream_replicas
                .clone()
                .map(|s| s as Arc<dyn cluster::replicas::StreamReplicas>),
        }
    }

    /// Deliver a reply wherever its consumer is: here, or across the link
    /// to its node. False when nobody takes it: no consumer here, or that
    /// node's link is down or full (a reply is then dropped, as for a
    /// consumer that is gone; the link's queue is bounded, so a flood of
    /// replies cannot grow the heap).
    pub fn deliver_reply(&self, name: &[u8], message: MessageRef) -> bool {
        match self.replies.whose(name) {
            Some(Whose::Node(node)) => self
                .cluster
                .as_ref()
                .is_some_and(|c| c.send_reply(&node, name, &message)),
            _ => self.replies.deliver(name, message),
        }
    }

    /// Is the consumer of reply queue `name` there, on whichever node it
    /// is? For another node, whether that node is reachable (its
    /// consumers are its to know).
    pub fn reply_alive(&self, name: &[u8]) -> bool {
        match self.replies.whose(name) {
            Some(Whose::Node(node)) => self.cluster.as_ref().is_some_and(|c| c.is_up(&node)),
            _ => self.replies.is_alive(name),
        }
    }

    /// Read the TLS certificate, key and CA files again: new connections
    /// get them, open ones keep their session.
    /// OAuth 2 signing keys are read again too.
    pub fn reload_tls(&self) -> Result<(), String> {
        if let Some(o) = &self.oauth2 {
            if let Err(e) = o.reload() {
                tracing::error!("OAuth 2 key reload failed, the previous keys stay: {e}");
                return Err(e.to_string());
            }
            tracing::info!("OAuth 2 signing keys reloaded");
        }
        if self.tls.is_none() && self.https_tls.is_none() {
            if self.oauth2.is_some() {
                return Ok(());
            }
            return Err("TLS is not configured (ssl_options.certfile, ssl_options.keyfile)".into());
        }
        for t in self.tls.iter().chain(&self.https_tls) {
            if let Err(e) = t.reload() {
                tracing::error!("TLS reload failed, the previous certificates stay: {e}");
                return Err(e.to_string());
            }
        }
        tracing::info!("TLS certificates and keys reloaded");
        Ok(())
    }
}

/// Where each listener is bound (None: not listening).
#[derive(Debug, Clone, Copy, Default)]
pub struct Listeners {
    pub amqp: Option<SocketAddr>,
    pub amqps: Option<SocketAddr>,
    pub stream: Option<SocketAddr>,
    pub stream_tls: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub prometheus: Option<SocketAddr>,
    pub prometheus_tls: Option<SocketAddr>,
    /// The inter-node listener, on a node with `[cluster]` settings.
    pub clustering: Option<SocketAddr>,
}

impl Listeners {
    /// The listeners as RabbitMQ names their protocols.
    pub fn named(&self) -> Vec<(&'static str, SocketAddr)> {
        [
            ("amqp", self.amqp),
            ("amqp/ssl", self.amqps),
            ("stream", self.stream),
            ("stream/ssl", self.stream_tls),
            ("http", self.http),
            ("https", self.https),
            ("http/prometheus", self.prometheus),
            ("https/prometheus", self.prometheus_tls),
            ("clustering", self.clustering),
        ]
        .into_iter()
        .filter_map(|(n, a)| a.map(|a| (n, a)))
        .collect()
    }
}
