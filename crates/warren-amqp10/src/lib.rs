//! AMQP 1.0 as bytes (OASIS AMQP 1.0, parts 1-3 and 5): the type system
//! ([`value`]), frames and protocol headers ([`frame`]), the transport
//! performatives ([`performative`]), SASL ([`sasl`]) and messaging
//! ([`messaging`]: termini, delivery states, message sections). No I/O and
//! no broker types, so the broker, the perf tool and a client share it.
//! Decoders never trust a length or count from the wire beyond the bytes
//! present, and bound nesting.

pub mod composite;
pub mod compound;
pub mod error;
pub mod filtex;
pub mod frame;
pub mod messaging;
pub mod performative;
pub mod sasl;
pub mod serial;
pub mod sql_filter;
mod transfer_fast;
pub mod value;

pub use error::CodecError;
pub use frame::{Frame, FrameType, AMQP_HEADER, SASL_HEADER};
pub use performative::Performative;
pub use value::Value;
