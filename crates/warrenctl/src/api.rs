//! The management API as warrenctl uses it: JSON requests with basic
//! auth, and the API's `{"error","reason"}` bodies turned into errors.

use base64::Engine;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the management API at {url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("{status} {error}: {reason}")]
    Api {
        status: u16,
        error: String,
        reason: String,
    },
    #[error("{0}: {1}")]
    File(String, std::io::Error),
}

impl CtlError {
    /// rabbitmqctl's exit codes: 64 usage, 69 unavailable, 70 software,
    /// 77 no permission.
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Usage(_) | CtlError::File(..) => 64,
            CtlError::Unreachable { .. } => 69,
            CtlError::Api { status: 401, .. } => 77,
            CtlError::Api { .. } => 70,
        }
    }
}

pub struct Api {
    base: String,
    auth: String,
    agent: ureq::Agent,
}

/// A path segment percent-encoded (vhost "/" is "%2F").
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Api {
    pub fn new(base: &str, user: &str, password: &str) -> Api {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Api {
            base: base.trim_end_matches('/').to_string(),
            auth: format!("Basic {token}"),
            agent: ureq::AgentBuilder::new()
                .timeout(std::time::Duration::from_secs(30))
                .build(),
        }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        reason: Option<&str>,
    ) -> Result<Value, CtlError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.request(method, &url).set("Authorization", &self.auth);
        if let Some(r) = reason {
            req = req.set("X-Reason", r);
        }
        let resp = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        match resp {
            Ok(r) => {
                let text = r.into_string().unwrap_or_default();
                Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            Err(ureq::Error::Status(status, r)) => {
                let body: Value = r.into_json().unwrap_or(Value::Null);
                Err(CtlError::Api {
                    status,
                    error: body["error"].as_str().unwrap_or("error").to_string(),
                    reason: body["reason"].as_str().unwrap_or("").to_string(),
                })
            }
            Err(e) => Err(CtlError::Unreachable {
                url,
                why: e.to_string(),
            }),
        }
    }

    pub fn get(&self, path: &str) -> Result<Value, CtlError> {
        self.call("GET", path, None, None)
    }

    pub fn put(&self, path: &str, body: Value) -> Result<(), CtlError> {
        self.call("PUT", path, Some(body), None).map(|_| ())
    }

    pub fn post(&self, path: &str, body: Value) -> Result<(), CtlError> {
        self.call("POST", path, Some(body), None).map(|_| ())
    }

    /// A POST whose answer matters.
    pub fn post_value(&self, path: &str, body: Value) -> Result<Value, CtlError> {
        self.call("POST", path, Some(body), None)
    }

    /// A DELETE with a body (RabbitMQ's replica paths take one).
    pub fn delete_with(&self, path: &str, body: Value) -> Result<Value, CtlError> {
        self.call("DELETE", path, Some(body), None)
    }

    pub fn delete(&self, path: &str, reason: Option<&str>) -> Result<(), CtlError> {
        self.call("DELETE", path, None, reason).map(|_| ())
    }
}
