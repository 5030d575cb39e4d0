//! A subscription's state on its connection: its reader over the log,
//! credit (in chunks), where it started, its filter and single-active-
//! consumer group.

use std::sync::Arc;

use warren_core::queue::StreamLog;
use warren_log::bloom::Matcher;
use warren_log::Reader;
use warren_stream::command::OffsetSpec;

pub struct Subscription {
    pub stream: String,
    pub log: Arc<StreamLog>,
    /// None while a single active consumer waits for its turn (or for its
    /// answer to ConsumerUpdate).
    pub(crate) reader: Option<Reader>,
    pub credit: u16,
    /// The reader found nothing more; a wake-up will clear it.
    pub(crate) at_end: bool,
    /// Where it started, and its filter (a single active consumer starts
    /// again when it becomes active).
    pub(crate) offset: OffsetSpec,
    pub(crate) filter: Option<Matcher>,
    /// Its single-active-consumer group.
    pub(crate) sac: Option<crate::sac::GroupKey>,
    /// The stream's epoch when it subscribed: a new leader ends it with
    /// MetadataUpdate, as RabbitMQ's restarted members do.
    pub epoch: u64,
}
