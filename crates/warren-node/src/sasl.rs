//! SASL as every protocol has it: the mechanisms Warren knows, what a
//! PLAIN or AMQPLAIN response holds, a refusal, and the login counters
//! (rabbitmq_prometheus's `rabbitmq_auth_attempts_*`). Which mechanisms a
//! connection is offered and how a login is checked are
//! [`crate::login`]'s, which needs the whole node.

use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use warren_amqp091::FieldTable;

/// The mechanisms Warren knows.
pub const KNOWN: &[&str] = &["PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS"];

/// Which front end is asking (AMQPLAIN is 0-9-1's own; ANONYMOUS is
/// offered to AMQP 1.0 clients only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Amqp091,
    Amqp10,
    Stream,
}

impl Proto {
    /// As rabbitmq_prometheus labels protocols.
    pub fn label(self) -> &'static str {
        match self {
            Proto::Amqp091 => "amqp091",
            Proto::Amqp10 => "amqp10",
            Proto::Stream => "stream",
        }
    }
}

/// Login attempts, counted once each.
#[derive(Debug, Default)]
pub struct AuthStats {
    pub attempts: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

/// A refused login: who it claimed to be and why (for the log; clients get
/// their protocol's generic refusal, as RabbitMQ gives them).
#[derive(Debug, Clone)]
pub struct Refused {
    pub user: String,
    pub why: String,
    /// The mechanism is not offered on this connection (the stream
    /// protocol answers that with its own code).
    pub unsupported: bool,
}

/// RFC 4616: [authzid] NUL authcid NUL passwd.
pub fn plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = parts.next()?;
    let pass = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    Some((
        String::from_utf8(user.to_vec()).ok()?,
        String::from_utf8(pass.to_vec()).ok()?,
    ))
}

/// AMQPLAIN: a field table's entries (LOGIN, PASSWORD), without the
/// table's length prefix.
pub fn amqplain(response: &[u8]) -> Option<(String, String)> {
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&(response.len() as u32).to_be_bytes());
    framed.extend_from_slice(response);
    let t = FieldTable::decode_from(Bytes::from(framed)).ok()?;
    let get = |k: &str| {
        t.get(k)
            .and_then(|v| v.as_bytes())
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    Some((get("LOGIN")?, get("PASSWORD")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain_responses() {
        assert_eq!(plain(b"\0bob\0pw"), Some(("bob".into(), "pw".into())));
        assert_eq!(plain(b"nonul"), None);
        assert_eq!(plain(b"\0a\0b\0c"), None);
        let mut t = FieldTable::new();
        t.insert("LOGIN", "bob".into());
        t.insert("PASSWORD", "pw".into());
        let mut enc = bytes::BytesMut::new();
        t.encode(&mut enc);
        assert_eq!(amqplain(&enc[4..]), Some(("bob".into(), "pw".into())));
    }
}
