//! Durable definitions on disk: vhosts, users, and durable exchanges, queues
//! and bindings, in RabbitMQ's definitions JSON format (the one
//! `rabbitmqctl export_definitions` writes), so files move between the two.
//! The file is rewritten whole on every change: written to a temporary file,
//! fsynced, then renamed over the old one, so a crash leaves either the old
//! or the new definitions, never half of one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use warren_amqp091::{FieldTable, FieldValue, ShortStr};
use warren_core::exchange::{Binding, Destination};
use warren_core::vhost::{ExchangeDecl, QueueDecl};
use warren_core::{Broker, Permission, User};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Definitions {
    #[serde(default)]
    pub vhosts: Vec<VHostDef>,
    #[serde(default)]
    pub users: Vec<UserDef>,
    #[serde(default)]
    pub permissions: Vec<PermissionDef>,
    #[serde(default)]
    pub exchanges: Vec<ExchangeDef>,
    #[serde(default)]
    pub queues: Vec<QueueDef>,
    #[serde(default)]
    pub bindings: Vec<BindingDef>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct VHostDef {
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct UserDef {
    pub name: String,
    pub password_hash: String,
    #[serde(default = "sha256")]
    pub hashing_algorithm: String,
    #[serde(default)]
    pub tags: Tags,
}

fn sha256() -> String {
    "rabbit_password_hashing_sha256".into()
}

/// RabbitMQ writes tags as a list (3.10+) or a comma-separated string (older).
#[derive(Debug, Default, Serialize, Deserialize)]
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

#[derive(Debug, Serialize, Deserialize)]
pub struct PermissionDef {
    pub user: String,
    pub vhost: String,
    pub configure: String,
    pub write: String,
    pub read: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ExchangeDef {
    pub name: String,
    pub vhost: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct QueueDef {
    pub name: String,
    pub vhost: String,
    pub durable: bool,
    pub auto_delete: bool,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BindingDef {
    pub source: String,
    pub vhost: String,
    pub destination: String,
    pub destination_type: String,
    pub routing_key: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
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
    let mut d = Definitions::default();
    for u in broker.users() {
        for (vh, p) in &u.permissions {
            d.permissions.push(PermissionDef {
                user: u.name.clone(),
                vhost: vh.clone(),
                configure: p.configure().into(),
                write: p.write().into(),
                read: p.read().into(),
            });
        }
        d.users.push(UserDef {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            hashing_algorithm: sha256(),
            tags: Tags::List(u.tags.clone()),
        });
    }
    let mut vhosts = broker.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    for vh in vhosts {
        d.vhosts.push(VHostDef {
            name: vh.name.clone(),
        });
        let (xs, qs, bs) = vh.durable_definitions();
        for x in xs {
            d.exchanges.push(ExchangeDef {
                name: x.name.to_string(),
                vhost: vh.name.clone(),
                kind: x.kind.to_string(),
                durable: x.durable,
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: table_to_json(&x.arguments),
            });
        }
        for q in qs {
            d.queues.push(QueueDef {
                name: q.name.to_string(),
                vhost: vh.name.clone(),
                durable: true,
                auto_delete: q.auto_delete,
                arguments: table_to_json(&q.arguments),
            });
        }
        for (src, b) in bs {
            let (dest, kind) = match &b.destination {
                Destination::Queue(n) => (n.to_string(), "queue"),
                Destination::Exchange(n) => (n.to_string(), "exchange"),
            };
            d.bindings.push(BindingDef {
                source: src.to_string(),
                vhost: vh.name.clone(),
                destination: dest,
                destination_type: kind.into(),
                routing_key: b.routing_key.to_string(),
                arguments: table_to_json(&b.arguments),
            });
        }
    }
    d
}

/// Recreate definitions in `broker`. Entries that fail (say, a queue with
/// arguments this version refuses) are logged and skipped.
pub fn restore(broker: &Broker, d: &Definitions) {
    for v in &d.vhosts {
        broker.add_vhost(&v.name);
    }
    // A user in the file replaces the one of that name, keeping the
    // permissions it had; then each permission is set for its user, in
    // the file or already here (RabbitMQ imports a grant to an existing
    // user without listing the user).
    for u in &d.users {
        let permissions = broker
            .user(&u.name)
            .map(|old| old.permissions)
            .unwrap_or_default();
        broker.put_user(User {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            tags: u.tags.to_vec(),
            permissions,
        });
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
    for x in &d.exchanges {
        let Some(vh) = broker.vhost(&x.vhost) else {
            continue;
        };
        let decl = ExchangeDecl {
            name: x.name.as_str().into(),
            kind: x.kind.as_str().into(),
            durable: x.durable,
            auto_delete: x.auto_delete,
            internal: x.internal,
            arguments: json_to_table(&x.arguments),
        };
        if let Err(e) = vh.declare_exchange(decl) {
            tracing::warn!(exchange = %x.name, vhost = %x.vhost, "skipping stored exchange: {e}");
        }
    }
    for q in &d.queues {
        let Some(vh) = broker.vhost(&q.vhost) else {
            continue;
        };
        let decl = QueueDecl {
            name: q.name.as_str().into(),
            durable: true,
            exclusive: false,
            auto_delete: q.auto_delete,
            arguments: json_to_table(&q.arguments),
        };
        if let Err(e) = vh.declare_queue_unchecked(decl, 0) {
            tracing::warn!(queue = %q.name, vhost = %q.vhost, "skipping stored queue: {e}");
        }
    }
    for b in &d.bindings {
        let Some(vh) = broker.vhost(&b.vhost) else {
            continue;
        };
        let name = ShortStr::from(b.destination.as_str());
        let destination = if b.destination_type == "exchange" {
            Destination::Exchange(name)
        } else {
            Destination::Queue(name)
        };
        let binding = Binding {
            destination,
            routing_key: b.routing_key.as_str().into(),
            arguments: json_to_table(&b.arguments),
        };
        if let Err(e) = vh.bind(&b.source.as_str().into(), binding) {
            tracing::warn!(source = %b.source, vhost = %b.vhost, "skipping stored binding: {e}");
        }
    }
}

/// Writes definitions to `<data_dir>/definitions.json`.
pub struct Store {
    path: PathBuf,
    lock: Mutex<()>,
    /// Open [`Batch`]es, and whether a change came while one was open
    /// (one lock, so a change cannot slip between the last batch's end
    /// and its check of the flag).
    batching: Mutex<(usize, bool)>,
}

/// Defers saving definitions until it is dropped, then saves once if
/// anything changed: an import of N objects costs one write instead of N
/// (each a full snapshot, which made a 10,000-queue import quadratic).
pub struct Batch {
    store: Arc<Store>,
    broker: Arc<Broker>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        let save = {
            let mut b = self.store.batching.lock();
            b.0 -= 1;
            b.0 == 0 && std::mem::take(&mut b.1)
        };
        if save {
            if let Err(e) = self.store.save(&snapshot(&self.broker)) {
                tracing::error!("cannot save definitions: {e}");
            }
        }
    }
}

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            path: data_dir.join("definitions.json"),
            lock: Mutex::new(()),
            batching: Mutex::new((0, false)),
        }
    }

    /// Save once when the returned guard drops, not after every change.
    pub fn batch(self: &Arc<Self>, broker: &Arc<Broker>) -> Batch {
        self.batching.lock().0 += 1;
        Batch {
            store: self.clone(),
            broker: broker.clone(),
        }
    }

    pub fn load(&self) -> std::io::Result<Option<Definitions>> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, d: &Definitions) -> std::io::Result<()> {
        let _guard = self.lock.lock();
        let tmp = self.path.with_extension("json.tmp");
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(d).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            // Make the rename itself durable.
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// A hook for [`Broker::new`] that saves definitions after each change.
pub fn save_hook(
    store: Arc<Store>,
    broker: Arc<std::sync::OnceLock<std::sync::Weak<Broker>>>,
) -> warren_core::vhost::ChangeHook {
    Arc::new(move || {
        let Some(b) = broker.get().and_then(|w| w.upgrade()) else {
            return;
        };
        {
            let mut batching = store.batching.lock();
            if batching.0 > 0 {
                batching.1 = true;
                return;
            }
        }
        if let Err(e) = store.save(&snapshot(&b)) {
            tracing::error!("cannot save definitions: {e}");
        }
    })
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
