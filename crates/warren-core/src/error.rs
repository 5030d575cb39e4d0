//! Errors of the broker model. Each carries RabbitMQ's reply text; the front
//! end maps the variant to its protocol's code (AMQP 0-9-1 reply codes here,
//! AMQP 1.0 error conditions later) and decides the close level from
//! [`BrokerError::is_connection_level`] (0-9-1 §1.2: soft errors close the
//! channel, hard errors the connection).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BrokerError {
    #[error("NOT_FOUND - {0}")]
    NotFound(String),
    #[error("ACCESS_REFUSED - {0}")]
    AccessRefused(String),
    #[error("RESOURCE_LOCKED - {0}")]
    ResourceLocked(String),
    #[error("PRECONDITION_FAILED - {0}")]
    PreconditionFailed(String),
    #[error("COMMAND_INVALID - {0}")]
    CommandInvalid(String),
    #[error("NOT_ALLOWED - {0}")]
    NotAllowed(String),
    #[error("NOT_IMPLEMENTED - {0}")]
    NotImplemented(String),
    #[error("INTERNAL_ERROR - {0}")]
    Internal(String),
}

impl BrokerError {
    /// The AMQP 0-9-1 reply code (0-9-1 §1.2, constants).
    pub fn reply_code(&self) -> u16 {
        match self {
            BrokerError::NotFound(_) => 404,
            BrokerError::AccessRefused(_) => 403,
            BrokerError::ResourceLocked(_) => 405,
            BrokerError::PreconditionFailed(_) => 406,
            BrokerError::CommandInvalid(_) => 503,
            BrokerError::NotAllowed(_) => 530,
            BrokerError::NotImplemented(_) => 540,
            BrokerError::Internal(_) => 541,
        }
    }

    /// Hard errors close the whole connection (0-9-1 constants' class).
    pub fn is_connection_level(&self) -> bool {
        self.reply_code() >= 500
    }

    /// The error a reply code names (the inverse of [`reply_code`], for
    /// errors that crossed between nodes as code and detail).
    ///
    /// [`reply_code`]: BrokerError::reply_code
    pub fn from_code(code: u16, detail: String) -> BrokerError {
        match code {
            404 => BrokerError::NotFound(detail),
            403 => BrokerError::AccessRefused(detail),
            405 => BrokerError::ResourceLocked(detail),
            406 => BrokerError::PreconditionFailed(detail),
            503 => BrokerError::CommandInvalid(detail),
            530 => BrokerError::NotAllowed(detail),
            540 => BrokerError::NotImplemented(detail),
            _ => BrokerError::Internal(detail),
        }
    }

    /// The detail alone, without the `NAME - ` prefix.
    pub fn detail(&self) -> &str {
        match self {
            BrokerError::NotFound(d)
            | BrokerError::AccessRefused(d)
            | BrokerError::ResourceLocked(d)
            | BrokerError::PreconditionFailed(d)
            | BrokerError::CommandInvalid(d)
            | BrokerError::NotAllowed(d)
            | BrokerError::NotImplemented(d)
            | BrokerError::Internal(d) => d,
        }
    }

    /// The reply text as RabbitMQ sends it: `NAME - detail`.
    pub fn reply_text(&self) -> String {
        self.to_string()
    }
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;
