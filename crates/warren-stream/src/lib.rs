//! The RabbitMQ Stream protocol as bytes (rabbitmq-server's
//! deps/rabbitmq_stream/docs/PROTOCOL.adoc): primitive types ([`wire`]),
//! frames and commands ([`command`]), and osiris chunks ([`chunk`]), the
//! unit of storage and of delivery. No I/O; shared by the broker's stream
//! front end and warren-perf. Decoders never trust a length
//! or count beyond the bytes present.

pub mod chunk;
pub mod command;
pub mod compression;
pub mod error;
pub mod publish;
pub mod wire;

pub use chunk::{Chunk, ChunkHeader, Entry};
pub use command::{Command, OffsetSpec, Response};
pub use error::CodecError;
