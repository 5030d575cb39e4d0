//! The management web UI: three static files (`crates/warren-management/ui/`)
//! compiled into the binary and served from the API's port, so the UI
//! needs no install step and always matches the API it calls. It is plain
//! HTML and JavaScript talking to `/api/*` with basic auth.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

const INDEX: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

fn asset(kind: &'static str, body: &'static str) -> impl IntoResponse {
    // no-cache: a browser revalidates, so an upgraded broker's UI is used.
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "no-cache")], body)
}

pub async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX)
}

pub async fn app_js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn app_css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", APP_CSS)
}
