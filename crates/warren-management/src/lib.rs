//! The management HTTP API on `http_listen` (15672, like RabbitMQ's
//! rabbitmq_management): RabbitMQ's paths, JSON shapes, basic auth, status
//! codes and error bodies, so rabbitmqadmin, monitoring scripts and
//! definitions tooling work against Warren unchanged.
//!
//! The module owns routing and serving; `auth` decides who may see and do
//! what, `error` shapes failures as RabbitMQ does, `overview` answers the
//! node-wide endpoints (overview, nodes, cluster name, alarm checks,
//! aliveness), `health` the listener, vhost, certificate and cluster
//! health checks, `params` the runtime and global parameters, operator
//! policies and feature flags Warren answers empty, `limits` the vhost
//! and user limits,
//! `conns` the client connections, `channels` their channels and the
//! queues' consumers,
//! `objects` the per-vhost ones (vhosts, users, permissions, exchanges,
//! queues, bindings), `topic_perms` topic permissions, `messages` publish
//! and get, `defs` definitions export and
//! import, and `ui` the web UI's files; `metrics` is the Prometheus
//! endpoint, served on its own listener.

mod auth;
mod channels;
mod conns;
mod defs;
mod error;
mod health;
mod limits;
pub mod listener;
mod listing;
mod message_stats;
mod messages;
pub mod metrics;
mod objects;
mod overview;
mod params;
mod policies;
pub mod queue_info;
mod quorum;
mod stream_members;
mod topic_perms;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::routing::{get, put};
use axum::serve::ListenerExt;
use axum::{Router, ServiceExt};
use listener::HttpListener;
use tokio::sync::watch;
use tower_http::normalize_path::NormalizePathLayer;
use tower_layer::Layer;

use warren_node::ServerCtx;

/// The largest request body taken (RabbitMQ: 20 MB).
pub const MAX_BODY: usize = 20_000_000;

/// Every route of the API.
pub fn router(ctx: Arc<ServerCtx>) -> Router {
    Router::new()
        .route("/", get(ui::index))
        .route("/ui/app.js", get(ui::app_js))
        .route("/ui/app.css", get(ui::app_css))
        .route("/api/overview", get(overview::overview))
        .route("/api/nodes", get(overview::nodes))
        .route("/api/whoami", get(overview::whoami))
        .route("/api/health/checks/alarms", get(overview::alarms))
        .route("/api/health/checks/local-alarms", get(overview::alarms))
        .route(
            "/api/health/checks/port-listener/{port}",
            get(health::port_listener),
        )
        .route(
            "/api/health/checks/protocol-listener/{protocol}",
            get(health::protocol_listener),
        )
        .route("/api/health/checks/virtual-hosts", get(health::virtual_hosts))
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(health::single_node),
        )
        .route(
            "/api/health/checks/node-is-mirror-sync-critical",
            get(health::single_node),
        )
        .route(
            "/api/health/checks/certificate-expiration/{within}/{unit}",
            get(health::certificate_expiration),
        )
        .route(
            "/api/nodes/{name}",
            get(overview::node).delete(overview::forget_node),
        )
        .route("/api/cluster/join", axum::routing::post(overview::join_cluster))
        .route("/api/cluster-name", get(overview::cluster_name))
        .route("/api/extensions", get(overview::extensions))
        .route("/api/tls/reload", axum::routing::post(health::reload_tls))
        .route("/api/auth", get(overview::auth))
        .route("/api/parameters", get(params::none))
        .route("/api/parameters/{component}", get(params::none))
        .route(
            "/api/parameters/{component}/{vhost}",
            get(params::component_in_vhost),
        )
        .route("/api/global-parameters", get(params::globals))
        .route("/api/global-parameters/{name}", get(params::global))
        .route("/api/operator-policies", get(params::none))
        .route("/api/operator-policies/{vhost}", get(params::none_in_vhost))
        .route("/api/vhost-limits", get(limits::vhosts))
        .route("/api/vhost-limits/{vhost}", get(limits::vhost))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            put(limits::put_vhost).delete(limits::delete_vhost),
        )
        .route("/api/user-limits", get(limits::users))
        .route("/api/user-limits/{user}", get(limits::user))
        .route(
            "/api/user-limits/{user}/{name}",
            put(limits::put_user).delete(limits::delete_user),
        )
        .route("/api/feature-flags", get(params::none))
        .route(
            "/api/users/without-permissions",
            get(objects::users_without_permissions),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/{side}",
            get(objects::exchange_bindings),
        )
        .route(
            "/api/connections/username/{user}",
            get(conns::user_connections).delete(conns::close_user_connections),
        )
        .route("/api/aliveness-test/{vhost}", get(overview::aliveness))
        .route("/api/connections", get(conns::connections))
        .route(
            "/api/connections/{name}",
            get(conns::connection).delete(conns::close_connection),
        )
        .route("/api/vhosts/{vhost}/connections", get(conns::vhost_connections))
        .route(
            "/api/connections/{name}/channels",
            get(channels::connection_channels),
        )
        .route("/api/channels", get(channels::channels))
        .route("/api/channels/{name}", get(channels::channel))
        .route("/api/vhosts/{vhost}/channels", get(channels::vhost_channels))
        .route("/api/consumers", get(channels::consumers))
        .route("/api/consumers/{vhost}", get(channels::vhost_consumers))
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
        .route("/api/users/{user}/permissions", get(objects::user_permissions))
        .route("/api/vhosts/{vhost}/permissions", get(objects::vhost_permissions))
        .route("/api/permissions", get(objects::permissions))
        .route("/api/topic-permissions", get(topic_perms::all))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(topic_perms::get_pair)
                .put(topic_perms::put_pair)
                .delete(topic_perms::delete_pair),
        )
        .route(
            "/api/topic-permissions/{vhost}/{user}/{exchange}",
            axum::routing::delete(topic_perms::delete_one),
        )
        .route(
            "/api/users/{user}/topic-permissions",
            get(topic_perms::of_one_user),
        )
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(topic_perms::in_vhost),
        )
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
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            axum::routing::post(messages::publish),
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
        .route(
            "/api/queues/{vhost}/{name}/get",
            axum::routing::post(messages::get),
        )
        .route(
            "/api/queues/quorum/{vhost}/{name}/replicas/add",
            axum::routing::post(quorum::add_member),
        )
        .route(
            "/api/queues/quorum/{vhost}/{name}/replicas/delete",
            axum::routing::delete(quorum::delete_member),
        )
        .route(
            "/api/queues/quorum/{vhost}/{name}/leader",
            axum::routing::post(quorum::transfer_leader),
        )
        .route(
            "/api/queues/quorum/replicas/on/{node}/grow",
            axum::routing::post(quorum::grow),
        )
        .route(
            "/api/queues/quorum/replicas/on/{node}/shrink",
            axum::routing::delete(quorum::shrink),
        )
        .route("/api/rebalance/queues", axum::routing::post(quorum::rebalance))
        .route(
            "/api/queues/stream/{vhost}/{name}/replicas/add",
            axum::routing::post(stream_members::add_replica),
        )
        .route(
            "/api/queues/stream/{vhost}/{name}/replicas/delete",
            axum::routing::delete(stream_members::delete_replica),
        )
        .route(
            "/api/queues/stream/{vhost}/{name}/status",
            get(stream_members::status),
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
        .route("/api/policies", get(policies::policies))
        .route("/api/policies/{vhost}", get(policies::policies_in))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::policy)
                .put(policies::put_policy)
                .delete(policies::delete_policy),
        )
        .route("/api/definitions", get(defs::export).post(defs::import))
        .route(
            "/api/definitions/{vhost}",
            get(defs::export_vhost).post(defs::import_vhost),
        )
        .route("/api/{*rest}", get(error::no_such_path))
        // Definitions of a large broker pass axum's 2 MB default; this is
        // RabbitMQ's management.http.max_body_size default, still a bound.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(ctx)
}

/// Serve the API on `listener` until shutdown.
pub async fn serve(listener: HttpListener, ctx: Arc<ServerCtx>, mut shutdown: watch::Receiver<bool>) {
    // RabbitMQ (cowboy) serves `/api/queues/` as `/api/queues`, and tools
    // call it so; the path is trimmed before routing, which axum's own
    // layers (applied after the route is chosen) cannot do.
    let app = NormalizePathLayer::trim_trailing_slash().layer(router(ctx));
    let app = ServiceExt::<Request>::into_make_service_with_connect_info::<SocketAddr>(app);
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    // tap_io: axum hands a listener's own address type to ConnectInfo
    // only through its TapIo wrapper.
    let listener = listener.tap_io(|_: &mut warren_node::transport::Transport| {});
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
        tracing::error!("management HTTP listener failed: {e}");
    }
}
