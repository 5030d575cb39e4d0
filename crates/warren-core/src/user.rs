//! A user of the broker ([`User`]): its password hash, tags, permissions
//! and topic permissions per vhost, its limits, and, for a token login,
//! the token's grants.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::limits::Limits;
use crate::permissions::Permission;
use crate::scopes::TokenGrants;
use crate::topic_permissions::{TopicGrants, TopicPermission, Vars};

/// A user: name, RabbitMQ-style password hash, tags, and its permissions
/// per vhost (a vhost without an entry is closed to it).
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    /// base64(salt(4) ++ sha256(salt ++ password)), RabbitMQ's
    /// rabbit_password_hashing_sha256, so definitions move between the two.
    pub password_hash: String,
    pub tags: Vec<String>,
    pub permissions: BTreeMap<String, Permission>,
    /// Topic permissions by vhost, then exchange.
    pub topic_permissions: BTreeMap<String, BTreeMap<String, TopicPermission>>,
    /// max-connections and max-channels (see [`crate::limits`]).
    pub limits: Limits,
    /// Set for a user who logged in with an OAuth 2 token: its scopes
    /// decide the vhosts and permissions, not `permissions` (the token's
    /// user need not exist in the user database).
    pub token: Option<Arc<TokenGrants>>,
}

impl User {
    pub fn hash_password(password: &str) -> String {
        let mut salt = [0u8; 4];
        rand::thread_rng().fill_bytes(&mut salt);
        Self::hash_with_salt(&salt, password)
    }

    fn hash_with_salt(salt: &[u8], password: &str) -> String {
        let mut h = Sha256::new();
        h.update(salt);
        h.update(password.as_bytes());
        let mut out = salt.to_vec();
        out.extend_from_slice(&h.finalize());
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// This user's topic permissions in `vhost`, compiled for a connection
    /// (its `client_id`, if the protocol has one).
    pub fn topic_grants(&self, vhost: &str, client_id: Option<&str>) -> TopicGrants {
        let vars = Vars {
            username: &self.name,
            vhost,
            client_id,
        };
        TopicGrants::compile(
            self.topic_permissions
                .get(vhost)
                .into_iter()
                .flat_map(|m| m.values()),
            &vars,
        )
    }

    pub fn check_password(&self, password: &str) -> bool {
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(&self.password_hash) else {
            return false;
        };
        if raw.len() < 4 {
            return false;
        }
        Self::hash_with_salt(&raw[..4], password) == self.password_hash
    }
}
