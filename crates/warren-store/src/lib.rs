//! Warren's message store. Each classic queue that needs the disk gets a
//! directory of its own under `DATA_DIR/queues/`, holding:
//!
//! - `queue.meta`: which queue this is (vhost and name).
//! - Segment files `<first seq, 20 digits>.seg`: the queue's messages,
//!   appended in the queue's order, never rewritten. A segment holds about
//!   [`queue_store::SEGMENT_BYTES`]; the next message starts a new one.
//! - Ack log files `<number, 20 digits>.acks`: which messages were acked and
//!   which were delivered, as ranges of sequence numbers. Kept apart from
//!   the messages so an ack is a 25-byte append, not a rewrite.
//!
//! Every file starts with an 8-byte magic (`WRNSEG01` / `WRNACK01`) and
//! then holds records, all integers little-endian:
//!
//! ```text
//!  0       4       8    9
//!  +-------+-------+----+------------------------------+
//!  |  len  |  crc  |kind|  payload (len - 1 bytes)     |
//!  +-------+-------+----+------------------------------+
//!  len = bytes from kind to the end of the payload
//!  crc = CRC-32 (IEEE) of kind ++ payload
//!
//!  kind 1, message:
//!  +-----+-----+-----------+---+--------+---+----+------+-------+------+------+
//!  | seq |flags|expires_at |el |exchange|rl | rk |pl u32| props |bl u32| body |
//!  | u64 | u8  |ms, u64    |u8 |        |u8 |    |      |       |      |      |
//!  +-----+-----+-----------+---+--------+---+----+------+-------+------+------+
//!  flags bit 0: persistent (delivery mode 2); expires_at 0: no expiry
//!
//!  kind 2, acked / kind 3, delivered:
//!  +-------+-------+
//!  | first | last  |   every seq in first..=last (u64 each)
//!  +-------+-------+
//! ```
//!
//! A record whose length runs past the end of the last segment, or whose
//! CRC does not match, is a torn write: recovery cuts the file there.
//!
//! Durability: persistent messages on durable queues are confirmed only
//! once an fsync covers them. One [`Syncer`] thread does every fsync; while
//! it syncs, new writes pile up and the next round covers them all (group
//! commit). Acks are written but not fsynced: an ack lost to a power cut
//! means a redelivery, never a loss.
//!
//! Disk space: a segment is deleted once every message in it has left the
//! queue (acked, expired, dropped, purged) and it is no longer the segment
//! being written; an ack log file goes once every segment it speaks of has.

mod error;
pub mod queue_store;
pub mod ranges;
pub mod record;
mod recovery;
pub mod storage;
pub mod syncer;
#[cfg(test)]
mod tests;
mod writer;

pub use queue_store::{Loaded, QueueStore, Recovered, SyncTicket};
pub use record::{MessageRecord, StoredMessage};
pub use storage::Storage;
pub use syncer::{SyncWaiter, Syncer};

pub use error::{Result, StoreError};
