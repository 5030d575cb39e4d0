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
use warren_core::queue::StreamWaiter;
use warren_log::bloom::Matcher;
use warren_log::{Reader, Start};
use warren_stream::command::{begin_frame, end_frame, key, Command, OffsetSpec};

use crate::conn::{Conn, Stop, WRITE_HIGH};
use crate::subscription::Subscription;
use warren_stream::command::code;

/// How many subscriptions a connection may hold (ids 0-255).
pub const MAX_SUBSCRIPTIONS: usize = 256;

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
        let sac = properties
            .iter()
            .any(|(k, v)| k == "single-active-consumer" && v == "true");
        let name = properties
            .iter()
            .find(|(k, _)| k == "name")
            .map(|(_, v)| v.clone());
        if sac && name.as_ref().is_none_or(|n| n.is_empty() || n.len() > 255) {
            // A group is named by its consumers' name.
            return self.respond(key::SUBSCRIBE, correlation_id, code::PRECONDITION_FAILED);
        }
        let filter = matcher(properties);
        let epoch = log.role().epoch();
        let reader = if sac {
            None
        } else {
            match Reader::new(log.view(), start_of(offset), filter.clone()) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!(stream, "cannot read the stream log: {e}");
                    return self.respond(key::SUBSCRIBE, correlation_id, code::INTERNAL_ERROR);
                }
            }
        };
        let group = sac.then(|| {
            (
                self.vhost().name.clone(),
                stream.to_string(),
                name.unwrap_or_default(),
            )
        });
        let partition = properties
            .iter()
            .find(|(k, _)| k == "super-stream")
            .and_then(|(_, s)| self.partition_index(s, stream));
        let watcher: Arc<dyn StreamWaiter> = self.wake.clone();
        log.watch(&watcher);
        self.subscriptions.insert(
            subscription_id,
            Subscription {
                stream: stream.to_string(),
                log,
                reader,
                credit,
                at_end: false,
                offset,
                filter,
                sac: group.clone(),
                epoch,
            },
        );
        self.respond(key::SUBSCRIBE, correlation_id, code::OK);
        if let Some(g) = group {
            if self
                .shared
                .sac
                .join(g, partition, self.id, subscription_id, self.wake.clone())
            {
                self.send_consumer_update(subscription_id, true);
            }
        }
    }

    /// Tell the client subscription `id` is (in)active (ConsumerUpdate); it
    /// answers with where to read from.
    pub(super) fn send_consumer_update(&mut self, id: u8, active: bool) {
        if !self.subscriptions.contains_key(&id) {
            return;
        }
        let correlation_id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        self.consumer_updates.insert(correlation_id, (id, active));
        self.command(key::CONSUMER_UPDATE, |out| {
            out.put_u32(correlation_id);
            out.put_u8(id);
            out.put_u8(u8::from(active));
        });
    }

    /// Subscription `id` must step down: no more chunks until it is
    /// active again (it answers the ConsumerUpdate, then the coordinator
    /// activates the member it wants).
    pub(super) fn step_down(&mut self, id: u8) {
        if let Some(s) = self.subscriptions.get_mut(&id) {
            s.reader = None;
            s.at_end = false;
        }
        // An answer still due to an earlier "you are active" no longer
        // starts it.
        self.consumer_updates
            .retain(|_, (sub, active)| !(*sub == id && *active));
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
        let Some(s) = self.subscriptions.remove(&subscription_id) else {
            return false;
        };
        if let Some(g) = &s.sac {
            self.shared.sac.leave(g, self.id, subscription_id);
        }
        true
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
        self.wbuf.len() < WRITE_HIGH
            && self
                .subscriptions
                .values()
                .any(|s| s.credit > 0 && !s.at_end && s.reader.is_some())
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
            let Some(reader) = s.reader.as_mut() else {
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
                let mut got = reader.next_chunk_into(&mut self.wbuf);
                if matches!(got, Ok(None)) {
                    // Ask to be woken, then look once more (an append may
                    // have come in between).
                    s.log.wait(&waiter);
                    got = reader.next_chunk_into(&mut self.wbuf);
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
        let dead: Vec<u8> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.log.is_deleted() || s.log.role().epoch() != s.epoch)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            if let Some(s) = self.subscriptions.get(&id) {
                if !gone.contains(&s.stream) {
                    gone.push(s.stream.clone());
                }
            }
            self.remove_subscription(id);
        }
        // A new leader (a new epoch): publishers are told to look for
        // it, as RabbitMQ's are when the writer they used goes.
        let dropped: Vec<u8> = self
            .publishers
            .iter()
            .filter(|(_, p)| p.log.is_deleted() || p.log.role().epoch() != p.epoch)
            .map(|(&id, _)| id)
            .collect();
        for id in dropped {
            self.drop_pending(id);
            if let Some(p) = self.publishers.remove(&id) {
                if !gone.contains(&p.stream) {
                    gone.push(p.stream);
                }
            }
        }
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

    /// The client's answer to a ConsumerUpdate: where the now active
    /// subscription reads from (type 0: where it asked at subscribe).
    pub(super) fn consumer_update_reply(&mut self, f: bytes::Bytes) -> Result<(), Stop> {
        let mut r = warren_stream::wire::Reader::new(f);
        r.u16()?;
        r.u16()?;
        let correlation_id = r.u32()?;
        let _code = r.u16()?;
        let spec = match r.u16()? {
            0 => None,
            1 => Some(OffsetSpec::First),
            2 => Some(OffsetSpec::Last),
            3 => Some(OffsetSpec::Next),
            4 => Some(OffsetSpec::Offset(r.u64()?)),
            5 => Some(OffsetSpec::Timestamp(r.i64()?)),
            t => return Err(Stop::Close(code::PRECONDITION_FAILED, format!("offset type {t}"))),
        };
        let Some((id, active)) = self.consumer_updates.remove(&correlation_id) else {
            return Ok(());
        };
        let Some(s) = self.subscriptions.get_mut(&id) else {
            return Ok(());
        };
        if !active {
            // It stepped down; its offset answer means nothing.
            if let Some(g) = s.sac.clone() {
                self.shared.sac.stepped_down(&g, self.id, id);
            }
            return Ok(());
        }
        let start = start_of(spec.unwrap_or(s.offset));
        match Reader::new(s.log.view(), start, s.filter.clone()) {
            Ok(reader) => {
                s.reader = Some(reader);
                s.at_end = false;
            }
            Err(e) => tracing::error!(stream = %s.stream, "cannot read the stream log: {e}"),
        }
        Ok(())
    }
}
