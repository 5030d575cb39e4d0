//! Queue arguments (`x-*` on queue.declare) parsed and checked once, at
//! declare time, into a [`QueueConfig`]. Errors follow RabbitMQ's texts:
//! PRECONDITION_FAILED "invalid arg 'x-max-length' for queue 'q' in vhost
//! '/': ...".

use warren_amqp091::{FieldTable, FieldValue, ShortStr};

use crate::error::BrokerError;

/// What x-max-length / x-max-length-bytes do when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest ready message.
    #[default]
    DropHead,
    /// Refuse the new message: a nack when the publisher uses confirms.
    RejectPublish,
    /// Refuse it and dead-letter it as well.
    RejectPublishDlx,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueConfig {
    pub message_ttl_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub max_length: Option<u64>,
    pub max_length_bytes: Option<u64>,
    pub overflow: Overflow,
    pub dead_letter_exchange: Option<ShortStr>,
    pub dead_letter_routing_key: Option<ShortStr>,
    /// Highest priority honoured; None for a plain FIFO queue.
    pub max_priority: Option<u8>,
    pub single_active_consumer: bool,
    /// x-queue-type.
    pub kind: QueueKind,
    /// A stream's own arguments.
    pub stream: StreamArgs,
    /// A quorum queue's own arguments.
    pub quorum: QuorumArgs,
    /// `x-consumer-timeout` (or a policy's `consumer-timeout`), ms: this
    /// queue's deliveries may stay unacknowledged this long instead of
    /// the broker's `consumer_timeout` (RabbitMQ 3.12 and later).
    pub consumer_timeout_ms: Option<u64>,
}

/// x-delivery-limit, x-quorum-initial-group-size, and publisher
/// deduplication (beyond RabbitMQ; the arguments of its community
/// plugin and of LavinMQ): x-message-deduplication, x-cache-size,
/// x-cache-ttl, x-deduplication-header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuorumArgs {
    /// None: RabbitMQ 4's default, 20 (see [`QuorumArgs::delivery_limit`]).
    pub delivery_limit: Option<i64>,
    pub initial_group_size: Option<u32>,
    /// x-message-deduplication: true.
    pub deduplication: bool,
    /// x-cache-size: how many recent keys are remembered.
    pub dedup_size: Option<u64>,
    /// x-cache-ttl: milliseconds a key is remembered.
    pub dedup_ttl: Option<u64>,
    /// x-deduplication-header: the header whose value is the key.
    pub dedup_header: Option<ShortStr>,
    /// x-dead-letter-strategy: at-least-once (in force only with
    /// reject-publish and a dead-letter exchange: see
    /// [`QueueConfig::dlx_at_least_once`]).
    pub at_least_once: bool,
    /// RabbitMQ 4.3's delayed retry: x-delayed-retry-type (all, failed,
    /// returned, disabled), x-delayed-retry-min and -max (milliseconds).
    /// Unchecked at declare, as RabbitMQ leaves them: what does not make
    /// sense turns it off (see [`QuorumArgs::delayed_retry`]).
    pub delayed_retry_type: Option<String>,
    pub delayed_retry_min: Option<i64>,
    pub delayed_retry_max: Option<i64>,
}

/// The deduplication window when x-cache-size is not given.
pub const DEDUP_WINDOW: u64 = 10_000;
/// The largest window (keys are kept in memory on every member).
pub const DEDUP_WINDOW_MAX: u64 = 1 << 20;

impl QuorumArgs {
    /// The deduplication window in force: 0 without deduplication.
    pub fn dedup_window(&self) -> u32 {
        if !self.deduplication {
            return 0;
        }
        self.dedup_size.unwrap_or(DEDUP_WINDOW).clamp(1, DEDUP_WINDOW_MAX) as u32
    }

    /// The delayed retry in force: a type other than `disabled` and a
    /// positive minimum; the maximum is the minimum when absent, invalid
    /// or lower (RabbitMQ 4.3's reading).
    pub fn delayed_retry(&self) -> Option<warren_fifo::DelayedRetry> {
        use warren_fifo::RetryKind;
        let kind = match self.delayed_retry_type.as_deref()? {
            "all" => RetryKind::All,
            "failed" => RetryKind::Failed,
            "returned" => RetryKind::Returned,
            _ => return None,
        };
        let min_ms = u64::try_from(self.delayed_retry_min?).ok().filter(|m| *m > 0)?;
        let max_ms = self
            .delayed_retry_max
            .and_then(|m| u64::try_from(m).ok())
            .filter(|m| *m >= min_ms)
            .unwrap_or(min_ms);
        Some(warren_fifo::DelayedRetry { kind, min_ms, max_ms })
    }

    /// The delivery limit in force: RabbitMQ 4 defaults it to 20, and a
    /// negative one means none.
    pub fn delivery_limit(&self) -> Option<u32> {
        match self.delivery_limit {
            None => Some(20),
            Some(n) if n < 0 => None,
            Some(n) => Some(n.min(u32::MAX as i64) as u32),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueKind {
    #[default]
    Classic,
    Stream,
    Quorum,
}

/// x-max-age, x-stream-max-segment-size-bytes, x-stream-filter-size-bytes
/// (x-max-length-bytes is shared with classic queues).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamArgs {
    pub max_age_ms: Option<u64>,
    pub max_segment_bytes: Option<u64>,
    pub filter_size: Option<u8>,
}

/// An x-max-age value: a number and a unit, Y M D h m s (RabbitMQ's).
pub fn parse_max_age(s: &str) -> Option<u64> {
    let unit = s.chars().last()?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        'Y' => 365 * 24 * 3600,
        'M' => 30 * 24 * 3600,
        'D' => 24 * 3600,
        'h' => 3600,
        'm' => 60,
        's' => 1,
        _ => return None,
    };
    n.checked_mul(secs * 1000)
}

fn invalid(arg: &str, queue: &ShortStr, vhost: &str, why: String) -> BrokerError {
    BrokerError::PreconditionFailed(format!(
        "invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {why}"
    ))
}

fn integer(v: &FieldValue, arg: &str, queue: &ShortStr, vhost: &str) -> Result<i64, BrokerError> {
    v.as_i64().ok_or_else(|| {
        invalid(
            arg,
            queue,
            vhost,
            format!("\"expected integer, got {}\"", v.type_name()),
        )
    })
}

fn non_negative(v: &FieldValue, arg: &str, q: &ShortStr, vh: &str) -> Result<u64, BrokerError> {
    let n = integer(v, arg, q, vh)?;
    if n < 0 {
        return Err(invalid(arg, q, vh, format!("{{value_negative,{n}}}")));
    }
    Ok(n as u64)
}

/// RabbitMQ caps TTLs at ten years.
const MAX_TTL_MS: u64 = 315_360_000_000;

fn ttl(v: &FieldValue, arg: &str, q: &ShortStr, vh: &str) -> Result<u64, BrokerError> {
    let n = non_negative(v, arg, q, vh)?;
    if n > MAX_TTL_MS {
        return Err(invalid(arg, q, vh, format!("{{value_too_large,{n}}}")));
    }
    Ok(n)
}

fn string(v: &FieldValue, arg: &str, q: &ShortStr, vh: &str) -> Result<ShortStr, BrokerError> {
    match v {
        FieldValue::LongStr(b) => Ok(ShortStr::from_bytes(b.clone())),
        other => Err(invalid(
            arg,
            q,
            vh,
            format!("{{unacceptable_type,{}}}", other.type_name()),
        )),
    }
}

/// A string argument that must be one of `allowed`.
fn one_of(
    v: &FieldValue,
    arg: &str,
    q: &ShortStr,
    vh: &str,
    allowed: &[&[u8]],
    why: &str,
) -> Result<(), BrokerError> {
    if allowed.contains(&string(v, arg, q, vh)?.as_bytes()) {
        Ok(())
    } else {
        Err(invalid(arg, q, vh, why.into()))
    }
}

impl QueueConfig {
    /// At-least-once dead-lettering is in force: asked for, with
    /// `reject-publish` and a dead-letter exchange (RabbitMQ falls back to
    /// at-most-once otherwise: drop-head would drop what waits to be
    /// dead-lettered, and with no exchange there is nowhere to send it).
    pub fn dlx_at_least_once(&self) -> bool {
        self.quorum.at_least_once
            && self.overflow == Overflow::RejectPublish
            && self.dead_letter_exchange.is_some()
    }

    pub fn from_arguments(
        args: &FieldTable,
        queue: &ShortStr,
        vhost: &str,
    ) -> Result<QueueConfig, BrokerError> {
        let mut c = QueueConfig::default();
        for (k, v) in args.iter() {
            let key = k.to_str_lossy();
            match &*key {
                "x-message-ttl" => c.message_ttl_ms = Some(ttl(v, &key, queue, vhost)?),
                "x-expires" => {
                    let n = ttl(v, &key, queue, vhost)?;
                    if n == 0 {
                        return Err(invalid(&key, queue, vhost, "{value_zero,0}".into()));
                    }
                    c.expires_ms = Some(n);
                }
                "x-max-length" => c.max_length = Some(non_negative(v, &key, queue, vhost)?),
                "x-consumer-timeout" => c.consumer_timeout_ms = Some(non_negative(v, &key, queue, vhost)?),
                "x-max-length-bytes" => c.max_length_bytes = Some(non_negative(v, &key, queue, vhost)?),
                "x-overflow" => {
                    c.overflow = match string(v, &key, queue, vhost)?.as_bytes() {
                        b"drop-head" => Overflow::DropHead,
                        b"reject-publish" => Overflow::RejectPublish,
                        b"reject-publish-dlx" => Overflow::RejectPublishDlx,
                        _ => return Err(invalid(&key, queue, vhost, "invalid_overflow".into())),
                    }
                }
                "x-dead-letter-exchange" => c.dead_letter_exchange = Some(string(v, &key, queue, vhost)?),
                "x-dead-letter-routing-key" => {
                    c.dead_letter_routing_key = Some(string(v, &key, queue, vhost)?)
                }
                "x-max-priority" => {
                    let n = non_negative(v, &key, queue, vhost)?;
                    // RabbitMQ accepts up to 255; 0 means no priorities.
                    if n > 255 {
                        return Err(invalid(&key, queue, vhost, format!("{{value_too_large,{n}}}")));
                    }
                    c.max_priority = if n == 0 { None } else { Some(n as u8) };
                }
                "x-single-active-consumer" => match v {
                    FieldValue::Bool(b) => c.single_active_consumer = *b,
                    other => {
                        return Err(invalid(
                            &key,
                            queue,
                            vhost,
                            format!("{{unacceptable_type,{}}}", other.type_name()),
                        ))
                    }
                },
                "x-max-age" => {
                    let text = string(v, &key, queue, vhost)?;
                    c.stream.max_age_ms = Some(
                        parse_max_age(&text.to_str_lossy())
                            .ok_or_else(|| invalid(&key, queue, vhost, "invalid_max_age".into()))?,
                    );
                }
                "x-stream-max-segment-size-bytes" => {
                    c.stream.max_segment_bytes = Some(non_negative(v, &key, queue, vhost)?.max(1))
                }
                "x-stream-filter-size-bytes" => {
                    let n = integer(v, &key, queue, vhost)?;
                    if !(16..=255).contains(&n) {
                        return Err(invalid(&key, queue, vhost, "{out_of_range,16,255}".into()));
                    }
                    c.stream.filter_size = Some(n as u8);
                }
                "x-queue-type" => match v.as_bytes() {
                    Some(b"classic") => {}
                    Some(b"stream") => c.kind = QueueKind::Stream,
                    Some(b"quorum") => c.kind = QueueKind::Quorum,
                    Some(other) => {
                        return Err(invalid(
                            &key,
                            queue,
                            vhost,
                            format!("unsupported queue type '{}'", String::from_utf8_lossy(other)),
                        ))
                    }
                    None => {
                        return Err(invalid(
                            &key,
                            queue,
                            vhost,
                            format!("{{unacceptable_type,{}}}", v.type_name()),
                        ))
                    }
                },
                // Where a new queue lives on a cluster (see
                // `leader_locator_balanced`): RabbitMQ 4's two strategies,
                // and 3.x's classic-queue names for them.
                "x-queue-leader-locator" => one_of(
                    v,
                    &key,
                    queue,
                    vhost,
                    // 3.x streams' least-leaders and random too (stream
                    // clients send least-leaders): both mean balanced.
                    &[b"client-local", b"balanced", b"least-leaders", b"random"],
                    "invalid_queue_leader_locator",
                )?,
                // RabbitMQ 3.10 takes a value that is not a number and
                // ignores it.
                "x-delivery-limit" => {
                    if let Some(n) = v.as_i64() {
                        c.quorum.delivery_limit = Some(n)
                    }
                }
                "x-delayed-retry-type" => {
                    c.quorum.delayed_retry_type =
                        v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned())
                }
                "x-delayed-retry-min" => c.quorum.delayed_retry_min = v.as_i64(),
                "x-delayed-retry-max" => c.quorum.delayed_retry_max = v.as_i64(),
                "x-message-deduplication" => match v {
                    FieldValue::Bool(b) => c.quorum.deduplication = *b,
                    _ => return Err(invalid(&key, queue, vhost, "expected a boolean".into())),
                },
                "x-cache-size" => c.quorum.dedup_size = Some(non_negative(v, &key, queue, vhost)?),
                "x-cache-ttl" => c.quorum.dedup_ttl = Some(non_negative(v, &key, queue, vhost)?),
                "x-deduplication-header" => c.quorum.dedup_header = Some(string(v, &key, queue, vhost)?),
                "x-dead-letter-strategy" => {
                    one_of(
                        v,
                        &key,
                        queue,
                        vhost,
                        &[b"at-most-once", b"at-least-once"],
                        "invalid_dead_letter_strategy",
                    )?;
                    c.quorum.at_least_once = v.as_bytes() == Some(b"at-least-once");
                }
                "x-quorum-initial-group-size" => {
                    c.quorum.initial_group_size =
                        Some(non_negative(v, &key, queue, vhost)?.clamp(1, 1 << 16) as u32)
                }
                "x-queue-master-locator" => one_of(
                    v,
                    &key,
                    queue,
                    vhost,
                    &[b"client-local", b"min-masters", b"random"],
                    "invalid_queue_master_locator",
                )?,
                // Other arguments (x-queue-mode, x-queue-version...) are
                // accepted and kept, as RabbitMQ does with unknown ones.
                _ => {}
            }
        }
        if c.dead_letter_routing_key.is_some() && c.dead_letter_exchange.is_none() {
            return Err(invalid(
                "x-dead-letter-routing-key",
                queue,
                vhost,
                "routing_key_but_no_dlx_defined".into(),
            ));
        }
        Ok(c)
    }
}

/// Whether a new queue with `args`, under a policy whose definition is
/// `policy`, is placed on the
/// cluster's node with the fewest queues (`balanced`; 3.x's `min-masters`,
/// `least-leaders` and `random` mean the same in RabbitMQ 4) rather than on the node its
/// client is connected to (`client-local`, the default). The argument
/// wins over the policy's `queue-leader-locator` (or 3.x's
/// `queue-master-locator`).
pub fn leader_locator_balanced(args: &FieldTable, policy: Option<&FieldTable>) -> bool {
    let from = |t: &FieldTable, leader: &str, master: &str| {
        t.get(leader)
            .or_else(|| t.get(master))
            .and_then(|v| v.as_bytes())
            .map(|b| matches!(b, b"balanced" | b"min-masters" | b"random" | b"least-leaders"))
    };
    from(args, "x-queue-leader-locator", "x-queue-master-locator")
        .or_else(|| from(policy?, "queue-leader-locator", "queue-master-locator"))
        .unwrap_or(false)
}

/// The arguments whose values must match on redeclare (RabbitMQ checks these
/// and ignores the rest).
pub const EQUIVALENCE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-mode",
    "x-queue-version",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-stream-filter-size-bytes",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, FieldValue)]) -> Result<QueueConfig, BrokerError> {
        let mut t = FieldTable::new();
        for (k, v) in pairs {
            t.insert(k, v.clone());
        }
        QueueConfig::from_arguments(&t, &"q".into(), "/")
    }

    #[test]
    fn parses_known_arguments() {
        let c = cfg(&[
            ("x-message-ttl", FieldValue::I32(1000)),
            ("x-max-length", FieldValue::I64(5)),
            ("x-overflow", "reject-publish".into()),
            ("x-dead-letter-exchange", "dlx".into()),
            ("x-max-priority", FieldValue::U8(10)),
            ("x-single-active-consumer", FieldValue::Bool(true)),
        ])
        .unwrap();
        assert_eq!(c.message_ttl_ms, Some(1000));
        assert_eq!(c.max_length, Some(5));
        assert_eq!(c.overflow, Overflow::RejectPublish);
        assert_eq!(c.dead_letter_exchange.as_ref().unwrap().as_bytes(), b"dlx");
        assert_eq!(c.max_priority, Some(10));
        assert!(c.single_active_consumer);
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            ("x-message-ttl", FieldValue::I32(-1)),
            ("x-message-ttl", "10".into()),
            ("x-expires", FieldValue::I32(0)),
            ("x-overflow", "drop-tail".into()),
            ("x-max-priority", FieldValue::I32(256)),
            ("x-single-active-consumer", "yes".into()),
        ] {
            let e = cfg(std::slice::from_ref(&bad)).unwrap_err();
            assert_eq!(e.reply_code(), 406, "{bad:?}");
            assert!(e.to_string().contains(bad.0), "{e}");
        }
    }
}
