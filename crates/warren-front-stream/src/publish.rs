//! Publishers: DeclarePublisher / DeletePublisher / QueryPublisherSequence,
//! and Publish frames. The entries of Publish frames are gathered per
//! publisher and written once the publisher has no chunk at the writer:
//! while the writer copies one, the next gathers everything that arrives
//! meanwhile. What gathered is cut into chunks as osiris's writer batches
//! (see `Publisher::next_chunk`): small when the load is light (a consumer's
//! credit, counted in chunks, then means a few messages), growing to
//! thousands of entries under load.
//! A connection stops reading while [`MAX_PENDING_BYTES`] wait. A named
//! publisher is deduplicated: an entry whose publishing id is not above
//! the last one stored for that name (in the log, so across reconnects and
//! restarts) is confirmed but not stored again; the new last id rides in
//! the chunk's trailer. Publishers sharing a connection keep its order:
//! a run of entries waits for earlier runs on the same stream (see
//! `Conn::flush_publishers`).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use warren_core::queue::{Queue, QueueKind, StreamLog, StreamRole};
use warren_core::stats::Stat;
use warren_log::{Delta, Message};
use warren_stream::command::{key, Command};
use warren_stream::publish::{parse_publish, Published};

use super::writer::Job;
use crate::conn::{response, Conn};
use crate::publisher::{Publisher, MAX_CHUNK, MIN_CHUNK};
use crate::wake::{Completion, Stage};
use warren_stream::command::code;

/// Chunks of a connection written on a replicated stream's leader and
/// waiting for a majority, at most; then it reads no more until some are
/// confirmed (the confirms' ids are held meanwhile).
pub const MAX_UNCOMMITTED: usize = 256;

/// How many publishers a connection may declare (RabbitMQ: 256, ids 0-255).
pub const MAX_PUBLISHERS: usize = 256;

/// Bytes of Publish frames a connection holds before it stops reading
/// (they wait for their publisher's chunk at the writer to complete).
pub const MAX_PENDING_BYTES: usize = 1 << 20;

/// A chunk's entries by publisher, in the order they came.
type Parts = Vec<(u8, Vec<Published>)>;

/// Where a stream's log is, for the Metadata answer.
pub(super) enum StreamNodes {
    /// Not replicated, on this node.
    Here,
    /// Not replicated, on that node.
    Home(String),
    /// Replicated: its leader (None while one is chosen) and the other
    /// members reachable from here.
    Replicated {
        leader: Option<String>,
        replicas: Vec<String>,
    },
}

impl Conn {
    /// The log of stream `name` in this connection's vhost.
    pub(super) fn stream_log(&self, name: &str) -> Result<Arc<StreamLog>, u16> {
        self.stream_queue(name).map(|(_, log)| log)
    }

    /// Stream `name` as a queue, and its log. A stream that lives on
    /// another node is not available here (the metadata sends clients
    /// there).
    fn stream_queue(&self, name: &str) -> Result<(Arc<Queue>, Arc<StreamLog>), u16> {
        let q = self
            .vhost()
            .queue(name.as_bytes(), 0)
            .map_err(|_| code::STREAM_DOES_NOT_EXIST)?;
        if q.home.is_some() && q.kind() == QueueKind::Stream {
            return Err(code::STREAM_NOT_AVAILABLE);
        }
        let log = q.stream().cloned().ok_or(code::STREAM_DOES_NOT_EXIST)?;
        Ok((q, log))
    }

    /// Which nodes hold stream `name`.
    pub(super) fn stream_nodes(&self, name: &str) -> Result<StreamNodes, u16> {
        let q = self
            .vhost()
            .queue(name.as_bytes(), 0)
            .map_err(|_| code::STREAM_DOES_NOT_EXIST)?;
        if q.kind() != QueueKind::Stream {
            return Err(code::STREAM_DOES_NOT_EXIST);
        }
        let placed = self
            .ctx
            .stream_replicas
            .as_ref()
            .and_then(|s| Some((s.clone(), s.placement(&q.vhost, name)?)));
        Ok(match (placed, &q.home) {
            (Some((s, p)), _) if p.members.len() > 1 => StreamNodes::Replicated {
                replicas: p
                    .members
                    .iter()
                    .filter(|m| Some(*m) != p.leader.as_ref() && s.is_up(m))
                    .cloned()
                    .collect(),
                leader: p.leader,
            },
            (_, Some(h)) => StreamNodes::Home(h.to_str_lossy().to_string()),
            (_, None) => StreamNodes::Here,
        })
    }

    pub(super) fn declare_publisher(
        &mut self,
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: &str,
    ) {
        let (queue, log) = match self.stream_queue(stream) {
            Ok(ql) => ql,
            Err(c) => return self.respond(key::DECLARE_PUBLISHER, correlation_id, c),
        };
        // On a replica's node, only while a leader is known to hand the
        // chunks to (RabbitMQ answers STREAM_NOT_AVAILABLE without one).
        if matches!(log.role(), StreamRole::Replica { leader: None, .. }) {
            return self.respond(key::DECLARE_PUBLISHER, correlation_id, code::STREAM_NOT_AVAILABLE);
        }
        let taken = self.publishers.contains_key(&publisher_id)
            || reference.as_ref().is_some_and(|r| {
                self.publishers
                    .values()
                    .any(|p| p.stream == stream && p.reference.as_ref() == Some(r))
            })
            || reference.as_ref().is_some_and(|r| r.len() > 255);
        if taken || self.publishers.len() >= MAX_PUBLISHERS {
            return self.respond(key::DECLARE_PUBLISHER, correlation_id, code::PRECONDITION_FAILED);
        }
        let last_stored = reference.as_deref().and_then(|r| log.sequence(r));
        let epoch = log.role().epoch();
        // Told when the stream goes (or changes leader), even if idle.
        let watcher: Arc<dyn warren_core::queue::StreamWaiter> = self.wake.clone();
        log.watch(&watcher);
        self.publishers.insert(
            publisher_id,
            Publisher {
                stream: stream.to_string(),
                log,
                queue,
                reference,
                pending: Vec::new(),
                pending_bytes: 0,
                chunk: MIN_CHUNK,
                in_flight: 0,
                last_stored,
                epoch,
            },
        );
        self.respond(key::DECLARE_PUBLISHER, correlation_id, code::OK);
    }

    pub(super) fn delete_publisher(&mut self, correlation_id: u32, publisher_id: u8) {
        self.flush_publishers(true);
        self.drop_pending(publisher_id);
        let c = if self.publishers.remove(&publisher_id).is_some() {
            code::OK
        } else {
            code::PUBLISHER_DOES_NOT_EXIST
        };
        self.respond(key::DELETE_PUBLISHER, correlation_id, c);
    }

    pub(super) fn query_publisher_sequence(&mut self, correlation_id: u32, reference: &str, stream: &str) {
        // What this connection has not written yet counts too.
        self.flush_publishers(true);
        let (c, seq) = match self.stream_log(stream) {
            Ok(log) => {
                // Chunks of ours still with the writer count too.
                let ours = self
                    .publishers
                    .values()
                    .filter(|p| p.stream == stream && p.reference.as_deref() == Some(reference))
                    .filter_map(|p| p.last_stored)
                    .max();
                (code::OK, log.sequence(reference).max(ours).unwrap_or(0))
            }
            Err(c) => (c, 0),
        };
        response(
            &mut self.wbuf,
            key::QUERY_PUBLISHER_SEQUENCE,
            correlation_id,
            c,
            &seq.to_be_bytes(),
        );
    }

    /// A Publish frame: entries wait in their publisher until it has no
    /// chunk at the writer (see [`Conn::flush_publishers`]).
    pub(super) fn publish(&mut self, f: Bytes) {
        let len = f.len();
        let (publisher_id, entries) = match parse_publish(f) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(peer = %self.peer, "malformed publish frame: {e}");
                return;
            }
        };
        match self.publishers.get_mut(&publisher_id) {
            Some(p) => {
                self.ctx.broker.messages.add(Stat::Publish, entries.len() as u64);
                p.queue.counters.add(Stat::Publish, entries.len() as u64);
                let n = entries.len();
                p.pending.extend(entries);
                p.pending_bytes += len;
                self.pending_bytes += len;
                match self.arrivals.back_mut() {
                    Some((id, run)) if *id == publisher_id => *run += n,
                    _ if n > 0 => self.arrivals.push_back((publisher_id, n)),
                    _ => {}
                }
            }
            None => {
                let errors = entries
                    .iter()
                    .map(|e| (e.publishing_id, code::PUBLISHER_DOES_NOT_EXIST))
                    .collect();
                Command::PublishError { publisher_id, errors }.encode(&mut self.wbuf);
            }
        }
    }

    /// Write publishers' pending entries as chunks and confirm them
    /// (duplicates included), or report why not, in the order they came:
    /// a run of entries goes once its publisher has no chunk at the
    /// writer and no earlier run on the same stream waits; with `now`,
    /// every run (the writer keeps order). A later publisher so waits for
    /// an earlier one's chunk rather than pass its entries, as it cannot
    /// in RabbitMQ, where a stream's writer takes a connection's frames
    /// one by one.
    pub(super) fn flush_publishers(&mut self, now: bool) {
        if self.arrivals.is_empty() {
            return;
        }
        let mut arrivals = std::mem::take(&mut self.arrivals);
        // Publishers take turns: chunks are cut by their runs, not by a
        // publisher's own batching (which would cut them small).
        let turns = arrivals.len() > 1;
        // Streams with a run still waiting: later runs on them wait too.
        let mut held: Vec<*const StreamLog> = Vec::new();
        // What goes now, per stream, in arrival order: one chunk each,
        // however many publishers it holds (osiris's writer batches
        // its writers' entries alike), so publishers taking turns on a
        // connection still fill large chunks.
        let mut chunks: Vec<(*const StreamLog, Parts)> = Vec::new();
        arrivals.retain_mut(|(id, run)| {
            let Some(p) = self.publishers.get_mut(id) else {
                return false; // gone, its entries with it
            };
            let stream = Arc::as_ptr(&p.log);
            if held.contains(&stream) {
                return true;
            }
            let at = chunks.iter().position(|(s, _)| *s == stream);
            // Entries the chunk on this stream holds so far.
            let began: usize = at.map_or(0, |i| chunks[i].1.iter().map(|(_, e)| e.len()).sum());
            // A named publisher's runs with another's between them go in
            // one chunk's parts: on a replica's node each part is a
            // chunk of its own, and a named publisher has one at a time.
            let named_again = p.reference.is_some()
                && at.is_some_and(|i| {
                    let parts = &chunks[i].1;
                    parts.iter().rev().skip(1).any(|(j, _)| j == id)
                        && parts.last().is_some_and(|(j, _)| j != id)
                });
            // A publisher with a chunk at the writer waits; a run that
            // would take the chunk over osiris's largest batch waits for
            // the next.
            if (now || (p.in_flight < p.max_in_flight() && !named_again))
                && (began == 0 || now || began + *run <= MAX_CHUNK)
            {
                let mut taken = Vec::new();
                let mut bytes = 0;
                loop {
                    // A chunk begun by this run is cut as the publisher
                    // cuts its own; a run joining one goes whole.
                    let (mut part, b) = if began == 0 && taken.is_empty() && !turns {
                        p.next_chunk(*run)
                    } else {
                        p.take(*run)
                    };
                    if part.is_empty() {
                        *run = 0; // cannot be: runs count what is pending
                        break;
                    }
                    *run -= part.len();
                    bytes += b;
                    if taken.is_empty() {
                        taken = part;
                    } else {
                        taken.append(&mut part);
                    }
                    if *run == 0 || !now {
                        break;
                    }
                }
                self.pending_bytes -= bytes;
                let parts = match at {
                    Some(i) => &mut chunks[i].1,
                    None => {
                        chunks.push((stream, Vec::new()));
                        &mut chunks.last_mut().expect("just pushed").1
                    }
                };
                match parts.last_mut() {
                    Some((last, entries)) if last == id => entries.append(&mut taken),
                    _ => parts.push((*id, taken)),
                }
            }
            if *run == 0 {
                return false;
            }
            held.push(stream);
            true
        });
        self.arrivals = arrivals;
        for (_, mut parts) in chunks {
            if parts.len() == 1 {
                let (id, entries) = parts.pop().expect("one");
                self.write_chunk(id, entries);
            } else {
                self.write_parts(parts);
            }
        }
    }

    /// Forget what publisher `id` had not written yet (it is removed).
    pub(super) fn drop_pending(&mut self, id: u8) {
        if let Some(p) = self.publishers.get(&id) {
            self.pending_bytes -= p.pending_bytes;
        }
        self.arrivals.retain(|(i, _)| *i != id);
    }

    /// One chunk of publisher `id`'s entries: to the writer (or, on a
    /// replica's node, to the leader), confirmed when written (committed,
    /// replicated).
    fn write_chunk(&mut self, id: u8, pending: Vec<Published>) {
        let Some(p) = self.publishers.get_mut(&id) else {
            return;
        };
        if let StreamRole::Replica { .. } = p.log.role() {
            // This node's member is a replica: the leader writes
            // (and deduplicates), and answers once committed.
            let confirmed: Vec<u64> = pending.iter().map(|e| e.publishing_id).collect();
            let wake = self.wake.clone();
            p.in_flight += 1;
            self.outstanding += 1;
            let done: warren_node::stream_replicas::forward::WriteDone = Box::new(move |c| {
                wake.complete(Completion {
                    publisher_id: id,
                    ids: confirmed,
                    error: (c != code::OK).then_some(c),
                    stage: Stage::Whole,
                })
            });
            match &self.ctx.stream_replicas {
                Some(s) => s.forward(&p.log, p.reference.as_deref(), &pending, done),
                None => done(code::STREAM_NOT_AVAILABLE),
            }
            return;
        }
        let mut messages = Vec::with_capacity(pending.len());
        let (confirmed, last) = p.keep_new(pending, &mut messages);
        if messages.is_empty() {
            // Only duplicates: nothing to write. A leader confirms
            // them once what its log holds is committed (they may be
            // in a chunk a majority does not have yet).
            match p.log.last_chunk() {
                Some((_, last)) if matches!(p.log.role(), StreamRole::Leader { .. }) => {
                    let wake = self.wake.clone();
                    p.in_flight += 1;
                    self.outstanding += 1;
                    p.log.on_committed(
                        last,
                        Box::new(move |ok| {
                            wake.complete(Completion {
                                publisher_id: id,
                                ids: confirmed,
                                error: (!ok).then_some(code::STREAM_NOT_AVAILABLE),
                                stage: Stage::Whole,
                            })
                        }),
                    );
                }
                _ => write_confirm(&mut self.wbuf, id, &confirmed),
            }
            return;
        }
        if p.log.is_deleted() {
            let errors = confirmed
                .into_iter()
                .map(|i| (i, code::STREAM_DOES_NOT_EXIST))
                .collect();
            Command::PublishError {
                publisher_id: id,
                errors,
            }
            .encode(&mut self.wbuf);
            return;
        }
        let sequences = match (&p.reference, last) {
            (Some(r), Some(l)) => vec![(r.clone(), l)],
            _ => Vec::new(),
        };
        // The next batch deduplicates against what this one will store.
        p.last_stored = last;
        p.in_flight += 1;
        self.outstanding += 1;
        let (log, stream) = (p.log.clone(), p.stream.clone());
        self.submit_chunk(log, stream, messages, sequences, vec![(id, confirmed)]);
    }

    /// Hand a chunk of `messages` to the writer, the named publishers'
    /// new last ids in its trailer (`sequences`); each publisher of
    /// `confirms` is told of its ids as if the chunk were its own. Not
    /// replicated: confirmed once written. A replicated stream's leader:
    /// the writer's part is done once written (the publisher's next
    /// chunk may go), the confirm waits for a majority.
    fn submit_chunk(
        &mut self,
        log: Arc<StreamLog>,
        stream: String,
        messages: Vec<Message>,
        sequences: Vec<(String, u64)>,
        confirms: Vec<(u8, Vec<u64>)>,
    ) {
        let wake = self.wake.clone();
        let done_log = log.clone();
        self.shared.writer.submit(Job {
            log,
            messages,
            delta: Delta {
                sequences,
                offsets: Vec::new(),
            },
            done: Box::new(move |r| match r {
                Ok(at) if matches!(done_log.role(), StreamRole::Leader { .. }) => {
                    for (id, _) in &confirms {
                        wake.complete(Completion {
                            publisher_id: *id,
                            ids: Vec::new(),
                            error: None,
                            stage: Stage::Written,
                        });
                    }
                    let w = wake.clone();
                    done_log.on_committed(
                        at.chunk_id,
                        Box::new(move |ok| {
                            for (id, ids) in confirms {
                                w.complete(Completion {
                                    publisher_id: id,
                                    ids,
                                    error: (!ok).then_some(code::STREAM_NOT_AVAILABLE),
                                    stage: Stage::Committed,
                                });
                            }
                        }),
                    );
                }
                r => {
                    if let Err(e) = &r {
                        tracing::error!(stream, "cannot append to the stream log: {e}");
                    }
                    for (id, ids) in confirms {
                        wake.complete(Completion {
                            publisher_id: id,
                            ids,
                            error: r.is_err().then_some(code::INTERNAL_ERROR),
                            stage: Stage::Whole,
                        });
                    }
                }
            }),
        });
    }

    /// One chunk of several publishers' entries on one stream, in the
    /// order they came (`parts`), each publisher confirmed as if the
    /// chunk were its own. On a replica's node, a deleted stream, or
    /// when every entry is a duplicate, each part goes as a chunk of its
    /// own ([`Conn::write_chunk`] knows those cases).
    fn write_parts(&mut self, parts: Parts) {
        let (log, stream) = match self.publishers.get(&parts[0].0) {
            Some(p) => (p.log.clone(), p.stream.clone()),
            None => return,
        };
        let local = matches!(log.role(), StreamRole::Leader { .. } | StreamRole::Alone);
        let all_duplicates = parts.iter().all(|(id, pending)| {
            self.publishers.get(id).is_some_and(|p| match &p.reference {
                Some(r) => {
                    let last = p.last_stored.max(p.log.sequence(r));
                    pending.iter().all(|e| last.is_some_and(|l| e.publishing_id <= l))
                }
                None => false,
            })
        });
        if !local || log.is_deleted() || all_duplicates {
            for (id, pending) in parts {
                self.write_chunk(id, pending);
            }
            return;
        }
        let mut messages = Vec::new();
        let mut sequences = Vec::new();
        let mut confirms = Vec::with_capacity(parts.len());
        for (id, pending) in parts {
            let Some(p) = self.publishers.get_mut(&id) else {
                continue;
            };
            let (ids, last) = p.keep_new(pending, &mut messages);
            if let (Some(r), Some(l)) = (&p.reference, last) {
                sequences.push((r.clone(), l));
            }
            // The next batch deduplicates against what this one stores.
            p.last_stored = last;
            p.in_flight += 1;
            self.outstanding += 1;
            confirms.push((id, ids));
        }
        self.submit_chunk(log, stream, messages, sequences, confirms);
    }

    /// Write the confirms (or errors) of chunks the writer finished.
    pub(super) fn write_completions(&mut self) {
        for c in self.wake.take_completions() {
            if c.stage == Stage::Committed {
                self.uncommitted = self.uncommitted.saturating_sub(1);
            } else {
                self.outstanding = self.outstanding.saturating_sub(1);
                if let Some(p) = self.publishers.get_mut(&c.publisher_id) {
                    p.in_flight = p.in_flight.saturating_sub(1);
                }
            }
            if c.stage == Stage::Written {
                self.uncommitted += 1;
                continue;
            }
            match c.error {
                None => {
                    self.ctx.broker.messages.add(Stat::Confirm, c.ids.len() as u64);
                    write_confirm(&mut self.wbuf, c.publisher_id, &c.ids)
                }
                Some(code) => {
                    // What this publisher last stored may not be stored:
                    // the next deduplication asks the log again.
                    if let Some(p) = self.publishers.get_mut(&c.publisher_id) {
                        p.last_stored = None;
                    }
                    Command::PublishError {
                        publisher_id: c.publisher_id,
                        errors: c.ids.into_iter().map(|i| (i, code)).collect(),
                    }
                    .encode(&mut self.wbuf)
                }
            }
        }
    }
}

/// A PublishConfirm frame without building a `Command`.
fn write_confirm(out: &mut BytesMut, publisher_id: u8, ids: &[u64]) {
    let at = warren_stream::command::begin_frame(out);
    out.put_u16(key::PUBLISH_CONFIRM);
    out.put_u16(1);
    out.put_u8(publisher_id);
    out.put_i32(ids.len() as i32);
    for id in ids {
        out.put_u64(*id);
    }
    warren_stream::command::end_frame(out, at);
}
