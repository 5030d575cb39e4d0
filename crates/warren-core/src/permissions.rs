//! A user's permissions in one vhost: RabbitMQ's configure / write / read
//! regular expressions (access-control guide, "How Permissions Work").
//!
//! Each protocol front end asks [`Permission::check`] before an operation:
//! configure to declare or delete a resource, write to publish to an
//! exchange or bind a queue, read to consume from a queue or bind from an
//! exchange. Patterns are matched unanchored, as RabbitMQ's `re:run` does;
//! an empty pattern grants nothing (RabbitMQ reads it as `^$`).

use warren_amqp091::FieldTable;

use crate::error::{BrokerError, Result};
use crate::exchange::Destination;
use crate::pattern::Pattern;
use crate::topic_permissions::{TopicAccess, TopicGrants};

/// Which exchanges are topic exchanges (a vhost knows): topic permissions
/// apply to those alone.
pub trait TopicExchanges {
    fn is_topic(&self, exchange: &[u8]) -> bool;
}

impl<T: TopicExchanges + ?Sized> TopicExchanges for std::sync::Arc<T> {
    fn is_topic(&self, exchange: &[u8]) -> bool {
        (**self).is_topic(exchange)
    }
}

/// Which of the three permissions an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Configure,
    Write,
    Read,
}

/// What kind of resource is named, for the refusal's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Exchange,
    Queue,
}

impl Resource {
    fn as_str(self) -> &'static str {
        match self {
            Resource::Exchange => "exchange",
            Resource::Queue => "queue",
        }
    }
}

/// configure / write / read for one user in one vhost.
#[derive(Debug, Clone)]
pub struct Permission {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

impl Permission {
    pub fn new(configure: &str, write: &str, read: &str) -> Result<Permission> {
        Ok(Permission {
            configure: Pattern::new(configure)?,
            write: Pattern::new(write)?,
            read: Pattern::new(read)?,
        })
    }

    /// Everything: `.*` three times (what `add_user` defaults and guest get).
    pub fn full() -> Permission {
        Permission::new(".*", ".*", ".*").expect("valid")
    }

    pub fn configure(&self) -> &str {
        &self.configure.source
    }

    pub fn write(&self) -> &str {
        &self.write.source
    }

    pub fn read(&self) -> &str {
        &self.read.source
    }

    pub fn allows(&self, access: Access, name: &str) -> bool {
        let p = match access {
            Access::Configure => &self.configure,
            Access::Write => &self.write,
            Access::Read => &self.read,
        };
        p.matches(permission_name(name))
    }

    /// `allows`, or RabbitMQ's ACCESS_REFUSED text (a channel error in
    /// 0-9-1, code 403).
    pub fn check(&self, access: Access, kind: Resource, name: &str, vhost: &str, user: &str) -> Result<()> {
        if self.allows(access, name) {
            return Ok(());
        }
        Err(BrokerError::AccessRefused(format!(
            "{} access to {} '{}' in vhost '{vhost}' refused for user '{user}'",
            match access {
                Access::Configure => "configure",
                Access::Write => "write",
                Access::Read => "read",
            },
            kind.as_str(),
            permission_name(name),
        )))
    }
}

/// A connection's standing in its vhost, taken at open: who it is and
/// what it may do there. Front ends ask it before each operation.
#[derive(Debug, Clone)]
pub struct Grant {
    pub user: String,
    pub vhost: String,
    pub permission: Permission,
    /// Topic permissions, compiled for this connection.
    pub topics: TopicGrants,
}

impl Grant {
    pub fn check(&self, access: Access, kind: Resource, name: &str) -> Result<()> {
        self.permission.check(access, kind, name, &self.vhost, &self.user)
    }

    /// Publishing with `routing_key` to `exchange`: the write topic
    /// permission when it is a topic exchange of `vh` (RabbitMQ checks
    /// the publish's own key, not CC or BCC). One branch when the user has
    /// no topic permissions in this vhost.
    pub fn check_topic_write(
        &self,
        vh: &impl TopicExchanges,
        exchange: &[u8],
        routing_key: &[u8],
    ) -> Result<()> {
        self.check_topic(vh, TopicAccess::Write, exchange, routing_key)
    }

    fn check_topic(
        &self,
        vh: &impl TopicExchanges,
        access: TopicAccess,
        exchange: &[u8],
        key: &[u8],
    ) -> Result<()> {
        if self.topics.is_empty() || !vh.is_topic(exchange) {
            return Ok(());
        }
        self.topics.check(
            access,
            &String::from_utf8_lossy(exchange),
            &String::from_utf8_lossy(key),
            &self.vhost,
            &self.user,
        )
    }

    /// What declaring `name` with `args` needs, by any route (0-9-1, the
    /// HTTP API, AMQP 1.0's management node): configure on it, and, when
    /// it names an exchange to route into (a queue's dead letter
    /// exchange, an exchange's alternate exchange), write on that
    /// exchange and read on the declared one, as RabbitMQ checks.
    pub fn check_declare(&self, kind: Resource, name: &str, args: &FieldTable) -> Result<()> {
        self.check(Access::Configure, kind, name)?;
        let key = match kind {
            Resource::Queue => "x-dead-letter-exchange",
            Resource::Exchange => "alternate-exchange",
        };
        if let Some(target) = args.get(key).and_then(|v| v.as_bytes()) {
            self.check(
                Access::Write,
                Resource::Exchange,
                &String::from_utf8_lossy(target),
            )?;
            self.check(Access::Read, kind, name)?;
        }
        Ok(())
    }

    /// Binding `destination` to exchange `source` of `vh` with `key`
    /// (queue.bind, exchange.bind, unbinding too): write on the
    /// destination, read on the source, and, when the source is a topic
    /// exchange, the read topic permission on the binding key.
    pub fn check_bind(
        &self,
        vh: &impl TopicExchanges,
        source: &str,
        destination: &Destination,
        key: &[u8],
    ) -> Result<()> {
        match destination {
            Destination::Queue(q) => self.check(Access::Write, Resource::Queue, &q.to_str_lossy())?,
            Destination::Exchange(x) => self.check(Access::Write, Resource::Exchange, &x.to_str_lossy())?,
        }
        self.check(Access::Read, Resource::Exchange, source)?;
        self.check_topic(vh, TopicAccess::Read, source.as_bytes(), key)
    }
}

/// The default exchange's blank name is checked as `amq.default`
/// (access-control guide).
fn permission_name(name: &str) -> &str {
    if name.is_empty() {
        "amq.default"
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_unanchored_and_empty_grants_nothing() {
        let p = Permission::new("^tmp-", "", "orders").unwrap();
        assert!(p.allows(Access::Configure, "tmp-1"));
        assert!(!p.allows(Access::Configure, "x-tmp-1"));
        assert!(!p.allows(Access::Write, "anything"));
        assert!(p.allows(Access::Read, "eu.orders.v2"));
        assert!(!p.allows(Access::Read, "invoices"));
    }

    #[test]
    fn default_exchange_is_amq_default() {
        let p = Permission::new("", "^amq\\.default$", "").unwrap();
        assert!(p.allows(Access::Write, ""));
        let e = Permission::new("", "", "")
            .unwrap()
            .check(Access::Write, Resource::Exchange, "", "/", "bob")
            .unwrap_err();
        assert_eq!(
            e.reply_text(),
            "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'bob'"
        );
    }

    #[test]
    fn bad_regex_is_refused() {
        assert!(Permission::new("(", ".*", ".*").is_err());
    }
}
