//! Receiving links (a client consuming): attach as a consumer whose link
//! credit the queue counts, flows (credit, drain, echo), dispositions,
//! turning the outbox into transfers within the session window, and
//! giving unsettled deliveries back when a link or the connection goes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::messaging::{self, Outcome};
use warren_amqp10::performative::{AmqpError, Attach, Disposition, Flow, Performative, Role, Transfer};
use warren_amqp10::Value;
use warren_core::message::Message;
use warren_core::queue::{ConsumerSpec, Effects, Entry, LinkCredit, Queue, Settle};
use warren_core::{Access, Resource};

use super::{Conn, Failure, Receiver, Unsettled};
use crate::{address, convert, source_filter};
use warren_node::outbox::OutItem;

/// The link-state property telling a single-active-consumer receiver
/// whether it is the active one (RabbitMQ 4.3).
const ACTIVE: &str = "rabbitmq:active";

impl Conn {
    /// The connection is gone: every receiving link's consumer goes, and
    /// what it had not settled goes back to its queue.
    pub(super) fn teardown(&mut self) {
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for ch in channels {
            self.close_session(ch);
        }
        // Deliveries that raced with the close go back too.
        self.consumers.clear();
        self.drain_outbox();
        if let Some(vh) = self.vhost.clone() {
            for q in self.exclusive.drain(..) {
                vh.discard_queue(&q);
            }
        }
    }

    /// A client's receiving link: a consumer on the source queue, with
    /// credit the queue counts.
    pub(super) fn attach_receiver(&mut self, channel: u16, a: Attach) {
        let (Some(vh), Some(grant)) = (self.vhost.clone(), self.grant.clone()) else {
            return;
        };
        let out = self.sessions.get(&channel).map_or(channel, |s| s.outgoing);
        let address = a.source.as_ref().and_then(messaging::address);
        let queue = address::source(address.as_deref())
            .map_err(|e| AmqpError::new("amqp:invalid-field", e.to_string()))
            .and_then(|q| {
                // Consuming needs read on the queue.
                grant
                    .check(Access::Read, Resource::Queue, &q)
                    .map_err(|e| AmqpError::new("amqp:unauthorized-access", e.to_string()))?;
                vh.queue(q.as_bytes(), self.id)
                    .map_err(|e| AmqpError::new("amqp:not-found", e.to_string()))
            });
        let queue = match queue {
            Ok(q) => q,
            Err(e) => {
                self.send(
                    out,
                    &Performative::Attach(Attach {
                        name: a.name,
                        handle: a.handle,
                        role: Role::Sender,
                        target: a.target,
                        initial_delivery_count: Some(0),
                        ..Default::default()
                    }),
                );
                self.detach_link(channel, a.handle, Some(e));
                return;
            }
        };
        let settled = a.snd_settle_mode == Some(1);
        let filters = source_filter::read(a.source.as_ref());
        let consumer_id = self.ctx.broker.next_id();
        let credit = Arc::new(LinkCredit::new(0));
        let spec = ConsumerSpec {
            id: consumer_id,
            connection_id: self.id,
            channel,
            tag: a.handle.to_string().into(),
            no_ack: settled,
            exclusive: false,
            prefetch: 0,
            priority: 0,
            sink: self.outbox.clone(),
            channel_limit: None,
            link_credit: Some(credit.clone()),
            arguments: filters.arguments,
            record_filter: filters.expressions,
        };
        let source = filters.source;
        self.accept_receiving_link(
            out,
            Attach {
                properties: None,
                source,
                ..a
            },
            u8::from(settled),
        );
        match queue.consume(spec) {
            Ok(effects) => {
                vh.apply(&queue, effects, &mut |q| self.ctx.timers.arm(&vh, q));
                self.consumers.insert(consumer_id, (channel, a.handle));
                if let Some(s) = self.sessions.get_mut(&channel) {
                    s.receivers.insert(
                        a.handle,
                        Receiver {
                            queue,
                            consumer_id,
                            credit,
                        },
                    );
                }
            }
            Err(e) => {
                let e = AmqpError::new("amqp:resource-locked", e.to_string());
                self.detach_link(channel, a.handle, Some(e));
            }
        }
    }

    /// A receiving link went away: cancel its consumer and give back what
    /// it had not settled, and what was waiting for the session window
    /// (§2.6.12: detach requeues unsettled deliveries).
    pub(super) fn stop_receiver(&mut self, channel: u16, handle: u32) {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let Some(r) = s.receivers.remove(&handle) else {
            return;
        };
        let mut entries = Vec::new();
        s.held.retain(|d| {
            if d.consumer_id != r.consumer_id {
                return true;
            }
            // A pre-settled delivery the queue has already let go of is
            // lost with the link, as in RabbitMQ.
            if !d.no_ack {
                entries.push(d.entry.clone());
            }
            false
        });
        let ids: Vec<u32> = s
            .unsettled
            .iter()
            .filter(|(_, u)| u.handle == handle)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(u) = s.unsettled.remove(&id) {
                entries.push(u.entry);
            }
        }
        let (_, effects) = r.queue.cancel(r.consumer_id);
        self.apply(&r.queue, effects);
        self.consumers.remove(&r.consumer_id);
        if !entries.is_empty() {
            entries.sort_by_key(|e| e.seq);
            let effects = r.queue.settle(Some(r.consumer_id), entries, Settle::Requeue);
            self.apply(&r.queue, effects);
        }
    }

    pub(super) fn apply(&self, queue: &Arc<Queue>, effects: Effects) {
        if let Some(vh) = self.vhost.as_ref() {
            vh.apply(queue, effects, &mut |q| self.ctx.timers.arm(vh, q));
        }
    }

    /// A flow from the client: its session window, and for a receiving
    /// link new credit (counted against the queue's delivery-count),
    /// drain and echo (§2.7.4).
    pub(super) fn flow(&mut self, channel: u16, f: Flow) -> Result<(), Failure> {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        // §2.5.6: remote-incoming-window = next-incoming-id + incoming-window - next-outgoing-id.
        // A null next-incoming-id means the peer has seen none of our
        // transfers yet: it counts from our initial next-outgoing-id, 0.
        // The ids are serial numbers: next-incoming-id is at most a little
        // behind ours (transfers in flight), so their difference is small.
        let next_in = f.next_incoming_id.unwrap_or(0);
        let behind = next_in.wrapping_sub(s.next_outgoing_id) as i32 as i64;
        s.remote_incoming_window = (f.incoming_window as i64 + behind).clamp(0, u32::MAX as i64) as u32;
        let Some(h) = f.handle else {
            self.send_held(channel);
            self.send_responses(channel);
            return Ok(());
        };
        if s.responders.contains_key(&h) {
            self.responder_flow(channel, h, &f);
            return Ok(());
        }
        if s.reply_links.contains_key(&h) {
            self.reply_flow(channel, h, &f);
            return Ok(());
        }
        if let Some(r) = s.receivers.get_mut(&h) {
            r.credit.flow(f.delivery_count, f.link_credit.unwrap_or(0));
            let (q, consumer_id) = (r.queue.clone(), r.consumer_id);
            let effects = q.pump();
            self.apply(&q, effects);
            // A queue on another node: its home delivers what it has
            // first, and the drain is answered when it says it is done
            // (`OutItem::Drained`). Otherwise the pump above did it all.
            if f.drain && q.drain(consumer_id) {
                return Ok(());
            }
            if f.drain || f.echo {
                self.link_replies.push((channel, h, f.drain));
            }
        } else if !s.publishers.contains_key(&h) && !s.detached.contains(&h) {
            return Err(Failure::Session(AmqpError::new(
                "amqp:session:unattached-handle",
                format!("flow for handle {h} which is not attached"),
            )));
        }
        Ok(())
    }

    /// A disposition from the client (as receiver): settle deliveries
    /// first..=last with their queues (§3.4): accepted acks, rejected
    /// dead-letters (or drops), released requeues, modified requeues or,
    /// with undeliverable-here, dead-letters as RabbitMQ does; its
    /// delivery-failed counts an attempt and its message-annotations are
    /// merged into the message. An outcome the client left unsettled is
    /// settled by us (receiver settle mode first).
    pub(super) fn disposition(&mut self, channel: u16, d: Disposition) {
        if d.role != Role::Receiver {
            return; // our publishing links settle on receipt
        }
        let last = d.last.unwrap_or(d.first);
        let state = d.state.as_ref();
        let mut modify = Modify::default();
        let how = match state.and_then(messaging::outcome) {
            Some(Outcome::Accepted) => Settle::Ack,
            Some(Outcome::Rejected) => Settle::Discard,
            Some(Outcome::Released) => Settle::Requeue,
            Some(Outcome::Modified) => {
                modify = Modify::from_state(state);
                if modify.undeliverable_here {
                    Settle::Discard
                } else {
                    Settle::Requeue
                }
            }
            // No terminal outcome: settling applies the source's default
            // outcome (released); unsettled, nothing is decided yet.
            Some(Outcome::Received) | None if d.settled => Settle::Requeue,
            Some(Outcome::Received) | None => return,
        };
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let ids: Vec<u32> = if d.first <= last {
            s.unsettled.range(d.first..=last).map(|(&id, _)| id).collect()
        } else {
            // The range wraps (serial numbers, §2.8.10).
            s.unsettled
                .range(d.first..)
                .chain(s.unsettled.range(..=last))
                .map(|(&id, _)| id)
                .collect()
        };
        let mut groups: Vec<(Arc<Queue>, u64, Vec<Entry>)> = Vec::new();
        for id in ids {
            let Some(u) = s.unsettled.remove(&id) else {
                continue;
            };
            let mut entry = u.entry;
            modify.apply(&u.queue, &mut entry);
            match groups
                .iter_mut()
                .find(|g| Arc::ptr_eq(&g.0, &u.queue) && g.1 == u.consumer_id)
            {
                Some(g) => g.2.push(entry),
                None => groups.push((u.queue, u.consumer_id, vec![entry])),
            }
        }
        let out = s.outgoing;
        for (q, consumer, entries) in groups {
            let effects = q.settle(Some(consumer), entries, how);
            self.apply(&q, effects);
        }
        if !d.settled {
            self.send(
                out,
                &Performative::Disposition(Disposition {
                    role: Role::Sender,
                    first: d.first,
                    last: d.last,
                    settled: true,
                    state: d.state,
                    batchable: false,
                }),
            );
        }
    }

    /// Turn what queues left in the outbox into transfers (within the
    /// peer's session window), then answer drains.
    pub(super) fn drain_outbox(&mut self) {
        let (items, waiting) = self.outbox.drain();
        for item in items {
            if let OutItem::Reply {
                channel,
                consumer_tag,
                message,
            } = item
            {
                self.send_reply(channel, &consumer_tag.to_str_lossy(), message);
                continue;
            }
            if let OutItem::Activity { consumer_id, active } = item {
                // Before the deliveries that follow it (RabbitMQ tells a
                // newly active consumer before its first message).
                if let Some(&(channel, handle)) = self.consumers.get(&consumer_id) {
                    self.send_activity(channel, handle, active);
                }
                continue;
            }
            if let OutItem::Drained { consumer_id } = item {
                if let Some(&(channel, handle)) = self.consumers.get(&consumer_id) {
                    self.link_replies.push((channel, handle, true));
                }
                continue;
            }
            if let OutItem::Deliver(d) = item {
                let Some(&(channel, _)) = self.consumers.get(&d.consumer_id) else {
                    // The link went away first: give it back.
                    if !d.no_ack {
                        let effects = d
                            .queue
                            .settle(Some(d.consumer_id), vec![d.entry], Settle::Requeue);
                        self.apply(&d.queue, effects);
                    }
                    continue;
                };
                if let Some(s) = self.sessions.get_mut(&channel) {
                    s.held.push_back(d);
                }
            }
        }
        for w in waiting {
            if let Some(q) = w.upgrade() {
                let effects = q.pump();
                self.apply(&q, effects);
            }
        }
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for ch in channels {
            self.send_held(ch);
            self.send_responses(ch);
        }
        // Drain and echo are answered after the deliveries already
        // counted against the credit have gone out as transfers.
        for (ch, h, drain) in std::mem::take(&mut self.link_replies) {
            let Some(r) = self.sessions.get(&ch).and_then(|s| s.receivers.get(&h)) else {
                continue;
            };
            let (delivery_count, credit) = if drain {
                (r.credit.drain(), 0)
            } else {
                r.credit.get()
            };
            // §2.7.4 available: what the queue holds ready for the link.
            let available = r.queue.stats().ready.min(u32::MAX as u64) as u32;
            self.send_flow_link(ch, h, delivery_count, credit, drain, available);
        }
    }

    /// Tell a receiving link of a single-active-consumer quorum queue
    /// whether it is the active one: a flow carrying the link's state
    /// with `properties` {`rabbitmq:active`: bool} (RabbitMQ 4.3). Its
    /// delivery-count may count deliveries still to be written; with the
    /// credit it gives the same limit the receiver granted.
    fn send_activity(&mut self, ch: u16, handle: u32, active: bool) {
        let Some(r) = self.sessions.get(&ch).and_then(|s| s.receivers.get(&handle)) else {
            return;
        };
        let (delivery_count, credit) = r.credit.get();
        let available = if active {
            r.queue.stats().ready.min(u32::MAX as u64) as u32
        } else {
            0
        };
        let properties = Value::Map(vec![(Value::symbol(ACTIVE), Value::Bool(active))]);
        self.send_link_flow(
            ch,
            Flow {
                handle: Some(handle),
                delivery_count: Some(delivery_count),
                link_credit: Some(credit),
                available: Some(available),
                properties: Some(properties),
                ..Default::default()
            },
        );
    }

    /// Send held deliveries as transfers while the peer's window allows.
    pub(super) fn send_held(&mut self, ch: u16) {
        let max_frame = self.peer_max_frame as usize;
        loop {
            let Some(s) = self.sessions.get_mut(&ch) else {
                return;
            };
            if s.remote_incoming_window == 0 {
                return;
            }
            let Some(d) = s.held.pop_front() else { return };
            let Some(&(_, handle)) = self.consumers.get(&d.consumer_id) else {
                continue;
            };
            let mut payload = BytesMut::new();
            let m = &d.entry.message;
            let info = convert::DeliveryInfo {
                exchange: &m.exchange.to_str_lossy(),
                routing_key: &m.routing_key.to_str_lossy(),
                redelivered: d.entry.redelivered,
                delivery_count: d.entry.delivery_count,
            };
            convert::to_amqp10(&m.raw_properties, &m.body, info, &mut payload);
            let id = s.next_delivery_id;
            s.next_delivery_id = s.next_delivery_id.wrapping_add(1);
            let out = s.outgoing;
            let frames = write_transfer(&mut self.wbuf, out, max_frame, handle, id, d.no_ack, &payload);
            if let Some(s) = self.sessions.get_mut(&ch) {
                s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames);
                s.remote_incoming_window = s.remote_incoming_window.saturating_sub(frames);
            }
            if !d.no_ack {
                if let Some(s) = self.sessions.get_mut(&ch) {
                    s.unsettled.insert(
                        id,
                        Unsettled {
                            handle,
                            queue: d.queue,
                            consumer_id: d.consumer_id,
                            entry: d.entry,
                        },
                    );
                }
            }
        }
    }

    pub(super) fn send_flow_link(
        &mut self,
        ch: u16,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
        available: u32,
    ) {
        self.send_link_flow(
            ch,
            Flow {
                handle: Some(handle),
                delivery_count: Some(delivery_count),
                link_credit: Some(credit),
                available: Some(available),
                drain,
                ..Default::default()
            },
        );
    }

    /// Send `f` (a link's fields) with the session's fields filled in.
    fn send_link_flow(&mut self, ch: u16, mut f: Flow) {
        let Some(s) = self.sessions.get(&ch) else { return };
        f.next_incoming_id = Some(s.next_incoming_id);
        f.incoming_window = if self.blocked { 0 } else { s.incoming_window };
        f.next_outgoing_id = s.next_outgoing_id;
        f.outgoing_window = 65_535;
        let out = s.outgoing;
        self.send(out, &Performative::Flow(f));
    }
}

/// The modified outcome's fields (§3.4.5).
#[derive(Debug, Default)]
struct Modify {
    delivery_failed: bool,
    undeliverable_here: bool,
    annotations: Option<Value>,
}

impl Modify {
    fn from_state(state: Option<&Value>) -> Modify {
        let Some((_, Value::List(f))) = state.and_then(Value::as_described) else {
            return Modify::default();
        };
        Modify {
            delivery_failed: matches!(f.first(), Some(Value::Bool(true))),
            undeliverable_here: matches!(f.get(1), Some(Value::Bool(true))),
            annotations: f.get(2).filter(|v| !v.is_null()).cloned(),
        }
    }

    /// Count the failed attempt and merge the annotations into the
    /// message (a new copy; the queue's memory gauge follows the size).
    fn apply(&self, queue: &Queue, entry: &mut Entry) {
        if self.delivery_failed {
            entry.delivery_count = entry.delivery_count.saturating_add(1);
        }
        let Some(a) = &self.annotations else { return };
        let old = &entry.message;
        let Some(raw) = convert::merge_annotations(&old.raw_properties, a) else {
            return;
        };
        let mut m = Message::clone(old);
        m.raw_properties = raw;
        queue.memory.sub(old.memory_size());
        queue.memory.add(m.memory_size());
        entry.message = Arc::new(m);
        entry.annotated = true;
    }
}

/// Write one delivery as transfer frames that fit the peer's max-frame-size
/// (§2.6.14: `more` on all but the last; delivery-id, tag, format and
/// settled on the first). Returns how many frames (transfer-ids) it took.
pub(super) fn write_transfer(
    wbuf: &mut BytesMut,
    channel: u16,
    max_frame: usize,
    handle: u32,
    delivery_id: u32,
    settled: bool,
    payload: &[u8],
) -> u32 {
    // Room for the frame header and the transfer performative.
    let chunk = max_frame.saturating_sub(128).max(256);
    let frames = payload.len().div_ceil(chunk).max(1);
    let mut parts = payload.chunks(chunk);
    for k in 0..frames {
        let first = k == 0;
        let t = Performative::Transfer(Transfer {
            handle,
            delivery_id: first.then_some(delivery_id),
            delivery_tag: first.then(|| Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
            message_format: first.then_some(0),
            settled: first.then_some(settled),
            more: k + 1 < frames,
            ..Default::default()
        });
        let mut body = BytesMut::new();
        t.encode(&mut body);
        write_frame(
            wbuf,
            FrameType::Amqp,
            channel,
            &[&body, parts.next().unwrap_or(&[])],
        );
    }
    frames as u32
}
