//! Warren's stream log: an append-only, replayable log per stream, stored
//! as osiris (RabbitMQ's stream storage) stores it, so a stored chunk goes
//! to a stream client as it is.
//!
//! A stream is a directory of segments, each two files named after the
//! offset of its first chunk ([`files`]): `.segment` holds osiris chunks
//! (a 48-byte header with a CRC of the data, a bloom filter of the
//! messages' filter values, the data entries as producers sent them,
//! simple or sub-batched and compressed, and a trailer), `.index` one
//! 29-byte record per chunk for finding a chunk by offset or timestamp.
//!
//! - Offsets count records. Tracking chunks (a consumer's stored offset;
//!   the snapshot that opens every segment) take an offset too, so the
//!   offsets a consumer sees are not contiguous ([`tracking`]).
//! - Producers' publishing ids ride in the trailer of the chunk that holds
//!   their messages: deduplication survives restarts and retention.
//! - A segment rolls over at its size or chunk limit; retention
//!   (max-length-bytes, max-age) then deletes whole old segments, never
//!   the newest ([`Log::apply_retention`]).
//! - After a crash, index records at the tail whose chunk is torn or fails
//!   its CRC are cut, and the segment with them ([`Log::open`]).
//! - Durability: a chunk is visible to readers (and may be confirmed) once
//!   written to the file; [`Log::sync`] fdatasyncs, which the owner does
//!   per its policy, and every roll-over does.

mod acceptor;
pub mod bloom;
pub mod error;
pub mod files;
mod log;
mod overview;
mod reader;
pub mod recent;
mod slabs;
#[cfg(test)]
mod tests;
pub mod tracking;

pub use acceptor::{accept, cut_point, Cut};
pub use error::LogError;
pub use log::{
    Appended, Config, Log, Message, SegmentFiles, SegmentMeta, ToSync, View, ViewState, CHUNK_TRACKING_DELTA,
    CHUNK_TRACKING_SNAPSHOT, CHUNK_USER,
};
pub use overview::{overview, Overview};
pub use reader::{ChunkRead, Reader, Start};
pub use tracking::{Delta, Tracking};
