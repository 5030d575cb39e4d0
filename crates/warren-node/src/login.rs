//! Logging in on this node, for every protocol: which SASL mechanisms a
//! connection is offered, a mechanism's response checked against the
//! configured backends (the user database, OAuth 2 tokens, client
//! certificates), a token refreshed on an open connection. The pure
//! parts (mechanism names, response formats, the counters) are
//! [`crate::sasl`]'s.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

use warren_core::User;

use crate::ctx::ServerCtx;
use crate::oauth2;
use crate::sasl::{amqplain, plain, Proto, Refused, KNOWN};
use crate::tls::peer::TlsInfo;

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
                if !oauth2::Verifier::looks_like_token(pass) {
                    why = "the password is not an access token".into();
                    continue;
                }
                match o.verify(pass) {
                    Ok(v) => return Ok(oauth2::user(v, &ctx.broker)),
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

/// Check a fresh token for a connection whose user is `current`: it must
/// verify and name the same user (RabbitMQ's update_state refuses a
/// token for someone else).
pub fn refresh(ctx: &ServerCtx, current: &str, secret: &str) -> Result<User, String> {
    let o = ctx.oauth2.as_ref().ok_or("OAuth 2 is not configured")?;
    let v = o.verify(secret).map_err(|e| e.to_string())?;
    if v.user != current {
        return Err(format!("the new token is for '{}', not '{current}'", v.user));
    }
    Ok(oauth2::user(v, &ctx.broker))
}
