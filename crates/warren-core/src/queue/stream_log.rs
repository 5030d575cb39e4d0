//! A stream's log as every front end and the stream queue type use it
//! ([`StreamLog`]): appends, readers, who waits for it to grow, the
//! background sync and page-cache trim, and, when the stream is
//! replicated, its member's role and the publishes waiting for a
//! majority ([`super::stream_member`]); and the server's replication as
//! the log sees it ([`StreamSystem`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use warren_amqp091::ShortStr;
use warren_log::{Appended, Config as LogConfig, Delta, Log, LogError, Message as LogMessage, View};

use super::stream_cache::CacheTrim;
use super::stream_member::{CommitWaiter, Member, StreamRole};
use crate::message::Message;

/// How a stream stores routed messages and hands them to queue-interface
/// consumers: AMQP 1.0 both ways (the server provides it, core has no
/// AMQP 1.0 codec). `decode` yields None for bytes that are no message.
#[derive(Debug, Clone, Copy)]
pub struct StreamCodec {
    pub encode: fn(&Message) -> Bytes,
    pub decode: fn(&[u8]) -> Option<Message>,
}

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
    /// Connections with publishers or subscriptions on the stream, told
    /// (until they go) when it is deleted or changes epoch, so they tell
    /// their clients (MetadataUpdate) even if idle.
    watchers: Mutex<Vec<Weak<dyn StreamWaiter>>>,
    /// The stream was deleted: publishers and readers let go.
    deleted: AtomicBool,
    /// Written since the last background sync.
    dirty: AtomicBool,
    /// Bytes of the newest data left in the page cache after a sync
    /// (0: all, as the OS pleases); see [`super::stream_cache`].
    cache_keep: u64,
    cache: Mutex<CacheTrim>,
    /// Its role when replicated, and publishes waiting for a majority.
    pub(super) member: Member,
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
    pub fn open(
        root: &Path,
        vhost: &str,
        name: &str,
        config: LogConfig,
        cache_keep: u64,
    ) -> Result<Arc<StreamLog>, LogError> {
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
            watchers: Mutex::new(Vec::new()),
            deleted: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            cache_keep,
            cache: Mutex::new(CacheTrim::default()),
            member: Default::default(),
        }))
    }

    pub fn view(&self) -> Arc<View> {
        self.view.clone()
    }

    /// Append one chunk and wake the readers waiting at the end.
    pub fn append(&self, messages: &[LogMessage], delta: &Delta) -> Result<Appended, LogError> {
        let r = self.log.lock().append(messages, delta, now_ms());
        self.dirty.store(true, Ordering::Release);
        self.wake();
        r
    }

    /// Run `f` on the log without marking it written or waking readers.
    pub(super) fn with_log_quiet<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.log.lock())
    }

    /// Wake the readers waiting at the end (more became readable).
    pub fn wake_readers(&self) {
        self.wake();
    }

    /// A replica's append: whole chunks as the leader stored them (see
    /// [`Log::accept_chunk`]). Readers are woken by the committed chunk
    /// moving, not by this.
    pub fn accept_chunk(&self, chunk: &[u8]) -> Result<Appended, LogError> {
        let r = self.log.lock().accept_chunk(chunk, now_ms());
        self.dirty.store(true, Ordering::Release);
        r
    }

    /// What the log holds, by epoch (see [`warren_log::overview`]).
    pub fn overview(&self) -> Result<warren_log::Overview, LogError> {
        warren_log::overview(&self.view)
    }

    /// Store a consumer's offset (a tracking chunk; it takes an offset).
    pub fn store_offset(&self, reference: &str, offset: u64) -> Result<(), LogError> {
        let d = Delta {
            sequences: Vec::new(),
            offsets: vec![(reference.to_string(), offset)],
        };
        self.log.lock().append_tracking(&d, now_ms())?;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// Run `f` on the log (dedup checks and appends under one lock).
    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        let r = f(&mut self.log.lock());
        self.dirty.store(true, Ordering::Release);
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

    /// Be told whenever the stream is deleted or changes epoch, for as
    /// long as `w` lives (once per waiter; gone ones are dropped here).
    pub fn watch(&self, w: &Arc<dyn StreamWaiter>) {
        let mut ws = self.watchers.lock();
        ws.retain(|x| x.strong_count() > 0);
        if !ws.iter().any(|x| x.upgrade().is_some_and(|x| Arc::ptr_eq(&x, w))) {
            ws.push(Arc::downgrade(w));
        }
    }

    /// Tell the watchers (deleted, or a new epoch).
    pub(crate) fn tell_watchers(&self) {
        let ws: Vec<_> = self.watchers.lock().iter().filter_map(Weak::upgrade).collect();
        for w in ws {
            w.grown();
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

    /// New retention and segment size (a policy changed), applied now.
    pub fn set_config(&self, config: LogConfig) -> Result<usize, LogError> {
        let mut log = self.log.lock();
        log.set_config(config);
        log.apply_retention(now_ms())
    }

    /// Apply retention now (x-max-age runs on a clock too, not only at
    /// roll-over).
    pub fn apply_retention(&self) -> Result<usize, LogError> {
        self.log.lock().apply_retention(now_ms())
    }

    /// Whether anything was written since the last [`Self::sync`].
    pub fn needs_sync(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Write what the OS holds of the stream to disk (segments sealed
    /// since the last time, then the newest), if anything was written; the
    /// fdatasyncs run outside the log's lock, so publishers go on
    /// meanwhile. Then what is older than the kept tail leaves the page
    /// cache.
    pub fn sync(&self) -> Result<(), LogError> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let (to_sync, dir) = {
            let mut log = self.log.lock();
            (log.to_sync()?, log.dir().to_path_buf())
        };
        let sealed = !to_sync.sealed.is_empty();
        for f in to_sync.sealed.iter().chain(std::iter::once(&to_sync.newest)) {
            f.sync(&dir)?;
        }
        if sealed {
            // New segment files must be in their directory too.
            if let Ok(d) = std::fs::File::open(&dir) {
                let _ = d.sync_all();
            }
        }
        if self.cache_keep > 0 {
            let mut cache = self.cache.lock();
            for f in to_sync.sealed {
                cache.synced(f);
            }
            cache.synced(to_sync.newest);
            cache.trim(self.cache_keep);
        }
        Ok(())
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

    /// What `stream_status` shows of this member: (first offset, last
    /// offset (None when empty), segments, readers holding the log).
    pub fn status(&self) -> (u64, Option<u64>, usize, usize) {
        let st = self.view.snapshot();
        let first = st
            .segments
            .iter()
            .find_map(|s| s.first.map(|r| r.chunk_id))
            .unwrap_or(st.next_offset);
        // The log and this struct hold the view; every reader one more.
        let readers = Arc::strong_count(&self.view).saturating_sub(2);
        (first, st.next_offset.checked_sub(1), st.segments.len(), readers)
    }

    /// This node stops being a member: let go of its log, files and all.
    pub fn discard(&self) {
        self.remove();
    }

    pub(super) fn remove(&self) {
        self.deleted.store(true, Ordering::Release);
        self.wake();
        self.tell_watchers();
        let dir = self.log.lock().dir().to_path_buf();
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!("cannot remove stream directory {}: {e}", dir.display());
        }
    }
}

impl StreamLog {
    pub fn role(&self) -> StreamRole {
        self.member.role.lock().clone()
    }

    /// Lead at `epoch` (new chunks carry it; readers wait for the first
    /// majority), follow, or stand alone (every chunk readable). Whoever
    /// waited for a chunk to commit under the old role is told no.
    pub fn set_role(&self, role: StreamRole) {
        let before = std::mem::replace(&mut *self.member.role.lock(), role.clone());
        if before == role {
            return;
        }
        // A leader whose members changed leads on: its waiting publishes
        // and readers stay as they are.
        if let (StreamRole::Leader { epoch: a, .. }, StreamRole::Leader { epoch: b, .. }) = (&before, &role) {
            if a == b {
                return;
            }
        }
        self.with_log_quiet(|log| match &role {
            StreamRole::Alone => {
                log.set_committed(None);
            }
            StreamRole::Leader { epoch, .. } => {
                log.set_epoch(*epoch);
                log.hold_readers();
            }
            StreamRole::Replica { .. } => {
                if matches!(before, StreamRole::Alone) {
                    log.hold_readers();
                }
            }
        });
        let mut c = self.member.commits.lock();
        if !matches!(role, StreamRole::Alone) && matches!(before, StreamRole::Leader { .. }) {
            c.committed = None;
        }
        let waiting = std::mem::take(&mut c.waiting);
        drop(c);
        for f in waiting.into_values().flatten() {
            f(matches!(role, StreamRole::Alone));
        }
        // Subscriptions waiting at the end notice the new epoch, and so do
        // connections with publishers (told to look for the leader).
        self.wake_readers();
        self.tell_watchers();
    }

    /// Run `f` once chunk `chunk_id` is on a majority (at once when the
    /// stream is not replicated or it already is).
    pub fn on_committed(&self, chunk_id: u64, f: CommitWaiter) {
        if matches!(*self.member.role.lock(), StreamRole::Alone) {
            return f(true);
        }
        let mut c = self.member.commits.lock();
        if c.committed.is_some_and(|x| x >= chunk_id) {
            drop(c);
            return f(true);
        }
        c.waiting.entry(chunk_id).or_default().push(f);
    }

    /// A new leader's first chunk: an empty tracking delta in its epoch.
    pub fn append_marker(&self) -> Result<warren_log::Appended, warren_log::LogError> {
        self.with_log(|log| log.append_tracking(&warren_log::Delta::default(), now_ms()))
    }

    /// The last chunk a majority has, as this member knows it.
    pub fn committed(&self) -> Option<u64> {
        self.member.commits.lock().committed
    }

    /// A majority has every chunk up to `chunk_id`: consumers may read
    /// them, and their publishers are confirmed. Never moves back.
    pub fn set_committed(&self, chunk_id: u64) {
        let ready = {
            let mut c = self.member.commits.lock();
            if c.committed.is_some_and(|x| x >= chunk_id) {
                return;
            }
            c.committed = Some(chunk_id);
            let later = c.waiting.split_off(&(chunk_id + 1));
            std::mem::replace(&mut c.waiting, later)
        };
        self.with_log_quiet(|log| log.set_committed(Some(chunk_id)));
        for f in ready.into_values().flatten() {
            f(true);
        }
        self.wake_readers();
    }

    /// A replica's log cut to agree with its leader's overview (see
    /// [`warren_log::Log::cut_to`]).
    pub fn cut_to(&self, leader: &warren_log::Overview) -> Result<warren_log::Cut, warren_log::LogError> {
        self.with_log_quiet(|log| log.cut_to(leader))
    }

    /// The epoch and the id of the last chunk written (any type).
    pub fn last_chunk(&self) -> Option<(u64, u64)> {
        let st = self.view().snapshot();
        st.segments
            .iter()
            .rev()
            .find_map(|s| s.last)
            .map(|r| (r.epoch, r.chunk_id))
    }
}

/// The server's stream replication, as the queues see it.
pub trait StreamSystem: Send + Sync {
    /// Is this node a member of stream `name` in `vhost` (so the stream
    /// is held here as a member, not as another node's queue)?
    fn is_member(&self, vhost: &str, name: &ShortStr) -> bool;
    /// A member's log is open (declared, or restored at start): set its
    /// role and start leading or following.
    fn attach(&self, log: &Arc<StreamLog>);
}

/// Set once when the server starts its stream replication (clusters
/// only); every vhost shares it.
#[derive(Clone, Default)]
pub struct StreamSlot(Arc<OnceLock<Arc<dyn StreamSystem>>>);

impl StreamSlot {
    pub fn set(&self, s: Arc<dyn StreamSystem>) {
        let _ = self.0.set(s);
    }

    pub fn get(&self) -> Option<&Arc<dyn StreamSystem>> {
        self.0.get()
    }
}

impl std::fmt::Debug for StreamSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "StreamSlot(set)"
        } else {
            "StreamSlot(unset)"
        })
    }
}
