//! The connection class (0-9-1 §1.4.2): start, start-ok (the login, by
//! the mechanisms `sasl.rs` offers: PLAIN, AMQPLAIN, EXTERNAL), tune, tune-ok, open, and close in either direction. Limits
//! follow RabbitMQ: a client may lower frame_max and channel_max but not
//! raise them or ask for "no limit" (0), and frame_max may not go under
//! 4096.

use bytes::Bytes;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, FieldValue, Method};

use super::error::{AmqpError, Result};
use crate::conn::{Conn, Phase};
use warren_core::BrokerError;
use warren_node::connections::Login;
use warren_node::definitions::table_to_json;
use warren_node::sasl::Proto;

fn longstr(s: &str) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
}

/// The server-properties table (RabbitMQ's keys, all long strings, and the
/// capabilities table of booleans that clients read).
pub fn server_properties(cluster_name: &str) -> FieldTable {
    let mut caps = FieldTable::new();
    for c in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        caps.insert(c, FieldValue::Bool(true));
    }
    let mut t = FieldTable::new();
    t.insert("capabilities", FieldValue::Table(caps));
    t.insert("cluster_name", longstr(cluster_name));
    t.insert("copyright", longstr("Copyright (c) the Warren authors"));
    t.insert("information", longstr("Licensed under the Apache License 2.0"));
    t.insert("platform", longstr(warren_node::version::PLATFORM));
    t.insert("product", longstr("RabbitMQ"));
    t.insert("version", longstr(warren_node::version::RABBITMQ_VERSION));
    t
}

pub fn send_start(conn: &mut Conn) {
    let server_properties = server_properties(conn.ctx.config.cluster_name());
    let mechanisms = warren_node::login::offered(&conn.ctx, Proto::Amqp091, conn.entry.tls()).join(" ");
    conn.send(
        0,
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties,
            mechanisms: Bytes::from(mechanisms),
            locales: Bytes::from_static(b"en_US"),
        },
    );
    conn.phase = Phase::StartOk;
}

fn read_caps(conn: &mut Conn, client_properties: &FieldTable) {
    if let Some(FieldValue::Table(c)) = client_properties.get("capabilities") {
        let on = |k: &str| c.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
        conn.caps.consumer_cancel_notify = on("consumer_cancel_notify");
        conn.caps.connection_blocked = on("connection.blocked");
        conn.caps.authentication_failure_close = on("authentication_failure_close");
    }
}

/// Check a negotiated limit as RabbitMQ does: 0 (no limit) or more than the
/// server's is refused, as is less than the minimum.
fn negotiate(name: &str, client: u32, server: u32, min: u32) -> Result<u32> {
    if client == 0 && server != 0 {
        let what = if name == "channel_max" { " (no limit)" } else { "" };
        return Err(AmqpError::new(
            530,
            format!("negotiated {name} = 0{what} is higher than the maximum allowed value ({server})"),
        ));
    }
    if client > server && server != 0 {
        return Err(AmqpError::new(
            530,
            format!("negotiated {name} = {client} is higher than the maximum allowed value ({server})"),
        ));
    }
    if client < min {
        return Err(AmqpError::new(
            530,
            format!("negotiated {name} = {client} is lower than the minimum allowed value ({min})"),
        ));
    }
    Ok(client)
}

/// A method on channel 0.
pub fn connection_method(conn: &mut Conn, m: Method) -> Result<()> {
    let (class_id, method_id) = (m.class_id(), m.method_id());
    let r = match (conn.phase, m) {
        (Phase::StartOk, Method::ConnectionStartOk(ok)) => start_ok(conn, ok),
        (Phase::TuneOk, Method::ConnectionTuneOk(t)) => {
            let cfg = &conn.ctx.config;
            conn.frame_max =
                negotiate("frame_max", t.frame_max, cfg.frame_max, 4096).map_err(|e| e.on(10, 30))?;
            conn.channel_max = negotiate("channel_max", t.channel_max as u32, cfg.channel_max as u32, 1)
                .map_err(|e| e.on(10, 30))? as u16;
            // RabbitMQ takes the client's heartbeat as given; 0 disables.
            conn.heartbeat = t.heartbeat;
            conn.phase = Phase::Open;
            Ok(())
        }
        (Phase::Open, Method::ConnectionOpen(o)) => {
            let vhost = o.virtual_host.to_string();
            let user = conn
                .user
                .clone()
                .ok_or_else(|| AmqpError::new(530, "not authenticated"))?;
            let (vh, grant) = conn
                .ctx
                .broker
                .open_vhost(&user, &vhost, None)
                .map_err(AmqpError::from)?;
            let mut login = conn.hello.take().map(|b| *b).unwrap_or_default();
            login.protocol = "AMQP 0-9-1";
            login.user = user.name.clone();
            login.vhost = vhost.clone();
            login.frame_max = conn.frame_max;
            login.channel_max = conn.channel_max as u32;
            login.timeout = conn.heartbeat as u32;
            let user_limits = conn.ctx.broker.user_limits(&user.name);
            conn.entry
                .logged_in(login, &vh.limits(), &user_limits)
                .map_err(|l| AmqpError::from(BrokerError::NotAllowed(l.text(&user.name, &vhost))))?;
            conn.entry.set_expiry(user.token.as_ref().map(|t| t.expires_at));
            conn.vhost = Some(vh);
            conn.grant = Some(grant);
            conn.send(0, ConnectionOpenOk::default());
            conn.phase = Phase::Running;
            Ok(())
        }
        (_, Method::ConnectionClose(_)) => {
            conn.send(0, ConnectionCloseOk {});
            conn.phase = Phase::Done;
            Ok(())
        }
        (_, Method::ConnectionCloseOk(_)) => {
            conn.phase = Phase::Done;
            Ok(())
        }
        (Phase::Running, Method::ConnectionUpdateSecret(u)) => update_secret(conn, &u.new_secret),
        (Phase::Running, Method::ConnectionBlocked(_) | Method::ConnectionUnblocked(_)) => Ok(()),
        (Phase::Running, _) => Err(AmqpError::new(
            504,
            "unexpected method in connection state running",
        )),
        (_, other) => Err(AmqpError::new(
            503,
            format!("unexpected {} during the connection handshake", other.name()),
        )),
    };
    r.map_err(|e| e.on(class_id, method_id))
}

/// connection.update-secret: a user who logged in with a token sends a
/// fresh one; it must verify and be for the same user, and its expiry and
/// scopes replace the old ones (channels check the new permissions from
/// now on). A refusal closes the connection, as RabbitMQ's 530. Users of
/// the user database have nothing to update.
fn update_secret(conn: &mut Conn, secret: &[u8]) -> Result<()> {
    let Some(user) = conn.user.as_ref().filter(|u| u.token.is_some()) else {
        conn.send(0, ConnectionUpdateSecretOk {});
        return Ok(());
    };
    let name = user.name.clone();
    let refused = |why: String| {
        tracing::warn!(user = %name, "secret update refused: {why}");
        AmqpError::from(BrokerError::NotAllowed(
            "New secret was refused by one of the backends".into(),
        ))
    };
    let fresh =
        warren_node::login::refresh(&conn.ctx, &name, &String::from_utf8_lossy(secret)).map_err(refused)?;
    let vhost = conn.vhost.as_ref().map(|v| v.name.clone()).unwrap_or_default();
    let grant = warren_node::login::renew(&conn.ctx, &conn.entry, &fresh, &vhost)
        .map_err(|e| refused(e.to_string()))?;
    conn.grant = Some(grant);
    conn.user = Some(fresh);
    tracing::info!(user = %name, "secret updated");
    conn.send(0, ConnectionUpdateSecretOk {});
    Ok(())
}

fn start_ok(conn: &mut Conn, ok: ConnectionStartOk) -> Result<()> {
    read_caps(conn, &ok.client_properties);
    let result = warren_node::login::login(
        &conn.ctx,
        Proto::Amqp091,
        &ok.mechanism.to_string(),
        &ok.response,
        conn.peer,
        conn.entry.tls(),
    );
    match result {
        Ok(user) => {
            conn.user = Some(user);
            conn.hello = Some(Box::new(Login {
                auth_mechanism: ok.mechanism.to_string(),
                client_properties: table_to_json(&ok.client_properties),
                ..Default::default()
            }));
            let cfg = &conn.ctx.config;
            conn.send(
                0,
                ConnectionTune {
                    channel_max: cfg.channel_max,
                    frame_max: cfg.frame_max,
                    heartbeat: cfg.heartbeat,
                },
            );
            conn.phase = Phase::TuneOk;
            Ok(())
        }
        Err(_) => {
            if conn.caps.authentication_failure_close {
                // Past start-ok the client understands connection.close.
                conn.phase = Phase::TuneOk;
                Err(AmqpError::new(
                    403,
                    format!(
                        "Login was refused using authentication mechanism {}. For details see the broker logfile.",
                        ok.mechanism
                    ),
                ))
            } else {
                conn.phase = Phase::Done;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_rabbitmq() {
        assert_eq!(negotiate("frame_max", 131072, 131072, 4096).unwrap(), 131072);
        assert_eq!(negotiate("frame_max", 8192, 131072, 4096).unwrap(), 8192);
        assert_eq!(negotiate("frame_max", 0, 131072, 4096).unwrap_err().code, 530);
        assert_eq!(
            negotiate("frame_max", 200000, 131072, 4096).unwrap_err().code,
            530
        );
        assert_eq!(negotiate("frame_max", 1000, 131072, 4096).unwrap_err().code, 530);
    }
}
