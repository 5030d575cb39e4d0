//! OAuth 2 access tokens as RabbitMQ's rabbitmq_auth_backend_oauth2 takes
//! them: a JWT given as the password (any user name) on every protocol,
//! or as `Authorization: Bearer` on the HTTP API. The signature is checked
//! against locally configured keys (`keys.rs`), then `exp` and `nbf`, the
//! audience (the resource server id) and the scopes: those that start with
//! the scope prefix (`rabbitmq.` by default) become the user's permissions
//! and tags (`warren_core::scopes`).
//!
//! A connection that logged in with a token is closed when the token
//! expires, unless the client sends a fresh one first (0-9-1
//! `connection.update-secret`, the stream protocol's `SaslAuthenticate`,
//! AMQP 1.0 `PUT /auth/tokens` on the management node); see
//! `connections::Registry::close_expired`.

mod keys;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use jsonwebtoken::{decode, decode_header, Algorithm, Validation};
use parking_lot::RwLock;
use serde::Deserialize;
use serde_json::{Map, Value};
use thiserror::Error;
use warren_core::scopes::TokenGrants;
use warren_core::{Broker, User};

/// RabbitMQ's `auth_oauth2.*` settings (the `[auth_oauth2]` table).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuth2Settings {
    /// The audience a token must name, and the default scope prefix.
    pub resource_server_id: String,
    /// Scopes for this broker start with this (default: the resource
    /// server id and a dot).
    pub scope_prefix: Option<String>,
    /// Check `aud` (RabbitMQ's verify_aud, on by default).
    pub verify_aud: bool,
    /// The claims the user name is taken from, first present wins.
    pub preferred_username_claims: Vec<String>,
    /// The key for tokens whose header names no `kid`.
    pub default_key: Option<String>,
    /// Public keys in PEM files, by key id.
    pub signing_keys: BTreeMap<String, PathBuf>,
    /// A JSON Web Key Set file (RSA, EC, OKP and `oct` HMAC keys).
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL, fetched at start and on reload.
    pub jwks_url: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway: u64,
}

impl Default for OAuth2Settings {
    fn default() -> Self {
        OAuth2Settings {
            resource_server_id: String::new(),
            scope_prefix: None,
            verify_aud: true,
            preferred_username_claims: vec!["sub".into(), "client_id".into()],
            default_key: None,
            signing_keys: BTreeMap::new(),
            jwks_file: None,
            jwks_url: None,
            leeway: 0,
        }
    }
}

impl OAuth2Settings {
    fn prefix(&self) -> String {
        self.scope_prefix
            .clone()
            .unwrap_or_else(|| format!("{}.", self.resource_server_id))
    }
}

#[derive(Debug, Error)]
pub enum TokenError {
    #[error("not a JWT: {0}")]
    Malformed(String),
    #[error("no key '{0}' to check the token with")]
    UnknownKey(String),
    #[error("the token's algorithm {0:?} is not the key's")]
    WrongAlgorithm(Algorithm),
    #[error("token rejected: {0}")]
    Rejected(String),
    #[error("the token names no user (claims {0:?})")]
    NoUser(Vec<String>),
    #[error("signing keys: {0}")]
    Keys(String),
}

/// A token that passed every check.
#[derive(Debug)]
pub struct Verified {
    pub user: String,
    pub grants: TokenGrants,
}

/// The settings and the keys they name (replaced on reload).
#[derive(Debug)]
pub struct Verifier {
    settings: OAuth2Settings,
    keys: RwLock<Arc<keys::Keys>>,
}

/// The algorithms Warren accepts: every JWS one but `none`.
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::HS256,
    Algorithm::HS384,
    Algorithm::HS512,
    Algorithm::EdDSA,
];

impl Verifier {
    pub fn new(settings: OAuth2Settings) -> Result<Verifier, TokenError> {
        let keys = keys::load(&settings)?;
        Ok(Verifier {
            settings,
            keys: RwLock::new(Arc::new(keys)),
        })
    }

    /// Read the key files (and URL) again; on error the old keys stay.
    pub fn reload(&self) -> Result<(), TokenError> {
        let keys = keys::load(&self.settings)?;
        *self.keys.write() = Arc::new(keys);
        Ok(())
    }

    /// Does `secret` look like a JWT (three base64url parts)? Only such
    /// passwords are tried as tokens.
    pub fn looks_like_token(secret: &str) -> bool {
        let parts: Vec<&str> = secret.split('.').collect();
        parts.len() == 3
            && parts[..2].iter().all(|p| !p.is_empty())
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
    }

    pub fn verify(&self, token: &str) -> Result<Verified, TokenError> {
        let header = decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(TokenError::WrongAlgorithm(header.alg));
        }
        let keys = self.keys.read().clone();
        let kid = header
            .kid
            .clone()
            .or_else(|| self.settings.default_key.clone())
            .or_else(|| (keys.len() == 1).then(|| keys.keys().next().cloned()).flatten())
            .unwrap_or_default();
        let key = keys
            .get(&kid)
            .ok_or_else(|| TokenError::UnknownKey(kid.clone()))?;
        if key.algorithm.is_some_and(|a| a != header.alg) {
            return Err(TokenError::WrongAlgorithm(header.alg));
        }
        let mut v = Validation::new(header.alg);
        v.leeway = self.settings.leeway;
        v.validate_nbf = true;
        if self.settings.verify_aud {
            v.set_audience(&[&self.settings.resource_server_id]);
            v.set_required_spec_claims(&["exp", "aud"]);
        } else {
            v.validate_aud = false;
        }
        let data = decode::<Map<String, Value>>(token, &key.decoding, &v)
            .map_err(|e| TokenError::Rejected(e.to_string()))?;
        let claims = data.claims;
        let user = self
            .settings
            .preferred_username_claims
            .iter()
            .find_map(|c| claims.get(c).and_then(Value::as_str))
            .map(str::to_string)
            .ok_or_else(|| TokenError::NoUser(self.settings.preferred_username_claims.clone()))?;
        let expires_at = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let scopes = scopes(&claims);
        let prefix = self.settings.prefix();
        let grants = TokenGrants::new(
            scopes.iter().filter_map(|s| s.strip_prefix(prefix.as_str())),
            expires_at,
        );
        Ok(Verified { user, grants })
    }
}

/// The `scope` claim: a space-separated string (RFC 8693 §4.2) or, as
/// some issuers write it, a list.
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    match claims.get("scope") {
        Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
        _ => Vec::new(),
    }
}

/// The broker user a verified token stands for: its scopes' tags, the
/// scopes themselves (asked for permissions in the vhost a connection
/// opens), and the limits of an internal user of the same name, if there
/// is one.
pub fn user(v: Verified, broker: &Broker) -> User {
    User {
        tags: v.grants.tags().to_vec(),
        permissions: BTreeMap::new(),
        topic_permissions: BTreeMap::new(),
        limits: broker.user_limits(&v.user),
        password_hash: String::new(),
        token: Some(Arc::new(v.grants)),
        name: v.user,
    }
}

/// A token user's permissions in every vhost there is now, written into
/// `permissions` as an internal user's are: for the HTTP API, which asks
/// them per vhost. (Connections ask the scopes for the one vhost they
/// open instead, so logins do not compile patterns for every vhost.)
pub fn with_vhost_permissions(mut u: User, broker: &Broker) -> User {
    if let Some(token) = u.token.clone() {
        u.permissions = broker
            .vhosts()
            .iter()
            .filter_map(|vh| token.permission_in(&vh.name).map(|p| (vh.name.clone(), p)))
            .collect();
    }
    u
}

/// Once a second, close the connections whose token has expired.
pub fn spawn_expiry(
    connections: crate::connections::Registry,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    connections.close_expired(now);
                }
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jwt_shaped_passwords_are_tried_as_tokens() {
        assert!(Verifier::looks_like_token("eyJh.eyJz.c2ln"));
        assert!(Verifier::looks_like_token("eyJh.eyJz."));
        assert!(!Verifier::looks_like_token("guest"));
        assert!(!Verifier::looks_like_token("a.b"));
        assert!(!Verifier::looks_like_token("p@ss.wo.rd"));
        assert!(!Verifier::looks_like_token("..x"));
    }
}
