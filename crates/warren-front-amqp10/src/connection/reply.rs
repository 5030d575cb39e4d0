//! Direct reply-to over AMQP 1.0 (RabbitMQ 4.2): a requester attaches a
//! receiving link with a dynamic source (capability
//! `rabbitmq:volatile-queue`, expiry-policy `link-detach`, pre-settled)
//! and is given an address, `/queues/amq.rabbitmq.reply-to.<token>`, that
//! its requests carry as `reply-to`. Replies sent there (by a 1.0 link or
//! `to`, or a 0-9-1 publish to that routing key) go straight to the link,
//! with no queue between: pre-settled, as credit allows, and dropped when
//! the link has none (at most once, as RabbitMQ's volatile queue).

use warren_amqp10::messaging;
use warren_amqp10::performative::{AmqpError, Attach, Flow};
use warren_amqp10::Value;
use warren_core::message::MessageRef;

use super::receive::write_transfer;
use super::Conn;
use crate::convert;

/// The capability a dynamic source must ask for.
const VOLATILE_QUEUE: &str = "rabbitmq:volatile-queue";

/// A requester's reply link (our sending end).
#[derive(Debug)]
pub(super) struct ReplyLink {
    /// Its name in the reply-to registry.
    pub name: String,
    pub delivery_count: u32,
    pub credit: u32,
}

/// Does this source ask for a dynamic node?
pub(super) fn is_dynamic(source: Option<&Value>) -> bool {
    let Some((_, Value::List(f))) = source.and_then(Value::as_described) else {
        return false;
    };
    matches!(f.get(4), Some(Value::Bool(true)))
}

/// Why a dynamic source is not one RabbitMQ takes, if it is not: the
/// volatile-queue capability, expiry-policy link-detach, a timeout of 0
/// and pre-settled deliveries.
fn refusal(a: &Attach) -> Option<String> {
    let Some((_, Value::List(f))) = a.source.as_ref().and_then(Value::as_described) else {
        return Some("no source".into());
    };
    let capabilities = match f.get(10) {
        Some(Value::Symbol(s)) => vec![s.as_str()],
        Some(Value::Array(v) | Value::List(v)) => v
            .iter()
            .filter_map(|c| match c {
                Value::Symbol(s) => Some(s.as_str()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if !capabilities.contains(&VOLATILE_QUEUE) {
        return Some(format!("the source lacks capability {VOLATILE_QUEUE}"));
    }
    if !matches!(f.get(2), Some(Value::Symbol(p)) if p == "link-detach") {
        return Some("expiry-policy must be link-detach".into());
    }
    if !matches!(f.get(3), None | Some(Value::Null) | Some(Value::Uint(0))) {
        return Some("timeout must be 0".into());
    }
    if a.snd_settle_mode != Some(1) {
        return Some("snd-settle-mode must be settled".into());
    }
    None
}

impl Conn {
    /// A requester's dynamic receiving link: given a reply-to name, or
    /// refused (amqp:not-implemented) if it is not one RabbitMQ takes.
    pub(super) fn attach_reply_receiver(&mut self, channel: u16, a: Attach) {
        if let Some(why) = refusal(&a) {
            let e = AmqpError::new(
                "amqp:not-implemented",
                format!("Dynamic source not supported: {why}"),
            );
            self.refuse_attach(channel, a, e);
            return;
        }
        let name = self
            .ctx
            .replies
            .register(self.outbox.clone(), channel, a.handle.to_string().into());
        let Some(s) = self.sessions.get_mut(&channel) else {
            self.ctx.replies.unregister(&name);
            return;
        };
        let out = s.outgoing;
        s.reply_links.insert(
            a.handle,
            ReplyLink {
                name: name.clone(),
                delivery_count: 0,
                credit: 0,
            },
        );
        let source = Value::described(
            messaging::SOURCE,
            Value::List(vec![
                Value::String(format!("/queues/{name}")),
                Value::Uint(0),
                Value::symbol("link-detach"),
                Value::Uint(0),
                Value::Bool(true),
                Value::Null,
                Value::symbol("move"),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Array(vec![Value::symbol(VOLATILE_QUEUE)]),
            ]),
        );
        self.accept_receiving_link(
            out,
            Attach {
                properties: None,
                source: Some(source),
                ..a
            },
            1,
        );
    }

    /// A reply link's flow (§2.6.7): its credit.
    pub(super) fn reply_flow(&mut self, channel: u16, handle: u32, f: &Flow) {
        let Some(r) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.reply_links.get_mut(&handle))
        else {
            return;
        };
        r.credit = super::management::sender_credit(r.delivery_count, f);
        if f.drain {
            r.delivery_count = r.delivery_count.wrapping_add(r.credit);
            r.credit = 0;
        }
        if f.drain || f.echo {
            let (dc, credit) = (r.delivery_count, r.credit);
            self.send_flow_link(channel, handle, dc, credit, f.drain, 0);
        }
    }

    /// A reply for the link `tag` names on `channel`: sent pre-settled if
    /// it has credit and the session window room, else dropped.
    pub(super) fn send_reply(&mut self, channel: u16, tag: &str, message: MessageRef) {
        let Ok(handle) = tag.parse::<u32>() else { return };
        let max_frame = self.peer_max_frame as usize;
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let Some(r) = s.reply_links.get_mut(&handle) else {
            return;
        };
        if r.credit == 0 || s.remote_incoming_window == 0 {
            tracing::debug!(link = %r.name, "a direct reply dropped: no credit");
            return;
        }
        r.credit -= 1;
        r.delivery_count = r.delivery_count.wrapping_add(1);
        let mut payload = bytes::BytesMut::new();
        let info = convert::DeliveryInfo {
            exchange: &message.exchange.to_str_lossy(),
            routing_key: &message.routing_key.to_str_lossy(),
            redelivered: false,
            delivery_count: 0,
        };
        convert::to_amqp10(&message.raw_properties, &message.body, info, &mut payload);
        let id = s.next_delivery_id;
        s.next_delivery_id = s.next_delivery_id.wrapping_add(1);
        let out = s.outgoing;
        let frames = write_transfer(&mut self.wbuf, out, max_frame, handle, id, true, &payload);
        if let Some(s) = self.sessions.get_mut(&channel) {
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames);
            s.remote_incoming_window = s.remote_incoming_window.saturating_sub(frames);
        }
    }

    /// A reply link goes (detached, or its session ended): its name too.
    pub(super) fn stop_reply_link(&mut self, channel: u16, handle: u32) {
        if let Some(r) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.reply_links.remove(&handle))
        {
            self.ctx.replies.unregister(&r.name);
        }
    }
}
