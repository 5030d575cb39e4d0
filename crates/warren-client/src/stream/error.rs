//! What can go wrong on a stream connection, as a caller matches on it.

use std::sync::Arc;

/// A response code of the stream protocol that is not OK (PROTOCOL.adoc,
/// "Response codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResponseCode {
    /// 0x02
    StreamDoesNotExist,
    /// 0x03
    SubscriptionIdAlreadyExists,
    /// 0x04
    SubscriptionIdDoesNotExist,
    /// 0x05
    StreamAlreadyExists,
    /// 0x06
    StreamNotAvailable,
    /// 0x07
    SaslMechanismNotSupported,
    /// 0x08
    AuthenticationFailure,
    /// 0x09
    SaslError,
    /// 0x0b
    AuthenticationFailureLoopback,
    /// 0x0c
    VirtualHostAccessFailure,
    /// 0x0d
    UnknownFrame,
    /// 0x0e
    FrameTooLarge,
    /// 0x0f
    InternalError,
    /// 0x10
    AccessRefused,
    /// 0x11
    PreconditionFailed,
    /// 0x12
    PublisherDoesNotExist,
    /// 0x13: no such offset (and, for QueryOffset, none stored).
    OffsetNotFound,
    /// A code this client does not name.
    Other(u16),
}

impl ResponseCode {
    /// The code's name for a number (never OK, 0x01).
    pub fn from_u16(code: u16) -> ResponseCode {
        use ResponseCode::*;
        match code {
            0x02 => StreamDoesNotExist,
            0x03 => SubscriptionIdAlreadyExists,
            0x04 => SubscriptionIdDoesNotExist,
            0x05 => StreamAlreadyExists,
            0x06 => StreamNotAvailable,
            0x07 => SaslMechanismNotSupported,
            0x08 => AuthenticationFailure,
            0x09 => SaslError,
            0x0b => AuthenticationFailureLoopback,
            0x0c => VirtualHostAccessFailure,
            0x0d => UnknownFrame,
            0x0e => FrameTooLarge,
            0x0f => InternalError,
            0x10 => AccessRefused,
            0x11 => PreconditionFailed,
            0x12 => PublisherDoesNotExist,
            0x13 => OffsetNotFound,
            other => Other(other),
        }
    }
}

/// A stream client error.
///
/// ```
/// use warren_client::stream::{Error, ResponseCode};
///
/// fn already_there(e: &Error) -> bool {
///     matches!(e, Error::Refused { code: ResponseCode::StreamAlreadyExists, .. })
/// }
/// # assert!(!already_there(&Error::ConnectionLost("gone".into())));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket failed.
    #[error("I/O: {0}")]
    Io(Arc<std::io::Error>),
    /// The URI does not parse.
    #[error(transparent)]
    Uri(#[from] crate::uri::UriError),
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The broker answered a request with an error code.
    #[error("{operation}: the broker answered {code:?}")]
    Refused {
        /// The request ("create", "subscribe", ...).
        operation: &'static str,
        /// What the broker said.
        code: ResponseCode,
    },
    /// The broker sent something this client cannot make sense of; the
    /// connection is closed.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The connection ended (the broker closed it, or the socket went).
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// No answer in time.
    #[error("no answer in {0:?}")]
    Timeout(std::time::Duration),
    /// This side closed the producer, consumer or connection.
    #[error("closed by the application")]
    Closed,
    /// A connection carries at most 256 producers (or consumers).
    #[error("no free {0} id on the connection (256 in use)")]
    NoFreeId(&'static str),
    /// Settings that cannot work (a single active consumer without a
    /// name, filtering with sub-entry batching, ...), or an operation the
    /// producer or consumer was not built for.
    #[error("misconfigured: {0}")]
    Misconfigured(String),
    /// A super stream producer found no partition for a message's
    /// routing key.
    #[error("no partition of super stream '{super_stream}' for routing key '{routing_key}'")]
    NoRoute {
        /// The super stream.
        super_stream: String,
        /// The key drawn from the message.
        routing_key: String,
    },
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl From<warren_stream::CodecError> for Error {
    fn from(e: warren_stream::CodecError) -> Error {
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

/// Whether a consumer or producer that met `e` may try again: the
/// connection went, or the stream's member is moving.
pub(crate) fn recoverable(e: &Error) -> bool {
    match e {
        Error::Io(_) | Error::ConnectionLost(_) | Error::Timeout(_) => true,
        Error::Refused { code, .. } => matches!(
            code,
            ResponseCode::StreamNotAvailable
                | ResponseCode::InternalError
                | ResponseCode::PublisherDoesNotExist
        ),
        _ => false,
    }
}
