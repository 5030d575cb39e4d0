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

    /// The reply text as RabbitMQ sends it: `NAME - detail`.
    pub fn reply_text(&self) -> String {
        self.to_string()
    }
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;
