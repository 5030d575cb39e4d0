//! Front-end errors and how they close things (0-9-1 §1.2 "soft" and "hard"
//! errors): a channel error closes the channel with channel.close, a
//! connection error closes the connection with connection.close. Both carry
//! the class and method id of the method that failed.

use warren_amqp091::constants::*;
use warren_core::BrokerError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpError {
    pub code: u16,
    pub text: String,
    pub class_id: u16,
    pub method_id: u16,
}

/// RabbitMQ's name for a reply code, which starts every reply text.
pub fn code_name(code: u16) -> &'static str {
    match code {
        CONTENT_TOO_LARGE => "CONTENT_TOO_LARGE",
        312 => "NO_ROUTE",
        NO_CONSUMERS => "NO_CONSUMERS",
        CONNECTION_FORCED => "CONNECTION_FORCED",
        INVALID_PATH => "INVALID_PATH",
        ACCESS_REFUSED => "ACCESS_REFUSED",
        NOT_FOUND => "NOT_FOUND",
        RESOURCE_LOCKED => "RESOURCE_LOCKED",
        PRECONDITION_FAILED => "PRECONDITION_FAILED",
        FRAME_ERROR => "FRAME_ERROR",
        SYNTAX_ERROR => "SYNTAX_ERROR",
        COMMAND_INVALID => "COMMAND_INVALID",
        CHANNEL_ERROR => "CHANNEL_ERROR",
        UNEXPECTED_FRAME => "UNEXPECTED_FRAME",
        RESOURCE_ERROR => "RESOURCE_ERROR",
        NOT_ALLOWED => "NOT_ALLOWED",
        NOT_IMPLEMENTED => "NOT_IMPLEMENTED",
        _ => "INTERNAL_ERROR",
    }
}

/// A reply-text is a short string: cut at 255 octets, on a char boundary.
fn short(mut text: String) -> String {
    if text.len() > 255 {
        let mut cut = 255;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

impl AmqpError {
    pub fn new(code: u16, detail: impl std::fmt::Display) -> AmqpError {
        let text = short(format!("{} - {detail}", code_name(code)));
        AmqpError {
            code,
            text,
            class_id: 0,
            method_id: 0,
        }
    }

    /// Attribute the error to a method (the ids go into the close frame).
    pub fn on(mut self, class_id: u16, method_id: u16) -> AmqpError {
        if self.class_id == 0 {
            self.class_id = class_id;
            self.method_id = method_id;
        }
        self
    }

    /// Hard errors close the connection (0-9-1 constants' class).
    pub fn is_connection_level(&self) -> bool {
        !matches!(self.code, 311..=313 | 403..=406)
    }
}

impl From<BrokerError> for AmqpError {
    fn from(e: BrokerError) -> AmqpError {
        AmqpError {
            code: e.reply_code(),
            text: short(e.reply_text()),
            class_id: 0,
            method_id: 0,
        }
    }
}

pub type Result<T, E = AmqpError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_code() {
        assert!(!AmqpError::new(404, "x").is_connection_level());
        assert!(!AmqpError::new(406, "x").is_connection_level());
        assert!(AmqpError::new(504, "x").is_connection_level());
        assert!(AmqpError::new(530, "x").is_connection_level());
        assert_eq!(
            AmqpError::new(404, "no queue 'q'").text,
            "NOT_FOUND - no queue 'q'"
        );
    }

    #[test]
    fn long_text_is_cut_to_a_short_string() {
        let e = AmqpError::new(406, "é".repeat(300));
        assert!(e.text.len() <= 255);
    }
}
