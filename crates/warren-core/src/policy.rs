//! Policies (RabbitMQ's "Policies" guide): named rules that give the
//! queues and exchanges of a vhost whose names match a pattern settings
//! they were not declared with: TTLs, length limits, dead-lettering, an
//! alternate exchange, stream retention. At most one policy applies to an
//! object, the matching one with the highest priority (ties go to the
//! first name in order, so the choice is stable).
//!
//! A queue's settings are its declared `x-` arguments with the policy's
//! merged in as RabbitMQ 3.10 merges them: for `message-ttl`, `expires`,
//! `max-length`, `max-length-bytes`, `delayed-retry-min` and
//! `delayed-retry-max` the lower of the two applies, for
//! `delayed-retry-type` the policy wins (RabbitMQ 4.3), for every other
//! key the argument wins over the policy.

use std::sync::Arc;

use regex::Regex;
use warren_amqp091::{FieldTable, FieldValue};

use crate::queue::args::{parse_max_age, QueueKind};

/// What kind of object a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    All,
    Queues,
    Exchanges,
    ClassicQueues,
    QuorumQueues,
    Streams,
}

impl ApplyTo {
    pub fn parse(s: &str) -> Option<ApplyTo> {
        Some(match s {
            "all" => ApplyTo::All,
            "queues" => ApplyTo::Queues,
            "exchanges" => ApplyTo::Exchanges,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }
}

/// Why a policy was refused; the text is what the HTTP API returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Validation failed\n\n{0}\n")]
pub struct PolicyError(pub String);

#[derive(Debug)]
pub struct Policy {
    pub vhost: String,
    pub name: String,
    pub pattern: String,
    regex: Regex,
    pub apply_to: ApplyTo,
    pub priority: i64,
    /// Keys as in RabbitMQ's policy definitions (`message-ttl`, not
    /// `x-message-ttl`).
    pub definition: FieldTable,
}

/// Keys that act on queues, how each is checked, and what RabbitMQ calls
/// its value when refusing one ("-1 is not a valid message TTL").
const QUEUE_KEYS: &[(&str, Check, &str)] = &[
    ("message-ttl", Check::NonNegative, "message TTL"),
    ("expires", Check::Positive, "queue expiry"),
    ("max-length", Check::NonNegative, "maximum length"),
    ("max-length-bytes", Check::NonNegative, "maximum length in bytes"),
    (
        "overflow",
        Check::OneOf(&["drop-head", "reject-publish", "reject-publish-dlx"]),
        "overflow value",
    ),
    ("dead-letter-exchange", Check::Text, "dead letter exchange name"),
    ("dead-letter-routing-key", Check::Text, "dead letter routing key"),
    ("consumer-timeout", Check::NonNegative, "consumer timeout"),
    (
        "dead-letter-strategy",
        Check::OneOf(&["at-most-once", "at-least-once"]),
        "dead letter strategy",
    ),
    ("max-age", Check::MaxAge, "max age"),
    // RabbitMQ 4.3's delayed retry of quorum queues' returns.
    (
        "delayed-retry-type",
        Check::OneOf(&["all", "failed", "returned", "disabled"]),
        "delayed retry type",
    ),
    ("delayed-retry-min", Check::Positive, "delayed retry minimum"),
    ("delayed-retry-max", Check::Positive, "delayed retry maximum"),
    (
        "stream-max-segment-size-bytes",
        Check::NonNegative,
        "segment size",
    ),
];

/// Keys RabbitMQ knows that Warren accepts and keeps but that change
/// nothing here (mirroring, federation, quorum queues, queue versions),
/// or that only a cluster reads when it places a new queue (the locators).
const KEPT_KEYS: &[&str] = &[
    "queue-mode",
    "queue-version",
    "queue-master-locator",
    "queue-leader-locator",
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "delivery-limit",
    "federation-upstream",
    "federation-upstream-set",
    "initial-cluster-size",
];

/// Where the lower of the policy's value and the argument applies.
const MIN_KEYS: &[&str] = &[
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "delayed-retry-min",
    "delayed-retry-max",
];

/// Where the policy's value wins over the argument (RabbitMQ 4.3's
/// delayed retry type).
const POLICY_KEYS: &[&str] = &["delayed-retry-type"];

#[derive(Debug, Clone, Copy)]
enum Check {
    NonNegative,
    Positive,
    Text,
    OneOf(&'static [&'static str]),
    MaxAge,
}

impl Check {
    fn ok(self, v: &FieldValue) -> bool {
        let int = v.as_i64();
        let text = v.as_bytes().map(String::from_utf8_lossy);
        match self {
            Check::NonNegative => int.is_some_and(|n| n >= 0),
            Check::Positive => int.is_some_and(|n| n > 0),
            Check::Text => text.is_some(),
            Check::OneOf(allowed) => text.as_deref().is_some_and(|t| allowed.contains(&t)),
            Check::MaxAge => text.as_deref().and_then(parse_max_age).is_some(),
        }
    }
}

/// A value as RabbitMQ's messages print it: numbers as they are, strings
/// as Erlang binaries (`<<"x">>`).
fn erlang(v: &FieldValue) -> String {
    match (v.as_i64(), v.as_bytes(), v.as_bool()) {
        (Some(n), _, _) => n.to_string(),
        (_, Some(b), _) => format!("<<\"{}\">>", String::from_utf8_lossy(b)),
        (_, _, Some(b)) => b.to_string(),
        _ => format!("{v:?}"),
    }
}

impl Policy {
    pub fn new(
        vhost: &str,
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: FieldTable,
    ) -> Result<Policy, PolicyError> {
        let regex =
            Regex::new(pattern).map_err(|e| PolicyError(format!("invalid pattern '{pattern}': {e}")))?;
        let apply_to = ApplyTo::parse(apply_to)
            .ok_or_else(|| PolicyError(format!("'{apply_to}' is not a valid apply-to value")))?;
        if definition.is_empty() {
            return Err(PolicyError("no policy provided".into()));
        }
        let mut unknown = Vec::new();
        for (k, v) in definition.iter() {
            let key = k.to_str_lossy();
            let check = match QUEUE_KEYS.iter().find(|(name, ..)| *name == key) {
                Some((_, check, what)) => Some((*check, *what)),
                None if key == "alternate-exchange" => Some((Check::Text, "alternate exchange name")),
                None if KEPT_KEYS.contains(&&*key) => None,
                None => {
                    unknown.push(format!("{{<<\"{key}\">>,{}}}", erlang(v)));
                    None
                }
            };
            if let Some((check, what)) = check {
                if !check.ok(v) {
                    return Err(PolicyError(format!("{} is not a valid {what}", erlang(v))));
                }
            }
        }
        if !unknown.is_empty() {
            return Err(PolicyError(format!(
                "[{}] are not recognised policy settings",
                unknown.join(",")
            )));
        }
        Ok(Policy {
            vhost: vhost.into(),
            name: name.into(),
            pattern: pattern.into(),
            regex,
            apply_to,
            priority,
            definition,
        })
    }

    /// Does the policy apply to the queue `name` of `kind`? (Patterns
    /// match anywhere in the name, as RabbitMQ's `re:run`.)
    pub fn matches_queue(&self, name: &[u8], kind: QueueKind) -> bool {
        let applies = match self.apply_to {
            ApplyTo::All | ApplyTo::Queues => true,
            ApplyTo::ClassicQueues => kind == QueueKind::Classic,
            ApplyTo::Streams => kind == QueueKind::Stream,
            ApplyTo::QuorumQueues => kind == QueueKind::Quorum,
            ApplyTo::Exchanges => false,
        };
        applies && self.regex.is_match(&String::from_utf8_lossy(name))
    }

    pub fn matches_exchange(&self, name: &[u8]) -> bool {
        matches!(self.apply_to, ApplyTo::All | ApplyTo::Exchanges)
            && self.regex.is_match(&String::from_utf8_lossy(name))
    }

    /// The policy's alternate exchange, if it names one.
    pub fn alternate_exchange(&self) -> Option<&[u8]> {
        self.definition
            .get("alternate-exchange")
            .and_then(|v| v.as_bytes())
    }
}

/// The policy for an object among `policies`: of those `matches` accepts,
/// the highest priority, then the first name.
pub fn pick<'a>(
    policies: impl IntoIterator<Item = &'a Arc<Policy>>,
    matches: impl Fn(&Policy) -> bool,
) -> Option<Arc<Policy>> {
    policies
        .into_iter()
        .filter(|p| matches(p))
        .min_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(&b.name)))
        .cloned()
}

/// A queue's declared arguments with `policy` merged in (see the module
/// docs for which side wins).
pub fn effective_arguments(arguments: &FieldTable, policy: Option<&Policy>) -> FieldTable {
    let Some(policy) = policy else {
        return arguments.clone();
    };
    let mut merged = arguments.clone();
    for (key, ..) in QUEUE_KEYS {
        let Some(pv) = policy.definition.get(key) else {
            continue;
        };
        let arg = format!("x-{key}");
        match arguments.get(arg.as_str()) {
            None => merged.insert(arg.as_str(), pv.clone()),
            Some(av) if MIN_KEYS.contains(key) => {
                if let (Some(a), Some(p)) = (av.as_i64(), pv.as_i64()) {
                    merged.insert(arg.as_str(), FieldValue::I64(a.min(p)));
                }
            }
            Some(_) if POLICY_KEYS.contains(key) => merged.insert(arg.as_str(), pv.clone()),
            Some(_) => {}
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(pairs: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in pairs {
            t.insert(k, v.clone());
        }
        t
    }

    fn policy(name: &str, pattern: &str, apply_to: &str, priority: i64, d: FieldTable) -> Arc<Policy> {
        Arc::new(Policy::new("/", name, pattern, apply_to, priority, d).unwrap())
    }

    #[test]
    fn definitions_are_checked_like_rabbitmqs() {
        let bad =
            |pairs: &[(&str, FieldValue)]| Policy::new("/", "p", ".*", "all", 0, def(pairs)).unwrap_err().0;
        // RabbitMQ 3.10's texts, as its HTTP API returned them.
        assert_eq!(
            bad(&[("message-ttl", FieldValue::I64(-1))]),
            "-1 is not a valid message TTL"
        );
        assert_eq!(
            bad(&[("expires", FieldValue::I64(0))]),
            "0 is not a valid queue expiry"
        );
        assert_eq!(
            bad(&[("overflow", "x".into())]),
            "<<\"x\">> is not a valid overflow value"
        );
        assert_eq!(
            bad(&[("max-age", "7 days".into())]),
            "<<\"7 days\">> is not a valid max age"
        );
        assert_eq!(
            bad(&[("dead-letter-exchange", FieldValue::I64(1))]),
            "1 is not a valid dead letter exchange name"
        );
        assert_eq!(
            bad(&[("x-message-ttl", FieldValue::I64(1)), ("foo", "bar".into())]),
            "[{<<\"x-message-ttl\">>,1},{<<\"foo\">>,<<\"bar\">>}] are not recognised policy settings"
        );
        assert!(bad(&[]).contains("no policy"));
        assert!(Policy::new(
            "/",
            "p",
            "(",
            "all",
            0,
            def(&[("max-length", FieldValue::I64(1))])
        )
        .is_err());
        assert!(Policy::new(
            "/",
            "p",
            ".*",
            "nodes",
            0,
            def(&[("max-length", FieldValue::I64(1))])
        )
        .is_err());
        assert!(Policy::new("/", "p", ".*", "all", 0, def(&[("ha-mode", "all".into())])).is_ok());
    }

    #[test]
    fn the_highest_priority_match_applies() {
        let d = || def(&[("max-length", FieldValue::I64(1))]);
        let ps = [
            policy("low", "^orders", "queues", 0, d()),
            policy("high", "^orders\\.eu", "all", 5, d()),
            policy("exchanges", ".*", "exchanges", 9, d()),
            policy("streams", ".*", "streams", 9, d()),
        ];
        let for_queue = |n: &str, k| pick(&ps, |p| p.matches_queue(n.as_bytes(), k)).map(|p| p.name.clone());
        assert_eq!(
            for_queue("orders.eu.1", QueueKind::Classic).as_deref(),
            Some("high")
        );
        assert_eq!(for_queue("orders.us", QueueKind::Classic).as_deref(), Some("low"));
        assert_eq!(
            for_queue("orders.us", QueueKind::Stream).as_deref(),
            Some("streams")
        );
        assert_eq!(for_queue("invoices", QueueKind::Classic), None);
        let x = pick(&ps, |p| p.matches_exchange(b"orders.eu")).map(|p| p.name.clone());
        assert_eq!(x.as_deref(), Some("exchanges"));
    }

    #[test]
    fn limits_take_the_lower_value_and_other_arguments_win() {
        let p = policy(
            "p",
            ".*",
            "all",
            0,
            def(&[
                ("max-length", FieldValue::I64(10)),
                ("message-ttl", FieldValue::I64(5000)),
                ("dead-letter-exchange", "from-policy".into()),
                ("overflow", "reject-publish".into()),
            ]),
        );
        let args = def(&[
            ("x-max-length", FieldValue::I32(100)),
            ("x-message-ttl", FieldValue::I32(1000)),
            ("x-dead-letter-exchange", "from-args".into()),
        ]);
        let m = effective_arguments(&args, Some(&p));
        assert_eq!(m.get("x-max-length").and_then(|v| v.as_i64()), Some(10));
        assert_eq!(m.get("x-message-ttl").and_then(|v| v.as_i64()), Some(1000));
        assert_eq!(
            m.get("x-dead-letter-exchange").and_then(|v| v.as_bytes()),
            Some(&b"from-args"[..])
        );
        assert_eq!(
            m.get("x-overflow").and_then(|v| v.as_bytes()),
            Some(&b"reject-publish"[..])
        );
        assert_eq!(effective_arguments(&args, None), args);
    }
}
