//! What can go wrong, as one enum a caller matches on. Errors are
//! `Clone`: one connection failure reaches every waiter on it.

use std::sync::Arc;

use crate::uri::UriError;

/// An AMQP 0-9-1 client error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URI does not parse.
    #[error(transparent)]
    Uri(#[from] UriError),
    /// The socket failed.
    #[error("I/O: {0}")]
    Io(Arc<std::io::Error>),
    /// The broker sent bytes that are not AMQP 0-9-1.
    #[error("bad frame from the broker: {0}")]
    Protocol(String),
    /// The broker closed the connection (a refused login is 403
    /// ACCESS_REFUSED).
    #[error("connection closed by the broker: {code} {text}")]
    ConnectionClosed {
        /// The reply code (320 CONNECTION_FORCED, 403, 530, ...).
        code: u16,
        /// The broker's reply text.
        text: String,
    },
    /// The broker closed the channel (404 NOT_FOUND, 406
    /// PRECONDITION_FAILED, ...); the connection stays open.
    #[error("channel closed by the broker: {code} {text}")]
    ChannelClosed {
        /// The reply code.
        code: u16,
        /// The broker's reply text.
        text: String,
    },
    /// The connection ended without a close from the broker (the socket
    /// broke, or heartbeats stopped). A publish not yet confirmed may or
    /// may not have reached the broker.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// This side closed the connection or channel.
    #[error("closed by this client")]
    ClosedByClient,
    /// A delivery answered with [`super::reply`] has no `reply_to`.
    #[error("the delivery has no reply_to: it is no request")]
    NotARequest,
    /// TLS could not be set up (certificate files, the handshake).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The broker did not answer in time.
    #[error("the broker did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The token source ([`super::ConnectionBuilder::token_source`])
    /// gave no token to log in with.
    #[error("the token source failed: {0}")]
    TokenSource(String),
    /// A typed body would not encode or decode ([`crate::codec`]).
    #[error("message body: {0}")]
    Codec(#[from] crate::codec::CodecError),
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl From<warren_amqp091::CodecError> for Error {
    fn from(e: warren_amqp091::CodecError) -> Error {
        Error::Protocol(e.to_string())
    }
}

impl From<crate::socket::ConnectError> for Error {
    fn from(e: crate::socket::ConnectError) -> Error {
        match e {
            crate::socket::ConnectError::Io(e) => e.into(),
            crate::socket::ConnectError::Tls(e) => e.into(),
        }
    }
}
