//! The management HTTP API on `http_listen` (15672, like RabbitMQ's
//! rabbitmq_management): RabbitMQ's paths, JSON shapes, basic auth, status
//! codes and error bodies, so rabbitmqadmin, monitoring scripts and
//! definitions tooling work against Warren unchanged.
//!
//! The module owns routing and serving; `auth` decides who may see and do
//! what, `error` shapes failures as RabbitMQ does, `overview` answers the
//! node-wide endpoints (overview, nodes, health checks, aliveness),
//! `conns` the client connections,
//! `objects` the per-vhost ones (vhosts, users, exchanges, queues,
//! bindings) and `defs` definitions export and import; `metrics` is the
//! Prometheus endpoint, served on its own listener.

mod auth;
mod conns;
mod defs;
mod error;
pub mod metrics;
mod objects;
mod overview;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::ServerCtx;

/// Every route of the API.
pub fn router(ctx: Arc<ServerCtx>) -> Router {
    Router::new()
        .route("/api/overview", get(overview::overview))
        .route("/api/nodes", get(overview::nodes))
        .route("/api/whoami", get(overview::whoami))
        .route("/api/health/checks/alarms", get(overview::alarms))
        .route("/api/health/checks/local-alarms", get(overview::alarms))
        .route("/api/aliveness-test/{vhost}", get(overview::aliveness))
        .route("/api/connections", get(conns::connections))
        .route(
            "/api/connections/{name}",
            get(conns::connection).delete(conns::close_connection),
        )
        .route("/api/vhosts/{vhost}/connections", get(conns::vhost_connections))
        .route("/api/vhosts", get(objects::vhosts))
        .route(
            "/api/vhosts/{vhost}",
            get(objects::vhost)
                .put(objects::put_vhost)
                .delete(objects::delete_vhost),
        )
        .route("/api/users", get(objects::users))
        .route(
            "/api/users/{user}",
            get(objects::user)
                .put(objects::put_user)
                .delete(objects::delete_user),
        )
        .route("/api/permissions", get(objects::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(objects::permission)
                .put(objects::put_permission)
                .delete(objects::delete_permission),
        )
        .route("/api/exchanges", get(objects::exchanges))
        .route("/api/exchanges/{vhost}", get(objects::exchanges_in))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(objects::exchange)
                .put(objects::put_exchange)
                .delete(objects::delete_exchange),
        )
        .route("/api/queues", get(objects::queues))
        .route("/api/queues/{vhost}", get(objects::queues_in))
        .route(
            "/api/queues/{vhost}/{name}",
            get(objects::queue)
                .put(objects::put_queue)
                .delete(objects::delete_queue),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(objects::purge_queue),
        )
        .route("/api/bindings", get(objects::bindings))
        .route("/api/bindings/{vhost}", get(objects::bindings_in))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(objects::bindings_between).post(objects::bind),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            axum::routing::delete(objects::unbind),
        )
        .route("/api/definitions", get(defs::export).post(defs::import))
        .route("/api/definitions/{vhost}", get(defs::export_vhost))
        .route("/api/{*rest}", get(error::no_such_path))
        .with_state(ctx)
}

/// Serve the API on `listener` until shutdown.
pub async fn serve(listener: TcpListener, ctx: Arc<ServerCtx>, mut shutdown: watch::Receiver<bool>) {
    let app = router(ctx).into_make_service_with_connect_info::<SocketAddr>();
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
        tracing::error!("management HTTP listener failed: {e}");
    }
}
