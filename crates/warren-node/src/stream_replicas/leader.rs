//! A stream's leader on this node (osiris_writer and its replica
//! readers): for each replica, a replication reader over the log that
//! sends every chunk as stored, no more than [`WINDOW`] bytes beyond what
//! the replica acknowledged; and the committed chunk, the highest a
//! majority of the members has (the leader counting itself), which
//! releases publish confirms and readers (`StreamLog::set_committed`)
//! and rides to the replicas with the next chunks.
//!
//! One task per stream led here does the reading and sending; acks from
//! the link only note progress and wake it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::queue::{StreamLog, StreamWaiter};
use warren_log::Reader;
use warren_peer::stream::{StreamMsg, StreamRef};

use super::outbox::Outbox;

/// Bytes sent to a replica and not yet acknowledged, at most (osiris
/// relies on TCP's window; here the link is shared, so the bound is
/// ours).
pub const WINDOW: usize = 8 << 20;

/// Bytes of chunks in one frame (a larger chunk goes in pieces; frames
/// may be 16 MiB).
const FRAME_BYTES: usize = 1 << 20;

/// The log's recent chunks kept for the replication readers, at most:
/// a replica's window and some (a replica further behind reads from the
/// file).
const RECENT: usize = WINDOW + (WINDOW >> 1);

pub struct Leading {
    pub log: Arc<StreamLog>,
    pub stream: StreamRef,
    /// How many members the stream has (this one included).
    members: std::sync::atomic::AtomicUsize,
    /// Chunks below this were written in earlier epochs: counting
    /// replicas does not commit them (a leader of a later epoch might
    /// have none of them); they commit with the first chunk of this
    /// epoch a majority has, as in Raft.
    epoch_start: u64,
    out: Arc<Outbox>,
    followers: Mutex<HashMap<String, Follower>>,
    notify: Arc<Notify>,
    stopped: AtomicBool,
}

#[derive(Default)]
struct Follower {
    /// The last chunk it holds, as it said.
    acked: Option<u64>,
    /// Its replication reader, once it said where its log ends.
    reader: Option<Reader>,
    /// Chunks sent and not acknowledged: (offset after it, bytes).
    sent: VecDeque<(u64, usize)>,
    in_flight: usize,
    /// The committed chunk it was last told.
    told: Option<u64>,
}

struct Grow(Arc<Notify>);

impl StreamWaiter for Grow {
    fn grown(&self) {
        self.0.notify_one();
    }
}

impl Leading {
    pub fn start(
        log: Arc<StreamLog>,
        stream: StreamRef,
        members: &[String],
        me: &str,
        out: Arc<Outbox>,
    ) -> Arc<Leading> {
        let epoch_start = match log.last_chunk() {
            Some((e, _)) if e < stream.epoch => log.extent().1,
            _ => 0,
        };
        if epoch_start > 0 {
            // A chunk of this epoch at once: the chunks before it (the
            // longest log the election found) commit with it when a
            // majority has it, with no publish needed (Raft's no-op).
            if let Err(e) = log.append_marker() {
                tracing::error!(stream = %log.name, "cannot write the new epoch's first chunk: {e}");
            }
        }
        let followers = members
            .iter()
            .filter(|m| *m != me)
            .map(|m| (m.clone(), Follower::default()))
            .collect();
        log.view().keep_recent(RECENT);
        let l = Arc::new(Leading {
            log,
            stream,
            members: std::sync::atomic::AtomicUsize::new(members.len()),
            epoch_start,
            out,
            followers: Mutex::new(followers),
            notify: Arc::new(Notify::new()),
            stopped: AtomicBool::new(false),
        });
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(l.clone().run());
            }
            Err(_) => tracing::error!(stream = %l.log.name, "no runtime to lead the stream in"),
        }
        l
    }

    pub fn stop(&self) {
        self.log.view().keep_recent(0);
        self.stopped.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// add_replica or delete_replica: replicas of the new member list,
    /// the majority counted over it.
    pub fn set_members(&self, members: &[String], me: &str) {
        let mut fs = self.followers.lock();
        fs.retain(|n, _| members.contains(n));
        for m in members.iter().filter(|m| *m != me) {
            fs.entry(m.clone()).or_default();
        }
        self.members.store(members.len(), Ordering::Release);
        drop(fs);
        self.notify.notify_one();
    }

    /// The coordinator ended this epoch (this node was thought gone):
    /// write no more, confirm nothing more; say where the log ends.
    pub fn step_down(&self) -> Option<(u64, u64)> {
        self.stop();
        self.log.set_role(warren_core::queue::StreamRole::Replica {
            epoch: self.stream.epoch,
            leader: None,
        });
        self.log.last_chunk()
    }

    async fn run(self: Arc<Self>) {
        let waiter: Arc<dyn StreamWaiter> = Arc::new(Grow(self.notify.clone()));
        while !self.stopped.load(Ordering::Acquire) && !self.log.is_deleted() {
            self.log.wait(&waiter);
            self.pump();
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// A replica asks to follow: it gets the overview to cut its log by,
    /// and nothing more until it says where its log ends.
    pub fn follow(&self, from: &str) {
        if let Some(f) = self.followers.lock().get_mut(from) {
            // What it held may be cut: it says again in `From`.
            *f = Follower::default();
        }
        let m = match self.log.overview() {
            Ok(o) => StreamMsg::Overview {
                stream: self.stream.clone(),
                range: o.range,
                epochs: o.epochs,
            },
            Err(e) => StreamMsg::Refuse {
                stream: self.stream.clone(),
                why: format!("cannot read the log's overview: {e}"),
            },
        };
        self.out.send(from, m);
    }

    /// The replica's log, cut, ends before `next` with chunk `last`
    /// (epoch, id): check the leader has that chunk in that epoch
    /// (osiris_log:init_data_reader), then stream from there.
    pub fn from(&self, from: &str, next: u64, last: Option<(u64, u64)>) {
        let refuse = |why: String| {
            self.out.send(
                from,
                StreamMsg::Refuse {
                    stream: self.stream.clone(),
                    why,
                },
            );
        };
        if let Some((epoch, id)) = last {
            let ok = self.log.overview().is_ok_and(|o| {
                let i = o.epochs.iter().position(|(e, _)| *e == epoch);
                i.is_some_and(|i| id <= o.epochs[i].1 && (i == 0 || o.epochs[i - 1].1 < id))
            });
            if !ok {
                return refuse(format!("chunk {id} of epoch {epoch} is not in the leader's log"));
            }
        }
        let reader = match Reader::for_replication(self.log.view(), next) {
            Ok(r) => r,
            Err(e) => return refuse(format!("cannot replicate from offset {next}: {e}")),
        };
        let mut fs = self.followers.lock();
        let Some(f) = fs.get_mut(from) else {
            drop(fs);
            return refuse(format!("node '{from}' is not a member"));
        };
        *f = Follower {
            acked: last.map(|(_, id)| id),
            reader: Some(reader),
            ..Follower::default()
        };
        drop(fs);
        self.notify.notify_one();
    }

    /// The replica holds every chunk up to `last` and its log ends before
    /// `next`.
    pub fn ack(&self, from: &str, last: u64, next: u64) {
        let mut fs = self.followers.lock();
        if let Some(f) = fs.get_mut(from) {
            f.acked = f.acked.max(Some(last));
            while let Some(&(end, n)) = f.sent.front() {
                if end > next {
                    break;
                }
                f.in_flight -= n;
                f.sent.pop_front();
            }
        }
        drop(fs);
        self.notify.notify_one();
    }

    /// The link to `node` is gone: it asks again when it is back.
    pub fn down(&self, node: &str) {
        if let Some(f) = self.followers.lock().get_mut(node) {
            f.reader = None;
            f.sent.clear();
            f.in_flight = 0;
        }
    }

    /// Move the committed chunk, then send each streaming replica what it
    /// lacks, within its window; then let the log drop the recent chunks
    /// every replica has been sent.
    fn pump(&self) {
        let mut fs = self.followers.lock();
        let committed = self.commit(&fs);
        for (node, f) in fs.iter_mut() {
            let Some(reader) = f.reader.as_mut() else {
                continue;
            };
            let mut batch = Batch::default();
            let mut failed = None;
            while f.in_flight < WINDOW {
                match reader.next_whole() {
                    Ok(Some((h, chunk))) => {
                        f.in_flight += chunk.len();
                        f.sent
                            .push_back((h.first_offset + h.num_records as u64, chunk.len()));
                        batch.add(chunk);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                tracing::warn!(stream = %self.log.name, replica = %node, "replication read failed: {e}");
                f.reader = None;
                continue;
            }
            if batch.is_empty() && f.told == committed {
                continue;
            }
            f.told = committed;
            let sent = batch.send(|bytes| {
                self.out.send(
                    node,
                    StreamMsg::Chunks {
                        stream: self.stream.clone(),
                        committed,
                        bytes,
                    },
                )
            });
            if !sent {
                f.reader = None;
            }
        }
        match fs
            .values()
            .filter_map(|f| f.reader.as_ref())
            .map(|r| r.place())
            .min()
        {
            Some(at) => self.log.view().release_recent(at),
            None => self.log.view().release_recent((u64::MAX, u64::MAX)),
        }
    }

    /// The highest chunk a majority has, this node counting (osiris's
    /// agreed_commit), moved forward when it is of this epoch.
    fn commit(&self, fs: &HashMap<String, Follower>) -> Option<u64> {
        let need = self.members.load(Ordering::Acquire) / 2 + 1;
        let mine = self.log.last_chunk().map(|(_, id)| id);
        let mut have: Vec<u64> = mine
            .into_iter()
            .chain(fs.values().filter_map(|f| f.acked))
            .collect();
        if have.len() >= need {
            have.sort_unstable_by(|a, b| b.cmp(a));
            let c = have[need - 1];
            if c >= self.epoch_start {
                self.log.set_committed(c);
            }
        }
        self.log.committed()
    }
}

/// The chunks for one replica in one pump, as `Chunks` messages: small
/// ones copied together, each large one sent as it is (shared with the
/// log's recent chunks; the link writes it after the frame's head), in
/// pieces of at most [`FRAME_BYTES`].
#[derive(Default)]
struct Batch {
    small: BytesMut,
    /// In order: (bytes of `small` before it, the chunk).
    large: Vec<(usize, Bytes)>,
}

impl Batch {
    fn add(&mut self, chunk: Bytes) {
        if chunk.len() < warren_peer::stream::SPLIT_MIN {
            self.small.extend_from_slice(&chunk);
        } else {
            self.large.push((self.small.len(), chunk));
        }
    }

    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.large.is_empty()
    }

    /// Hand every message to `send`, in order (at least one, to carry
    /// the committed chunk); false when any was refused.
    fn send(mut self, mut send: impl FnMut(Bytes) -> bool) -> bool {
        let mut small = self.small.freeze();
        let mut taken = 0;
        let mut pieces: Vec<Bytes> = Vec::new();
        for (before, chunk) in self.large.drain(..) {
            if before > taken {
                pieces.push(small.split_to(before - taken));
                taken = before;
            }
            pieces.push(chunk);
        }
        if !small.is_empty() || pieces.is_empty() {
            pieces.push(small);
        }
        let mut ok = true;
        for mut p in pieces {
            loop {
                let piece = p.split_to(p.len().min(FRAME_BYTES));
                ok &= send(piece);
                if p.is_empty() {
                    break;
                }
            }
        }
        ok
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    fn collect(b: Batch) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        assert!(b.send(|p| {
            out.push(p.to_vec());
            true
        }));
        out
    }

    #[test]
    fn small_chunks_go_together_large_ones_alone_in_order() {
        let big = warren_peer::stream::SPLIT_MIN;
        let mut b = Batch::default();
        b.add(Bytes::from(vec![1u8; 10]));
        b.add(Bytes::from(vec![2u8; 10]));
        b.add(Bytes::from(vec![3u8; big]));
        b.add(Bytes::from(vec![4u8; 5]));
        let got = collect(b);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], [vec![1u8; 10], vec![2u8; 10]].concat());
        assert_eq!(got[1], vec![3u8; big]);
        assert_eq!(got[2], vec![4u8; 5]);
    }

    #[test]
    fn nothing_still_sends_one_empty_message_and_large_ones_split() {
        assert_eq!(collect(Batch::default()), vec![Vec::<u8>::new()]);
        let mut b = Batch::default();
        b.add(Bytes::from(vec![9u8; FRAME_BYTES + 3]));
        let got = collect(b);
        assert_eq!(
            got.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![FRAME_BYTES, 3]
        );
    }
}
