//! Topic permissions: RabbitMQ's per-exchange write and read patterns on
//! routing keys (access-control guide, "Topic Authorisation").
//!
//! A user may hold, per vhost and exchange, a write pattern (checked
//! against the routing key of each message published to that exchange)
//! and a read pattern (checked against the binding key of each binding
//! from it). Only topic exchanges are checked, and an exchange without a
//! topic permission is open to everyone whom the ordinary permissions let
//! in. Patterns may name `{username}`, `{vhost}` and `{client_id}`, filled
//! in per connection; a variable the connection does not have stays as
//! literal text, as RabbitMQ leaves it. Patterns match unanchored, and an
//! empty one grants nothing.
//!
//! [`TopicPermission`] is what a user holds (the sources, as definitions
//! and the HTTP API show them); [`TopicGrants`] is a connection's compiled
//! copy, taken with its `Grant` at open.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{BrokerError, Result};
use crate::pattern::Pattern;

/// A user's write and read patterns on one exchange of one vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPermission {
    pub exchange: String,
    pub write: String,
    pub read: String,
}

impl TopicPermission {
    /// Checked as they would compile for a user named `u` in vhost `v`.
    pub fn new(exchange: &str, write: &str, read: &str) -> Result<TopicPermission> {
        let vars = Vars {
            username: "u",
            vhost: "v",
            client_id: None,
        };
        compile(write, &vars)?;
        compile(read, &vars)?;
        Ok(TopicPermission {
            exchange: exchange.to_string(),
            write: write.to_string(),
            read: read.to_string(),
        })
    }
}

/// Which pattern a check uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicAccess {
    Write,
    Read,
}

/// What a connection fills in for a pattern's variables.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    pub username: &'a str,
    pub vhost: &'a str,
    /// AMQP 1.0's container-id; 0-9-1 and the stream protocol have none.
    pub client_id: Option<&'a str>,
}

/// `{name}` replaced by its value, regex-escaped (RabbitMQ escapes them
/// since 4.2.4: a user named `a.b` must not match `aXb`); a variable
/// without a value is escaped so the braces stay literal text (PCRE reads
/// `{client_id}` so; Rust's regex would take it for a broken repetition).
fn expand(pattern: &str, vars: &Vars) -> String {
    let mut out = pattern
        .replace("{username}", &regex::escape(vars.username))
        .replace("{vhost}", &regex::escape(vars.vhost));
    out = match vars.client_id {
        Some(id) => out.replace("{client_id}", &regex::escape(id)),
        None => out.replace("{client_id}", "\\{client_id\\}"),
    };
    out
}

/// A pattern filled in for a connection and compiled as permissions are.
fn compile(pattern: &str, vars: &Vars) -> Result<Pattern> {
    Pattern::new(&expand(pattern, vars))
}

#[derive(Debug)]
struct Compiled {
    write: Pattern,
    read: Pattern,
}

/// A connection's topic permissions in its vhost, compiled for its
/// variables, by exchange. Empty (the usual case) costs one branch.
#[derive(Debug, Clone, Default)]
pub struct TopicGrants {
    by_exchange: Option<Arc<HashMap<String, Compiled>>>,
}

impl TopicGrants {
    /// Compile `held` for a connection. Each was checked when set and the
    /// values filled in are escaped, so this cannot fail; if it did, the
    /// pattern would grant nothing.
    pub fn compile<'a>(held: impl IntoIterator<Item = &'a TopicPermission>, vars: &Vars) -> TopicGrants {
        let or_nothing = |r: Result<Pattern>| r.unwrap_or_else(|_| Pattern::new("").expect("valid"));
        let map: HashMap<String, Compiled> = held
            .into_iter()
            .map(|p| {
                let c = Compiled {
                    write: or_nothing(compile(&p.write, vars)),
                    read: or_nothing(compile(&p.read, vars)),
                };
                (p.exchange.clone(), c)
            })
            .collect();
        TopicGrants {
            by_exchange: (!map.is_empty()).then(|| Arc::new(map)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_exchange.is_none()
    }

    /// May `key` be used on `exchange`? Yes when the exchange has no topic
    /// permission. The caller checks only topic exchanges.
    pub fn allows(&self, access: TopicAccess, exchange: &str, key: &str) -> bool {
        let Some(c) = self.by_exchange.as_ref().and_then(|m| m.get(exchange)) else {
            return true;
        };
        match access {
            TopicAccess::Write => c.write.matches(key),
            TopicAccess::Read => c.read.matches(key),
        }
    }

    /// `allows`, or RabbitMQ's ACCESS_REFUSED text (3.10's, compared: it
    /// names neither write nor read).
    pub fn check(
        &self,
        access: TopicAccess,
        exchange: &str,
        key: &str,
        vhost: &str,
        user: &str,
    ) -> Result<()> {
        if self.allows(access, exchange, key) {
            return Ok(());
        }
        Err(BrokerError::AccessRefused(format!(
            "access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(write: &str, read: &str, client_id: Option<&str>) -> TopicGrants {
        let p = TopicPermission::new("amq.topic", write, read).unwrap();
        let vars = Vars {
            username: "alice",
            vhost: "prod",
            client_id,
        };
        TopicGrants::compile([&p], &vars)
    }

    #[test]
    fn patterns_are_per_exchange_and_unanchored() {
        let g = grants("^orders\\.", "", None);
        assert!(g.allows(TopicAccess::Write, "amq.topic", "orders.eu"));
        assert!(!g.allows(TopicAccess::Write, "amq.topic", "invoices.eu"));
        assert!(
            !g.allows(TopicAccess::Read, "amq.topic", "orders.eu"),
            "empty grants nothing"
        );
        assert!(
            g.allows(TopicAccess::Write, "other", "anything"),
            "no permission, no check"
        );
        assert!(TopicGrants::default().is_empty());
    }

    #[test]
    fn variables_are_filled_in_and_missing_ones_stay_literal() {
        let g = grants("^{username}\\.{vhost}\\.", "^{client_id}$", Some("c-1"));
        assert!(g.allows(TopicAccess::Write, "amq.topic", "alice.prod.x"));
        assert!(!g.allows(TopicAccess::Write, "amq.topic", "bob.prod.x"));
        assert!(g.allows(TopicAccess::Read, "amq.topic", "c-1"));
        // Values are literal text, not patterns.
        let p = TopicPermission::new("amq.topic", "^{username}$", ".*").unwrap();
        let dotted = Vars {
            username: "a.b",
            vhost: "/",
            client_id: None,
        };
        let g = TopicGrants::compile([&p], &dotted);
        assert!(g.allows(TopicAccess::Write, "amq.topic", "a.b"));
        assert!(!g.allows(TopicAccess::Write, "amq.topic", "aXb"));
        let g = grants(".*", "^{client_id}$", None);
        assert!(g.allows(TopicAccess::Read, "amq.topic", "{client_id}"));
        assert!(!g.allows(TopicAccess::Read, "amq.topic", "c-1"));
    }

    #[test]
    fn refusals_read_as_rabbitmqs() {
        let e = grants("^a$", ".*", None)
            .check(TopicAccess::Write, "amq.topic", "b", "prod", "alice")
            .unwrap_err();
        assert_eq!(
            e.reply_text(),
            "ACCESS_REFUSED - access to topic 'b' in exchange 'amq.topic' in vhost 'prod' refused for user 'alice'"
        );
        assert!(TopicPermission::new("x", "(", ".*").is_err());
    }
}
