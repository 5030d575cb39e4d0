//! AMQP 0-9-1 as RabbitMQ speaks it, as a pure codec: bytes in, frames and
//! methods out, and back. No I/O, no async, no broker types, so the broker,
//! a client and the perf tool can all share it.
//!
//! Decoding never trusts a length from the wire: every read is checked
//! against what is left, a frame larger than the negotiated `frame_max` is
//! refused before it is buffered, and field tables nest only so deep.

pub mod error;
pub mod frame;
pub mod methods;
pub mod primitives;
pub mod properties;
pub mod table;

pub use error::CodecError;
pub use frame::{Frame, FrameHeader, FrameType, PROTOCOL_HEADER};
pub use methods::{constants, method_name, Method};
pub use primitives::ShortStr;
pub use properties::{BasicProperties, ContentHeader};
pub use table::{FieldTable, FieldValue};
