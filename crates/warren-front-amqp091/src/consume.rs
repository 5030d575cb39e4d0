//! Consuming (0-9-1 basic class): qos, consume, cancel, get, the three
//! settlements (ack, nack, reject), recover, and turning the outbox into
//! basic.deliver frames. Delivery tags are per channel and increase by one
//! per delivery; a channel keeps its unacknowledged deliveries in tag
//! order, so acks (usually in order) come off the front cheaply.

use ahash::AHashMap as HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use warren_amqp091::frame::{write_body, write_content_header_raw, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{Method, ShortStr};
use warren_core::queue::{Answer, ConsumerSpec, DeliverySink, Entry, Queue, Settle};
use warren_core::{Access, BrokerError, Resource};

use super::channel::{Channel, ChannelState, ConsumerRec, How, Unacked};
use super::error::{AmqpError, Result};
use super::generated_name;
use crate::conn::Conn;
use warren_node::outbox::OutItem;
use warren_node::reply_to;

pub fn basic_qos(conn: &mut Conn, ch: &mut Channel, m: BasicQos) -> Result<()> {
    if m.prefetch_size != 0 {
        return Err(AmqpError::new(
            540,
            format!("prefetch_size!=0 ({})", m.prefetch_size),
        ));
    }
    if m.global {
        ch.limit.limit.store(m.prefetch_count as u32, Ordering::Relaxed);
        // A raised limit may let consumers on this channel take more.
        pump_consumers(conn, ch);
    } else {
        ch.prefetch = m.prefetch_count as u32;
    }
    conn.send(ch.id, BasicQosOk {});
    Ok(())
}

fn pump_consumers(conn: &mut Conn, ch: &Channel) {
    let mut seen: Vec<*const Queue> = Vec::new();
    for rec in ch.consumers.values() {
        let p = Arc::as_ptr(&rec.queue);
        if !seen.contains(&p) {
            seen.push(p);
            let effects = rec.queue.pump();
            conn.apply(&rec.queue, effects);
        }
    }
}

pub fn basic_consume(conn: &mut Conn, ch: &mut Channel, m: BasicConsume) -> Result<()> {
    let tag = if m.consumer_tag.is_empty() {
        ShortStr::from(generated_name("amq.ctag-"))
    } else {
        m.consumer_tag
    };
    if ch.consumers.contains_key(&tag) || ch.reply_consumer.as_ref().is_some_and(|(_, t)| *t == tag) {
        return Err(AmqpError::new(
            530,
            format!("attempt to reuse consumer tag '{tag}'"),
        ));
    }
    if m.queue.as_bytes() == reply_to::PSEUDO_QUEUE.as_bytes() {
        if !m.no_ack {
            return Err(AmqpError::new(406, "reply consumer cannot acknowledge"));
        }
        if ch.reply_consumer.is_some() {
            return Err(AmqpError::new(406, "reply consumer already set"));
        }
        let name = conn.ctx.replies.register(conn.outbox.clone(), ch.id, tag.clone());
        ch.reply_consumer = Some((name, tag.clone()));
        if !m.no_wait {
            conn.send(ch.id, BasicConsumeOk { consumer_tag: tag });
        }
        return Ok(());
    }
    let name = ch.queue_name(&m.queue)?;
    conn.check(Access::Read, Resource::Queue, &name)?;
    let vh = conn.vhost()?;
    let q = vh.queue(&name, conn.id)?;
    let priority = match m.arguments.get("x-priority") {
        None => 0,
        Some(v) => match v.as_i64() {
            Some(p) => p.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
            None => {
                return Err(BrokerError::PreconditionFailed(format!(
                    "invalid arg 'x-priority' for queue '{}' in vhost '{}': \"expected integer, got {}\"",
                    q.name,
                    vh.name,
                    v.type_name()
                ))
                .into())
            }
        },
    };
    let id = conn.ctx.broker.next_id();
    let sink: Arc<dyn DeliverySink> = conn.outbox.clone();
    let spec = ConsumerSpec {
        id,
        connection_id: conn.id,
        channel: ch.id,
        tag: tag.clone(),
        no_ack: m.no_ack,
        exclusive: m.exclusive,
        prefetch: ch.prefetch,
        priority,
        sink,
        // Every acknowledging consumer counts against the channel-wide
        // limit, so a global basic.qos applies whenever it is set.
        channel_limit: (!m.no_ack).then(|| ch.limit.clone()),
        link_credit: None,
        arguments: m.arguments.clone(),
        record_filter: None,
    };
    if q.home.is_some() {
        return consume_remote(conn, ch, q, spec, m.no_wait);
    }
    // Deliveries the queue makes now wait in the outbox, which is drained
    // only after this method's replies are written: consume-ok goes first.
    let effects = q.consume(spec)?;
    conn.apply(&q, effects);
    let timeout = custom_timeout(conn, ch, &q);
    ch.consumers.insert(
        tag.clone(),
        ConsumerRec {
            id,
            queue: q,
            timeout,
        },
    );
    if !m.no_wait {
        conn.send(ch.id, BasicConsumeOk { consumer_tag: tag });
    }
    Ok(())
}

/// basic.consume on a queue whose home is another node: answered once
/// the home has the consumer (its errors, such as an exclusive consumer
/// already there, are the home's); deliveries start only after
/// consume-ok is written, when the queue is pumped.
fn consume_remote(
    conn: &mut Conn,
    ch: &mut Channel,
    q: Arc<Queue>,
    spec: ConsumerSpec,
    no_wait: bool,
) -> Result<()> {
    let Some(client) = conn.ctx.queue_client.clone() else {
        return Err(AmqpError::new(
            541,
            "a queue of another node on a node with no cluster",
        ));
    };
    crate::conn::remote_home_up(conn, &q)?;
    let (id, tag) = (spec.id, spec.tag.clone());
    q.consume(spec)?;
    let Some(answer) = client.consume_answer(id) else {
        return Err(AmqpError::new(541, "the consume was not registered"));
    };
    let queue = q.clone();
    let work = async move {
        match answer.await {
            Ok(r) => r,
            Err(_) => Err(warren_node::cluster::queue_client::home_down(
                &queue,
                "the queue's home",
            )),
        }
    };
    crate::conn::after_cluster(conn, ch, BASIC_CONSUME, work, move |conn, ch, ()| {
        let timeout = custom_timeout(conn, ch, &q);
        ch.consumers.insert(
            tag.clone(),
            ConsumerRec {
                id,
                queue: q.clone(),
                timeout,
            },
        );
        if !no_wait {
            conn.send(ch.id, BasicConsumeOk { consumer_tag: tag });
        }
        let effects = q.pump();
        conn.apply(&q, effects);
        Ok(())
    });
    Ok(())
}

/// `q`'s own consumer timeout, if it has one: the channel's timeout
/// check then looks at every delivery, and the connection's at least as
/// often as a quarter of it.
fn custom_timeout(conn: &mut Conn, ch: &mut Channel, q: &Queue) -> Option<u64> {
    let t = q.config().consumer_timeout_ms?;
    ch.custom_timeouts = true;
    conn.shortest_timeout = Some(conn.shortest_timeout.map_or(t, |s| s.min(t)));
    Some(t)
}

const BASIC_CONSUME: (u16, u16) = (60, 20);
const BASIC_GET: (u16, u16) = (60, 70);

pub fn basic_cancel(conn: &mut Conn, ch: &mut Channel, m: BasicCancel) -> Result<()> {
    if let Some(rec) = ch.consumers.remove(&m.consumer_tag) {
        let (_, effects) = rec.queue.cancel(rec.id);
        conn.apply(&rec.queue, effects);
    } else if ch
        .reply_consumer
        .as_ref()
        .is_some_and(|(_, t)| *t == m.consumer_tag)
    {
        if let Some((name, _)) = ch.reply_consumer.take() {
            conn.ctx.replies.unregister(&name);
        }
    }
    // 0-9-1 basic.cancel: an unknown tag is not an error.
    if !m.no_wait {
        conn.send(
            ch.id,
            BasicCancelOk {
                consumer_tag: m.consumer_tag,
            },
        );
    }
    Ok(())
}

pub fn basic_get(conn: &mut Conn, ch: &mut Channel, m: BasicGet) -> Result<()> {
    let name = ch.queue_name(&m.queue)?;
    conn.check(Access::Read, Resource::Queue, &name)?;
    let q = conn.vhost()?.queue(&name, conn.id)?;
    if let Some(home) = q.forward_home() {
        crate::conn::remote_home_up(conn, &q)?;
        let Some(client) = conn.ctx.queue_client.clone() else {
            return Err(AmqpError::new(
                541,
                "a queue of another node on a node with no cluster",
            ));
        };
        let queue = q.clone();
        let work = async move { client.get(&queue, &home, m.no_ack).await };
        crate::conn::after_cluster(conn, ch, BASIC_GET, work, move |conn, ch, got| {
            get_ok(conn, ch, q, m.no_ack, got);
            Ok(())
        });
        return Ok(());
    }
    let (got, effects) = q.get(m.no_ack);
    conn.apply(&q, effects);
    match got {
        Answer::Now(got) => get_ok(conn, ch, q, m.no_ack, got),
        // A quorum queue's, once its dequeue is applied; the channel's
        // later methods wait for it.
        later => {
            let work = async move { Ok(later.wait().await.flatten()) };
            crate::conn::after_cluster(conn, ch, BASIC_GET, work, move |conn, ch, got| {
                get_ok(conn, ch, q, m.no_ack, got);
                Ok(())
            });
        }
    }
    Ok(())
}

/// basic.get-ok (with the message) or basic.get-empty.
fn get_ok(conn: &mut Conn, ch: &mut Channel, q: Arc<Queue>, no_ack: bool, got: Option<(Entry, u64)>) {
    match got {
        None => conn.send(ch.id, BasicGetEmpty::default()),
        Some((entry, remaining)) => {
            let tag = ch.next_delivery_tag;
            ch.next_delivery_tag += 1;
            let msg = &entry.message;
            let get_ok = Method::BasicGetOk(BasicGetOk {
                delivery_tag: tag,
                redelivered: entry.redelivered,
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
                message_count: remaining as u32,
            });
            write_content(conn, ch.id, &get_ok, msg);
            if !no_ack {
                let timeout = custom_timeout(conn, ch, &q);
                ch.unacked.push_back(Unacked {
                    tag,
                    queue: q,
                    consumer_id: None,
                    entry,
                    delivered_at: std::time::Instant::now(),
                    timeout,
                });
            }
        }
    }
}

fn write_content(conn: &mut Conn, channel: u16, method: &Method, msg: &warren_core::Message) {
    write_method(&mut conn.wbuf, channel, method);
    write_content_header_raw(
        &mut conn.wbuf,
        channel,
        60,
        msg.body.len() as u64,
        &msg.raw_properties,
    );
    write_body(&mut conn.wbuf, channel, &msg.body, conn.frame_max);
}

/// Take the deliveries an ack/nack/reject names out of the unacked list
/// (RabbitMQ's rules: `multiple` with tag 0 means all; otherwise every tag
/// up to the given one, which must exist or lie below an outstanding tag).
fn take_unacked(ch: &mut Channel, tag: u64, multiple: bool) -> Result<Vec<Unacked>> {
    let unknown = || AmqpError::new(406, format!("unknown delivery tag {tag}"));
    if multiple {
        if tag == 0 {
            return Ok(ch.unacked.drain(..).collect());
        }
        let n = ch.unacked.partition_point(|u| u.tag <= tag);
        if n == ch.unacked.len() && ch.unacked.back().is_none_or(|u| u.tag != tag) {
            return Err(unknown());
        }
        Ok(ch.unacked.drain(..n).collect())
    } else {
        let i = ch.unacked.partition_point(|u| u.tag < tag);
        match ch.unacked.get(i) {
            Some(u) if u.tag == tag => Ok(ch.unacked.remove(i).into_iter().collect()),
            _ => Err(unknown()),
        }
    }
}

pub fn settle(conn: &mut Conn, ch: &mut Channel, tag: u64, multiple: bool, how: How) -> Result<()> {
    let mut taken = take_unacked(ch, tag, multiple)?;
    if how == How::RequeueFailed {
        // A failed attempt: the queue sees it in the delivery count.
        for u in &mut taken {
            u.entry.delivery_count = u.entry.delivery_count.saturating_add(1);
        }
    }
    if let Some(tx) = ch.tx.as_mut() {
        tx.settles.extend(taken.into_iter().map(|u| (u, how)));
        return Ok(());
    }
    let counted = settle_entries(conn, taken, how.settle());
    release_limit(conn, ch, counted);
    Ok(())
}

/// Settled consumer deliveries free room under the channel-wide limit;
/// with a global limit set, its consumers may take more now.
fn release_limit(conn: &mut Conn, ch: &Channel, counted: u32) {
    ch.limit.released(counted);
    if counted > 0 && ch.limit.limit.load(Ordering::Relaxed) > 0 {
        pump_consumers(conn, ch);
    }
}

/// Apply settlements a transaction held back, in order.
pub fn apply_settles(conn: &mut Conn, ch: &mut Channel, settles: Vec<(Unacked, How)>) {
    let mut counted = 0;
    let mut group = Vec::new();
    let mut current: Option<How> = None;
    for (u, how) in settles {
        if let Some(c) = current.filter(|c| *c != how) {
            counted += settle_entries(conn, std::mem::take(&mut group), c.settle());
        }
        current = Some(how);
        group.push(u);
    }
    if let Some(c) = current {
        counted += settle_entries(conn, group, c.settle());
    }
    release_limit(conn, ch, counted);
}

/// Settle deliveries, one queue call per run of the same queue and
/// consumer. Returns how many were consumer deliveries (which count against
/// the channel-wide limit; basic.get deliveries do not).
pub fn settle_entries(conn: &mut Conn, entries: Vec<Unacked>, how: Settle) -> u32 {
    let mut counted = 0u32;
    let mut batch: Vec<Entry> = Vec::new();
    let mut key: Option<(Arc<Queue>, Option<u64>)> = None;
    for u in entries {
        let same = key
            .as_ref()
            .is_some_and(|(q, c)| Arc::ptr_eq(q, &u.queue) && *c == u.consumer_id);
        if !same {
            if let Some((q, c)) = key.take() {
                let effects = q.settle(c, std::mem::take(&mut batch), how);
                conn.apply(&q, effects);
            }
            key = Some((u.queue.clone(), u.consumer_id));
        }
        if u.consumer_id.is_some() {
            counted += 1;
        }
        batch.push(u.entry);
    }
    if let Some((q, c)) = key {
        let effects = q.settle(c, batch, how);
        conn.apply(&q, effects);
    }
    counted
}

pub fn basic_recover(conn: &mut Conn, ch: &mut Channel, requeue: bool, reply: bool) -> Result<()> {
    if !requeue {
        return Err(AmqpError::new(540, "requeue=false"));
    }
    let all: Vec<Unacked> = ch.unacked.drain(..).collect();
    let counted = settle_entries(conn, all, Settle::Requeue);
    release_limit(conn, ch, counted);
    if reply {
        conn.send(ch.id, BasicRecoverOk {});
    }
    Ok(())
}

/// Turn what queues left in the outbox into frames, then let queues that
/// were waiting for room deliver again.
pub fn drain_outbox(conn: &mut Conn, channels: &mut HashMap<u16, Channel>) {
    let (items, waiting) = conn.outbox.drain();
    // One clock read for the batch: the consumer timeout is counted in
    // seconds or minutes.
    let now = std::time::Instant::now();
    for item in items {
        match item {
            OutItem::Deliver(d) => {
                let ch = channels
                    .get_mut(&d.channel)
                    .filter(|c| c.state == ChannelState::Open);
                let Some(ch) = ch.filter(|c| {
                    c.consumers
                        .get(&d.consumer_tag)
                        .is_some_and(|r| r.id == d.consumer_id)
                }) else {
                    // The channel or consumer went away first: give it back.
                    if !d.no_ack {
                        let effects = d
                            .queue
                            .settle(Some(d.consumer_id), vec![d.entry], Settle::Requeue);
                        conn.apply(&d.queue, effects);
                    }
                    continue;
                };
                let tag = ch.next_delivery_tag;
                ch.next_delivery_tag += 1;
                // Only a channel with a consumer of a queue with its own
                // consumer timeout pays for the lookup.
                let timeout = if ch.custom_timeouts && !d.no_ack {
                    ch.consumers.get(&d.consumer_tag).and_then(|r| r.timeout)
                } else {
                    None
                };
                let msg = &d.entry.message;
                let deliver = Method::BasicDeliver(BasicDeliver {
                    consumer_tag: d.consumer_tag,
                    delivery_tag: tag,
                    redelivered: d.entry.redelivered,
                    exchange: msg.exchange.clone(),
                    routing_key: msg.routing_key.clone(),
                });
                write_content(conn, ch.id, &deliver, msg);
                if !d.no_ack {
                    ch.unacked.push_back(Unacked {
                        tag,
                        queue: d.queue,
                        consumer_id: Some(d.consumer_id),
                        entry: d.entry,
                        delivered_at: now,
                        timeout,
                    });
                }
            }
            OutItem::Reply {
                channel,
                consumer_tag,
                message,
            } => {
                let Some(ch) = channels
                    .get_mut(&channel)
                    .filter(|c| c.state == ChannelState::Open)
                else {
                    continue;
                };
                let tag = ch.next_delivery_tag;
                ch.next_delivery_tag += 1;
                let deliver = Method::BasicDeliver(BasicDeliver {
                    consumer_tag,
                    delivery_tag: tag,
                    redelivered: false,
                    exchange: message.exchange.clone(),
                    routing_key: message.routing_key.clone(),
                });
                write_content(conn, channel, &deliver, &message);
            }
            OutItem::Cancel {
                channel,
                consumer_tag,
            } => {
                let Some(ch) = channels.get_mut(&channel) else {
                    continue;
                };
                if ch.consumers.remove(&consumer_tag).is_some()
                    && ch.state == ChannelState::Open
                    && conn.caps.consumer_cancel_notify
                {
                    conn.send(
                        channel,
                        BasicCancel {
                            consumer_tag,
                            no_wait: true,
                        },
                    );
                }
            }
            // AMQP 1.0 only.
            OutItem::Drained { .. } | OutItem::Activity { .. } => {}
        }
    }
    for w in waiting {
        if let Some(q) = w.upgrade() {
            let effects = q.pump();
            conn.apply(&q, effects);
        }
    }
}
