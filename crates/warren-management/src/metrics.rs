//! Prometheus metrics on their own listener (`prometheus_listen`, 15692
//! like rabbitmq_prometheus), in the text exposition format, with
//! rabbitmq_prometheus's metric names where the concept is the same, so
//! its Grafana dashboards find them: `/metrics` has node-wide totals,
//! `/metrics/per-object` one series per queue (labels `vhost`, `queue`),
//! as RabbitMQ splits them. No auth, as RabbitMQ's endpoint has none.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use warren_core::queue::QueueStats;
use warren_core::stats::{MessageCounters, Stat};

use warren_node::ServerCtx;

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router(ctx: Arc<ServerCtx>) -> Router {
    Router::new()
        .route("/metrics", get(totals))
        .route("/metrics/per-object", get(per_object))
        .with_state(ctx)
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}\n{name} {value}");
}

/// Label values escaped as the exposition format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

async fn totals(State(ctx): State<Arc<ServerCtx>>) -> impl IntoResponse {
    let b = &ctx.broker;
    let super::overview::Totals {
        queues,
        consumers,
        ready,
        unacked,
    } = super::overview::Totals::of(&b.vhosts());
    let mut out = String::new();
    metric(
        &mut out,
        "rabbitmq_connections",
        "gauge",
        "Connections currently open",
        ctx.connections.len(),
    );
    metric(&mut out, "rabbitmq_queues", "gauge", "Queues available", queues);
    metric(
        &mut out,
        "rabbitmq_consumers",
        "gauge",
        "Consumers currently connected",
        consumers,
    );
    metric(
        &mut out,
        "rabbitmq_queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages",
        ready + unacked,
    );
    metric(
        &mut out,
        "rabbitmq_queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        ready,
    );
    metric(
        &mut out,
        "rabbitmq_queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        unacked,
    );
    metric(
        &mut out,
        "rabbitmq_resident_memory_limit_bytes",
        "gauge",
        "Memory high watermark in bytes",
        b.alarms.memory_limit(),
    );
    metric(
        &mut out,
        "rabbitmq_alarms_memory_used_watermark",
        "gauge",
        "is 1 if VM memory watermark alarm is in effect",
        u8::from(b.alarms.memory_alarm()),
    );
    metric(
        &mut out,
        "rabbitmq_alarms_free_disk_space_watermark",
        "gauge",
        "is 1 if free disk space watermark alarm is in effect",
        u8::from(b.alarms.disk_alarm()),
    );
    metric(
        &mut out,
        "rabbitmq_disk_space_available_limit_bytes",
        "gauge",
        "Free disk space low watermark in bytes",
        b.alarms.disk_free_limit(),
    );
    global_counters(&mut out, &b.messages);
    // rabbitmq_prometheus's auth_attempt_metrics, summed over protocols.
    let auth = &ctx.auth;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    metric(
        &mut out,
        "rabbitmq_auth_attempts_total",
        "counter",
        "Total number of authentication attempts",
        n(&auth.attempts),
    );
    metric(
        &mut out,
        "rabbitmq_auth_attempts_succeeded_total",
        "counter",
        "Total number of successful authentication attempts",
        n(&auth.succeeded),
    );
    metric(
        &mut out,
        "rabbitmq_auth_attempts_failed_total",
        "counter",
        "Total number of failed authentication attempts",
        n(&auth.failed),
    );
    // RabbitMQ's Grafana dashboards join every series on this one.
    let _ = writeln!(
        out,
        "# TYPE rabbitmq_identity_info untyped\n# HELP rabbitmq_identity_info RabbitMQ node & cluster identity info\nrabbitmq_identity_info{{rabbitmq_node=\"{}\",rabbitmq_cluster=\"{}\",rabbitmq_cluster_permanent_id=\"warren-{}\"}} 1",
        ctx.config.node_name,
        ctx.config.cluster_name(),
        ctx.config.cluster_name()
    );
    let _ = writeln!(
        out,
        "# TYPE rabbitmq_build_info untyped\n# HELP rabbitmq_build_info RabbitMQ & Erlang/OTP version info\nrabbitmq_build_info{{rabbitmq_version=\"{}\",product_name=\"Warren\",product_version=\"{}\"}} 1",
        super::overview::RABBITMQ_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    ([(CONTENT_TYPE, TEXT)], out)
}

/// rabbitmq_prometheus's `rabbitmq_global_messages_*_total` counters
/// (without its `protocol` label: Warren counts across protocols).
fn global_counters(out: &mut String, c: &MessageCounters) {
    let n = |s| c.count(s);
    let delivered = n(Stat::Deliver) + n(Stat::DeliverNoAck) + n(Stat::Get) + n(Stat::GetNoAck);
    let rows: [(&str, &str, u64); 11] = [
        ("received", "Total number of messages received from publishers", n(Stat::Publish)),
        (
            "routed",
            "Total number of messages routed to queues or streams",
            n(Stat::Publish).saturating_sub(n(Stat::Unroutable)),
        ),
        (
            "unroutable_dropped",
            "Total number of messages published as non-mandatory into an exchange and dropped as unroutable (mandatory ones returned are counted here too)",
            n(Stat::Unroutable),
        ),
        ("confirmed", "Total number of messages confirmed to publishers", n(Stat::Confirm)),
        ("delivered", "Total number of messages delivered to consumers", delivered),
        (
            "delivered_consume_manual_ack",
            "Total number of messages delivered to consumers using manual acknowledgement mode",
            n(Stat::Deliver),
        ),
        (
            "delivered_consume_auto_ack",
            "Total number of messages delivered to consumers using automatic acknowledgement mode",
            n(Stat::DeliverNoAck),
        ),
        (
            "delivered_get_manual_ack",
            "Total number of messages fetched with basic.get in manual acknowledgement mode",
            n(Stat::Get),
        ),
        (
            "delivered_get_auto_ack",
            "Total number of messages fetched with basic.get in automatic acknowledgement mode",
            n(Stat::GetNoAck),
        ),
        ("acknowledged", "Total number of messages acknowledged by consumers", n(Stat::Ack)),
        ("redelivered", "Total number of messages redelivered to consumers", n(Stat::Redeliver)),
    ];
    for (name, help, value) in rows {
        metric(
            out,
            &format!("rabbitmq_global_messages_{name}_total"),
            "counter",
            help,
            value,
        );
    }
}

/// A per-queue series: its name, its help text, and its value.
type Series = (&'static str, &'static str, fn(&QueueStats) -> u64);

async fn per_object(State(ctx): State<Arc<ServerCtx>>) -> impl IntoResponse {
    let mut rows: Vec<(String, String, QueueStats)> = Vec::new();
    for vh in ctx.broker.vhosts() {
        // This node's queues only, as RabbitMQ's per-node endpoint: a
        // scrape of every node counts each queue once.
        for q in vh.queues().into_iter().filter(|q| q.home.is_none()) {
            rows.push((vh.name.clone(), q.name.to_str_lossy().into_owned(), q.stats()));
        }
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut out = String::new();
    let series: [Series; 4] = [
        (
            "rabbitmq_queue_messages",
            "Sum of ready and unacknowledged messages",
            |s| s.ready + s.unacked,
        ),
        (
            "rabbitmq_queue_messages_ready",
            "Messages ready to be delivered to consumers",
            |s| s.ready,
        ),
        (
            "rabbitmq_queue_messages_unacked",
            "Messages delivered to consumers but not yet acknowledged",
            |s| s.unacked,
        ),
        ("rabbitmq_queue_consumers", "Consumers on a queue", |s| {
            s.consumers as u64
        }),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# TYPE {name} gauge\n# HELP {name} {help}");
        for (vhost, queue, s) in &rows {
            let _ = writeln!(
                out,
                "{name}{{vhost=\"{}\",queue=\"{}\"}} {}",
                label(vhost),
                label(queue),
                value(s)
            );
        }
    }
    ([(CONTENT_TYPE, TEXT)], out)
}

/// Serve the metrics on `listener` until shutdown.
pub async fn serve(
    listener: super::listener::HttpListener,
    ctx: Arc<ServerCtx>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    if let Err(e) = axum::serve(listener, router(ctx))
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!("Prometheus listener failed: {e}");
    }
}
