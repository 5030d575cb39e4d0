//! AMQP 1.0 addresses as RabbitMQ resolves them (its AMQP 1.0 guide,
//! "Address"). Version 2 (RabbitMQ 4), percent-encoded segments:
//!
//! - targets: `/exchanges/:exchange/:routing-key`, `/exchanges/:exchange`
//!   (empty routing key), `/queues/:queue`, or null (each message's `to`
//!   holds one of the first three);
//! - sources: `/queues/:queue`.
//!
//! Version 1 (RabbitMQ 3.x's plugin), taken as written: `/amq/queue/:q`,
//! `/queue/:q`, `/exchange/:x/:key`, `/exchange/:x` and `/topic/:key` for
//! targets; `/amq/queue/:q` and `/queue/:q` for sources. The default
//! exchange cannot be named in an exchange form: `/queues/` is for that.

/// Where a sending link's (or a message's) messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Through the default exchange to this queue (which must exist).
    Queue(String),
    /// To an exchange with a fixed routing key.
    Exchange { exchange: String, routing_key: String },
    /// Null target: each message's `to` property says.
    PerMessage,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address '{address}': {why}")]
pub struct AddressError {
    pub address: String,
    pub why: &'static str,
}

fn bad(address: &str, why: &'static str) -> AddressError {
    AddressError {
        address: address.to_string(),
        why,
    }
}

/// RFC 3986 percent-decoding of one path segment (`whole` names the
/// address in errors).
pub fn decode_segment(segment: &str, whole: &str) -> Result<String, AddressError> {
    decode(segment, whole)
}

fn decode(segment: &str, whole: &str) -> Result<String, AddressError> {
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = segment
                .get(i + 1..i + 3)
                .ok_or_else(|| bad(whole, "truncated percent-encoding"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad(whole, "bad percent-encoding"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(whole, "not UTF-8 once decoded"))
}

fn nonempty_exchange(x: String, whole: &str) -> Result<String, AddressError> {
    if x.is_empty() {
        Err(bad(
            whole,
            "the default exchange is addressed with /queues/:queue",
        ))
    } else {
        Ok(x)
    }
}

/// A target address (None: the null address).
pub fn target(address: Option<&str>) -> Result<Target, AddressError> {
    let Some(a) = address else {
        return Ok(Target::PerMessage);
    };
    if let Some(rest) = a.strip_prefix("/queues/") {
        if rest.contains('/') {
            return Err(bad(a, "a queue name's slashes must be percent-encoded"));
        }
        return Ok(Target::Queue(decode(rest, a)?));
    }
    if let Some(rest) = a.strip_prefix("/exchanges/") {
        let mut parts = rest.splitn(2, '/');
        let exchange = nonempty_exchange(decode(parts.next().unwrap_or(""), a)?, a)?;
        let routing_key = match parts.next() {
            Some(k) if k.contains('/') => {
                return Err(bad(a, "a routing key's slashes must be percent-encoded"))
            }
            Some(k) => decode(k, a)?,
            None => String::new(),
        };
        return Ok(Target::Exchange {
            exchange,
            routing_key,
        });
    }
    // Version 1, as RabbitMQ 3.x's plugin wrote them (no percent-decoding).
    if let Some(q) = a
        .strip_prefix("/amq/queue/")
        .or_else(|| a.strip_prefix("/queue/"))
    {
        if q.is_empty() {
            return Err(bad(a, "no queue name"));
        }
        return Ok(Target::Queue(q.to_string()));
    }
    if let Some(rest) = a.strip_prefix("/exchange/") {
        let (exchange, routing_key) = match rest.split_once('/') {
            Some((x, k)) => (x, k),
            None => (rest, ""),
        };
        return Ok(Target::Exchange {
            exchange: nonempty_exchange(exchange.to_string(), a)?,
            routing_key: routing_key.to_string(),
        });
    }
    if let Some(key) = a.strip_prefix("/topic/") {
        return Ok(Target::Exchange {
            exchange: "amq.topic".into(),
            routing_key: key.to_string(),
        });
    }
    Err(bad(
        a,
        "not a RabbitMQ address (/queues/:queue, /exchanges/:exchange[/:key])",
    ))
}

/// A source address: the queue a receiving link consumes from.
pub fn source(address: Option<&str>) -> Result<String, AddressError> {
    let Some(a) = address else {
        return Err(bad("", "a receiving link needs a source address"));
    };
    if let Some(rest) = a.strip_prefix("/queues/") {
        if rest.is_empty() || rest.contains('/') {
            return Err(bad(a, "expected /queues/:queue"));
        }
        return decode(rest, a);
    }
    if let Some(q) = a
        .strip_prefix("/amq/queue/")
        .or_else(|| a.strip_prefix("/queue/"))
    {
        if !q.is_empty() {
            return Ok(q.to_string());
        }
    }
    Err(bad(a, "not a RabbitMQ source address (/queues/:queue)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Target {
        Target::Queue(s.into())
    }
    fn x(e: &str, k: &str) -> Target {
        Target::Exchange {
            exchange: e.into(),
            routing_key: k.into(),
        }
    }

    #[test]
    fn v2_targets() {
        assert_eq!(target(Some("/queues/orders")), Ok(q("orders")));
        assert_eq!(target(Some("/queues/a%2Fb%20c")), Ok(q("a/b c")));
        assert_eq!(
            target(Some("/exchanges/amq.direct/rk")),
            Ok(x("amq.direct", "rk"))
        );
        assert_eq!(target(Some("/exchanges/fan")), Ok(x("fan", "")));
        assert_eq!(target(Some("/exchanges/x/a%2Fb")), Ok(x("x", "a/b")));
        assert_eq!(target(None), Ok(Target::PerMessage));
    }

    #[test]
    fn v1_targets() {
        assert_eq!(target(Some("/amq/queue/q1")), Ok(q("q1")));
        assert_eq!(target(Some("/queue/q2")), Ok(q("q2")));
        assert_eq!(target(Some("/exchange/amq.topic/a.b")), Ok(x("amq.topic", "a.b")));
        assert_eq!(target(Some("/exchange/fan")), Ok(x("fan", "")));
        assert_eq!(target(Some("/topic/a.b")), Ok(x("amq.topic", "a.b")));
    }

    #[test]
    fn bad_targets() {
        for a in [
            "/exchanges//rk",
            "/exchanges/",
            "/queues/a/b",
            "/exchanges/x/a/b",
            "/queues/%zz",
            "/queues/%4",
            "/queues/%ff",
            "orders",
            "/amq/queue/",
            "/exchange//k",
        ] {
            assert!(target(Some(a)).is_err(), "{a}");
        }
    }

    #[test]
    fn sources() {
        assert_eq!(source(Some("/queues/q")), Ok("q".into()));
        assert_eq!(source(Some("/queues/a%2Fb")), Ok("a/b".into()));
        assert_eq!(source(Some("/amq/queue/q")), Ok("q".into()));
        assert_eq!(source(Some("/queue/q")), Ok("q".into()));
        assert!(source(None).is_err());
        assert!(source(Some("/queues/")).is_err());
        assert!(source(Some("/exchanges/x")).is_err());
    }
}
