//! Streams as queues (x-queue-type: stream), after RabbitMQ's
//! rabbit_stream_queue: the queue is a name in the topology (so exchanges
//! route to it and super streams are bindings), its messages live in an
//! append-only log ([`warren_log`]) that reading does not consume.
//!
//! The stream protocol front end publishes and reads through
//! [`StreamLog`](super::stream_log::StreamLog) directly, chunk by chunk. Through the queue interface,
//! messages routed to a stream (AMQP 0-9-1, AMQP 1.0) are appended one
//! chunk each, encoded as AMQP 1.0 by the [`StreamCodec`](super::stream_log::StreamCodec) the server
//! provides (so stream clients read them), with the message's
//! `x-stream-filter-value` header (a 1.0 publisher's message annotation of
//! that name arrives as one) as the entry's filter value. Consumers through
//! the queue interface read from an offset spec with an optional filter.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::Bytes;
use warren_log::{Delta, Message as LogMessage};
use warren_stream::chunk::Entry as ChunkEntry;

use warren_amqp091::{BasicProperties, FieldTable, FieldValue};
use warren_log::bloom::Matcher;
use warren_log::{Reader, Start};
use warren_stream::chunk::Chunk;

use super::consumer::{Consumer, ConsumerInfo};
use super::stream_log::{now_ms, StreamCodec, StreamLog, StreamWaiter};
use super::stream_member::StreamRole;
use super::{
    Answer, ConsumerSpec, Ctx, DeliverySink, Entry, FlowWaiter, PublishOutcome, QueueStats, QueueType, Settle,
};
use super::{RemoteConfirm, Ticket};
use crate::error::BrokerError;
use crate::message::Message;

/// Wakes a consumer's connection when the stream grows: it then pumps the
/// queue, as it does when its outbox has room again.
struct SinkWake {
    sink: Arc<dyn DeliverySink>,
    queue: Weak<super::Queue>,
}

impl StreamWaiter for SinkWake {
    fn grown(&self) {
        self.sink.wait_for_room(self.queue.clone());
    }
}

/// A queue-interface consumer of a stream: its reader and the records of
/// the chunk it is in.
struct StreamConsumer {
    c: Consumer,
    reader: Reader,
    /// (offset, AMQP 1.0 message) not delivered yet.
    buffered: VecDeque<(u64, Bytes)>,
    /// Records below this offset are skipped (an offset spec starts at the
    /// chunk holding it).
    skip_below: u64,
    wake: Arc<dyn StreamWaiter>,
}

impl std::fmt::Debug for StreamConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamConsumer")
            .field("id", &self.c.spec.id)
            .finish()
    }
}

/// Where a consumer starts (x-stream-offset: first, last, next, an
/// offset, a timestamp, or an interval back from now such as "30m").
fn start_of(args: &FieldTable) -> Result<(Start, u64), String> {
    let Some(v) = args.get("x-stream-offset") else {
        return Ok((Start::Next, 0));
    };
    if let Some(n) = v.as_i64() {
        let n = n.max(0) as u64;
        return Ok((Start::Offset(n), n));
    }
    match v {
        FieldValue::Timestamp(secs) => Ok((Start::Timestamp(*secs as i64 * 1000), 0)),
        FieldValue::LongStr(b) => match &b[..] {
            b"first" => Ok((Start::First, 0)),
            b"last" => Ok((Start::Last, 0)),
            b"next" => Ok((Start::Next, 0)),
            other => {
                let text = String::from_utf8_lossy(other);
                let ms = super::args::parse_max_age(&text)
                    .ok_or_else(|| format!("invalid x-stream-offset '{text}'"))?;
                Ok((Start::Timestamp(now_ms() - ms as i64), 0))
            }
        },
        other => Err(format!("invalid x-stream-offset of type {}", other.type_name())),
    }
}

/// The filter value a routed message carries: its `x-stream-filter-value`
/// header when that is a non-empty string (RabbitMQ's stream filtering
/// guide; an AMQP 1.0 publisher's message annotation of that name became
/// this header at publish). Headers are decoded only when present.
fn filter_value(m: &Message) -> Option<Bytes> {
    let hints = warren_amqp091::properties::RoutingHints::scan(&m.raw_properties).ok()?;
    if !hints.has_headers {
        return None;
    }
    let headers = m.headers()?;
    match headers.get("x-stream-filter-value")? {
        FieldValue::LongStr(b) | FieldValue::Bytes(b) if !b.is_empty() => Some(b.clone()),
        _ => None,
    }
}

/// A consumer's filter (x-stream-filter: a string or an array of them;
/// x-stream-match-unfiltered).
fn matcher_of(args: &FieldTable) -> Option<Matcher> {
    let values: Vec<Vec<u8>> = match args.get("x-stream-filter") {
        Some(FieldValue::LongStr(b)) => vec![b.to_vec()],
        Some(FieldValue::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_bytes().map(|b| b.to_vec()))
            .collect(),
        _ => return None,
    };
    let match_unfiltered = args
        .get("x-stream-match-unfiltered")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    Some(Matcher {
        values,
        match_unfiltered,
    })
}

/// A chunk's records as (offset, message bytes): simple entries as they
/// are, sub-batches opened (their records are `u32 length, message`).
/// A compressed sub-batch this build cannot open is skipped, with a log.
fn records(chunk: &Bytes) -> Vec<(u64, Bytes)> {
    let Ok(parsed) = Chunk::parse(chunk, false) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(parsed.header.num_records as usize);
    let mut offset = parsed.header.first_offset;
    for e in parsed.entries {
        match e {
            ChunkEntry::Simple(b) => {
                out.push((offset, b));
                offset += 1;
            }
            ChunkEntry::SubBatch {
                compression,
                records,
                body,
                ..
            } => {
                let Some(plain) = warren_stream::compression::decompress(compression, &body) else {
                    tracing::warn!("skipping a sub-batch compressed with codec {compression}");
                    offset += records as u64;
                    continue;
                };
                let mut rest = &plain[..];
                for _ in 0..records {
                    if rest.len() < 4 {
                        break;
                    }
                    let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    if rest.len() < 4 + n {
                        break;
                    }
                    out.push((offset, Bytes::copy_from_slice(&rest[4..4 + n])));
                    rest = &rest[4 + n..];
                    offset += 1;
                }
                // Whatever the batch claimed, its records took these offsets.
                offset = offset.max(out.last().map_or(offset, |l| l.0 + 1));
            }
        }
    }
    out
}

/// The queue-interface side of a stream.
#[derive(Debug)]
pub struct StreamQueue {
    log: Arc<StreamLog>,
    codec: Option<StreamCodec>,
    /// A replica hands publishes to its leader's node through this.
    cluster: crate::replication::ReplicationSlot,
    last_used: Instant,
    consumers: Vec<StreamConsumer>,
}

impl StreamQueue {
    pub fn new(
        log: Arc<StreamLog>,
        codec: Option<StreamCodec>,
        cluster: crate::replication::ReplicationSlot,
    ) -> StreamQueue {
        StreamQueue {
            log,
            codec,
            cluster,
            last_used: Instant::now(),
            consumers: Vec::new(),
        }
    }

    /// The next message for consumer `i`, or None at the end of the log
    /// (then the consumer's connection is woken when it grows).
    fn next_message(&mut self, i: usize) -> Option<(u64, Bytes)> {
        let sc = &mut self.consumers[i];
        loop {
            if let Some(m) = sc.buffered.pop_front() {
                if m.0 < sc.skip_below {
                    continue;
                }
                return Some(m);
            }
            let chunk = match sc.reader.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => {
                    self.log.wait(&sc.wake);
                    // An append may have come in between.
                    match sc.reader.next_chunk() {
                        Ok(Some(c)) => c,
                        _ => return None,
                    }
                }
                Err(e) => {
                    tracing::error!("stream '{}': reading for a consumer: {e}", self.log.name);
                    return None;
                }
            };
            sc.buffered.extend(records(&chunk.bytes));
        }
    }
}

impl QueueType for StreamQueue {
    fn publish(&mut self, ctx: &mut Ctx, msg: super::MessageRef) -> PublishOutcome {
        let Some(codec) = self.codec else {
            return PublishOutcome::Rejected;
        };
        let leader = match self.log.role() {
            StreamRole::Alone => false,
            StreamRole::Leader { .. } => true,
            // Only the leader writes (osiris's writer): a replica's node
            // hands the publish to it, and confirms when it does.
            StreamRole::Replica { leader, .. } => {
                let (Some(home), Some(c)) = (leader, self.cluster.get()) else {
                    return PublishOutcome::Rejected;
                };
                return match c.publish(ctx.queue, &home, &msg) {
                    Some(p) => {
                        ctx.effects.sync = Some(Ticket::Remote(p.confirm));
                        ctx.effects.flow = p.flow;
                        PublishOutcome::Enqueued
                    }
                    None => PublishOutcome::Rejected,
                };
            }
        };
        let m = LogMessage {
            entry: ChunkEntry::Simple((codec.encode)(&msg)),
            filter: filter_value(&msg),
        };
        match self.log.append(&[m], &Delta::default()) {
            Ok(at) => {
                if leader {
                    // Confirmed once a majority has the chunk.
                    let confirm = RemoteConfirm::new();
                    let c = confirm.clone();
                    self.log
                        .on_committed(at.chunk_id, Box::new(move |ok| c.resolve(ok)));
                    ctx.effects.sync = Some(Ticket::Remote(confirm));
                }
                self.pump(ctx);
                PublishOutcome::Enqueued
            }
            Err(e) => {
                tracing::error!("stream '{}': cannot append: {e}", self.log.name);
                PublishOutcome::Rejected
            }
        }
    }

    fn consume(&mut self, ctx: &mut Ctx, spec: ConsumerSpec) -> Result<(), BrokerError> {
        if self.codec.is_none() {
            return Err(BrokerError::NotImplemented("no codec for stream messages".into()));
        }
        let limited = spec.prefetch > 0
            || spec.link_credit.is_some()
            || spec
                .channel_limit
                .as_ref()
                .is_some_and(|l| l.limit.load(std::sync::atomic::Ordering::Relaxed) > 0);
        if spec.no_ack || !limited {
            return Err(BrokerError::PreconditionFailed(format!(
                "stream queue '{}' in vhost '{}' needs a consumer prefetch (basic.qos) and manual acknowledgements",
                self.log.name, self.log.vhost
            )));
        }
        let (start, skip_below) = start_of(&spec.arguments).map_err(BrokerError::PreconditionFailed)?;
        let reader = Reader::new(self.log.view(), start, matcher_of(&spec.arguments))
            .map_err(|e| BrokerError::Internal(e.to_string()))?;
        let wake: Arc<dyn StreamWaiter> = Arc::new(SinkWake {
            sink: spec.sink.clone(),
            queue: Arc::downgrade(ctx.queue),
        });
        self.consumers.push(StreamConsumer {
            c: Consumer { spec, unacked: 0 },
            reader,
            buffered: VecDeque::new(),
            skip_below,
            wake,
        });
        self.pump(ctx);
        Ok(())
    }

    fn cancel(&mut self, _ctx: &mut Ctx, consumer_id: u64) -> bool {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.c.spec.id != consumer_id);
        self.consumers.len() != before
    }

    /// Acks, nacks and rejects alike give the credit back: reading a stream
    /// takes nothing from it.
    fn settle(&mut self, ctx: &mut Ctx, consumer_id: Option<u64>, entries: Vec<Entry>, _how: Settle) {
        let n = entries.len() as u32;
        if let Some(sc) = self
            .consumers
            .iter_mut()
            .find(|c| Some(c.c.spec.id) == consumer_id)
        {
            sc.c.unacked = sc.c.unacked.saturating_sub(n);
            if let Some(l) = &sc.c.spec.channel_limit {
                l.released(n);
            }
        }
        self.pump(ctx);
    }

    fn get(&mut self, _ctx: &mut Ctx, _no_ack: bool) -> Answer<Option<(Entry, u64)>> {
        Answer::Now(None)
    }

    fn pump(&mut self, ctx: &mut Ctx) {
        let Some(codec) = self.codec else { return };
        for i in 0..self.consumers.len() {
            loop {
                let c = &self.consumers[i].c;
                if !c.has_credit() {
                    break;
                }
                if !c.spec.sink.has_room() {
                    c.spec.sink.wait_for_room(Arc::downgrade(ctx.queue));
                    break;
                }
                let Some((offset, bytes)) = self.next_message(i) else {
                    break;
                };
                // AMQP 1.0 filter expressions: after the bloom filter's
                // chunks, each message (RabbitMQ's second stage).
                if let Some(f) = &self.consumers[i].c.spec.record_filter {
                    if !f.matches(&bytes) {
                        continue;
                    }
                }
                let Some(message) = (codec.decode)(&bytes).map(|m| with_offset(m, offset)) else {
                    continue;
                };
                // Stream consumers always acknowledge (checked at consume).
                self.consumers[i].c.hand_over(
                    ctx.queue,
                    Entry {
                        seq: offset,
                        message: Arc::new(message),
                        redelivered: false,
                        delivery_count: 0,
                        expires_at: None,
                        stored: false,
                        annotated: false,
                    },
                );
            }
        }
    }

    fn purge(&mut self, _ctx: &mut Ctx) -> Answer<u64> {
        Answer::Now(0)
    }

    fn expire(&mut self, _ctx: &mut Ctx) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn delete(&mut self, _ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        self.log.remove();
        self.consumers.drain(..).map(|c| c.c.spec).collect()
    }

    fn stats(&self) -> QueueStats {
        let (first, next, _) = self.log.extent();
        QueueStats {
            ready: next.saturating_sub(first),
            unacked: self.consumers.iter().map(|c| c.c.unacked as u64).sum(),
            consumers: self.consumers.len() as u32,
            // A stream's messages are in its log on disk, none in queues'
            // memory.
            ..Default::default()
        }
    }

    fn consumers(&self) -> Vec<ConsumerInfo> {
        self.consumers.iter().map(|c| c.c.info()).collect()
    }

    fn wait_for_drain(&mut self, _waiter: Arc<dyn FlowWaiter>) -> bool {
        false
    }

    fn idle_since(&self) -> Option<Instant> {
        self.consumers.is_empty().then_some(self.last_used)
    }

    fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }
}

/// The message with its stream offset in the `x-stream-offset` header, as
/// RabbitMQ delivers stream messages over AMQP 0-9-1.
fn with_offset(mut m: Message, offset: u64) -> Message {
    let Ok(mut p) = BasicProperties::decode(m.raw_properties.clone()) else {
        return m;
    };
    p.headers
        .get_or_insert_with(FieldTable::new)
        .insert("x-stream-offset", FieldValue::I64(offset as i64));
    m.raw_properties = p.to_bytes();
    m
}
