//! Configuration: embedded defaults, overridden by a TOML file (`--config`),
//! then by `WARREN_*` environment variables and flags. The defaults match
//! RabbitMQ's: AMQP on 0.0.0.0:5672, vhost `/`, guest/guest from loopback
//! only, frame_max 131072, channel_max 2047, heartbeat 60 s, max message
//! size 128 MiB.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::Parser;
use serde::{Deserialize, Deserializer};

use crate::tls::peer::{LoginFrom, SanType};
use crate::tls::SslOptions;

pub mod cluster;

/// A node's name when none is configured (a queue's leader and replica
/// on one node, as the API and the AMQP 1.0 management node report them).
pub const DEFAULT_NODE_NAME: &str = "warren@localhost";

/// A listener's address, or `none` for no listener (RabbitMQ's
/// `listeners.tcp = none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen(pub Option<SocketAddr>);

impl Listen {
    pub fn at(addr: &str) -> Listen {
        Listen(Some(addr.parse().expect("static address")))
    }

    pub const NONE: Listen = Listen(None);
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        match s {
            "none" | "off" | "" => Ok(Listen(None)),
            _ => s
                .parse()
                .map(|a| Listen(Some(a)))
                .map_err(|e| format!("{s:?}: {e} (an address HOST:PORT, or none)")),
        }
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Listen, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Parser, Default)]
#[command(
    name = "warren",
    version,
    about = "Warren: a RabbitMQ-compatible message broker"
)]
pub struct Cli {
    /// Where definitions and messages are kept.
    #[arg(long, env = "WARREN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// This node's name (default warren@localhost); each node of a
    /// cluster needs its own.
    #[arg(long, env = "WARREN_NODE_NAME")]
    pub node_name: Option<String>,
    /// AMQP listener address (`none`: no plain AMQP listener).
    #[arg(long, env = "WARREN_AMQP_LISTEN")]
    pub amqp_listen: Option<Listen>,
    /// RabbitMQ Stream protocol listener address (`none` turns it off).
    #[arg(long, env = "WARREN_STREAM_LISTEN")]
    pub stream_listen: Option<Listen>,
    /// Management HTTP API listener address (`none` turns it off).
    #[arg(long, env = "WARREN_HTTP_LISTEN")]
    pub http_listen: Option<Listen>,
    /// Prometheus metrics listener address (`none` turns it off).
    #[arg(long, env = "WARREN_PROMETHEUS_LISTEN")]
    pub prometheus_listen: Option<Listen>,
    /// AMQP over TLS listener address (needs a certificate and key).
    #[arg(long, env = "WARREN_AMQPS_LISTEN")]
    pub amqps_listen: Option<Listen>,
    /// Stream protocol over TLS listener address.
    #[arg(long, env = "WARREN_STREAM_TLS_LISTEN")]
    pub stream_tls_listen: Option<Listen>,
    /// Management HTTP API over TLS (HTTPS) listener address.
    #[arg(long, env = "WARREN_HTTPS_LISTEN")]
    pub https_listen: Option<Listen>,
    /// Prometheus metrics over TLS listener address (off by default).
    #[arg(long, env = "WARREN_PROMETHEUS_TLS_LISTEN")]
    pub prometheus_tls_listen: Option<Listen>,
    /// The server's certificate chain, PEM (ssl_options.certfile).
    #[arg(long, env = "WARREN_SSL_CERTFILE")]
    pub ssl_certfile: Option<PathBuf>,
    /// The server's private key, PEM (ssl_options.keyfile).
    #[arg(long, env = "WARREN_SSL_KEYFILE")]
    pub ssl_keyfile: Option<PathBuf>,
    /// CA bundle client certificates are checked against, PEM
    /// (ssl_options.cacertfile).
    #[arg(long, env = "WARREN_SSL_CACERTFILE")]
    pub ssl_cacertfile: Option<PathBuf>,
    /// A TOML configuration file.
    #[arg(long, env = "WARREN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `warren=debug`.
    #[arg(long, env = "WARREN_LOG")]
    pub log: Option<String>,
    /// Log line format: `text` (coloured only when standard output is a
    /// terminal and NO_COLOR is unset) or `json` (one object per line,
    /// for log shippers).
    #[arg(long, env = "WARREN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Everything the broker can be told, with RabbitMQ's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub data_dir: PathBuf,
    /// This node's name, as the API, the Prometheus labels and the other
    /// nodes know it (RabbitMQ's `rabbit@host`). Each node of a cluster
    /// needs its own.
    pub node_name: String,
    /// The cluster this node belongs to (`[cluster]`); none: a single
    /// node, exactly as before clustering existed.
    pub cluster: Option<cluster::ClusterSettings>,
    pub amqp_listen: Listen,
    /// AMQP 0-9-1 and 1.0 over TLS (RabbitMQ's listeners.ssl, 5671).
    /// Listeners over TLS start only when `ssl_options` names a
    /// certificate and key.
    pub amqps_listen: Listen,
    /// The stream protocol over TLS (stream.listeners.ssl, 5551).
    pub stream_tls_listen: Listen,
    /// The management API over HTTPS (management.ssl.port, 15671).
    pub https_listen: Listen,
    /// Prometheus over TLS (prometheus.ssl.port, RabbitMQ's 15691); off
    /// unless set.
    pub prometheus_tls_listen: Listen,
    /// Certificates and how clients are verified, for the AMQP and stream
    /// TLS listeners, and the HTTPS ones unless `management_ssl_options`
    /// is given (then HTTPS asks no client certificate).
    pub ssl_options: SslOptions,
    /// The HTTPS listeners' own settings (RabbitMQ's management.ssl.*).
    pub management_ssl_options: Option<SslOptions>,
    /// A TLS handshake not done in this many milliseconds is dropped
    /// (RabbitMQ's ssl_handshake_timeout).
    pub ssl_handshake_timeout: u64,
    /// SASL mechanisms offered, in order (RabbitMQ's auth_mechanisms):
    /// PLAIN, AMQPLAIN, EXTERNAL, ANONYMOUS.
    pub auth_mechanisms: Vec<String>,
    /// Where logins with a password are checked, in order (RabbitMQ's
    /// auth_backends): `internal` (the user database) and `oauth2` (the
    /// password is an access token; needs `[auth_oauth2]`).
    pub auth_backends: Vec<String>,
    /// OAuth 2 access tokens (RabbitMQ's auth_oauth2.*).
    pub auth_oauth2: Option<crate::oauth2::OAuth2Settings>,
    /// Where SASL EXTERNAL takes the user name from in the client's
    /// certificate: distinguished_name, common_name or
    /// subject_alternative_name.
    pub ssl_cert_login_from: LoginFrom,
    /// With subject_alternative_name: which kind, and which of them.
    pub ssl_cert_login_san_type: SanType,
    pub ssl_cert_login_san_index: usize,
    pub default_vhost: String,
    pub default_user: String,
    pub default_pass: String,
    /// Users that may only log in from loopback addresses.
    pub loopback_users: Vec<String>,
    pub frame_max: u32,
    pub channel_max: u16,
    /// Heartbeat timeout proposed to clients, in seconds (0 disables).
    pub heartbeat: u16,
    /// A delivery not acknowledged within this many milliseconds closes
    /// its channel (RabbitMQ's `consumer_timeout`, 30 minutes by
    /// default; 0 disables).
    pub consumer_timeout: u64,
    /// Largest message body accepted, in bytes.
    pub max_message_size: u64,
    /// Publishers are blocked once messages held in memory reach this
    /// fraction of physical memory (RabbitMQ's
    /// vm_memory_high_watermark.relative)...
    pub memory_high_watermark: f64,
    /// ...or this many bytes, when set (vm_memory_high_watermark.absolute).
    pub memory_high_watermark_bytes: u64,
    /// Publishers are blocked while the data directory's file system has
    /// less free space than this (disk_free_limit.absolute).
    pub disk_free_limit_bytes: u64,
    /// Most connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// AMQP 1.0: accept SASL ANONYMOUS (and no SASL at all) as the default
    /// user, which a loopback user (guest) is only from loopback. On by
    /// default, as RabbitMQ 4 offers ANONYMOUS (its AMQP 1.0 clients log
    /// in so when given no credentials).
    pub amqp10_anonymous: bool,
    /// The RabbitMQ Stream protocol listener (RabbitMQ's port 5552).
    pub stream_listen: Listen,
    /// The host and port stream clients are told to connect to (metadata),
    /// for brokers behind NAT or a load balancer. By default: the address
    /// the client reached, and the listener's port.
    pub stream_advertised_host: Option<String>,
    pub stream_advertised_port: Option<u16>,
    /// The port TLS stream clients are told (stream.advertised_tls_port).
    pub stream_advertised_tls_port: Option<u16>,
    /// Largest stream protocol frame, offered in Tune (RabbitMQ: 1 MiB).
    pub stream_frame_max: u32,
    /// The management HTTP API (RabbitMQ: 15672).
    pub http_listen: Listen,
    /// Prometheus metrics (RabbitMQ: 15692).
    pub prometheus_listen: Listen,
    /// Bytes of each stream's newest data left in the OS page cache once
    /// it is on disk; older data is dropped from the cache after each
    /// background sync (0: leave it to the OS, as RabbitMQ does).
    pub stream_cache_bytes: u64,
    /// How often message rates are sampled, in milliseconds (RabbitMQ's
    /// collect_statistics_interval, 5000).
    pub collect_statistics_interval: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("warren-data"),
            node_name: DEFAULT_NODE_NAME.into(),
            cluster: None,
            amqp_listen: Listen::at("0.0.0.0:5672"),
            amqps_listen: Listen::at("0.0.0.0:5671"),
            stream_tls_listen: Listen::at("0.0.0.0:5551"),
            https_listen: Listen::at("0.0.0.0:15671"),
            prometheus_tls_listen: Listen::NONE,
            ssl_options: SslOptions::default(),
            management_ssl_options: None,
            ssl_handshake_timeout: 5000,
            auth_mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into()],
            auth_backends: vec!["internal".into()],
            auth_oauth2: None,
            ssl_cert_login_from: LoginFrom::default(),
            ssl_cert_login_san_type: SanType::default(),
            ssl_cert_login_san_index: 0,
            default_vhost: "/".into(),
            default_user: "guest".into(),
            default_pass: "guest".into(),
            loopback_users: vec!["guest".into()],
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat: 60,
            consumer_timeout: 1_800_000,
            max_message_size: 128 << 20,
            memory_high_watermark: 0.4,
            memory_high_watermark_bytes: 0,
            disk_free_limit_bytes: 50_000_000,
            max_connections: 100_000,
            amqp10_anonymous: true,
            stream_listen: Listen::at("0.0.0.0:5552"),
            stream_advertised_host: None,
            stream_advertised_port: None,
            stream_advertised_tls_port: None,
            stream_frame_max: 1 << 20,
            stream_cache_bytes: 1 << 30,
            collect_statistics_interval: 5000,
            http_listen: Listen::at("0.0.0.0:15672"),
            prometheus_listen: Listen::at("0.0.0.0:15692"),
        }
    }
}

/// Physical memory, from /proc/meminfo (4 GiB if unknown).
fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30)
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config file {path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Config {
    /// The defaults, with data in `data_dir` and every listener on
    /// 127.0.0.1 at a port the OS picks: for tests and tools that start a
    /// broker in-process beside others. (The TLS listeners start only once
    /// `ssl_options` has a certificate; Prometheus over TLS stays off.)
    pub fn loopback(data_dir: PathBuf) -> Config {
        let any = Listen::at("127.0.0.1:0");
        Config {
            data_dir,
            amqp_listen: any,
            stream_listen: any,
            http_listen: any,
            prometheus_listen: any,
            amqps_listen: any,
            stream_tls_listen: any,
            https_listen: any,
            ..Config::default()
        }
    }

    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut c = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source,
                })?
            }
            None => Config::default(),
        };
        if let Some(d) = &cli.data_dir {
            c.data_dir = d.clone();
        }
        if let Some(n) = &cli.node_name {
            c.node_name = n.clone();
        }
        if let Some(a) = cli.amqp_listen {
            c.amqp_listen = a;
        }
        if let Some(a) = cli.stream_listen {
            c.stream_listen = a;
        }
        if let Some(a) = cli.http_listen {
            c.http_listen = a;
        }
        if let Some(a) = cli.prometheus_listen {
            c.prometheus_listen = a;
        }
        if let Some(a) = cli.amqps_listen {
            c.amqps_listen = a;
        }
        if let Some(a) = cli.stream_tls_listen {
            c.stream_tls_listen = a;
        }
        if let Some(a) = cli.https_listen {
            c.https_listen = a;
        }
        if let Some(a) = cli.prometheus_tls_listen {
            c.prometheus_tls_listen = a;
        }
        if let Some(p) = &cli.ssl_certfile {
            c.ssl_options.certfile = Some(p.clone());
        }
        if let Some(p) = &cli.ssl_keyfile {
            c.ssl_options.keyfile = Some(p.clone());
        }
        if let Some(p) = &cli.ssl_cacertfile {
            c.ssl_options.cacertfile = Some(p.clone());
        }
        c.validate()?;
        Ok(c)
    }

    /// The cluster's name (RabbitMQ's cluster_name): the `[cluster]`
    /// table's, or this node's name on a node of its own.
    pub fn cluster_name(&self) -> &str {
        match &self.cluster {
            Some(c) => &c.name,
            None => &self.node_name,
        }
    }

    /// The memory high watermark in bytes: the absolute setting if given,
    /// else the relative one applied to physical memory.
    pub fn memory_limit(&self) -> u64 {
        if self.memory_high_watermark_bytes > 0 {
            self.memory_high_watermark_bytes
        } else {
            (total_memory() as f64 * self.memory_high_watermark) as u64
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.memory_high_watermark) {
            return Err(ConfigError::Invalid(
                "memory_high_watermark is a fraction of memory, between 0 and 1".into(),
            ));
        }
        if self.node_name.is_empty() || self.node_name.len() > 255 {
            return Err(ConfigError::Invalid("node_name must be 1 to 255 bytes".into()));
        }
        if let Some(c) = &self.cluster {
            c.validate(&self.node_name).map_err(ConfigError::Invalid)?;
        }
        if self.frame_max < 4096 {
            return Err(ConfigError::Invalid("frame_max must be at least 4096".into()));
        }
        for m in &self.auth_mechanisms {
            if !crate::sasl::KNOWN.contains(&m.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "auth_mechanisms: unknown mechanism {m:?} (known: {})",
                    crate::sasl::KNOWN.join(", ")
                )));
            }
        }
        for b in &self.auth_backends {
            match b.as_str() {
                "internal" => {}
                "oauth2" => {
                    if self
                        .auth_oauth2
                        .as_ref()
                        .is_none_or(|o| o.resource_server_id.is_empty())
                    {
                        return Err(ConfigError::Invalid(
                            "auth_backends names oauth2: [auth_oauth2] needs a resource_server_id".into(),
                        ));
                    }
                }
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "auth_backends: unknown backend {other:?} (known: internal, oauth2)"
                    )))
                }
            }
        }
        if self.ssl_options.certfile.is_some() != self.ssl_options.keyfile.is_some() {
            return Err(ConfigError::Invalid(
                "ssl_options.certfile and ssl_options.keyfile go together".into(),
            ));
        }
        if self.max_message_size > 512 << 20 {
            return Err(ConfigError::Invalid(
                "max_message_size may be at most 536870912".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults_and_flags_override_file() {
        let dir = std::env::temp_dir().join(format!("warren-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("warren.toml");
        std::fs::write(&path, "heartbeat = 10\namqp_listen = \"127.0.0.1:6000\"\n").unwrap();
        let cli = Cli {
            config: Some(path.clone()),
            amqp_listen: Some("127.0.0.1:7000".parse().unwrap()),
            stream_listen: Some("none".parse().unwrap()),
            ..Default::default()
        };
        let c = Config::load(&cli).unwrap();
        assert_eq!(c.heartbeat, 10);
        assert_eq!(c.amqp_listen.0.unwrap().port(), 7000);
        assert_eq!(c.stream_listen, Listen::NONE);
        assert_eq!(c.frame_max, 131_072);
        std::fs::write(&path, "no_such_key = 1\n").unwrap();
        assert!(matches!(Config::load(&cli), Err(ConfigError::Parse { .. })));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
