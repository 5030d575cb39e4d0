//! The health checks that RabbitMQ's management API offers beyond alarms,
//! as Kubernetes probes and monitoring scripts call them: a listener on a
//! port or for a protocol, vhosts running, certificates not expiring, and
//! the cluster checks (a single node is never quorum- or sync-critical).
//! Answers and failures are shaped as RabbitMQ 3.10's (compared).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::auth::Authed;
use super::error::ApiError;
use warren_node::ServerCtx;

fn ok(v: Value) -> Response {
    Json(v).into_response()
}

fn failed(v: Value) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, Json(v)).into_response()
}

/// The node's listeners as RabbitMQ names their protocols, with ports.
pub fn listeners(ctx: &ServerCtx) -> Vec<(&'static str, u16)> {
    ctx.listeners
        .named()
        .into_iter()
        .map(|(n, a)| (n, a.port()))
        .collect()
}

/// `/api/health/checks/port-listener/{port}`.
pub async fn port_listener(
    State(ctx): State<Arc<ServerCtx>>,
    _who: Authed,
    Path(port): Path<String>,
) -> Result<Response, ApiError> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::BadRequest("Invalid port".into()))?;
    let ls = listeners(&ctx);
    Ok(if ls.iter().any(|(_, p)| *p == port) {
        ok(json!({"status": "ok", "port": port}))
    } else {
        let ports: Vec<u16> = ls.iter().map(|(_, p)| *p).collect();
        failed(json!({"status": "failed", "reason": "No active listener", "missing": port, "ports": ports}))
    })
}

/// The names RabbitMQ accepts for a protocol, as its listener calls it.
fn protocol_name(asked: &str) -> &str {
    match asked.to_ascii_lowercase().as_str() {
        "amqp" | "amqp091" | "amqp0-9-1" | "amqp0.9.1" | "amqp10" | "amqp1.0" | "amqp1-0" => "amqp",
        "http" | "management" => "http",
        "http/prometheus" => "http/prometheus",
        "stream" => "stream",
        "amqps" | "amqp/ssl" | "amqp091/ssl" | "amqp10/ssl" => "amqp/ssl",
        "https" | "management/ssl" => "https",
        "streams" | "stream/ssl" => "stream/ssl",
        "https/prometheus" => "https/prometheus",
        _ => asked,
    }
}

/// `/api/health/checks/protocol-listener/{protocol}`.
pub async fn protocol_listener(
    State(ctx): State<Arc<ServerCtx>>,
    _who: Authed,
    Path(protocol): Path<String>,
) -> Response {
    let name = protocol_name(&protocol);
    let ls = listeners(&ctx);
    if ls.iter().any(|(p, _)| *p == name) {
        ok(json!({"status": "ok", "protocol": name}))
    } else {
        let protocols: Vec<&str> = ls.iter().map(|(p, _)| *p).collect();
        failed(
            json!({"status": "failed", "reason": "No active listener", "missing": protocol, "protocols": protocols}),
        )
    }
}

/// `/api/health/checks/virtual-hosts`: every vhost is up (a Warren vhost
/// has no processes of its own to be down).
pub async fn virtual_hosts(_who: Authed) -> Response {
    ok(json!({"status": "ok"}))
}

/// `/api/health/checks/node-is-quorum-critical` and
/// `node-is-mirror-sync-critical`: one node is never critical.
pub async fn single_node(_who: Authed) -> Response {
    ok(json!({"status": "ok", "reason": "single node cluster"}))
}

/// `/api/health/checks/certificate-expiration/{within}/{unit}`: fails
/// when the TLS listeners' certificate expires within that time (never,
/// without TLS).
pub async fn certificate_expiration(
    State(ctx): State<Arc<ServerCtx>>,
    _who: Authed,
    Path((within, unit)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let day = 86_400i64;
    let per = match unit.as_str() {
        "days" => day,
        "weeks" => 7 * day,
        "months" => 30 * day,
        "years" => 365 * day,
        _ => {
            return Err(ApiError::BadRequest(
                "Time unit not recognised. Supported units: days, weeks, months, years.".into(),
            ))
        }
    };
    let within: i64 = within
        .parse::<u32>()
        .map_err(|_| ApiError::BadRequest("Invalid expiration value.".into()))?
        .into();
    let Some(tls) = &ctx.tls else {
        return Ok(ok(json!({"status": "ok"})));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if tls.not_after() > now.saturating_add(within * per) {
        return Ok(ok(json!({"status": "ok"})));
    }
    let certfile = tls.opts.certfile.as_ref().map(|p| p.display().to_string());
    let cacertfile = tls.opts.cacertfile.as_ref().map(|p| p.display().to_string());
    let expired: Vec<Value> = ctx
        .listeners
        .named()
        .into_iter()
        .filter(|(p, _)| p.contains("ssl") || p.starts_with("https"))
        .map(|(protocol, a)| {
            json!({"node": ctx.config.node_name, "protocol": protocol,
                   "interface": a.ip().to_string(), "port": a.port(),
                   "certfile": certfile, "cacertfile": cacertfile,
                   "expiry_date": tls.not_after()})
        })
        .collect();
    Ok(failed(
        json!({"status": "failed", "reason": "Certificates expiring", "expired": expired}),
    ))
}

/// `POST /api/tls/reload` (Warren's; `warrenctl reload_tls`): read the TLS
/// certificate, key and CA files again, as SIGHUP does.
pub async fn reload_tls(State(ctx): State<Arc<ServerCtx>>, who: Authed) -> Result<Response, ApiError> {
    who.admin()?;
    ctx.reload_tls().map_err(ApiError::BadRequest)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
