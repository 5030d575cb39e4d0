//! The classic queue's use of the message store (`warren-store`):
//! persistent messages on durable queues are written before they are
//! confirmed, and a backlog past the in-memory window is paged out, every
//! message of it, transient ones too (RabbitMQ's CQv2 keeps a bounded
//! window in memory the same way). The window refills from the store as
//! consumers drain it. Priority queues keep everything in memory: their
//! order is not the log's.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use warren_amqp091::ShortStr;
use warren_store::{MessageRecord, QueueStore, Storage, SyncTicket};

use super::{Ctx, Entry};
use crate::message::{Message, MessageRef};

/// Ready messages kept in memory before new ones are paged out.
pub const WINDOW_MAX: u64 = 4096;
/// Body bytes kept in memory before new messages are paged out.
pub const WINDOW_BYTES: u64 = 8 << 20;
/// The window is refilled from the store when it falls below this.
pub(super) const WINDOW_LOW: u64 = 1024;

/// A queue's handle on the store, opened when first needed.
#[derive(Debug, Default)]
pub struct Paging {
    storage: Option<Arc<Storage>>,
    store: Option<QueueStore>,
    /// Opening the store failed once: do not retry on every publish.
    failed: bool,
}

/// What storing one message at publish did.
pub enum Stored {
    /// Not written (nothing asked for it, or there is no store).
    No,
    /// Written; kept in the window too.
    InWindow(Option<SyncTicket>),
    /// Written to the tail only.
    InTail(Option<SyncTicket>),
    /// A persistent message could not be written: refuse it.
    Failed,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Paging {
    pub fn new(storage: Option<Arc<Storage>>) -> Paging {
        Paging {
            storage,
            store: None,
            failed: false,
        }
    }

    /// A durable queue's store from before a restart.
    pub fn recovered(storage: Option<Arc<Storage>>, store: QueueStore) -> Paging {
        Paging {
            storage,
            store: Some(store),
            failed: false,
        }
    }

    pub fn tail_len(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| s.tail_len())
    }

    pub fn tail_bytes(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| s.tail_bytes())
    }

    fn open(&mut self, ctx: &Ctx) -> Option<&mut QueueStore> {
        if self.store.is_none() && !self.failed {
            let storage = self.storage.as_ref()?;
            let q = ctx.queue;
            match storage.create(&q.vhost, &q.name, q.durable) {
                Ok(s) => self.store = Some(s),
                Err(e) => {
                    tracing::error!(
                        "queue '{}' in vhost '{}': cannot open its message store: {e}",
                        q.name,
                        q.vhost
                    );
                    self.failed = true;
                }
            }
        }
        self.store.as_mut()
    }

    /// Write `msg` if it must be durable or the window is full.
    pub fn store(
        &mut self,
        ctx: &Ctx,
        seq: u64,
        msg: &Message,
        ttl_ms: Option<u64>,
        page_out: bool,
    ) -> Stored {
        let persist = ctx.queue.durable && msg.persistent;
        if !persist && !page_out {
            return Stored::No;
        }
        let Some(store) = self.open(ctx) else {
            // No store configured (or it failed): keep it in memory.
            return if persist && self.failed {
                Stored::Failed
            } else {
                Stored::No
            };
        };
        let rec = MessageRecord {
            seq,
            persistent: msg.persistent,
            expires_at_ms: ttl_ms.map_or(0, |t| now_ms().saturating_add(t).max(1)),
            exchange: &msg.exchange,
            routing_key: &msg.routing_key,
            properties: &msg.raw_properties,
            body: &msg.body,
        };
        match store.append(&rec, page_out) {
            Ok(t) if page_out => Stored::InTail(t),
            Ok(t) => Stored::InWindow(t),
            Err(e) => {
                tracing::error!("queue '{}': cannot store a message: {e}", ctx.queue.name);
                if persist {
                    Stored::Failed
                } else {
                    Stored::No
                }
            }
        }
    }

    /// A stored message went to a consumer that will ack it.
    pub fn delivered(&mut self, e: &Entry) {
        if let (true, false, Some(s)) = (e.stored, e.redelivered, self.store.as_mut()) {
            s.delivered(e.seq, e.message.persistent);
        }
    }

    /// A message left the queue for good.
    pub fn forget(&mut self, e: &Entry) {
        if let (true, Some(s)) = (e.stored, self.store.as_mut()) {
            s.remove(e.seq, e.message.persistent);
        }
    }

    pub fn purge_tail(&mut self, next_seq: u64) -> u64 {
        let Some(s) = self.store.as_mut() else { return 0 };
        let n = s.tail_len();
        s.purge_tail(next_seq);
        n
    }

    pub fn destroy(&mut self) {
        if let Some(mut s) = self.store.take() {
            s.destroy();
        }
    }

    /// Read up to `max` messages (`max_bytes` of bodies) back from the tail
    /// as window entries.
    pub fn load(&mut self, ctx: &Ctx, max: u64, max_bytes: u64, out: &mut Vec<Entry>) {
        let Some(store) = self.store.as_mut() else { return };
        let mut loaded = Vec::new();
        if let Err(e) = store.read_tail(max as usize, max_bytes, &mut loaded) {
            tracing::error!("queue '{}': reading its message store: {e}", ctx.queue.name);
        }
        let wall = now_ms();
        for l in loaded {
            let m = l.message;
            let built = Message::from_publish(
                ShortStr::from_bytes(m.exchange),
                ShortStr::from_bytes(m.routing_key),
                m.properties,
                m.body,
            );
            let msg: MessageRef = match built {
                Ok((msg, _)) => Arc::new(msg),
                Err(e) => {
                    // Only a corrupt store could get here (it was accepted
                    // once): drop it from the log rather than loop on it.
                    tracing::error!(
                        "queue '{}': dropping unreadable stored message {}: {e}",
                        ctx.queue.name,
                        m.seq
                    );
                    store.remove(m.seq, m.persistent);
                    continue;
                }
            };
            out.push(Entry {
                seq: m.seq,
                message: msg,
                redelivered: l.redelivered,
                delivery_count: 0,
                expires_at: deadline(ctx.now, wall, m.expires_at_ms),
                stored: true,
                annotated: false,
            });
        }
    }
}

/// The monotonic deadline for a wall-clock expiry (past ones come out just
/// before `now`, so they expire at once).
fn deadline(now: Instant, wall_ms: u64, expires_at_ms: u64) -> Option<Instant> {
    if expires_at_ms == 0 {
        return None;
    }
    Some(match expires_at_ms.checked_sub(wall_ms) {
        Some(ahead) => now + Duration::from_millis(ahead),
        None => now.checked_sub(Duration::from_millis(1)).unwrap_or(now),
    })
}
