//! What can go wrong on an AMQP 1.0 connection, as callers match on it.

use warren_amqp10::CodecError;

/// An error condition the broker sent (AMQP 1.0 `error`, 2.8.14): a
/// symbol such as `amqp:not-found` and a description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The condition symbol, e.g. `amqp:resource-locked`.
    pub condition: String,
    /// The broker's words, if any.
    pub description: Option<String>,
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.description {
            Some(d) => write!(f, "{}: {d}", self.condition),
            None => f.write_str(&self.condition),
        }
    }
}

impl From<warren_amqp10::performative::AmqpError> for Condition {
    fn from(e: warren_amqp10::performative::AmqpError) -> Condition {
        Condition {
            condition: e.condition,
            description: e.description,
        }
    }
}

/// Errors of [`crate::amqp`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URI could not be read.
    #[error("bad URI: {0}")]
    Uri(String),
    /// A message's address is missing or not one (`to` on a publisher
    /// without a target).
    #[error("bad address: {0}")]
    Address(String),
    /// The socket could not be opened (TCP or TLS).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// SASL refused the credentials (or offered no mechanism we have).
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// The connection is gone: closed by us, by the broker (with its
    /// condition), or lost.
    #[error("connection closed: {0}")]
    ConnectionClosed(String),
    /// The connection was lost before the broker told this publish's
    /// outcome (or answered this request): it may or may not have taken
    /// it. The connection recovers by itself unless recovery is off.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The broker refused a link (attach) or closed it with a condition.
    #[error("link refused: {0}")]
    LinkRefused(Condition),
    /// The broker closed the connection or session with a condition.
    #[error("closed by the broker: {0}")]
    Closed(Condition),
    /// A management request failed: the HTTP status the broker answered
    /// with (404 not found, 409 conflict with an existing entity's
    /// arguments, 400 bad request ...) and its words.
    #[error("management request failed with status {status}: {text}")]
    Management {
        /// The HTTP status.
        status: u16,
        /// The broker's explanation.
        text: String,
    },
    /// The broker broke the protocol (a frame we cannot read, a
    /// transfer over the credit given ...).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker did not take a consumer's filter expression (it does
    /// not support it, or it is not valid): its label.
    #[error("the broker did not take the filter {0}")]
    FilterRefused(String),
    /// An RPC request was not taken by the broker (released when no
    /// queue takes it, rejected): the outcome.
    #[error("the request was not taken: {0}")]
    RequestNotTaken(String),
    /// The token source ([`super::ConnectionBuilder::token_source`]) gave
    /// no token to log in with.
    #[error("the token source failed: {0}")]
    TokenSource(String),
    /// The broker did not answer in time.
    #[error("no answer from the broker within {0:?}")]
    Timeout(std::time::Duration),
}

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Error {
        Error::Protocol(e.to_string())
    }
}
