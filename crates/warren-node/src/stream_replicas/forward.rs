//! Publishing through a replica's node, as RabbitMQ allows (its
//! publishers on any node write to the leader's osiris writer; seen on
//! the 3.10 anchor: DeclarePublisher on a replica answers OK and the
//! publish is confirmed and read on the leader). A stream protocol
//! publisher connected to a node whose member is a replica hands each
//! chunk's entries to the leader (`Write`, the Publish frame's content
//! with the producer's name); the leader deduplicates against its own
//! log (the replica's copy of the producer's last id may lag), appends,
//! and answers `Written` once the chunk is committed, so the confirm
//! means what it means on the leader. A link that goes down fails what
//! was sent on it (STREAM_NOT_AVAILABLE: the client publishes again;
//! deduplication keeps what was stored once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use warren_core::queue::{StreamLog, StreamRole};
use warren_log::{Delta, Message};
use warren_peer::stream::{StreamMsg, StreamRef};
use warren_stream::publish::{encode_publish, parse_publish, Published};

use super::leader::Leading;
use super::Streams;
use warren_stream::command::code;

/// Told the outcome of a forwarded chunk: a stream protocol code.
pub type WriteDone = Box<dyn FnOnce(u16) + Send>;

#[derive(Default)]
pub struct Writes {
    next: AtomicU64,
    /// By request: the leader's node it went to, and who waits.
    waiting: Mutex<HashMap<u64, (String, WriteDone)>>,
}

impl Streams {
    /// Hand `entries` of publisher `reference` to the leader of the
    /// stream whose replica `log` is here; `done` gets the outcome.
    pub fn forward(&self, log: &StreamLog, reference: Option<&str>, entries: &[Published], done: WriteDone) {
        let StreamRole::Replica {
            epoch,
            leader: Some(leader),
        } = log.role()
        else {
            return done(code::STREAM_NOT_AVAILABLE);
        };
        let leader = leader.to_str_lossy().into_owned();
        let mut publish = BytesMut::new();
        encode_publish(&mut publish, 0, entries);
        let req = self.writes.next.fetch_add(1, Ordering::Relaxed);
        self.writes.waiting.lock().insert(req, (leader.clone(), done));
        let sent = self.out.send(
            &leader,
            StreamMsg::Write {
                stream: StreamRef {
                    vhost: log.vhost.clone(),
                    name: Bytes::from(log.name.clone().into_bytes()),
                    epoch,
                },
                req,
                reference: reference.unwrap_or_default().to_string(),
                publish: publish.freeze(),
            },
        );
        if !sent {
            self.written(req, code::STREAM_NOT_AVAILABLE);
        }
    }

    /// The leader's answer to request `req`.
    pub(super) fn written(&self, req: u64, code: u16) {
        let w = self.writes.waiting.lock().remove(&req);
        if let Some((_, done)) = w {
            done(code);
        }
    }

    /// The link to `node` went: what waits on it will not be answered.
    pub(super) fn fail_writes_to(&self, node: &str) {
        let failed: Vec<WriteDone> = {
            let mut w = self.writes.waiting.lock();
            let reqs: Vec<u64> = w
                .iter()
                .filter(|(_, (n, _))| n == node)
                .map(|(r, _)| *r)
                .collect();
            reqs.into_iter()
                .filter_map(|r| w.remove(&r))
                .map(|(_, d)| d)
                .collect()
        };
        for done in failed {
            done(code::STREAM_NOT_AVAILABLE);
        }
    }

    /// On the leader: a replica's node's publisher's chunk.
    pub(super) fn write_here(&self, from: &str, l: &Leading, req: u64, reference: String, publish: Bytes) {
        let answer = {
            let out = self.out.clone();
            let (from, stream) = (from.to_string(), l.stream.clone());
            move |code: u16| {
                out.send(&from, StreamMsg::Written { stream, req, code });
            }
        };
        let entries = match parse_publish(publish) {
            Ok((_, e)) => e,
            Err(e) => {
                tracing::warn!(peer = %from, "a forwarded publish that does not parse: {e}");
                return answer(code::INTERNAL_ERROR);
            }
        };
        let reference = (!reference.is_empty()).then_some(reference);
        let r = l.log.with_log(|log| {
            let mut last = reference.as_deref().and_then(|r| log.sequence(r));
            let mut messages = Vec::with_capacity(entries.len());
            for e in entries {
                if reference.is_some() {
                    if last.is_some_and(|x| e.publishing_id <= x) {
                        continue; // stored already: confirmed, not again
                    }
                    last = Some(e.publishing_id);
                }
                messages.push(Message {
                    entry: e.entry,
                    filter: e.filter.filter(|f| !f.is_empty()),
                });
            }
            if messages.is_empty() {
                return Ok(None);
            }
            let delta = Delta {
                sequences: match (&reference, last) {
                    (Some(r), Some(x)) => vec![(r.clone(), x)],
                    _ => Vec::new(),
                },
                offsets: Vec::new(),
            };
            log.append(&messages, &delta, warren_core::queue::now_ms())
                .map(Some)
        });
        // Duplicates are confirmed once what the log holds is committed
        // (they may be in a chunk a majority does not have yet).
        let chunk = match r {
            Ok(Some(at)) => Some(at.chunk_id),
            Ok(None) => l.log.last_chunk().map(|(_, id)| id),
            Err(e) => {
                tracing::error!(stream = %l.log.name, "cannot append a forwarded publish: {e}");
                return answer(code::INTERNAL_ERROR);
            }
        };
        match chunk {
            Some(id) => l.log.on_committed(
                id,
                Box::new(move |ok| answer(if ok { code::OK } else { code::STREAM_NOT_AVAILABLE })),
            ),
            None => answer(code::OK),
        }
    }
}
