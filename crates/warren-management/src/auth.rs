//! Who is asking: HTTP basic auth against the broker's users, as
//! RabbitMQ's management plugin does it. Only users tagged
//! `administrator`, `monitoring`, `policymaker` or `management` may use
//! the API; `administrator` and `monitoring` see every vhost, the others
//! only the vhosts they have permissions on; changing users, vhosts and
//! permissions takes `administrator`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use base64::Engine;
use warren_amqp091::FieldTable;
use warren_core::exchange::Destination;
use warren_core::{Access, Grant, Permission, Resource, User, VHost};

use super::error::ApiError;
use warren_node::ServerCtx;

/// The logged-in user.
pub struct Authed {
    pub user: User,
}

const TAGS: [&str; 4] = ["administrator", "monitoring", "policymaker", "management"];

impl Authed {
    pub fn is_admin(&self) -> bool {
        self.user.tags.iter().any(|t| t == "administrator")
    }

    fn sees_all(&self) -> bool {
        self.user
            .tags
            .iter()
            .any(|t| t == "administrator" || t == "monitoring")
    }

    /// May this user see `vhost`'s objects?
    pub fn may_see(&self, vhost: &str) -> bool {
        self.sees_all() || self.user.permissions.contains_key(vhost)
    }

    /// May this user use `vhost` at all? Its permissions there if so.
    pub fn may_change(&self, vhost: &str) -> Result<&Permission, ApiError> {
        self.user.permissions.get(vhost).ok_or_else(|| {
            ApiError::Forbidden(format!(
                "access to vhost '{vhost}' refused for user '{}'",
                self.user.name
            ))
        })
    }

    /// The user's standing in `vhost`, as a connection opening it gets.
    fn grant(&self, vhost: &str) -> Result<Grant, ApiError> {
        Ok(Grant {
            user: self.user.name.clone(),
            vhost: vhost.to_string(),
            permission: self.may_change(vhost)?.clone(),
            topics: self.user.topic_grants(vhost, None),
        })
    }

    /// The protocol permission check, for API operations that do what a
    /// client would (delete, purge, publish, get).
    pub fn check(&self, vhost: &str, access: Access, kind: Resource, name: &str) -> Result<(), ApiError> {
        self.grant(vhost)?
            .check(access, kind, name)
            .map_err(|e| ApiError::Forbidden(e.to_string()))
    }

    /// A binding's checks ([`Grant::check_bind`]).
    pub fn check_bind(
        &self,
        vh: &VHost,
        source: &str,
        destination: &Destination,
        key: &[u8],
    ) -> Result<(), ApiError> {
        self.grant(&vh.name)?
            .check_bind(vh, source, destination, key)
            .map_err(|e| ApiError::Forbidden(e.to_string()))
    }

    /// A publish's topic permission ([`Grant::check_topic_write`]).
    pub fn check_topic_write(&self, vh: &VHost, exchange: &str, routing_key: &str) -> Result<(), ApiError> {
        self.grant(&vh.name)?
            .check_topic_write(vh, exchange.as_bytes(), routing_key.as_bytes())
            .map_err(|e| ApiError::Forbidden(e.to_string()))
    }

    /// A declare's checks ([`Grant::check_declare`]).
    pub fn check_declare(
        &self,
        vhost: &str,
        kind: Resource,
        name: &str,
        args: &FieldTable,
    ) -> Result<(), ApiError> {
        self.grant(vhost)?
            .check_declare(kind, name, args)
            .map_err(|e| ApiError::Forbidden(e.to_string()))
    }

    /// Policies take `policymaker` (or `administrator`, which has it all).
    pub fn policymaker(&self) -> Result<(), ApiError> {
        if self
            .user
            .tags
            .iter()
            .any(|t| t == "administrator" || t == "policymaker")
        {
            Ok(())
        } else {
            Err(ApiError::Forbidden("Not policymaker user".into()))
        }
    }

    /// Monitoring (or administrator): sees every vhost's objects.
    pub fn monitor(&self) -> Result<(), ApiError> {
        if self.sees_all() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("Not monitor user".into()))
        }
    }

    pub fn admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("Not administrator user".into()))
        }
    }
}

impl FromRequestParts<Arc<ServerCtx>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &Arc<ServerCtx>) -> Result<Authed, ApiError> {
        let header = parts.headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
        // An OAuth 2 access token (rabbitmq_auth_backend_oauth2's Bearer).
        if let Some(token) = header.and_then(|v| v.strip_prefix("Bearer ")) {
            let o = ctx
                .oauth2
                .as_ref()
                .ok_or(ApiError::NotAuthorized("Not_Authorized"))?;
            let user = match o.verify(token.trim()) {
                Ok(v) => warren_node::oauth2::with_vhost_permissions(
                    warren_node::oauth2::user(v, &ctx.broker),
                    &ctx.broker,
                ),
                Err(e) => {
                    tracing::warn!("HTTP API login refused: {e}");
                    return Err(ApiError::NotAuthorized("Login failed"));
                }
            };
            if !user.tags.iter().any(|t| TAGS.contains(&t.as_str())) {
                return Err(ApiError::NotAuthorized("Not management user"));
            }
            return Ok(Authed { user });
        }
        let (name, password) = header
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_string(), p.to_string())))
            .ok_or(ApiError::NotAuthorized("Not_Authorized"))?;
        let loopback = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .is_none_or(|c| c.0.ip().is_loopback());
        let user = warren_node::login::password(ctx, &name, &password, loopback)
            .map_err(|_| ApiError::NotAuthorized("Login failed"))?;
        // A token as the password: its scopes as per-vhost permissions.
        let user = warren_node::oauth2::with_vhost_permissions(user, &ctx.broker);
        if !user.tags.iter().any(|t| TAGS.contains(&t.as_str())) {
            return Err(ApiError::NotAuthorized("Not management user"));
        }
        Ok(Authed { user })
    }
}
