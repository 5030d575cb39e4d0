//! A stream's replica on this node (osiris_replica): it asks the leader
//! to be followed, cuts its log where the leader's overview says it
//! stops agreeing (osiris_log:init_acceptor), says where it ends, then
//! writes the chunks the leader sends verbatim (checked: whole, CRC,
//! next in order) and acknowledges them. Its consumers read up to the
//! committed chunk the leader sends along.
//!
//! Anything unexpected (a refusal, a chunk out of order, the link going)
//! sends it back to asking: soon at first ([`RETRY_FIRST`]), then less
//! often, up to [`RETRY`]. The members of a new stream take it up as each
//! node applies its placement, so a replica often asks before its leader
//! leads and is refused; waiting the whole [`RETRY`] then left it idle,
//! and its consumers without messages, for half a second or more.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use tokio::time::Instant;
use warren_core::queue::StreamLog;
use warren_peer::stream::{StreamMsg, StreamRef};
use warren_stream::chunk::{ChunkHeader, HEADER_SIZE};

use super::outbox::Outbox;

/// How long a replica waits before asking again, at most...
pub const RETRY: Duration = Duration::from_millis(500);

/// ...and after its first refusal (doubling with each one after).
pub const RETRY_FIRST: Duration = Duration::from_millis(20);

/// Bytes of one chunk a replica buffers at most while its pieces arrive
/// (a message may be 128 MiB; a header claiming more is a broken peer).
const CHUNK_MAX: usize = 256 << 20;

pub struct Following {
    pub log: Arc<StreamLog>,
    pub stream: StreamRef,
    pub leader: String,
    out: Arc<Outbox>,
    state: Mutex<State>,
    /// Itself, for the timer that asks again after a refusal (weak: a
    /// member replaced or removed is not kept asking).
    me: Weak<Following>,
}

enum Phase {
    /// Not following; ask again from the instant.
    Idle(Instant),
    /// Asked at the instant; waiting for the overview.
    Asked(Instant),
    /// Taking chunks.
    Streaming,
    /// Stopped by the stream coordinator: the leader of this epoch is
    /// gone; nothing more is taken until a new leader is chosen.
    Stopped,
}

struct State {
    phase: Phase,
    /// Bytes of a chunk whose rest has not arrived.
    partial: BytesMut,
    /// How long the next back-off waits (short again once a chunk is
    /// written).
    retry: Duration,
}

impl Following {
    /// A replica that has not asked yet: it asks with [`Following::ask`]
    /// once the node routes its stream's messages to it (the leader's
    /// answer can be back before that, and would be dropped).
    pub fn new(log: Arc<StreamLog>, stream: StreamRef, leader: String, out: Arc<Outbox>) -> Arc<Following> {
        Arc::new_cyclic(|me| Following {
            log,
            stream,
            leader,
            out,
            state: Mutex::new(State {
                phase: Phase::Idle(Instant::now()),
                partial: BytesMut::new(),
                retry: RETRY_FIRST,
            }),
            me: me.clone(),
        })
    }

    /// Ask the leader to be followed.
    pub fn ask(&self) {
        let mut st = self.state.lock();
        st.partial.clear();
        st.phase = if self.out.send(
            &self.leader,
            StreamMsg::Follow {
                stream: self.stream.clone(),
            },
        ) {
            Phase::Asked(Instant::now())
        } else {
            Phase::Idle(Instant::now())
        };
    }

    fn back_off(&self, why: &str) {
        let mut st = self.state.lock();
        if matches!(st.phase, Phase::Stopped) {
            return;
        }
        let wait = st.retry;
        st.retry = (wait * 2).min(RETRY);
        tracing::info!(stream = %self.log.name, leader = %self.leader, ?wait, "replica will ask again: {why}");
        st.partial.clear();
        st.phase = Phase::Idle(Instant::now() + wait);
        drop(st);
        // The node's tick comes once a second; ask when the wait is over.
        let me = self.me.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(wait).await;
                if let Some(f) = me.upgrade() {
                    f.tick();
                }
            });
        }
    }

    /// Ask again if it is time (every second, and when a back-off ends).
    pub fn tick(&self) {
        let due = match self.state.lock().phase {
            Phase::Idle(t) => Instant::now() >= t,
            Phase::Asked(t) => t.elapsed() >= 5 * RETRY,
            Phase::Streaming | Phase::Stopped => false,
        };
        if due && !self.log.is_deleted() {
            self.ask();
        }
    }

    /// A link to the leader is up: ask at once, even while streaming. A
    /// new link can replace one this side never saw go down (the leader
    /// dropped it, and this node, paused, read its end only after the new
    /// one was up): the leader then dropped this replica too and waits to
    /// be asked, and chunks sent on the old link may be lost.
    pub fn up(&self) {
        if !matches!(self.state.lock().phase, Phase::Stopped) {
            self.ask();
        }
    }

    pub fn down(&self) {
        let mut st = self.state.lock();
        if matches!(st.phase, Phase::Stopped) {
            return;
        }
        st.partial.clear();
        st.phase = Phase::Idle(Instant::now());
    }

    /// Stop following (the coordinator asks, its leader being gone) and
    /// say where the log ends: (epoch, chunk id) of its last chunk.
    pub fn stop(&self) -> Option<(u64, u64)> {
        let mut st = self.state.lock();
        st.phase = Phase::Stopped;
        st.partial.clear();
        drop(st);
        self.log.last_chunk()
    }

    pub fn refused(&self, why: &str) {
        self.back_off(why);
    }

    /// The leader's overview: cut the log to agree, say where it ends.
    pub fn overview(&self, range: Option<(u64, u64)>, epochs: Vec<(u64, u64)>) {
        if !matches!(self.state.lock().phase, Phase::Asked(_)) {
            return;
        }
        let o = warren_log::Overview { range, epochs };
        match self.log.cut_to(&o) {
            Ok(warren_log::Cut::Nothing) => {}
            Ok(cut) => {
                tracing::info!(stream = %self.log.name, ?cut, "replica log cut to agree with the leader's")
            }
            Err(e) => return self.back_off(&format!("cannot cut the log: {e}")),
        }
        let next = self.log.extent().1;
        let last = self.log.last_chunk();
        let mut st = self.state.lock();
        st.phase = Phase::Streaming;
        st.partial.clear();
        drop(st);
        let sent = self.out.send(
            &self.leader,
            StreamMsg::From {
                stream: self.stream.clone(),
                next,
                last,
            },
        );
        if !sent {
            self.back_off("the link to the leader is down");
        }
    }

    /// Chunks from the leader: write the whole ones, keep a partial one,
    /// acknowledge, and let consumers read to `committed`.
    pub fn chunks(&self, committed: Option<u64>, bytes: bytes::Bytes) {
        let mut st = self.state.lock();
        if !matches!(st.phase, Phase::Streaming) {
            return;
        }
        // Whole chunks are written from the frame's bytes; only a chunk
        // cut by the frame's end is copied, to wait for its rest.
        let mut buf = if st.partial.is_empty() {
            bytes
        } else {
            st.partial.extend_from_slice(&bytes);
            st.partial.split().freeze()
        };
        let mut wrote = None;
        let mut failed = None;
        while buf.len() >= HEADER_SIZE {
            let h = match ChunkHeader::parse(&buf[..HEADER_SIZE]) {
                Ok(h) => h,
                Err(e) => {
                    failed = Some(format!("a chunk header that does not parse: {e}"));
                    break;
                }
            };
            let total =
                HEADER_SIZE + h.bloom_size as usize + h.data_length as usize + h.trailer_length as usize;
            if total > CHUNK_MAX {
                failed = Some(format!("a chunk of {total} bytes"));
                break;
            }
            if buf.len() < total {
                break;
            }
            match self.log.accept_chunk(&buf[..total]) {
                Ok(at) => wrote = Some(at.chunk_id),
                Err(e) => {
                    failed = Some(format!("a chunk refused: {e}"));
                    break;
                }
            }
            buf.advance(total);
        }
        if failed.is_none() {
            st.partial.extend_from_slice(&buf);
        }
        if wrote.is_some() {
            // Back-offs start short again only after progress: a chunk
            // refused each time it comes is asked for at most every RETRY.
            st.retry = RETRY_FIRST;
        }
        drop(st);
        if let Some(last) = wrote {
            let next = self.log.extent().1;
            self.out.send(
                &self.leader,
                StreamMsg::Ack {
                    stream: self.stream.clone(),
                    last,
                    next,
                },
            );
        }
        if let Some(c) = committed {
            self.log.set_committed(c);
        }
        if let Some(why) = failed {
            self.back_off(&why);
        }
    }
}
