//! Failures as RabbitMQ's management API reports them: a status code and
//! a JSON body `{"error": ..., "reason": ...}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use warren_core::BrokerError;

#[derive(Debug)]
pub enum ApiError {
    /// 401: no or wrong credentials, or a user without a management tag.
    NotAuthorized(&'static str),
    /// 401 as RabbitMQ answers a logged-in user lacking a permission.
    Forbidden(String),
    /// 404 Object Not Found.
    NotFound,
    /// 400 bad_request, with the reason.
    BadRequest(String),
    /// 500, with the reason.
    Internal(String),
    /// 503: a resource alarm holds publishers.
    Unavailable(String),
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> ApiError {
        match e {
            BrokerError::NotFound(_) => ApiError::NotFound,
            BrokerError::AccessRefused(r) | BrokerError::NotAllowed(r) => ApiError::Forbidden(r),
            BrokerError::Internal(r) => ApiError::Internal(r),
            other => ApiError::BadRequest(other.reply_text()),
        }
    }
}

/// A metadata change the cluster could not commit: 503 with the reason.
impl From<warren_node::cluster::meta::MetaError> for ApiError {
    fn from(e: warren_node::cluster::meta::MetaError) -> ApiError {
        ApiError::Unavailable(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error, reason) = match self {
            ApiError::NotAuthorized(reason) => {
                (StatusCode::UNAUTHORIZED, "not_authorized", reason.to_string())
            }
            ApiError::Forbidden(reason) => (StatusCode::UNAUTHORIZED, "not_authorized", reason),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Object Not Found", "Not Found".to_string()),
            ApiError::BadRequest(reason) => (StatusCode::BAD_REQUEST, "bad_request", reason),
            ApiError::Internal(reason) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error", reason),
            ApiError::Unavailable(reason) => (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", reason),
        };
        let mut r = (status, Json(json!({ "error": error, "reason": reason }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        r
    }
}

/// An /api path that does not exist.
pub async fn no_such_path() -> ApiError {
    ApiError::NotFound
}
