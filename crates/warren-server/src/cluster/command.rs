//! Changes agreed through the metadata Raft group, and how each node
//! applies one. So far, as the HTTP API makes them: vhosts, users, their
//! permissions and topic permissions, policies, vhost and user limits. On a single node a change is applied at once, as before; on a
//! cluster it is proposed, and every node applies it once a majority has
//! it on disk, in the same order everywhere.
//!
//! Applying is deterministic and idempotent (a put replaces, a delete of
//! something absent does nothing), because a node may apply an entry
//! again after a crash (between its definitions' fsync and the record of
//! how far it had applied). The proposer decides the HTTP status from its
//! own state before proposing.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use warren_core::{Broker, Limits, Permission, TopicPermission, User};

use super::meta::MetaError;
use crate::definitions::PolicyDef;
use crate::timers::Timers;
use crate::ServerCtx;

/// How long a change may take to commit before the caller hears it did
/// not (a minority cannot commit).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// A vhost, and full permissions on it for the user who made it (as
    /// RabbitMQ grants the creator).
    PutVhost {
        name: String,
        creator: String,
    },
    /// The vhost, everything in it, and every grant on it.
    DeleteVhost {
        name: String,
    },
    /// A user added or replaced; its permissions stay, its limits too
    /// unless given.
    PutUser {
        name: String,
        password_hash: String,
        tags: Vec<String>,
        limits: Option<Limits>,
    },
    DeleteUser {
        name: String,
    },
    PutPermission {
        user: String,
        vhost: String,
        configure: String,
        write: String,
        read: String,
    },
    DeletePermission {
        user: String,
        vhost: String,
    },
    PutTopicPermission {
        user: String,
        vhost: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// One exchange's, or (None) all of the user's in the vhost.
    DeleteTopicPermission {
        user: String,
        vhost: String,
        exchange: Option<String>,
    },
    PutPolicy(PolicyDef),
    DeletePolicy {
        vhost: String,
        name: String,
    },
    SetVhostLimit {
        vhost: String,
        name: String,
        value: i64,
    },
    ClearVhostLimit {
        vhost: String,
        name: String,
    },
    SetUserLimit {
        user: String,
        name: String,
        value: i64,
    },
    ClearUserLimit {
        user: String,
        name: String,
    },
}

impl Command {
    /// Apply to this node's broker (`timers` arms what a policy's TTLs
    /// and expiries need).
    pub fn apply(&self, broker: &Broker, timers: &Arc<Timers>) {
        match self {
            Command::PutVhost { name, creator } => {
                broker.add_vhost(name);
                broker.update_user(creator, |u| {
                    u.permissions.entry(name.clone()).or_insert_with(Permission::full);
                });
            }
            Command::DeleteVhost { name } => {
                broker.delete_vhost(name);
                for u in broker.users() {
                    if u.permissions.contains_key(name) {
                        broker.update_user(&u.name, |u| {
                            u.permissions.remove(name);
                        });
                    }
                }
            }
            Command::PutUser {
                name,
                password_hash,
                tags,
                limits,
            } => {
                let (permissions, topic_permissions, old_limits) = broker
                    .user(name)
                    .map(|u| (u.permissions, u.topic_permissions, u.limits))
                    .unwrap_or_default();
                broker.put_user(User {
                    name: name.clone(),
                    password_hash: password_hash.clone(),
                    tags: tags.clone(),
                    permissions,
                    topic_permissions,
                    limits: limits.clone().unwrap_or(old_limits),
                    token: None,
                });
            }
            Command::DeleteUser { name } => {
                broker.delete_user(name);
            }
            Command::PutPermission {
                user,
                vhost,
                configure,
                write,
                read,
            } => match Permission::new(configure, write, read) {
                Ok(p) => {
                    broker.update_user(user, |u| {
                        u.permissions.insert(vhost.clone(), p);
                    });
                }
                // Checked before it was proposed; a build that disagrees
                // skips it rather than stop applying.
                Err(e) => tracing::error!(%user, %vhost, "permission not applied: {e}"),
            },
            Command::DeletePermission { user, vhost } => {
                broker.update_user(user, |u| {
                    u.permissions.remove(vhost);
                });
            }
            Command::PutTopicPermission {
                user,
                vhost,
                exchange,
                write,
                read,
            } => match TopicPermission::new(exchange, write, read) {
                Ok(p) => {
                    broker.update_user(user, |u| {
                        u.topic_permissions
                            .entry(vhost.clone())
                            .or_default()
                            .insert(exchange.clone(), p);
                    });
                }
                Err(e) => tracing::error!(%user, %vhost, "topic permission not applied: {e}"),
            },
            Command::DeleteTopicPermission {
                user,
                vhost,
                exchange,
            } => {
                broker.update_user(user, |u| match exchange {
                    None => {
                        u.topic_permissions.remove(vhost);
                    }
                    Some(x) => {
                        if let Some(in_vhost) = u.topic_permissions.get_mut(vhost) {
                            in_vhost.remove(x);
                            if in_vhost.is_empty() {
                                u.topic_permissions.remove(vhost);
                            }
                        }
                    }
                });
            }
            Command::PutPolicy(def) => {
                let Some(vh) = broker.vhost(&def.vhost) else {
                    return;
                };
                match def.to_policy() {
                    Ok(p) => {
                        vh.put_policy(p, &mut |q| timers.arm(&vh, q));
                    }
                    Err(e) => tracing::error!(policy = %def.name, "policy not applied: {e}"),
                }
            }
            Command::DeletePolicy { vhost, name } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.delete_policy(name, &mut |q| timers.arm(&vh, q));
                }
            }
            Command::SetVhostLimit { vhost, name, value } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.update_limits(|l| l.set(name, *value));
                }
            }
            Command::ClearVhostLimit { vhost, name } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.update_limits(|l| {
                        l.remove(name);
                    });
                }
            }
            Command::SetUserLimit { user, name, value } => {
                broker.update_user(user, |u| u.limits.set(name, *value));
            }
            Command::ClearUserLimit { user, name } => {
                broker.update_user(user, |u| {
                    u.limits.remove(name);
                });
            }
        }
    }

    /// Apply an entry of the metadata log; one this build cannot read is
    /// logged and skipped.
    pub fn apply_entry(broker: &Broker, timers: &Arc<Timers>, data: &[u8]) {
        match serde_json::from_slice::<Command>(data) {
            Ok(c) => c.apply(broker, timers),
            Err(e) => tracing::error!("a metadata entry this node cannot read, skipped: {e}"),
        }
    }
}

/// Make the change: at once on a single node; through the metadata group
/// on a cluster, returning once this node has applied it.
pub async fn run(ctx: &Arc<ServerCtx>, c: Command) -> Result<(), MetaError> {
    match &ctx.meta {
        None => {
            c.apply(&ctx.broker, &ctx.timers);
            Ok(())
        }
        Some(meta) => {
            let data = serde_json::to_vec(&c).expect("a command encodes");
            meta.propose(data, COMMIT_TIMEOUT).await.map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_read_back_as_written() {
        let c = Command::PutUser {
            name: "carol".into(),
            password_hash: "h".into(),
            tags: vec!["administrator".into()],
            limits: None,
        };
        let b = serde_json::to_vec(&c).unwrap();
        let again = serde_json::to_vec(&serde_json::from_slice::<Command>(&b).unwrap()).unwrap();
        assert_eq!(again, b);
    }
}
