//! The durable set as the definitions store holds it in memory, and the
//! records that change it. One `apply` serves both the live broker's
//! changes and the replay of the log at start, so the two cannot drift
//! apart; compaction writes the model, never reads the broker (which would
//! race with changes being recorded).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use warren_core::changes::Change;

use super::records::ClusterNode;

use super::{
    binding_def, exchange_def, queue_def, user_defs, BindingDef, Definitions, ExchangeDef, PermissionDef,
    PolicyDef, QueueDef, TopicPermissionDef, UserDef, VHostDef,
};

/// One line of the change log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    Vhost {
        name: String,
    },
    VhostDeleted {
        name: String,
    },
    User {
        user: UserDef,
        permissions: Vec<PermissionDef>,
        /// Absent in logs written before topic permissions.
        #[serde(default)]
        topic_permissions: Vec<TopicPermissionDef>,
    },
    UserDeleted {
        name: String,
    },
    Exchange(ExchangeDef),
    ExchangeDeleted {
        vhost: String,
        name: String,
    },
    Queue(QueueDef),
    QueueDeleted {
        vhost: String,
        name: String,
    },
    Binding(BindingDef),
    Unbinding(BindingDef),
    Policy(PolicyDef),
    PolicyDeleted {
        vhost: String,
        name: String,
    },
    VhostLimits {
        vhost: String,
        limits: warren_core::Limits,
    },
    /// On a cluster: every metadata log entry up to `index` is applied in
    /// the records before this one (so the two are durable together).
    MetaApplied {
        index: u64,
    },
    /// On a cluster: a node joined (see `cluster::nodes`).
    ClusterNode(ClusterNode),
    /// On a cluster: a joined node was forgotten.
    ClusterNodeForgotten {
        name: String,
    },
}

impl From<Change<'_>> for Record {
    fn from(c: Change<'_>) -> Record {
        match c {
            Change::VHostAdded(name) => Record::Vhost { name: name.into() },
            Change::VHostDeleted(name) => Record::VhostDeleted { name: name.into() },
            Change::UserPut(u) => {
                let (user, permissions, topic_permissions) = user_defs(u);
                Record::User {
                    user,
                    permissions,
                    topic_permissions,
                }
            }
            Change::UserDeleted(name) => Record::UserDeleted { name: name.into() },
            Change::ExchangeDeclared { vhost, decl } => Record::Exchange(exchange_def(vhost, decl)),
            Change::ExchangeDeleted { vhost, name } => Record::ExchangeDeleted {
                vhost: vhost.into(),
                name: name.to_string(),
            },
            Change::QueueDeclared { vhost, decl, home } => Record::Queue(queue_def(vhost, decl, home)),
            Change::QueueDeleted { vhost, name } => Record::QueueDeleted {
                vhost: vhost.into(),
                name: name.to_string(),
            },
            Change::Bound {
                vhost,
                source,
                binding,
            } => Record::Binding(binding_def(vhost, source, binding)),
            Change::Unbound {
                vhost,
                source,
                binding,
            } => Record::Unbinding(binding_def(vhost, source, binding)),
            Change::PolicySet(p) => Record::Policy(PolicyDef::of(p)),
            Change::PolicyCleared { vhost, name } => Record::PolicyDeleted {
                vhost: vhost.into(),
                name: name.into(),
            },
            Change::VHostLimits { vhost, limits } => Record::VhostLimits {
                vhost: vhost.into(),
                limits: limits.clone(),
            },
        }
    }
}

/// A binding's identity. Destination first, so the bindings to a queue or
/// exchange are one range; arguments as their JSON text (serde_json's maps
/// are sorted, so equal tables give equal text).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BindingKey {
    destination_type: String,
    destination: String,
    source: String,
    routing_key: String,
    arguments: String,
}

impl BindingKey {
    fn of(b: &BindingDef) -> BindingKey {
        BindingKey {
            destination_type: b.destination_type.clone(),
            destination: b.destination.clone(),
            source: b.source.clone(),
            routing_key: b.routing_key.clone(),
            arguments: serde_json::to_string(&b.arguments).unwrap_or_default(),
        }
    }

    /// The first key of every binding to `destination`.
    fn first_to(destination_type: &str, destination: &str) -> BindingKey {
        BindingKey {
            destination_type: destination_type.into(),
            destination: destination.into(),
            source: String::new(),
            routing_key: String::new(),
            arguments: String::new(),
        }
    }
}

#[derive(Debug, Default)]
struct VHostModel {
    exchanges: BTreeMap<String, ExchangeDef>,
    queues: BTreeMap<String, QueueDef>,
    bindings: BTreeMap<BindingKey, BindingDef>,
    policies: BTreeMap<String, PolicyDef>,
    limits: warren_core::Limits,
}

impl VHostModel {
    fn unbind_destination(&mut self, destination_type: &str, destination: &str) {
        let keys: Vec<BindingKey> = self
            .bindings
            .range(BindingKey::first_to(destination_type, destination)..)
            .take_while(|(k, _)| k.destination_type == destination_type && k.destination == destination)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.bindings.remove(&k);
        }
    }
}

#[derive(Debug)]
struct UserModel {
    user: UserDef,
    permissions: Vec<PermissionDef>,
    topic_permissions: Vec<TopicPermissionDef>,
}

#[derive(Debug, Default)]
pub struct Model {
    users: BTreeMap<String, UserModel>,
    vhosts: BTreeMap<String, VHostModel>,
    meta_applied: Option<u64>,
    cluster_nodes: BTreeMap<String, ClusterNode>,
}

impl Model {
    /// The model of a definitions file (what restoring it would record).
    pub fn of(d: &Definitions) -> Model {
        let mut m = Model::default();
        for v in &d.vhosts {
            m.apply(Record::Vhost { name: v.name.clone() });
        }
        for u in &d.users {
            let permissions = d
                .permissions
                .iter()
                .filter(|p| p.user == u.name)
                .cloned()
                .collect();
            let topic_permissions = d
                .topic_permissions
                .iter()
                .filter(|p| p.user == u.name)
                .cloned()
                .collect();
            m.apply(Record::User {
                user: u.clone(),
                permissions,
                topic_permissions,
            });
        }
        for x in &d.exchanges {
            m.apply(Record::Exchange(x.clone()));
        }
        for q in &d.queues {
            m.apply(Record::Queue(q.clone()));
        }
        for b in &d.bindings {
            m.apply(Record::Binding(b.clone()));
        }
        for p in &d.policies {
            m.apply(Record::Policy(p.clone()));
        }
        for p in &d.parameters {
            if let Some((vhost, Ok(limits))) = crate::limits::from_vhost_parameter(p) {
                m.apply(Record::VhostLimits { vhost, limits });
            }
        }
        if let Some(index) = d.warren_meta_applied {
            m.apply(Record::MetaApplied { index });
        }
        for n in &d.warren_cluster_nodes {
            m.apply(Record::ClusterNode(n.clone()));
        }
        m
    }

    /// Change the model as the record says. Objects in a vhost the model
    /// does not have are ignored, as restoring them would skip them.
    pub fn apply(&mut self, r: Record) {
        match r {
            Record::MetaApplied { index } => self.meta_applied = Some(index),
            Record::ClusterNode(n) => {
                self.cluster_nodes.insert(n.name.clone(), n);
            }
            Record::ClusterNodeForgotten { name } => {
                self.cluster_nodes.remove(&name);
            }
            Record::Vhost { name } => {
                self.vhosts.entry(name).or_default();
            }
            Record::VhostDeleted { name } => {
                self.vhosts.remove(&name);
            }
            Record::User {
                user,
                permissions,
                topic_permissions,
            } => {
                let name = user.name.clone();
                let u = UserModel {
                    user,
                    permissions,
                    topic_permissions,
                };
                self.users.insert(name, u);
            }
            Record::UserDeleted { name } => {
                self.users.remove(&name);
            }
            Record::Exchange(x) => {
                if let Some(v) = self.vhosts.get_mut(&x.vhost) {
                    v.exchanges.insert(x.name.clone(), x);
                }
            }
            Record::ExchangeDeleted { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(&vhost) {
                    v.exchanges.remove(&name);
                    v.bindings.retain(|k, _| k.source != name);
                    v.unbind_destination("exchange", &name);
                }
            }
            Record::Queue(q) => {
                if let Some(v) = self.vhosts.get_mut(&q.vhost) {
                    v.queues.insert(q.name.clone(), q);
                }
            }
            Record::QueueDeleted { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(&vhost) {
                    v.queues.remove(&name);
                    v.unbind_destination("queue", &name);
                }
            }
            Record::Binding(b) => {
                if let Some(v) = self.vhosts.get_mut(&b.vhost) {
                    v.bindings.insert(BindingKey::of(&b), b);
                }
            }
            Record::Unbinding(b) => {
                if let Some(v) = self.vhosts.get_mut(&b.vhost) {
                    v.bindings.remove(&BindingKey::of(&b));
                }
            }
            Record::Policy(p) => {
                if let Some(v) = self.vhosts.get_mut(&p.vhost) {
                    v.policies.insert(p.name.clone(), p);
                }
            }
            Record::PolicyDeleted { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(&vhost) {
                    v.policies.remove(&name);
                }
            }
            Record::VhostLimits { vhost, limits } => {
                if let Some(v) = self.vhosts.get_mut(&vhost) {
                    v.limits = limits;
                }
            }
        }
    }

    /// How many objects the model holds (to decide when the log has grown
    /// past what a snapshot would cost).
    pub fn len(&self) -> usize {
        self.users.len()
            + self
                .vhosts
                .values()
                .map(|v| 1 + v.exchanges.len() + v.queues.len() + v.bindings.len() + v.policies.len())
                .sum::<usize>()
    }

    pub fn to_definitions(&self) -> Definitions {
        let mut d = Definitions {
            warren_meta_applied: self.meta_applied,
            warren_cluster_nodes: self.cluster_nodes.values().cloned().collect(),
            ..Definitions::default()
        };
        for u in self.users.values() {
            d.users.push(u.user.clone());
            d.permissions.extend(u.permissions.iter().cloned());
            d.topic_permissions.extend(u.topic_permissions.iter().cloned());
        }
        for (name, v) in &self.vhosts {
            d.vhosts.push(VHostDef { name: name.clone() });
            d.exchanges.extend(v.exchanges.values().cloned());
            d.queues.extend(v.queues.values().cloned());
            d.bindings.extend(v.bindings.values().cloned());
            d.policies.extend(v.policies.values().cloned());
            if !v.limits.is_empty() {
                d.parameters.push(crate::limits::vhost_parameter(name, &v.limits));
            }
        }
        d
    }
}
