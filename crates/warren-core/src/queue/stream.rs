//! Streams as queues (x-queue-type: stream), after RabbitMQ's
//! rabbit_stream_queue: the queue is a name in the topology (so exchanges
//! route to it and super streams are bindings), its messages live in an
//! append-only log ([`warren_log`]) that reading does not consume.
//!
//! The stream protocol front end publishes and reads through
//! [`StreamLog`] directly, chunk by chunk. Through the queue interface,
//! messages routed to a stream (AMQP 0-9-1, AMQP 1.0) are appended one
//! chunk each, encoded as AMQP 1.0 by the [`StreamCodec`] the server
//! provides (so stream clients read them). Consuming a stream through the
//! queue interface is not supported yet.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use warren_log::{Appended, Config as LogConfig, Delta, Log, LogError, Message as LogMessage, View};
use warren_stream::chunk::Entry as ChunkEntry;

use super::{ConsumerSpec, Ctx, Entry, FlowWaiter, PublishOutcome, QueueStats, QueueType, Settle};
use crate::error::BrokerError;
use crate::message::Message;

/// Turns a routed message into the bytes a stream stores (AMQP 1.0).
pub type StreamCodec = fn(&Message) -> Bytes;

/// Told once that a stream has grown (a connection with subscriptions at
/// the end of the log). Must not block or call back into the stream.
pub trait StreamWaiter: Send + Sync {
    fn grown(&self);
}

/// A stream's log and who waits for it to grow.
pub struct StreamLog {
    pub name: String,
    pub vhost: String,
    log: Mutex<Log>,
    view: Arc<View>,
    waiters: Mutex<Vec<Weak<dyn StreamWaiter>>>,
    /// The stream was deleted: publishers and readers let go.
    deleted: AtomicBool,
}

impl std::fmt::Debug for StreamLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLog").field("name", &self.name).finish()
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Where the stream `name` of `vhost` keeps its log: a directory named by
/// a hash of both (names may be long or hold any byte).
pub fn stream_dir(root: &Path, vhost: &str, name: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(vhost.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&h.finalize()[..18]);
    root.join(id)
}

impl StreamLog {
    pub fn open(root: &Path, vhost: &str, name: &str, config: LogConfig) -> Result<Arc<StreamLog>, LogError> {
        let dir = stream_dir(root, vhost, name);
        let log = Log::open(&dir, config)?;
        // For people looking at the directory.
        let _ = std::fs::write(
            dir.join("stream.meta"),
            format!("vhost: {vhost}\nstream: {name}\n"),
        );
        let view = log.view();
        Ok(Arc::new(StreamLog {
            name: name.to_string(),
            vhost: vhost.to_string(),
            log: Mutex::new(log),
            view,
            waiters: Mutex::new(Vec::new()),
            deleted: AtomicBool::new(false),
        }))
    }

    pub fn view(&self) -> Arc<View> {
        self.view.clone()
    }

    /// Append one chunk and wake the readers waiting at the end.
    pub fn append(&self, messages: &[LogMessage], delta: &Delta) -> Result<Appended, LogError> {
        let r = self.log.lock().append(messages, delta, now_ms());
        self.wake();
        r
    }

    /// Store a consumer's offset (a tracking chunk; it takes an offset).
    pub fn store_offset(&self, reference: &str, offset: u64) -> Result<(), LogError> {
        let d = Delta {
            sequences: Vec::new(),
            offsets: vec![(reference.to_string(), offset)],
        };
        self.log.lock().append_tracking(&d, now_ms())?;
        Ok(())
    }

    /// Run `f` on the log (dedup checks and appends under one lock).
    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        let r = f(&mut self.log.lock());
        self.wake();
        r
    }

    pub fn stored_offset(&self, reference: &str) -> Option<u64> {
        self.log.lock().stored_offset(reference)
    }

    pub fn sequence(&self, reference: &str) -> Option<u64> {
        self.log.lock().sequence(reference)
    }

    /// (first offset, next offset, bytes on disk).
    pub fn extent(&self) -> (u64, u64, u64) {
        let l = self.log.lock();
        (l.first_offset(), l.next_offset(), l.bytes())
    }

    /// Be told once when the log grows.
    pub fn wait(&self, w: &Arc<dyn StreamWaiter>) {
        let mut ws = self.waiters.lock();
        if !ws.iter().any(|x| x.upgrade().is_some_and(|x| Arc::ptr_eq(&x, w))) {
            ws.push(Arc::downgrade(w));
        }
    }

    fn wake(&self) {
        let ws = std::mem::take(&mut *self.waiters.lock());
        for w in ws {
            if let Some(w) = w.upgrade() {
                w.grown();
            }
        }
    }

    /// Apply retention now (x-max-age runs on a clock too, not only at
    /// roll-over).
    pub fn apply_retention(&self) -> Result<usize, LogError> {
        self.log.lock().apply_retention(now_ms())
    }

    /// Write what the OS holds of the newest segment to disk.
    pub fn sync(&self) -> Result<(), LogError> {
        self.log.lock().sync()
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// The first and last chunk ids (any chunk type), None when empty.
    pub fn chunk_ids(&self) -> Option<(u64, u64)> {
        let st = self.view.snapshot();
        let first = st.segments.iter().find_map(|s| s.first)?;
        let last = st.segments.iter().rev().find_map(|s| s.last)?;
        Some((first.chunk_id, last.chunk_id))
    }

    fn remove(&self) {
        self.deleted.store(true, Ordering::Release);
        self.wake();
        let dir = self.log.lock().dir().to_path_buf();
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!("cannot remove stream directory {}: {e}", dir.display());
        }
    }
}

/// The queue-interface side of a stream.
#[derive(Debug)]
pub struct StreamQueue {
    log: Arc<StreamLog>,
    codec: Option<StreamCodec>,
    last_used: Instant,
}

impl StreamQueue {
    pub fn new(log: Arc<StreamLog>, codec: Option<StreamCodec>) -> StreamQueue {
        StreamQueue {
            log,
            codec,
            last_used: Instant::now(),
        }
    }
}

impl QueueType for StreamQueue {
    fn publish(&mut self, _ctx: &mut Ctx, msg: super::MessageRef) -> PublishOutcome {
        let Some(encode) = self.codec else {
            return PublishOutcome::Rejected;
        };
        let m = LogMessage {
            entry: ChunkEntry::Simple(encode(&msg)),
            filter: None,
        };
        match self.log.append(&[m], &Delta::default()) {
            Ok(_) => PublishOutcome::Enqueued,
            Err(e) => {
                tracing::error!("stream '{}': cannot append: {e}", self.log.name);
                PublishOutcome::Rejected
            }
        }
    }

    fn consume(&mut self, _ctx: &mut Ctx, _spec: ConsumerSpec) -> Result<(), BrokerError> {
        Err(BrokerError::NotImplemented(format!(
            "consuming stream '{}' over this protocol is not supported yet; use the stream protocol",
            self.log.name
        )))
    }

    fn cancel(&mut self, _ctx: &mut Ctx, _consumer_id: u64) -> bool {
        false
    }

    fn settle(&mut self, _ctx: &mut Ctx, _consumer_id: Option<u64>, _entries: Vec<Entry>, _how: Settle) {}

    fn get(&mut self, _ctx: &mut Ctx, _no_ack: bool) -> Option<(Entry, u64)> {
        None
    }

    fn pump(&mut self, _ctx: &mut Ctx) {}

    fn purge(&mut self, _ctx: &mut Ctx) -> u64 {
        0
    }

    fn expire(&mut self, _ctx: &mut Ctx) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn delete(&mut self, _ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        self.log.remove();
        Vec::new()
    }

    fn stats(&self) -> QueueStats {
        let (first, next, _) = self.log.extent();
        QueueStats {
            ready: next.saturating_sub(first),
            unacked: 0,
            consumers: 0,
        }
    }

    fn wait_for_drain(&mut self, _waiter: Arc<dyn FlowWaiter>) -> bool {
        false
    }

    fn idle_since(&self) -> Option<Instant> {
        Some(self.last_used)
    }

    fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }
}
