//! The broker: virtual hosts, users and their permissions, and the memory
//! gauge behind the memory alarm. One `Broker` is shared by every
//! connection of every protocol.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::alarms::Alarms;
use crate::changes::{Change, DefinitionsLog};
use crate::error::BrokerError;
use crate::limits::Limits;
use crate::permissions::Grant;
use crate::queue::{MemoryGauge, QueueEnv, Storage};
use crate::stats::MessageCounters;
use crate::topic_permissions::TopicGrants;
use crate::user::User;
use crate::vhost::VHost;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Users whose login is refused unless they connect from loopback
    /// (RabbitMQ's loopback_users; guest by default).
    pub loopback_users: Vec<String>,
    /// Bytes of queued messages above which publishers are blocked.
    pub memory_high_watermark: u64,
    /// Free bytes on the data directory's file system below which
    /// publishers are blocked.
    pub disk_free_limit: u64,
    /// Where queues keep messages on disk; None keeps them all in memory.
    pub storage: Option<Arc<Storage>>,
    /// Where streams keep their logs; None: no streams.
    pub streams_dir: Option<std::path::PathBuf>,
    /// How messages routed to a stream are encoded (AMQP 1.0).
    pub stream_codec: Option<crate::queue::StreamCodec>,
    /// Bytes of each stream's newest data left in the OS page cache once
    /// on disk (0: as the OS pleases).
    pub stream_cache_bytes: u64,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            loopback_users: vec!["guest".into()],
            memory_high_watermark: 1 << 30,
            disk_free_limit: 50_000_000,
            storage: None,
            streams_dir: None,
            stream_codec: None,
            stream_cache_bytes: 0,
        }
    }
}

pub struct Broker {
    pub config: BrokerConfig,
    pub memory: Arc<MemoryGauge>,
    pub alarms: Alarms,
    /// Broker-wide message counters (received, delivered, acked, ...).
    pub messages: Arc<MessageCounters>,
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    users: RwLock<HashMap<String, User>>,
    log: Arc<dyn DefinitionsLog>,
    next_id: AtomicU64,
    /// Set when the node is part of a cluster (see [`crate::replication`]).
    pub replication: crate::replication::ReplicationSlot,
    /// Set when the server starts its quorum queues' Raft groups.
    pub quorum: crate::queue::QuorumSlot,
    /// Set when a clustered server starts its stream replication.
    pub streams: crate::queue::StreamSlot,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker whose durable changes go to `log` (see [`crate::changes`]).
    pub fn new(config: BrokerConfig, log: Arc<dyn DefinitionsLog>) -> Arc<Broker> {
        Arc::new(Broker {
            alarms: Alarms::new(config.memory_high_watermark, config.disk_free_limit),
            config,
            memory: Arc::new(MemoryGauge::default()),
            messages: Arc::new(MessageCounters::default()),
            vhosts: RwLock::new(HashMap::new()),
            users: RwLock::new(HashMap::new()),
            log,
            next_id: AtomicU64::new(1),
            replication: Default::default(),
            quorum: Default::default(),
            streams: Default::default(),
        })
    }

    /// A process-unique id for connections and consumers.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn add_vhost(&self, name: &str) -> Arc<VHost> {
        let mut v = self.vhosts.write();
        let mut ticket = None;
        let vh = v
            .entry(name.to_string())
            .or_insert_with(|| {
                ticket = Some(self.log.record(Change::VHostAdded(name)));
                let env = QueueEnv {
                    memory: self.memory.clone(),
                    storage: self.config.storage.clone(),
                    streams_dir: self.config.streams_dir.clone(),
                    stream_codec: self.config.stream_codec,
                    stream_cache_bytes: self.config.stream_cache_bytes,
                    messages: self.messages.clone(),
                    replication: self.replication.clone(),
                    quorum: self.quorum.clone(),
                    streams: self.streams.clone(),
                };
                Arc::new(VHost::new(name, env, self.log.clone()))
            })
            .clone();
        drop(v);
        if let Some(ticket) = ticket {
            self.log.commit(ticket);
        }
        vh
    }

    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        self.vhosts.read().values().cloned().collect()
    }

    pub fn put_user(&self, user: User) {
        let mut users = self.users.write();
        let ticket = self.log.record(Change::UserPut(&user));
        users.insert(user.name.clone(), user);
        drop(users);
        self.log.commit(ticket);
    }

    /// Delete a vhost and everything in it (its queues' consumers are
    /// cancelled). False if there was none.
    pub fn delete_vhost(&self, name: &str) -> bool {
        let mut vhosts = self.vhosts.write();
        let Some(vh) = vhosts.remove(name) else {
            return false;
        };
        // One record for the vhost and all in it; what its queues' removal
        // below would record is not.
        vh.retire();
        let ticket = self.log.record(Change::VHostDeleted(name));
        drop(vhosts);
        for q in vh.queues() {
            if vh.remove_queue_if_same(&q) {
                vh.destroy_queue(&q);
            }
        }
        self.log.commit(ticket);
        true
    }

    /// Delete a user. False if there was none.
    pub fn delete_user(&self, name: &str) -> bool {
        let mut users = self.users.write();
        if users.remove(name).is_none() {
            return false;
        }
        let ticket = self.log.record(Change::UserDeleted(name));
        drop(users);
        self.log.commit(ticket);
        true
    }

    /// Change a user in place, under the users' lock (so two concurrent
    /// changes to one user both land). False if there is no such user.
    pub fn update_user(&self, name: &str, f: impl FnOnce(&mut User)) -> bool {
        let mut users = self.users.write();
        let Some(u) = users.get_mut(name) else {
            return false;
        };
        f(u);
        let ticket = self.log.record(Change::UserPut(u));
        drop(users);
        self.log.commit(ticket);
        true
    }

    pub fn user(&self, name: &str) -> Option<User> {
        self.users.read().get(name).cloned()
    }

    /// A user's limits (none for no such user): what a channel or
    /// connection open checks, without copying the whole user.
    pub fn user_limits(&self, name: &str) -> Limits {
        self.users
            .read()
            .get(name)
            .map(|u| u.limits.clone())
            .unwrap_or_default()
    }

    pub fn users(&self) -> Vec<User> {
        self.users.read().values().cloned().collect()
    }

    /// Is publishing blocked by a resource alarm? Re-checks the memory
    /// alarm against the gauge; the disk alarm is kept by its monitor.
    pub fn publishing_blocked(&self) -> Option<&'static str> {
        self.alarms.check_memory(self.memory.bytes());
        self.alarms.blocked_reason()
    }

    /// Check a login (0-9-1 connection.start-ok). `loopback` says whether
    /// the peer connected from a loopback address.
    pub fn authenticate(&self, name: &str, password: &str, loopback: bool) -> Result<User, BrokerError> {
        let refused = || {
            BrokerError::AccessRefused(
                "Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
                    .into(),
            )
        };
        let users = self.users.read();
        let user = users.get(name).ok_or_else(refused)?;
        if !user.check_password(password) {
            return Err(refused());
        }
        if !loopback && self.config.loopback_users.iter().any(|u| u == name) {
            return Err(BrokerError::AccessRefused(format!(
                "Login was refused using authentication mechanism PLAIN. User '{name}' can only connect via localhost"
            )));
        }
        Ok(user.clone())
    }

    /// Log in without a password: SASL EXTERNAL, where the TLS layer has
    /// already checked the client's certificate and named the user. The
    /// user must exist (rabbit_auth_backend_internal with no password).
    pub fn authenticate_external(&self, name: &str, loopback: bool) -> Result<User, BrokerError> {
        let users = self.users.read();
        let user = users.get(name).ok_or_else(|| {
            BrokerError::AccessRefused(format!("user '{name}' - not found (SASL EXTERNAL)"))
        })?;
        if !loopback && self.config.loopback_users.iter().any(|u| u == name) {
            return Err(BrokerError::AccessRefused(format!(
                "Login was refused using authentication mechanism EXTERNAL. User '{name}' can only connect via localhost"
            )));
        }
        Ok(user.clone())
    }

    /// connection.open: may `user` use `vhost`? (530 NOT_ALLOWED otherwise.)
    /// Returns the vhost and the user's permissions in it as they are now
    /// (topic permissions compiled for this user, vhost and `client_id`);
    /// a connection keeps that copy, as RabbitMQ's channels cache theirs.
    pub fn open_vhost(
        &self,
        user: &User,
        vhost: &str,
        client_id: Option<&str>,
    ) -> Result<(Arc<VHost>, Grant), BrokerError> {
        let refused = || {
            BrokerError::NotAllowed(format!(
                "access to vhost '{vhost}' refused for user '{}'",
                user.name
            ))
        };
        let vh = self
            .vhost(vhost)
            .ok_or_else(|| BrokerError::NotAllowed(format!("vhost {vhost} not found")))?;
        if let Some(token) = &user.token {
            let permission = token.permission_in(vhost).ok_or_else(refused)?;
            return Ok((
                vh,
                Grant {
                    user: user.name.clone(),
                    vhost: vhost.to_string(),
                    permission,
                    // Topic scopes' routing-key part is read as "any".
                    topics: TopicGrants::default(),
                },
            ));
        }
        let users = self.users.read();
        let Some(u) = users.get(&user.name) else {
            return Err(refused());
        };
        let Some(permission) = u.permissions.get(vhost).cloned() else {
            return Err(refused());
        };
        let topics = u.topic_grants(vhost, client_id);
        Ok((
            vh,
            Grant {
                user: user.name.clone(),
                vhost: vhost.to_string(),
                permission,
                topics,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::permissions::Permission;

    #[test]
    fn password_hash_roundtrip() {
        let u = User {
            name: "u".into(),
            password_hash: User::hash_password("secret"),
            tags: vec![],
            permissions: BTreeMap::new(),
            topic_permissions: BTreeMap::new(),
            limits: Limits::default(),
            token: None,
        };
        assert!(u.check_password("secret"));
        assert!(!u.check_password("Secret"));
    }

    #[test]
    fn guest_only_from_loopback() {
        let b = Broker::new(BrokerConfig::default(), Arc::new(crate::changes::NoLog));
        b.add_vhost("/");
        b.put_user(User {
            name: "guest".into(),
            password_hash: User::hash_password("guest"),
            tags: vec!["administrator".into()],
            permissions: [("/".to_string(), Permission::full())].into(),
            topic_permissions: BTreeMap::new(),
            limits: Limits::default(),
            token: None,
        });
        assert!(b.authenticate("guest", "guest", true).is_ok());
        assert_eq!(
            b.authenticate("guest", "guest", false).unwrap_err().reply_code(),
            403
        );
        assert_eq!(
            b.authenticate("guest", "nope", true).unwrap_err().reply_code(),
            403
        );
        let u = b.authenticate("guest", "guest", true).unwrap();
        assert!(b.open_vhost(&u, "/", None).is_ok());
        assert_eq!(b.open_vhost(&u, "/other", None).unwrap_err().reply_code(), 530);
    }
}
