//! Definitions: vhosts, users, and durable exchanges, queues and bindings,
//! in RabbitMQ's definitions JSON format (the one `rabbitmqctl
//! export_definitions` writes), so files move between the two. This module
//! owns the format and the conversions to and from the broker (export,
//! import, restore at start); `store` keeps them on disk as a snapshot plus
//! a log of changes, `model` is the set the store holds in memory.

mod model;
pub mod records;
mod store;

pub use store::{read_json_or_default, replace_file, Batch, Store};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use warren_amqp091::{FieldTable, FieldValue, ShortStr};
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};
use warren_core::policy::{Policy, PolicyError};
use warren_core::vhost::VHost;
use warren_core::{Broker, Permission, TopicPermission, User};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Definitions {
    /// Which change log (`definitions.N.log`) continues this file; only in
    /// the store's own snapshot, never in an export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warren_log_generation: Option<u64>,
    /// On a cluster node, the last metadata log entry these definitions
    /// include; only in the store's own snapshot, never in an export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warren_meta_applied: Option<u64>,
    /// On a cluster node, the nodes that joined after the configured ones
    /// (`cluster::nodes`); only in the store's own snapshot and in a
    /// metadata snapshot, never in an export.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warren_cluster_nodes: Vec<records::ClusterNode>,
    /// On a cluster, every replicated stream's members, leader and epoch
    /// (`stream_replicas::registry`); only in a metadata snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warren_stream_placements: Vec<records::Placement>,
    #[serde(default)]
    pub vhosts: Vec<VHostDef>,
    #[serde(default)]
    pub users: Vec<UserDef>,
    #[serde(default)]
    pub permissions: Vec<PermissionDef>,
    #[serde(default)]
    pub topic_permissions: Vec<TopicPermissionDef>,
    #[serde(default)]
    pub exchanges: Vec<ExchangeDef>,
    #[serde(default)]
    pub queues: Vec<QueueDef>,
    #[serde(default)]
    pub bindings: Vec<BindingDef>,
    #[serde(default)]
    pub policies: Vec<PolicyDef>,
    /// Per-vhost runtime parameters. The one component Warren has is
    /// `vhost-limits` (a vhost's limits, as RabbitMQ files them); others
    /// (federation upstreams, shovels, ...) are logged and skipped.
    #[serde(default)]
    pub parameters: Vec<Value>,
    /// Cluster-wide parameters (`cluster_name`, `internal_cluster_id`).
    /// Warren's are fixed: an export names its cluster, an import's are
    /// read and not applied.
    #[serde(default)]
    pub global_parameters: Vec<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VHostDef {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserDef {
    pub name: String,
    pub password_hash: String,
    #[serde(default = "sha256")]
    pub hashing_algorithm: String,
    #[serde(default)]
    pub tags: Tags,
    /// max-connections and max-channels; absent in files that predate
    /// user limits, where an import keeps the user's own.
    #[serde(default)]
    pub limits: Option<warren_core::Limits>,
}

fn sha256() -> String {
    "rabbit_password_hashing_sha256".into()
}

/// RabbitMQ writes tags as a list (3.10+) or a comma-separated string (older).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Tags {
    List(Vec<String>),
    Joined(String),
    #[default]
    None,
}

impl Tags {
    fn to_vec(&self) -> Vec<String> {
        match self {
            Tags::List(v) => v.clone(),
            Tags::Joined(s) => s.split(',').filter(|t| !t.is_empty()).map(String::from).collect(),
            Tags::None => Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PermissionDef {
    pub user: String,
    pub vhost: String,
    pub configure: String,
    pub write: String,
    pub read: String,
}

/// One user's write and read patterns on one exchange's routing keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicPermissionDef {
    pub user: String,
    pub vhost: String,
    pub exchange: String,
    pub write: String,
    pub read: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExchangeDef {
    pub name: String,
    /// Absent in RabbitMQ's per-vhost exports (the path names it).
    #[serde(default)]
    pub vhost: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueDef {
    pub name: String,
    /// Absent in RabbitMQ's per-vhost exports (the path names it).
    #[serde(default)]
    pub vhost: String,
    pub durable: bool,
    pub auto_delete: bool,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// The cluster node it lives on, in this node's own store only (for a
    /// queue of another node); exports and imports leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Only a queue of another node is stored while exclusive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BindingDef {
    pub source: String,
    /// Absent in RabbitMQ's per-vhost exports (the path names it).
    #[serde(default)]
    pub vhost: String,
    pub destination: String,
    pub destination_type: String,
    pub routing_key: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyDef {
    /// Absent in RabbitMQ's per-vhost exports (the path names it).
    #[serde(default)]
    pub vhost: String,
    pub name: String,
    pub pattern: String,
    #[serde(rename = "apply-to", default = "apply_to_all")]
    pub apply_to: String,
    #[serde(default)]
    pub definition: Map<String, Value>,
    #[serde(default)]
    pub priority: i64,
}

fn apply_to_all() -> String {
    "all".into()
}

impl PolicyDef {
    pub fn of(p: &Policy) -> PolicyDef {
        PolicyDef {
            vhost: p.vhost.clone(),
            name: p.name.clone(),
            pattern: p.pattern.clone(),
            apply_to: p.apply_to.as_str().into(),
            definition: table_to_json(&p.definition),
            priority: p.priority,
        }
    }

    /// The policy this describes, checked as RabbitMQ checks a new one.
    pub fn to_policy(&self) -> Result<Policy, PolicyError> {
        Policy::new(
            &self.vhost,
            &self.name,
            &self.pattern,
            &self.apply_to,
            self.priority,
            json_to_table(&self.definition),
        )
    }
}

/// A field table as JSON, the way RabbitMQ's HTTP API and definitions show
/// it (types collapse: every integer is a JSON number).
pub fn table_to_json(t: &FieldTable) -> Map<String, Value> {
    t.iter().map(|(k, v)| (k.to_string(), value_to_json(v))).collect()
}

fn value_to_json(v: &FieldValue) -> Value {
    if let Some(i) = v.as_i64() {
        return Value::from(i);
    }
    match v {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::F32(f) => Value::from(*f as f64),
        FieldValue::F64(f) => Value::from(*f),
        FieldValue::Decimal(s, u) => Value::from(*u as f64 / 10f64.powi(*s as i32)),
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => {
            Value::String(String::from_utf8_lossy(b).into_owned())
        }
        FieldValue::Timestamp(t) => Value::from(*t),
        FieldValue::Table(t) => Value::Object(table_to_json(t)),
        FieldValue::Array(a) => Value::Array(a.iter().map(value_to_json).collect()),
        _ => Value::Null,
    }
}

pub fn json_to_table(m: &Map<String, Value>) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in m {
        t.insert(k, json_to_value(v));
    }
    t
}

fn json_to_value(v: &Value) -> FieldValue {
    match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes())),
        Value::Array(a) => FieldValue::Array(a.iter().map(json_to_value).collect()),
        Value::Object(o) => FieldValue::Table(json_to_table(o)),
    }
}

/// Take a snapshot of what must survive a restart.
pub fn snapshot(broker: &Broker) -> Definitions {
    snapshot_with(broker, |vh, d| {
        let (xs, qs, bs) = vh.durable_definitions();
        d.exchanges.extend(xs.iter().map(|x| exchange_def(&vh.name, x)));
        d.queues.extend(qs.iter().map(|q| queue_def(&vh.name, q, None)));
        d.bindings
            .extend(bs.iter().map(|(src, b)| binding_def(&vh.name, src, b)));
    })
}

/// Users with their grants, and every vhost (in name order) with its
/// policies and limits; `objects` adds each vhost's exchanges, queues and
/// bindings (which of them is the caller's choice).
pub fn snapshot_with(broker: &Broker, mut objects: impl FnMut(&VHost, &mut Definitions)) -> Definitions {
    let mut d = Definitions::default();
    let mut users = broker.users();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    for u in users {
        let (user, permissions, topic_permissions) = user_defs(&u);
        d.users.push(user);
        d.permissions.extend(permissions);
        d.topic_permissions.extend(topic_permissions);
    }
    let mut vhosts = broker.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    for vh in vhosts {
        d.vhosts.push(VHostDef {
            name: vh.name.clone(),
        });
        d.policies.extend(vh.policies().iter().map(|p| PolicyDef::of(p)));
        let limits = vh.limits();
        if !limits.is_empty() {
            d.parameters
                .push(crate::limits::vhost_parameter(&vh.name, &limits));
        }
        objects(&vh, &mut d);
    }
    d
}

/// A user and its permissions and topic permissions as definitions list
/// them.
pub fn user_defs(u: &User) -> (UserDef, Vec<PermissionDef>, Vec<TopicPermissionDef>) {
    let permissions = u
        .permissions
        .iter()
        .map(|(vh, p)| PermissionDef {
            user: u.name.clone(),
            vhost: vh.clone(),
            configure: p.configure().into(),
            write: p.write().into(),
            read: p.read().into(),
        })
        .collect();
    let topic_permissions = u
        .topic_permissions
        .iter()
        .flat_map(|(vh, by_exchange)| {
            by_exchange.values().map(move |p| TopicPermissionDef {
                user: u.name.clone(),
                vhost: vh.clone(),
                exchange: p.exchange.clone(),
                write: p.write.clone(),
                read: p.read.clone(),
            })
        })
        .collect();
    let user = UserDef {
        name: u.name.clone(),
        password_hash: u.password_hash.clone(),
        hashing_algorithm: sha256(),
        tags: Tags::List(u.tags.clone()),
        limits: Some(u.limits.clone()),
    };
    (user, permissions, topic_permissions)
}

pub fn exchange_def(vhost: &str, x: &ExchangeDecl) -> ExchangeDef {
    ExchangeDef {
        name: x.name.to_string(),
        vhost: vhost.into(),
        kind: x.kind.to_string(),
        durable: x.durable,
        auto_delete: x.auto_delete,
        internal: x.internal,
        arguments: table_to_json(&x.arguments),
    }
}

pub fn queue_def(vhost: &str, q: &QueueDecl, home: Option<&ShortStr>) -> QueueDef {
    QueueDef {
        name: q.name.to_string(),
        vhost: vhost.into(),
        durable: q.durable,
        auto_delete: q.auto_delete,
        arguments: table_to_json(&q.arguments),
        node: home.map(|h| h.to_string()),
        exclusive: q.exclusive,
    }
}

impl QueueDef {
    /// The declaration it stands for.
    pub fn decl(&self) -> QueueDecl {
        QueueDecl {
            name: self.name.as_str().into(),
            durable: self.durable,
            exclusive: self.exclusive,
            auto_delete: self.auto_delete,
            arguments: json_to_table(&self.arguments),
        }
    }
}

impl ExchangeDef {
    pub fn decl(&self) -> ExchangeDecl {
        ExchangeDecl {
            name: self.name.as_str().into(),
            kind: self.kind.as_str().into(),
            durable: self.durable,
            auto_delete: self.auto_delete,
            internal: self.internal,
            arguments: json_to_table(&self.arguments),
        }
    }
}

impl BindingDef {
    /// The source exchange and the binding.
    pub fn binding(&self) -> (ShortStr, Binding) {
        let name = ShortStr::from(self.destination.as_str());
        let destination = if self.destination_type == "exchange" {
            Destination::Exchange(name)
        } else {
            Destination::Queue(name)
        };
        let b = Binding {
            destination,
            routing_key: self.routing_key.as_str().into(),
            arguments: json_to_table(&self.arguments),
        };
        (self.source.as_str().into(), b)
    }
}

pub fn binding_def(vhost: &str, source: &ShortStr, b: &Binding) -> BindingDef {
    let (destination, kind) = match &b.destination {
        Destination::Queue(n) => (n.to_string(), "queue"),
        Destination::Exchange(n) => (n.to_string(), "exchange"),
    };
    BindingDef {
        source: source.to_string(),
        vhost: vhost.into(),
        destination,
        destination_type: kind.into(),
        routing_key: b.routing_key.to_string(),
        arguments: table_to_json(&b.arguments),
    }
}

/// Recreate definitions in `broker`. Entries that fail (say, a queue with
/// arguments this version refuses) are logged and skipped. A queue lives
/// on the node its definition names, or else on `home` (None: here);
/// `me` is this node's name, so a queue of this node is made here.
pub fn restore_at(broker: &Broker, d: &Definitions, home: Option<&str>, me: &str) {
    for v in &d.vhosts {
        broker.add_vhost(&v.name);
    }
    // A user in the file replaces the one of that name, keeping the
    // permissions it had; then each permission and topic permission is set
    // for its user, in the file or already here (RabbitMQ imports a grant
    // to an existing user without listing the user).
    for u in &d.users {
        let (permissions, topic_permissions, limits) = broker
            .user(&u.name)
            .map(|old| (old.permissions, old.topic_permissions, old.limits))
            .unwrap_or_default();
        broker.put_user(User {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            tags: u.tags.to_vec(),
            permissions,
            topic_permissions,
            limits: u.limits.clone().unwrap_or(limits),
            token: None,
        });
    }
    for p in &d.topic_permissions {
        match TopicPermission::new(&p.exchange, &p.write, &p.read) {
            Ok(tp) => {
                if !broker.update_user(&p.user, |u| {
                    u.topic_permissions
                        .entry(p.vhost.clone())
                        .or_default()
                        .insert(p.exchange.clone(), tp);
                }) {
                    tracing::warn!("skipping topic permissions of '{}', no such user", p.user);
                }
            }
            Err(e) => tracing::warn!(
                "skipping {}'s topic permissions on '{}' in '{}': {e}",
                p.user,
                p.exchange,
                p.vhost
            ),
        }
    }
    for p in &d.permissions {
        match Permission::new(&p.configure, &p.write, &p.read) {
            Ok(perm) => {
                if !broker.update_user(&p.user, |u| {
                    u.permissions.insert(p.vhost.clone(), perm);
                }) {
                    tracing::warn!("skipping permissions of '{}', no such user", p.user);
                }
            }
            Err(e) => tracing::warn!("skipping {}'s permissions in '{}': {e}", p.user, p.vhost),
        }
    }
    for p in &d.parameters {
        match crate::limits::from_vhost_parameter(p) {
            Some((vhost, Ok(limits))) => match broker.vhost(&vhost) {
                Some(vh) => vh.update_limits(|l| *l = limits),
                None => tracing::warn!(%vhost, "skipping vhost limits, no such vhost"),
            },
            Some((vhost, Err(e))) => tracing::warn!(%vhost, "skipping vhost limits: {e}"),
            None => tracing::warn!(
                component = %p["component"].as_str().unwrap_or("?"),
                name = %p["name"].as_str().unwrap_or("?"),
                "definitions: runtime parameter not applied (no such component)"
            ),
        }
    }
    // Policies before the objects they apply to, so those start with them.
    // Timers the new settings need are the caller's to arm.
    for p in &d.policies {
        let Some(vh) = broker.vhost(&p.vhost) else {
            continue;
        };
        match p.to_policy() {
            Ok(policy) => {
                vh.put_policy(policy, &mut |_| {});
            }
            Err(e) => tracing::warn!(policy = %p.name, vhost = %p.vhost, "skipping policy: {e}"),
        }
    }
    for x in &d.exchanges {
        let Some(vh) = broker.vhost(&x.vhost) else {
            continue;
        };
        if let Err(e) = vh.declare_exchange(x.decl()) {
            tracing::warn!(exchange = %x.name, vhost = %x.vhost, "skipping stored exchange: {e}");
        }
    }
    for q in &d.queues {
        let Some(vh) = broker.vhost(&q.vhost) else {
            continue;
        };
        let node = q.node.as_deref().or(home).filter(|n| *n != me);
        let owner = if q.exclusive {
            warren_core::queue::REMOTE_OWNER
        } else {
            0
        };
        if let Err(e) = vh.declare_queue_at(q.decl(), owner, node.map(ShortStr::from)) {
            tracing::warn!(queue = %q.name, vhost = %q.vhost, "skipping stored queue: {e}");
        }
    }
    for b in &d.bindings {
        let Some(vh) = broker.vhost(&b.vhost) else {
            continue;
        };
        let (source, binding) = b.binding();
        if let Err(e) = vh.bind(&source, binding) {
            tracing::warn!(source = %b.source, vhost = %b.vhost, "skipping stored binding: {e}");
        }
    }
}

/// Restore `d` with one commit, then start the timers it needs. Its
/// queues live on `home` (None: here); `me` is this node.
pub fn apply_at(
    broker: &Broker,
    timers: &std::sync::Arc<crate::timers::Timers>,
    store: &std::sync::Arc<Store>,
    d: &Definitions,
    home: Option<&str>,
    me: &str,
) {
    {
        let _batch = store.batch();
        restore_at(broker, d, home, me);
    }
    // Imported policies and queues may bring TTLs and x-expires.
    for vh in broker.vhosts() {
        for q in vh.queues() {
            if q.needs_timer() {
                timers.arm(&vh, &q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_survive_json_by_value() {
        let mut t = FieldTable::new();
        t.insert("x-message-ttl", FieldValue::I32(1000));
        t.insert("x-dead-letter-exchange", "dlx".into());
        t.insert("x-single-active-consumer", FieldValue::Bool(true));
        let back = json_to_table(&table_to_json(&t));
        assert_eq!(back.get("x-message-ttl"), Some(&FieldValue::I64(1000)));
        assert_eq!(back.get("x-dead-letter-exchange"), Some(&FieldValue::from("dlx")));
        assert_eq!(
            back.get("x-single-active-consumer"),
            Some(&FieldValue::Bool(true))
        );
    }

    #[test]
    fn reads_rabbitmq_export_shapes() {
        let json = r#"{"rabbit_version":"3.10.8","users":[{"name":"u","password_hash":"abc","hashing_algorithm":"rabbit_password_hashing_sha256","tags":"administrator,monitoring","limits":{}}],
            "vhosts":[{"name":"/","limits":[],"metadata":{}}],"permissions":[{"user":"u","vhost":"/","configure":".*","write":".*","read":".*"}],
            "queues":[{"name":"q","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"classic"}}],
            "exchanges":[],"bindings":[]}"#;
        let d: Definitions = serde_json::from_str(json).unwrap();
        assert_eq!(d.users[0].tags.to_vec(), vec!["administrator", "monitoring"]);
        assert_eq!(d.queues[0].name, "q");
    }
}
