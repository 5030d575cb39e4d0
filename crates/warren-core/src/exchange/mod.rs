//! Exchanges: the four AMQP types, RabbitMQ 4's `x-local-random`, and
//! their bindings. An exchange owns
//! its bindings and answers one question, "which destinations does this
//! message go to?"; following exchange-to-exchange bindings, alternate
//! exchanges and looking up queues is the virtual host's job.

mod binding;
mod direct;
mod fanout;
mod headers;
mod local_random;
mod topic;

use warren_amqp091::{FieldTable, FieldValue, ShortStr};

use crate::error::BrokerError;

pub use binding::{Binding, Destination};
pub use headers::headers_match;
pub use topic::TopicTrie;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
    /// `x-local-random` (RabbitMQ 4.0): one random bound queue.
    LocalRandom,
}

impl ExchangeKind {
    pub fn parse(s: &[u8]) -> Option<ExchangeKind> {
        Some(match s {
            b"direct" => ExchangeKind::Direct,
            b"fanout" => ExchangeKind::Fanout,
            b"topic" => ExchangeKind::Topic,
            b"headers" => ExchangeKind::Headers,
            b"x-local-random" => ExchangeKind::LocalRandom,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::LocalRandom => "x-local-random",
        }
    }
}

/// The type-specific index over an exchange's bindings.
#[derive(Debug)]
enum Index {
    Direct(direct::DirectIndex),
    Fanout(fanout::FanoutIndex),
    Topic(TopicTrie),
    Headers(headers::HeadersIndex),
    LocalRandom(local_random::LocalRandomIndex),
}

#[derive(Debug)]
pub struct Exchange {
    pub name: ShortStr,
    pub kind: ExchangeKind,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
    /// The `alternate-exchange` argument: where unroutable messages go.
    pub alternate_exchange: Option<ShortStr>,
    /// The policy that applies to it (its `alternate-exchange` is used when
    /// the argument is absent); kept by the vhost.
    pub policy: Option<std::sync::Arc<crate::policy::Policy>>,
    bindings: Vec<Binding>,
    index: Index,
}

impl Exchange {
    pub fn new(
        name: ShortStr,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Result<Exchange, BrokerError> {
        let alternate_exchange = match arguments.get("alternate-exchange") {
            None => None,
            Some(FieldValue::LongStr(s)) => Some(ShortStr::from_bytes(s.clone())),
            Some(other) => {
                return Err(BrokerError::PreconditionFailed(format!(
                    "invalid arg 'alternate-exchange' for exchange '{}' in vhost: {:?}",
                    name,
                    other.type_name()
                )))
            }
        };
        let index = match kind {
            ExchangeKind::Direct => Index::Direct(Default::default()),
            ExchangeKind::Fanout => Index::Fanout(Default::default()),
            ExchangeKind::Topic => Index::Topic(Default::default()),
            ExchangeKind::Headers => Index::Headers(Default::default()),
            ExchangeKind::LocalRandom => Index::LocalRandom(Default::default()),
        };
        Ok(Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            alternate_exchange,
            policy: None,
            bindings: Vec::new(),
            index,
        })
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// Add a binding; false if an identical one exists (binding is idempotent).
    pub fn bind(&mut self, b: Binding) -> bool {
        if self.bindings.contains(&b) {
            return false;
        }
        match &mut self.index {
            Index::Direct(i) => i.add(&b),
            Index::Fanout(i) => i.add(&b),
            Index::Topic(i) => i.add(&b.routing_key, b.destination.clone()),
            Index::Headers(i) => i.add(&b),
            Index::LocalRandom(i) => i.add(&b),
        }
        self.bindings.push(b);
        true
    }

    /// Remove a binding; false if there was none.
    pub fn unbind(&mut self, b: &Binding) -> bool {
        let Some(pos) = self.bindings.iter().position(|x| x == b) else {
            return false;
        };
        self.bindings.remove(pos);
        match &mut self.index {
            Index::Direct(i) => i.remove(b),
            Index::Fanout(i) => i.remove(b),
            Index::Topic(i) => i.remove(&b.routing_key, &b.destination),
            Index::Headers(i) => i.remove(b),
            Index::LocalRandom(i) => i.remove(b),
        }
        true
    }

    /// Remove every binding to `dest`; returns how many went.
    pub fn unbind_destination(&mut self, dest: &Destination) -> usize {
        let gone: Vec<Binding> = self
            .bindings
            .iter()
            .filter(|b| &b.destination == dest)
            .cloned()
            .collect();
        for b in &gone {
            self.unbind(b);
        }
        gone.len()
    }

    /// Append this exchange's own matches (not following e2e bindings).
    pub fn route(&self, routing_key: &[u8], headers: Option<&FieldTable>, out: &mut Vec<Destination>) {
        match &self.index {
            Index::Direct(i) => i.route(routing_key, out),
            Index::Fanout(i) => i.route(out),
            Index::Topic(i) => i.route(routing_key, out),
            Index::Headers(i) => i.route(headers, out),
            Index::LocalRandom(i) => i.route(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: &str) -> Destination {
        Destination::Queue(n.into())
    }

    fn b(dest: Destination, key: &str) -> Binding {
        Binding {
            destination: dest,
            routing_key: key.into(),
            arguments: FieldTable::new(),
        }
    }

    #[test]
    fn bind_is_idempotent_and_unbind_removes() {
        let mut x = Exchange::new(
            "x".into(),
            ExchangeKind::Direct,
            false,
            false,
            false,
            FieldTable::new(),
        )
        .unwrap();
        assert!(x.bind(b(q("a"), "k")));
        assert!(!x.bind(b(q("a"), "k")));
        let mut out = vec![];
        x.route(b"k", None, &mut out);
        assert_eq!(out, vec![q("a")]);
        assert!(x.unbind(&b(q("a"), "k")));
        assert!(!x.unbind(&b(q("a"), "k")));
        out.clear();
        x.route(b"k", None, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn unbind_destination_removes_all_its_bindings() {
        let mut x = Exchange::new(
            "x".into(),
            ExchangeKind::Topic,
            false,
            false,
            false,
            FieldTable::new(),
        )
        .unwrap();
        x.bind(b(q("a"), "a.*"));
        x.bind(b(q("a"), "#"));
        x.bind(b(q("b"), "#"));
        assert_eq!(x.unbind_destination(&q("a")), 2);
        let mut out = vec![];
        x.route(b"a.b", None, &mut out);
        assert_eq!(out, vec![q("b")]);
    }
}
