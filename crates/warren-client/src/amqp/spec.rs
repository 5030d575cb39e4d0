//! What the management node declares, as the RabbitMQ AMQP 1.0 clients
//! describe it: queue specifications by type (their settings become the
//! queue's `x-` arguments), exchanges, bindings, and what a queue's
//! information holds.

use std::time::Duration;

use warren_amqp10::Value;

use super::address::segment;

/// A queue's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    /// One node's queue.
    Classic,
    /// Replicated by Raft.
    Quorum,
    /// An append-only log, read from any offset.
    Stream,
}

impl QueueType {
    fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

/// A queue to declare: durable, of a type, with its settings.
///
/// ```
/// use std::time::Duration;
/// use warren_client::amqp::QueueSpec;
///
/// let q = QueueSpec::quorum("orders").delivery_limit(3).dead_letter_exchange("dlx");
/// let s = QueueSpec::stream("events").max_age(Duration::from_secs(7 * 86_400));
/// let tmp = QueueSpec::classic("replies").exclusive().auto_delete();
/// # let _ = (q, s, tmp);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: QueueType,
    /// Deleted when the connection closes (classic only).
    pub exclusive: bool,
    /// Deleted once its last consumer goes (classic only).
    pub auto_delete: bool,
    /// Its `x-` arguments (the setters below fill them in).
    pub arguments: Vec<(String, Value)>,
}

impl QueueSpec {
    fn new(name: &str, kind: QueueType) -> QueueSpec {
        QueueSpec {
            name: name.to_string(),
            kind,
            exclusive: false,
            auto_delete: false,
            arguments: Vec::new(),
        }
    }

    /// A classic queue.
    pub fn classic(name: &str) -> QueueSpec {
        QueueSpec::new(name, QueueType::Classic)
    }

    /// A quorum queue.
    pub fn quorum(name: &str) -> QueueSpec {
        QueueSpec::new(name, QueueType::Quorum)
    }

    /// A stream.
    pub fn stream(name: &str) -> QueueSpec {
        QueueSpec::new(name, QueueType::Stream)
    }

    /// Deleted when its declaring connection closes (classic only).
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// Deleted once its last consumer goes (classic only).
    pub fn auto_delete(mut self) -> Self {
        self.auto_delete = true;
        self
    }

    /// Any argument (`x-...`).
    pub fn argument(mut self, key: &str, value: Value) -> Self {
        self.arguments.retain(|(k, _)| k != key);
        self.arguments.push((key.to_string(), value));
        self
    }

    /// `x-max-length`.
    pub fn max_length(self, messages: u64) -> Self {
        self.argument("x-max-length", Value::Long(messages as i64))
    }

    /// `x-max-length-bytes`.
    pub fn max_length_bytes(self, bytes: u64) -> Self {
        self.argument("x-max-length-bytes", Value::Long(bytes as i64))
    }

    /// `x-message-ttl`.
    pub fn message_ttl(self, ttl: Duration) -> Self {
        self.argument("x-message-ttl", Value::Long(ttl.as_millis() as i64))
    }

    /// `x-expires`: deleted after this long unused.
    pub fn auto_expire(self, after: Duration) -> Self {
        self.argument("x-expires", Value::Long(after.as_millis() as i64))
    }

    /// `x-overflow`: `drop-head`, `reject-publish` or `reject-publish-dlx`.
    pub fn overflow(self, strategy: &str) -> Self {
        self.argument("x-overflow", Value::string(strategy))
    }

    /// `x-single-active-consumer`.
    pub fn single_active_consumer(self) -> Self {
        self.argument("x-single-active-consumer", Value::Bool(true))
    }

    /// `x-dead-letter-exchange`.
    pub fn dead_letter_exchange(self, exchange: &str) -> Self {
        self.argument("x-dead-letter-exchange", Value::string(exchange))
    }

    /// `x-dead-letter-routing-key`.
    pub fn dead_letter_routing_key(self, key: &str) -> Self {
        self.argument("x-dead-letter-routing-key", Value::string(key))
    }

    /// `x-max-priority` (classic).
    pub fn max_priority(self, priority: u8) -> Self {
        self.argument("x-max-priority", Value::Long(priority as i64))
    }

    /// `x-delivery-limit` (quorum).
    pub fn delivery_limit(self, limit: u32) -> Self {
        self.argument("x-delivery-limit", Value::Long(limit as i64))
    }

    /// `x-quorum-initial-group-size` (quorum).
    pub fn quorum_initial_group_size(self, members: u32) -> Self {
        self.argument("x-quorum-initial-group-size", Value::Long(members as i64))
    }

    /// `x-initial-cluster-size` (stream).
    pub fn initial_cluster_size(self, members: u32) -> Self {
        self.argument("x-initial-cluster-size", Value::Long(members as i64))
    }

    /// `x-max-age` (stream), in seconds.
    pub fn max_age(self, age: Duration) -> Self {
        self.argument("x-max-age", Value::String(format!("{}s", age.as_secs())))
    }

    /// `x-stream-max-segment-size-bytes` (stream).
    pub fn max_segment_size_bytes(self, bytes: u64) -> Self {
        self.argument("x-stream-max-segment-size-bytes", Value::Long(bytes as i64))
    }

    /// `x-stream-filter-size-bytes` (stream).
    pub fn filter_size_bytes(self, bytes: u8) -> Self {
        self.argument("x-stream-filter-size-bytes", Value::Long(bytes as i64))
    }

    pub(crate) fn to_body(&self) -> Value {
        let mut arguments: Vec<(Value, Value)> =
            vec![(Value::string("x-queue-type"), Value::string(self.kind.name()))];
        arguments.extend(self.arguments.iter().map(|(k, v)| (Value::string(k), v.clone())));
        let (exclusive, auto_delete) = match self.kind {
            QueueType::Classic => (self.exclusive, self.auto_delete),
            // Quorum queues and streams are neither.
            _ => (false, false),
        };
        Value::Map(vec![
            (Value::string("durable"), Value::Bool(true)),
            (Value::string("exclusive"), Value::Bool(exclusive)),
            (Value::string("auto_delete"), Value::Bool(auto_delete)),
            (Value::string("arguments"), Value::Map(arguments)),
        ])
    }
}

/// An exchange to declare (durable).
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeSpec {
    /// Its name.
    pub name: String,
    /// `direct`, `fanout`, `topic`, `headers`, or a plugin's type.
    pub kind: String,
    /// Deleted once its last binding goes.
    pub auto_delete: bool,
    /// Only other exchanges publish to it.
    pub internal: bool,
    /// Its arguments (e.g. `alternate-exchange`).
    pub arguments: Vec<(String, Value)>,
}

impl ExchangeSpec {
    /// An exchange of type `kind`.
    pub fn new(name: &str, kind: &str) -> ExchangeSpec {
        ExchangeSpec {
            name: name.to_string(),
            kind: kind.to_string(),
            auto_delete: false,
            internal: false,
            arguments: Vec::new(),
        }
    }

    /// Routes by exact routing key.
    pub fn direct(name: &str) -> ExchangeSpec {
        ExchangeSpec::new(name, "direct")
    }

    /// Routes to every binding.
    pub fn fanout(name: &str) -> ExchangeSpec {
        ExchangeSpec::new(name, "fanout")
    }

    /// Routes by dotted patterns (`*`, `#`).
    pub fn topic(name: &str) -> ExchangeSpec {
        ExchangeSpec::new(name, "topic")
    }

    /// Routes by application properties.
    pub fn headers(name: &str) -> ExchangeSpec {
        ExchangeSpec::new(name, "headers")
    }

    /// Deleted once its last binding goes.
    pub fn auto_delete(mut self) -> Self {
        self.auto_delete = true;
        self
    }

    /// Only other exchanges publish to it.
    pub fn internal(mut self) -> Self {
        self.internal = true;
        self
    }

    /// An argument.
    pub fn argument(mut self, key: &str, value: Value) -> Self {
        self.arguments.push((key.to_string(), value));
        self
    }

    pub(crate) fn to_body(&self) -> Value {
        Value::Map(vec![
            (Value::string("type"), Value::string(&self.kind)),
            (Value::string("durable"), Value::Bool(true)),
            (Value::string("auto_delete"), Value::Bool(self.auto_delete)),
            (Value::string("internal"), Value::Bool(self.internal)),
            (Value::string("arguments"), map(&self.arguments)),
        ])
    }
}

/// Where a binding leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A queue by name.
    Queue(String),
    /// An exchange by name.
    Exchange(String),
}

/// A binding from an exchange to a queue or another exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingSpec {
    /// The exchange bound from.
    pub source: String,
    /// Where it leads.
    pub destination: Destination,
    /// The key (or pattern) routing keys are matched against.
    pub binding_key: String,
    /// Its arguments (headers exchanges match on them).
    pub arguments: Vec<(String, Value)>,
}

impl BindingSpec {
    /// From exchange to queue.
    pub fn to_queue(exchange: &str, queue: &str, binding_key: &str) -> BindingSpec {
        BindingSpec {
            source: exchange.to_string(),
            destination: Destination::Queue(queue.to_string()),
            binding_key: binding_key.to_string(),
            arguments: Vec::new(),
        }
    }

    /// From exchange to exchange.
    pub fn to_exchange(source: &str, destination: &str, binding_key: &str) -> BindingSpec {
        BindingSpec {
            source: source.to_string(),
            destination: Destination::Exchange(destination.to_string()),
            binding_key: binding_key.to_string(),
            arguments: Vec::new(),
        }
    }

    /// A binding argument (headers exchanges match on them).
    pub fn argument(mut self, key: &str, value: Value) -> Self {
        self.arguments.push((key.to_string(), value));
        self
    }

    pub(crate) fn to_body(&self) -> Value {
        let (key, name) = match &self.destination {
            Destination::Queue(q) => ("destination_queue", q),
            Destination::Exchange(x) => ("destination_exchange", x),
        };
        Value::Map(vec![
            (Value::string("source"), Value::string(&self.source)),
            (Value::string(key), Value::string(name)),
            (Value::string("binding_key"), Value::string(&self.binding_key)),
            (Value::string("arguments"), map(&self.arguments)),
        ])
    }

    /// Its path under `/bindings` (arguments are not in it: a binding
    /// with arguments is deleted by this path only if it has none, as in
    /// RabbitMQ).
    pub(crate) fn path(&self) -> String {
        let (key, name) = match &self.destination {
            Destination::Queue(q) => ("dstq", q),
            Destination::Exchange(x) => ("dste", x),
        };
        format!(
            "/bindings/src={};{key}={};key={};args=",
            segment(&self.source),
            segment(name),
            segment(&self.binding_key)
        )
    }
}

/// What the management node says of a queue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// `classic`, `quorum` or `stream`.
    pub kind: String,
    /// Kept across restarts.
    pub durable: bool,
    /// Its declaring connection's alone.
    pub exclusive: bool,
    /// Deleted once its last consumer goes.
    pub auto_delete: bool,
    /// Messages ready for delivery.
    pub message_count: u64,
    /// Consumers attached.
    pub consumer_count: u32,
    /// The node leading it.
    pub leader: Option<String>,
    /// The nodes holding it.
    pub members: Vec<String>,
    /// Its arguments.
    pub arguments: Vec<(String, Value)>,
}

impl QueueInfo {
    pub(crate) fn from_value(v: &Value) -> QueueInfo {
        let text = |k| match get(v, k) {
            Some(Value::String(s)) | Some(Value::Symbol(s)) => Some(s.clone()),
            _ => None,
        };
        let flag = |k| matches!(get(v, k), Some(Value::Bool(true)));
        let number = |k| match get(v, k) {
            Some(Value::Ulong(n)) => *n,
            Some(Value::Uint(n)) => *n as u64,
            Some(Value::Long(n)) => *n as u64,
            Some(Value::Int(n)) => *n as u64,
            _ => 0,
        };
        let members = match get(v, "replicas") {
            Some(Value::Array(a)) | Some(Value::List(a)) => a
                .iter()
                .filter_map(|m| match m {
                    Value::String(s) | Value::Symbol(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let arguments = match get(v, "arguments") {
            Some(Value::Map(m)) => m
                .iter()
                .filter_map(|(k, v)| match k {
                    Value::String(s) | Value::Symbol(s) => Some((s.clone(), v.clone())),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        QueueInfo {
            name: text("name").unwrap_or_default(),
            kind: text("type").unwrap_or_default(),
            durable: flag("durable"),
            exclusive: flag("exclusive"),
            auto_delete: flag("auto_delete"),
            message_count: number("message_count"),
            consumer_count: number("consumer_count") as u32,
            leader: text("leader"),
            members,
            arguments,
        }
    }
}

/// Key `key` of a map value.
pub(crate) fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(entries) = v else { return None };
    entries.iter().find_map(|(k, v)| match k {
        Value::String(s) | Value::Symbol(s) if s == key => Some(v),
        _ => None,
    })
}

fn map(entries: &[(String, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| (Value::string(k), v.clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifications_become_the_request_bodies() {
        let q = QueueSpec::quorum("q").exclusive().delivery_limit(3);
        let body = q.to_body();
        assert_eq!(
            get(&body, "exclusive"),
            Some(&Value::Bool(false)),
            "quorum queues are not exclusive"
        );
        let args = get(&body, "arguments").unwrap();
        assert_eq!(get(args, "x-queue-type"), Some(&Value::string("quorum")));
        assert_eq!(get(args, "x-delivery-limit"), Some(&Value::Long(3)));
        let b = BindingSpec::to_queue("x y", "q/1", "a.#");
        assert_eq!(b.path(), "/bindings/src=x%20y;dstq=q%2F1;key=a.%23;args=");
        assert_eq!(
            get(&b.to_body(), "destination_queue"),
            Some(&Value::string("q/1"))
        );
    }
}
