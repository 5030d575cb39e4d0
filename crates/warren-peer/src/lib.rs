//! Warren's inter-node protocol, as bytes: what one node of a cluster says
//! to another over the cluster port (25672 by default, RabbitMQ's
//! distribution port). Pure: no sockets, no clocks, no crypto; the server
//! drives it and computes the handshake's MACs.
//!
//! Wire format: every message is one frame, a 4-byte big-endian size (of
//! what follows it), a 1-byte kind, then the kind's fields. Integers are
//! big-endian; a name is a 1-byte length and UTF-8; a blob a 4-byte length
//! and bytes. One TCP (or TLS) connection per node pair carries everything
//! between the two, so messages of many Raft groups travel in one frame.
//!
//! A connection opens with the handshake ([`handshake`]): the dialing node
//! says which protocol versions it speaks, its cluster and node names and
//! a random nonce; the accepting node answers with the version chosen, its
//! names, its own nonce and a MAC over both under the shared secret (the
//! role of Erlang's cookie); the dialer proves it knows the secret the
//! same way. Until then a frame may be at most [`HANDSHAKE_FRAME_MAX`]
//! bytes, so a stranger cannot make a node allocate much.

pub mod error;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod queue;
pub mod stream;
mod wire;

pub use error::CodecError;
pub use frame::{parse_frame, Frame, FRAME_MAX, HANDSHAKE_FRAME_MAX};
pub use handshake::{VERSION_MAX, VERSION_MIN};
pub use message::Message;
