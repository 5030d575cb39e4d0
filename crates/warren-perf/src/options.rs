//! Command-line options, named after PerfTest's where it has one (`-x`
//! producers, `-y` consumers, `-s` size, `-c` confirms in flight, `-q`
//! prefetch, `-A` ack interval, `-z` time, `-C`/`-D` message counts), and
//! AMQP URI parsing.

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    Amqp091,
    Amqp10,
    Stream,
}

/// Stream: how sub-entry batches are compressed (stream-perf-test's
/// `--compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum StreamCompression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<StreamCompression> for warren_client::stream::Compression {
    fn from(c: StreamCompression) -> Self {
        use warren_client::stream::Compression as C;
        match c {
            StreamCompression::None => C::None,
            StreamCompression::Gzip => C::Gzip,
            StreamCompression::Snappy => C::Snappy,
            StreamCompression::Lz4 => C::Lz4,
            StreamCompression::Zstd => C::Zstd,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueType {
    Classic,
    Quorum,
    Stream,
}

impl QueueType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Confirms in flight 1, 5, 20, 200, 1000, 10000; prefetch 1000; ack every message.
    Inflight,
    /// Confirms in flight 1000; prefetch 1, 10, 100, 1000, 10000; ack every message.
    Prefetch,
    /// Confirms in flight 1000; prefetch 1000; ack every 1, 10, 50, 100, 250, 500 (multiple).
    AckInterval,
    /// No publisher confirms, consumers in autoack.
    NoConfirmsNoAcks,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "warren-perf",
    version,
    about = "Load generator for RabbitMQ-compatible brokers (AMQP 0-9-1 now; AMQP 1.0 and streams to come)",
    disable_help_flag = true
)]
pub struct Options {
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Wire protocol.
    #[arg(short = 'P', long, value_enum, default_value = "amqp091")]
    pub protocol: Protocol,
    /// Broker URI(s), amqp:// or rabbitmq-stream://; connections go
    /// round-robin over them.
    #[arg(
        short = 'h',
        long = "uri",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub uris: Vec<String>,
    /// Producers (one connection each).
    #[arg(short = 'x', long, default_value_t = 1)]
    pub producers: u32,
    /// Consumers (one connection each).
    #[arg(short = 'y', long, default_value_t = 1)]
    pub consumers: u32,
    /// Queue name (with --queues N, a pattern where %d is the index).
    #[arg(short = 'u', long)]
    pub queue: Option<String>,
    /// How many queues; producers and consumers are spread over them.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Type of the queues declared (x-queue-type).
    #[arg(long, value_enum, default_value = "classic")]
    pub queue_type: QueueType,
    /// Persistent messages (delivery mode 2) on durable queues.
    #[arg(long)]
    pub persistent: bool,
    /// PerfTest's flags: `persistent`, `mandatory`.
    #[arg(short = 'f', long = "flag")]
    pub flags: Vec<String>,
    /// Declare queues auto-delete (the default for generated names).
    #[arg(long)]
    pub auto_delete: Option<bool>,
    /// Message size in bytes (the first 8 carry the send time).
    #[arg(short = 's', long, default_value_t = 12)]
    pub size: usize,
    /// Publishing rate limit per producer, msg/s (0: none).
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rate: u64,
    /// Run time in seconds (0: until the message counts are reached).
    #[arg(short = 'z', long, default_value_t = 0)]
    pub time: u64,
    /// Messages each producer sends (0: unlimited).
    #[arg(short = 'C', long, default_value_t = 0)]
    pub pmessages: u64,
    /// Messages each consumer takes before stopping (0: unlimited).
    #[arg(short = 'D', long, default_value_t = 0)]
    pub cmessages: u64,
    /// Publisher confirms with at most this many unconfirmed (0: no confirms).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub confirm: u32,
    /// Consumer prefetch (basic.qos) or link credit (0: unlimited).
    #[arg(short = 'q', long, default_value_t = 0)]
    pub qos: u32,
    /// Ack every N messages, with `multiple` (1: each message alone).
    #[arg(short = 'A', long = "multi-ack-every", default_value_t = 1)]
    pub ack_every: u32,
    /// Consumers do not ack (autoack / pre-settled).
    #[arg(short = 'a', long)]
    pub autoack: bool,
    /// Stream: messages per publish batch.
    #[arg(long, default_value_t = 100)]
    pub batch_size: u32,
    /// Stream: messages per sub-entry (1: no sub-entry batching).
    #[arg(long, default_value_t = 1)]
    pub sub_entry_size: u16,
    /// Stream: compression of sub-entries.
    #[arg(long, value_enum, default_value_t = StreamCompression::None)]
    pub compression: StreamCompression,
    /// Stream: every connection to the URI's address (a load balancer,
    /// or a node whose advertised host is not reachable from here).
    #[arg(long)]
    pub load_balancer: bool,
    /// Stream: check each chunk's CRC as it is read (the built-in mode
    /// never does).
    #[arg(long)]
    pub crc_check: bool,
    /// Stream: producer name (deduplication).
    #[arg(long)]
    pub producer_name: Option<String>,
    /// Stream: consumer name (server-side offset tracking).
    #[arg(long)]
    pub consumer_name: Option<String>,
    /// Stream: where consumers start (first, last, next, an offset, or a timestamp).
    #[arg(long, default_value = "next")]
    pub offset: String,
    /// Stream: retention of the streams the run creates, in bytes
    /// (stream-perf-test's default, 20 GB), so long runs cannot fill a disk.
    #[arg(long, default_value_t = 20_000_000_000)]
    pub max_length_bytes: u64,
    /// Stream: segment size of the streams the run creates (500 MB).
    #[arg(long, default_value_t = 500_000_000)]
    pub stream_max_segment_size_bytes: u64,
    /// AMQP 1.0: the address of a queue's node ({queue} is its name);
    /// `/amq/queue/{queue}` for RabbitMQ 3.x, `/queues/{queue}` for 4.x.
    #[arg(long, default_value = "/amq/queue/{queue}")]
    pub amqp10_address: String,
    /// Run a named seed-003 sweep instead of one workload.
    #[arg(long, value_enum)]
    pub scenario: Option<Scenario>,
    /// Seconds per stage of a scenario.
    #[arg(long, default_value_t = 30)]
    pub stage_time: u64,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Draw throughput and latency over time as SVG.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// No per-second lines.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionError {
    #[error("bad URI {0}: {1}")]
    Uri(String, &'static str),
    #[error("{0}")]
    Invalid(String),
}

impl Options {
    /// Check combinations clap cannot, and fold PerfTest's `-f` flags in.
    pub fn validate(&mut self) -> Result<(), OptionError> {
        for f in std::mem::take(&mut self.flags) {
            match f.as_str() {
                "persistent" => self.persistent = true,
                "mandatory" => {}
                other => return Err(OptionError::Invalid(format!("unknown flag '{other}'"))),
            }
        }
        for u in &self.uris {
            Uri::parse(u)?;
        }
        if self.time == 0 && self.pmessages == 0 && self.cmessages == 0 && self.scenario.is_none() {
            return Err(OptionError::Invalid(
                "give a run time (-z) or message counts (-C / -D)".into(),
            ));
        }
        if self.ack_every == 0 {
            return Err(OptionError::Invalid("the ack interval is at least 1".into()));
        }
        if self.queues == 0 {
            return Err(OptionError::Invalid("at least one queue".into()));
        }
        if self.producers == 0 && self.consumers == 0 {
            return Err(OptionError::Invalid("no producers and no consumers".into()));
        }
        if self.qos > u16::MAX as u32 && self.protocol == Protocol::Amqp091 {
            return Err(OptionError::Invalid(format!(
                "AMQP 0-9-1 prefetch is at most {}",
                u16::MAX
            )));
        }
        Ok(())
    }

    /// The name of queue `i`.
    pub fn queue_name(&self, i: u32, run_id: &str) -> String {
        match &self.queue {
            Some(q) if q.contains("%d") => q.replace("%d", &i.to_string()),
            Some(q) if self.queues > 1 => format!("{q}-{i}"),
            Some(q) => q.clone(),
            None => format!("perf-{run_id}-{i}"),
        }
    }

    /// Queues are auto-delete unless named by the user (PerfTest's `-ad`).
    pub fn auto_delete(&self) -> bool {
        self.auto_delete.unwrap_or(self.queue.is_none())
    }
}

/// `amqp://user:pass@host:port/vhost`, with RabbitMQ's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub pass: String,
    pub vhost: String,
}

fn percent_decode(s: &str) -> Result<String, &'static str> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or("truncated %-escape")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "bad %-escape")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 after %-decoding")
}

/// Percent-encode all but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Uri {
    pub fn parse(s: &str) -> Result<Uri, OptionError> {
        let bad = |why| OptionError::Uri(s.to_string(), why);
        let (rest, default_port) = match (s.strip_prefix("amqp://"), s.strip_prefix("rabbitmq-stream://")) {
            (Some(r), _) => (r, 5672),
            (_, Some(r)) => (r, 5552),
            _ => return Err(bad("must start with amqp:// or rabbitmq-stream://")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, pass) = match userinfo {
            Some(u) => match u.find(':') {
                Some(i) => (
                    percent_decode(&u[..i]).map_err(bad)?,
                    percent_decode(&u[i + 1..]).map_err(bad)?,
                ),
                None => (percent_decode(u).map_err(bad)?, String::new()),
            },
            None => ("guest".into(), "guest".into()),
        };
        let (host, port) = match hostport.rfind(':') {
            Some(i) if !hostport.ends_with(']') => (
                &hostport[..i],
                hostport[i + 1..].parse::<u16>().map_err(|_| bad("bad port"))?,
            ),
            _ => (hostport, default_port),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let vhost = match path {
            None | Some("") => "/".to_string(),
            Some(p) => percent_decode(p).map_err(bad)?,
        };
        Ok(Uri {
            host: host.to_string(),
            port,
            user,
            pass,
            vhost,
        })
    }

    /// The URI again as an `amqp://` URI, every part percent-encoded,
    /// for a client that parses URIs itself.
    pub fn stream_uri(&self) -> String {
        format!(
            "rabbitmq-stream://{}:{}@{}/{}",
            percent_encode(&self.user),
            percent_encode(&self.pass),
            self.addr(),
            percent_encode(&self.vhost)
        )
    }

    pub fn amqp_uri(&self) -> String {
        format!(
            "amqp://{}:{}@{}/{}",
            percent_encode(&self.user),
            percent_encode(&self.pass),
            self.addr(),
            percent_encode(&self.vhost)
        )
    }

    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Options {
        let mut o =
            Options::try_parse_from(std::iter::once("warren-perf").chain(args.iter().copied())).unwrap();
        o.validate().unwrap();
        o
    }

    #[test]
    fn perftest_style_flags() {
        let o = parse(&[
            "-h",
            "amqp://u:p@10.0.0.1:5673/%2fv",
            "-x",
            "2",
            "-y",
            "3",
            "-s",
            "1000",
            "-c",
            "1000",
            "-q",
            "500",
            "-A",
            "100",
            "-z",
            "30",
            "-f",
            "persistent",
            "-u",
            "q1",
        ]);
        assert_eq!((o.producers, o.consumers, o.size), (2, 3, 1000));
        assert_eq!((o.confirm, o.qos, o.ack_every, o.time), (1000, 500, 100, 30));
        assert!(o.persistent);
        assert!(!o.auto_delete(), "a named queue is kept");
        assert_eq!(o.queue_name(0, "r"), "q1");
        let u = Uri::parse(&o.uris[0]).unwrap();
        assert_eq!(u.addr(), "10.0.0.1:5673");
        assert_eq!(
            (u.user.as_str(), u.pass.as_str(), u.vhost.as_str()),
            ("u", "p", "/v")
        );
    }

    #[test]
    fn defaults_and_generated_names() {
        let o = parse(&["-z", "1"]);
        assert_eq!(o.protocol, Protocol::Amqp091);
        assert_eq!((o.producers, o.consumers, o.size, o.ack_every), (1, 1, 12, 1));
        assert!(o.auto_delete());
        assert_eq!(o.queue_name(2, "abc"), "perf-abc-2");
        let o = parse(&["-z", "1", "--queues", "3", "-u", "load-%d"]);
        assert_eq!(o.queue_name(2, "x"), "load-2");
    }

    #[test]
    fn nonsense_is_refused() {
        let mut o = Options::try_parse_from(["warren-perf"]).unwrap();
        assert!(o.validate().is_err(), "no time and no counts");
        let mut o = Options::try_parse_from(["warren-perf", "-z", "1", "-A", "0"]).unwrap();
        assert!(o.validate().is_err());
        let mut o = Options::try_parse_from(["warren-perf", "-z", "1", "-f", "bogus"]).unwrap();
        assert!(o.validate().is_err());
        let mut o = Options::try_parse_from(["warren-perf", "-z", "1", "-q", "70000"]).unwrap();
        assert!(o.validate().is_err());
        assert!(Options::try_parse_from(["warren-perf", "-x", "many"]).is_err());
    }

    #[test]
    fn uris() {
        let u = Uri::parse("amqp://localhost").unwrap();
        assert_eq!(
            (u.addr().as_str(), u.user.as_str(), u.vhost.as_str()),
            ("localhost:5672", "guest", "/")
        );
        let u = Uri::parse("amqp://a%40b:p%3Aw@[::1]:5680/my%20vh").unwrap();
        assert_eq!(u.amqp_uri(), "amqp://a%40b:p%3Aw@[::1]:5680/my%20vh");
        assert_eq!(
            Uri::parse("amqp://localhost").unwrap().amqp_uri(),
            "amqp://guest:guest@localhost:5672/%2F"
        );
        assert_eq!(u.addr(), "[::1]:5680");
        assert_eq!(
            (u.user.as_str(), u.pass.as_str(), u.vhost.as_str()),
            ("a@b", "p:w", "my vh")
        );
        assert!(Uri::parse("http://x").is_err());
        assert_eq!(Uri::parse("rabbitmq-stream://h").unwrap().port, 5552);
        assert!(Uri::parse("amqp://x:notaport").is_err());
        assert!(Uri::parse("amqp://x/%zz").is_err());
    }
}
