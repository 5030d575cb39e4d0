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
use crate::ServerCtx;

fn ok(v: Value) -> Response {
    Json(v).into_response()
}

fn failed(v: Value) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, Json(v)).into_response()
}

/// The node's listeners as RabbitMQ names their protocols, with ports.
pub fn listeners(ctx: &ServerCtx) -> Vec<(&'static str, u16)> {
    let l = &ctx.listeners;
    vec![
        ("amqp", l.amqp.port()),
        ("stream", l.stream.port()),
        ("http", l.http.port()),
        ("http/prometheus", l.prometheus.port()),
    ]
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

/// `/api/health/checks/certificate-expiration/{within}/{unit}`: no TLS
/// listener, so no certificate expires.
pub async fn certificate_expiration(
    _who: Authed,
    Path((within, unit)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if !matches!(unit.as_str(), "days" | "weeks" | "months" | "years") {
        return Err(ApiError::BadRequest(
            "Time unit not recognised. Supported units: days, weeks, months, years.".into(),
        ));
    }
    within
        .parse::<u64>()
        .map_err(|_| ApiError::BadRequest("Invalid expiration value.".into()))?;
    Ok(ok(json!({"status": "ok"})))
}
