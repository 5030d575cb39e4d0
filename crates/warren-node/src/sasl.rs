//! Logging in, for every protocol: which SASL mechanisms a connection is
//! offered (RabbitMQ's `auth_mechanisms`, EXTERNAL only where the client
//! sent a certificate), what a mechanism's response means, and the one
//! log line and counter every refusal gets (rabbitmq_prometheus's
//! `rabbitmq_auth_attempts_*`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use warren_amqp091::FieldTable;
use warren_core::User;

use crate::tls::peer::TlsInfo;
use crate::ServerCtx;

/// The mechanisms Warren knows.
pub const KNOWN: &[&str] = &["PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS"];

/// Which front end is asking (AMQPLAIN is 0-9-1's own; ANONYMOUS is
/// offered to AMQP 1.0 clients only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Amqp091,
    Amqp10,
    Stream,
}

impl Proto {
    /// As rabbitmq_prometheus labels protocols.
    pub fn label(self) -> &'static str {
        match self {
            Proto::Amqp091 => "amqp091",
            Proto::Amqp10 => "amqp10",
            Proto::Stream => "stream",
        }
    }
}

/// Login attempts, counted once each.
#[derive(Debug, Default)]
pub struct AuthStats {
    pub attempts: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

/// A refused login: who it claimed to be and why (for the log; clients get
/// their protocol's generic refusal, as RabbitMQ gives them).
#[derive(Debug, Clone)]
pub struct Refused {
    pub user: String,
    pub why: String,
    /// The mechanism is not offered on this connection (the stream
    /// protocol answers that with its own code).
    pub unsupported: bool,
}

/// The mechanisms offered on this connection, in configured order.
pub fn offered(ctx: &ServerCtx, proto: Proto, tls: Option<&TlsInfo>) -> Vec<&'static str> {
    let has_cert = tls.is_some_and(|t| t.peer.is_some());
    let mut out: Vec<&'static str> = Vec::new();
    for m in &ctx.config.auth_mechanisms {
        let Some(&m) = KNOWN.iter().find(|k| **k == m.as_str()) else {
            continue;
        };
        let ok = match m {
            "AMQPLAIN" => proto == Proto::Amqp091,
            // rabbit_auth_mechanism_ssl offers itself only to a peer that
            // presented a certificate.
            "EXTERNAL" => has_cert,
            "ANONYMOUS" => proto == Proto::Amqp10,
            _ => true,
        };
        if ok && !out.contains(&m) {
            out.push(m);
        }
    }
    if proto == Proto::Amqp10 && ctx.config.amqp10_anonymous && !out.contains(&"ANONYMOUS") {
        out.push("ANONYMOUS");
    }
    out
}

/// Log in with `mechanism` and its `response`. Counts the attempt, and
/// logs a refusal once with the peer, user and mechanism.
pub fn login(
    ctx: &ServerCtx,
    proto: Proto,
    mechanism: &str,
    response: &[u8],
    peer: SocketAddr,
    tls: Option<&TlsInfo>,
) -> Result<User, Refused> {
    ctx.auth.attempts.fetch_add(1, Relaxed);
    let r = attempt(ctx, proto, mechanism, response, peer, tls);
    match &r {
        Ok(_) => {
            ctx.auth.succeeded.fetch_add(1, Relaxed);
        }
        Err(e) => {
            ctx.auth.failed.fetch_add(1, Relaxed);
            tracing::warn!(
                peer = %peer,
                user = %e.user,
                mechanism = %mechanism,
                protocol = proto.label(),
                "login refused: {}",
                e.why
            );
        }
    }
    r
}

fn attempt(
    ctx: &ServerCtx,
    proto: Proto,
    mechanism: &str,
    response: &[u8],
    peer: SocketAddr,
    tls: Option<&TlsInfo>,
) -> Result<User, Refused> {
    let refused = |user: &str, why: String| Refused {
        user: user.into(),
        why,
        unsupported: false,
    };
    if !offered(ctx, proto, tls).contains(&mechanism) {
        return Err(Refused {
            unsupported: true,
            ..refused("", format!("authentication mechanism '{mechanism}' not offered"))
        });
    }
    let loopback = peer.ip().is_loopback();
    let broker = &ctx.broker;
    match mechanism {
        "PLAIN" | "AMQPLAIN" => {
            let (user, pass) = if mechanism == "PLAIN" {
                plain(response)
            } else {
                amqplain(response)
            }
            .ok_or_else(|| refused("", format!("malformed {mechanism} response")))?;
            password(ctx, &user, &pass, loopback).map_err(|why| refused(&user, why))
        }
        "EXTERNAL" => {
            let cert = tls
                .and_then(|t| t.peer.as_ref())
                .ok_or_else(|| refused("", "no client certificate".into()))?;
            let c = &ctx.config;
            let name = cert
                .login_name(
                    c.ssl_cert_login_from,
                    c.ssl_cert_login_san_type,
                    c.ssl_cert_login_san_index,
                )
                .map_err(|why| refused("", why))?;
            broker
                .authenticate_external(&name, loopback)
                .map_err(|e| refused(&name, e.to_string()))
        }
        // RabbitMQ 4's anonymous login: as the default user (its
        // anonymous_login_user, guest), which a loopback user is only
        // from loopback.
        "ANONYMOUS" => {
            let name = &ctx.config.default_user;
            if !loopback && broker.config.loopback_users.iter().any(|u| u == name) {
                return Err(refused(
                    name,
                    format!("user '{name}' can only connect via localhost (ANONYMOUS)"),
                ));
            }
            broker
                .user(name)
                .ok_or_else(|| refused(name, "the default user does not exist".into()))
        }
        other => Err(refused("", format!("unknown authentication mechanism '{other}'"))),
    }
}

/// A user name and password, checked by each of `auth_backends` in turn
/// (RabbitMQ's order): `oauth2` takes a password shaped as a JWT as an
/// access token (the user name is then the token's), `internal` the user
/// database. The last refusal's reason, for the log.
pub fn password(ctx: &ServerCtx, name: &str, pass: &str, loopback: bool) -> Result<User, String> {
    let mut why = String::from("no authentication backend");
    for backend in &ctx.config.auth_backends {
        match backend.as_str() {
            "oauth2" => {
                let Some(o) = &ctx.oauth2 else { continue };
                if !crate::oauth2::Verifier::looks_like_token(pass) {
                    why = "the password is not an access token".into();
                    continue;
                }
                match o.verify(pass) {
                    Ok(v) => return Ok(crate::oauth2::user(v, &ctx.broker)),
                    Err(e) => why = e.to_string(),
                }
            }
            _ => match ctx.broker.authenticate(name, pass, loopback) {
                Ok(u) => return Ok(u),
                Err(e) => why = e.to_string(),
            },
        }
    }
    Err(why)
}

/// A connection's user logged in again (a fresh token, sent to keep the
/// connection past the old one's expiry): its permissions in `vhost` as
/// the new login gives them, and the connection's expiry moved to the new
/// token's. Every protocol's refresh ends here.
pub fn renew(
    ctx: &ServerCtx,
    entry: &crate::connections::Entry,
    fresh: &User,
    vhost: &str,
) -> Result<warren_core::Grant, warren_core::BrokerError> {
    let (_, grant) = ctx.broker.open_vhost(fresh, vhost, None)?;
    entry.set_expiry(fresh.token.as_ref().map(|t| t.expires_at));
    Ok(grant)
}

/// RFC 4616: [authzid] NUL authcid NUL passwd.
pub fn plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = parts.next()?;
    let pass = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    Some((
        String::from_utf8(user.to_vec()).ok()?,
        String::from_utf8(pass.to_vec()).ok()?,
    ))
}

/// AMQPLAIN: a field table's entries (LOGIN, PASSWORD), without the
/// table's length prefix.
pub fn amqplain(response: &[u8]) -> Option<(String, String)> {
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&(response.len() as u32).to_be_bytes());
    framed.extend_from_slice(response);
    let t = FieldTable::decode_from(Bytes::from(framed)).ok()?;
    let get = |k: &str| {
        t.get(k)
            .and_then(|v| v.as_bytes())
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    Some((get("LOGIN")?, get("PASSWORD")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain_responses() {
        assert_eq!(plain(b"\0bob\0pw"), Some(("bob".into(), "pw".into())));
        assert_eq!(plain(b"nonul"), None);
        assert_eq!(plain(b"\0a\0b\0c"), None);
        let mut t = FieldTable::new();
        t.insert("LOGIN", "bob".into());
        t.insert("PASSWORD", "pw".into());
        let mut enc = bytes::BytesMut::new();
        t.encode(&mut enc);
        assert_eq!(amqplain(&enc[4..]), Some(("bob".into(), "pw".into())));
    }
}
