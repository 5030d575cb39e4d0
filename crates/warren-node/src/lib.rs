//! What a Warren node's front ends share: the [`ServerCtx`] every
//! connection task holds, configuration, the connections registry,
//! transport and TLS, SASL and OAuth 2, definitions, timers and limits;
//! and the cluster and replication (links, the metadata Raft log, the
//! node table, remote queues, quorum groups, stream replicas). The front
//! ends (`warren-front-*`) and the management API (`warren-management`)
//! stand on it; `warren-server` wires them into a running node. Nothing
//! here imports a front end.

pub mod cluster;
pub mod config;
pub mod connections;
mod ctx;
pub mod definitions;
pub mod disk_monitor;
pub mod limits;
pub mod login;
pub mod membership;
pub mod oauth2;
pub mod outbox;
pub mod quorum;
pub mod reply_to;
pub mod sasl;
pub mod sniff;
pub mod stats_sampler;
pub mod stream_replicas;
pub mod timers;
pub mod tls;
pub mod topology;
pub mod transport;
pub mod uri;
pub mod version;

pub use config::{Cli, Config, LogFormat};
pub use ctx::{Listeners, ServerCtx};
