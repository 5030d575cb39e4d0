//! Subscriptions: Subscribe / Unsubscribe / Credit, and delivering chunks.
//! A subscription reads its stream's log from where its offset spec says
//! and sends each user chunk as one Deliver frame, header and data as
//! stored, one credit per chunk (the protocol counts credit in chunks).
//! At the end of the log it asks the stream to wake the connection when
//! it grows. Chunks are read only while less than `WRITE_HIGH` waits to
//! be written, so a slow consumer slows its own deliveries and nothing
//! piles up in memory.

use std::sync::Arc;

use bytes::BufMut;
use warren_core::queue::{StreamLog, StreamWaiter};
use warren_log::bloom::Matcher;
use warren_log::{Reader, Start};
use warren_stream::command::{begin_frame, end_frame, key, Command, OffsetSpec};

use super::code;
use super::connection::{Conn, Stop, WRITE_HIGH};

/// How many subscriptions a connection may hold (ids 0-255).
pub const MAX_SUBSCRIPTIONS: usize = 256;

pub struct Subscription {
    pub stream: String,
    pub log: Arc<StreamLog>,
    reader: Reader,
    pub credit: u16,
    /// The reader found nothing more; a wake-up will clear it.
    at_end: bool,
}

fn start_of(spec: OffsetSpec) -> Start {
    match spec {
        OffsetSpec::First => Start::First,
        OffsetSpec::Last => Start::Last,
        OffsetSpec::Next => Start::Next,
        OffsetSpec::Offset(o) => Start::Offset(o),
        OffsetSpec::Timestamp(t) => Start::Timestamp(t),
    }
}

/// A consumer's filter from its properties: `filter.<anything>` values
/// and `match-unfiltered`.
fn matcher(properties: &[(String, String)]) -> Option<Matcher> {
    let values: Vec<Vec<u8>> = properties
        .iter()
        .filter(|(k, _)| k.starts_with("filter."))
        .map(|(_, v)| v.as_bytes().to_vec())
        .collect();
    if values.is_empty() {
        return None;
    }
    let match_unfiltered = properties
        .iter()
        .any(|(k, v)| k == "match-unfiltered" && v == "true");
    Some(Matcher {
        values,
        match_unfiltered,
    })
}

impl Conn {
    pub(super) fn subscribe(
        &mut self,
        correlation_id: u32,
        subscription_id: u8,
        stream: &str,
        offset: OffsetSpec,
        credit: u16,
        properties: &[(String, String)],
    ) {
        let log = match self.stream_log(stream) {
            Ok(l) => l,
            Err(c) => return self.respond(key::SUBSCRIBE, correlation_id, c),
        };
        if self.subscriptions.contains_key(&subscription_id) {
            return self.respond(
                key::SUBSCRIBE,
                correlation_id,
                code::SUBSCRIPTION_ID_ALREADY_EXISTS,
            );
        }
        if self.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return self.respond(key::SUBSCRIBE, correlation_id, code::PRECONDITION_FAILED);
        }
        if properties
            .iter()
            .any(|(k, v)| k == "single-active-consumer" && v == "true")
        {
            // Not yet: say so rather than pretend.
            tracing::info!(peer = %self.peer, stream, "single active consumer is not supported yet");
            return self.respond(key::SUBSCRIBE, correlation_id, code::PRECONDITION_FAILED);
        }
        let reader = match Reader::new(log.view(), start_of(offset), matcher(properties)) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(stream, "cannot read the stream log: {e}");
                return self.respond(key::SUBSCRIBE, correlation_id, code::INTERNAL_ERROR);
            }
        };
        self.subscriptions.insert(
            subscription_id,
            Subscription {
                stream: stream.to_string(),
                log,
                reader,
                credit,
                at_end: false,
            },
        );
        self.respond(key::SUBSCRIBE, correlation_id, code::OK);
    }

    pub(super) fn unsubscribe(&mut self, correlation_id: u32, subscription_id: u8) {
        let c = if self.remove_subscription(subscription_id) {
            code::OK
        } else {
            code::SUBSCRIPTION_ID_DOES_NOT_EXIST
        };
        self.respond(key::UNSUBSCRIBE, correlation_id, c);
    }

    pub(super) fn remove_subscription(&mut self, subscription_id: u8) -> bool {
        self.subscriptions.remove(&subscription_id).is_some()
    }

    pub(super) fn credit(&mut self, subscription_id: u8, credit: u16) {
        match self.subscriptions.get_mut(&subscription_id) {
            Some(s) => s.credit = s.credit.saturating_add(credit),
            None => Command::CreditError {
                code: code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                subscription_id,
            }
            .encode(&mut self.wbuf),
        }
    }

    /// Does a subscription have credit and chunks it could not send for
    /// want of write room? Then the connection goes round again at once.
    pub(super) fn wants_to_deliver(&self) -> bool {
        self.wbuf.len() < WRITE_HIGH && self.subscriptions.values().any(|s| s.credit > 0 && !s.at_end)
    }

    /// Deliver chunks while credit and write room last.
    pub(super) fn pump_subscriptions(&mut self) {
        self.drop_deleted_streams();
        let waiter: Arc<dyn StreamWaiter> = self.wake.clone();
        let ids: Vec<u8> = self.subscriptions.keys().copied().collect();
        for id in ids {
            let v2 = self.deliver_v2;
            let Some(s) = self.subscriptions.get_mut(&id) else {
                continue;
            };
            // A wake-up may mean more: look again.
            s.at_end = false;
            while s.credit > 0 && self.wbuf.len() < WRITE_HIGH {
                // The Deliver frame's head, then the chunk read straight
                // after it; undone if there is no chunk.
                let at = begin_frame(&mut self.wbuf);
                self.wbuf.put_u16(key::DELIVER);
                self.wbuf.put_u16(if v2 { 2 } else { 1 });
                self.wbuf.put_u8(id);
                let committed_at = self.wbuf.len();
                if v2 {
                    self.wbuf.put_u64(0); // the committed chunk id, below
                }
                let mut got = s.reader.next_chunk_into(&mut self.wbuf);
                if matches!(got, Ok(None)) {
                    // Ask to be woken, then look once more (an append may
                    // have come in between).
                    s.log.wait(&waiter);
                    got = s.reader.next_chunk_into(&mut self.wbuf);
                }
                match got {
                    Ok(Some(header)) => {
                        if v2 {
                            let committed = s.log.chunk_ids().map_or(header.first_offset, |c| c.1);
                            self.wbuf[committed_at..committed_at + 8]
                                .copy_from_slice(&committed.to_be_bytes());
                        }
                        end_frame(&mut self.wbuf, at);
                        s.credit -= 1;
                    }
                    Ok(None) => {
                        self.wbuf.truncate(at);
                        s.at_end = true;
                        break;
                    }
                    Err(e) => {
                        self.wbuf.truncate(at);
                        tracing::error!(stream = %s.stream, "reading the stream log: {e}");
                        s.at_end = true;
                        break;
                    }
                }
            }
        }
    }

    /// Streams deleted under this connection's publishers or subscriptions:
    /// tell the client (MetadataUpdate, stream not available) and forget them.
    pub(super) fn drop_deleted_streams(&mut self) {
        let mut gone: Vec<String> = Vec::new();
        self.subscriptions.retain(|_, s| {
            let deleted = s.log.is_deleted();
            if deleted && !gone.contains(&s.stream) {
                gone.push(s.stream.clone());
            }
            !deleted
        });
        self.publishers.retain(|_, p| {
            let deleted = p.log.is_deleted();
            if deleted && !gone.contains(&p.stream) {
                gone.push(p.stream.clone());
            }
            !deleted
        });
        for stream in gone {
            self.metadata_update(&stream);
        }
    }

    pub(super) fn metadata_update(&mut self, stream: &str) {
        self.command(key::METADATA_UPDATE, |out| {
            out.put_u16(code::STREAM_NOT_AVAILABLE);
            warren_stream::wire::put_string(out, stream);
        });
    }

    /// The client's answer to a ConsumerUpdate (single active consumer):
    /// not sent yet, so nothing to do but read it.
    pub(super) fn consumer_update_reply(&mut self, _f: bytes::Bytes) -> Result<(), Stop> {
        Ok(())
    }
}
