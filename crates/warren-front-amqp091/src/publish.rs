//! Publishing (0-9-1 basic.publish and its content, §2.1.4): assemble the
//! header and body frames, route, enqueue, then answer with basic.return
//! (mandatory and unroutable) and publisher confirms. Confirms decided
//! while handling one read are merged per channel into as few basic.ack /
//! basic.nack frames as possible (`multiple` over contiguous runs). Also
//! transactions (tx class): publishes and acks buffered until commit.

use ahash::AHashMap as HashMap;
use std::sync::Arc;

use bytes::Bytes;
use warren_amqp091::frame::{write_body, write_content_header_raw, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{ContentHeader, FieldTable, FieldValue, Method, ShortStr};
use warren_core::message::Message;
use warren_core::queue::{PublishOutcome, SyncWaiter, Ticket};
use warren_core::stats::Stat;
use warren_core::{Access, Resource};

use super::channel::{AfterSync, Body, Channel, PendingPublish, SyncedReply, TxPublish, TxState};
use super::consume;
use super::error::{AmqpError, Result};
use crate::conn::Conn;
use warren_node::reply_to;

/// RabbitMQ's hard cap on a message body, whatever max_message_size says.
const HARD_MAX_BODY: u64 = 512 << 20;

pub fn basic_publish(conn: &mut Conn, ch: &mut Channel, m: BasicPublish) -> Result<()> {
    if m.immediate {
        return Err(AmqpError::new(540, "immediate=true"));
    }
    conn.check(Access::Write, Resource::Exchange, &m.exchange)?;
    conn.published = true;
    ch.pending = Some(PendingPublish {
        method: m,
        header: None,
        body: Body::Empty,
    });
    Ok(())
}

pub fn content_header(conn: &mut Conn, ch: &mut Channel, payload: Bytes) -> Result<()> {
    let Some(p) = ch.pending.as_mut() else {
        return Err(AmqpError::new(
            505,
            "expected method frame, got non method frame instead",
        ));
    };
    if p.header.is_some() {
        return Err(AmqpError::new(
            505,
            "expected content body, got non content body frame instead",
        ));
    }
    let h = ContentHeader::decode(payload)
        .map_err(|e| AmqpError::new(502, format!("bad content header: {e}")))?;
    if h.class_id != 60 {
        return Err(AmqpError::new(
            505,
            format!(
                "expected content header for class 60, got one for class {} instead",
                h.class_id
            ),
        ));
    }
    if h.body_size > HARD_MAX_BODY {
        return Err(AmqpError::new(
            501,
            format!(
                "content body size {} exceeds maximum allowed size {HARD_MAX_BODY}",
                h.body_size
            ),
        ));
    }
    let max = conn.ctx.config.max_message_size;
    if h.body_size > max {
        ch.pending = None;
        return Err(AmqpError::new(
            406,
            format!(
                "message size {} is larger than configured max size {max}",
                h.body_size
            ),
        )
        .on(60, 40));
    }
    p.header = Some((h.body_size, h.raw_properties));
    if h.body_size == 0 {
        complete(conn, ch)?;
    }
    Ok(())
}

pub fn content_body(conn: &mut Conn, ch: &mut Channel, payload: Bytes) -> Result<()> {
    let Some(p) = ch.pending.as_mut() else {
        return Err(AmqpError::new(
            505,
            "expected method frame, got non method frame instead",
        ));
    };
    let Some((size, _)) = p.header else {
        return Err(AmqpError::new(
            505,
            "expected content header for class 60, got non content header frame instead",
        ));
    };
    if (p.body.len() + payload.len()) as u64 > size {
        return Err(AmqpError::new(
            501,
            "content body frame exceeds remaining content size",
        ));
    }
    p.body.push(payload);
    if p.body.len() as u64 == size {
        complete(conn, ch)?;
    }
    Ok(())
}

/// The routing keys a publish routes by: its key plus the CC and BCC
/// headers (RabbitMQ's sender-selected distribution). BCC is removed from
/// the headers so no consumer sees it; returns whether it was.
fn sender_selected(routing_key: &ShortStr, headers: Option<&mut FieldTable>) -> (Vec<ShortStr>, bool) {
    let mut keys = vec![routing_key.clone()];
    let Some(h) = headers else { return (keys, false) };
    let extra = |v: Option<&FieldValue>, keys: &mut Vec<ShortStr>| {
        if let Some(FieldValue::Array(a)) = v {
            keys.extend(
                a.iter()
                    .filter_map(|x| x.as_bytes())
                    .map(|b| ShortStr::from_bytes(Bytes::copy_from_slice(b))),
            );
        }
    };
    extra(h.get("CC"), &mut keys);
    let bcc = h.remove("BCC");
    let had_bcc = bcc.is_some();
    extra(bcc.as_ref(), &mut keys);
    (keys, had_bcc)
}

fn complete(conn: &mut Conn, ch: &mut Channel) -> Result<()> {
    let Some(p) = ch.pending.take() else { return Ok(()) };
    let (class_id, method_id) = (BasicPublish::CLASS_ID, BasicPublish::METHOD_ID);
    let err_on = |e: AmqpError| e.on(class_id, method_id);
    let seq = if ch.confirm {
        let s = ch.next_publish_seq;
        ch.next_publish_seq += 1;
        Some(s)
    } else {
        None
    };
    let (_, raw_properties) = p.header.unwrap_or_default();
    let m = p.method;
    // Owned copies, not slices of the read buffer (see `Body::freeze`).
    let own = |s: &ShortStr| ShortStr::from_bytes(Bytes::copy_from_slice(s));
    let (mut msg, props) = Message::from_publish(
        own(&m.exchange),
        own(&m.routing_key),
        Bytes::copy_from_slice(&raw_properties),
        p.body.freeze(),
    )
    .map_err(|e| err_on(e.into()))?;

    let mut headers = None;
    let mut keys = vec![m.routing_key.clone()];
    if let Some(mut props) = props {
        let mut rewrite = false;
        if let Some(u) = &props.user_id {
            let user = conn.user.as_ref().map(|u| u.name.as_str()).unwrap_or("");
            if u.as_bytes() != user.as_bytes() {
                return Err(err_on(AmqpError::new(
                    406,
                    format!("user_id property set to '{u}' but authenticated user was '{user}'"),
                )));
            }
        }
        if props
            .reply_to
            .as_ref()
            .is_some_and(|r| r.as_bytes() == reply_to::PSEUDO_QUEUE.as_bytes())
        {
            let Some((name, _)) = &ch.reply_consumer else {
                return Err(err_on(AmqpError::new(406, "fast reply consumer does not exist")));
            };
            props.reply_to = Some(name.as_str().into());
            rewrite = true;
        }
        let (k, had_bcc) = sender_selected(&m.routing_key, props.headers.as_mut());
        keys = k;
        rewrite |= had_bcc;
        if rewrite {
            msg = msg.with_properties(&props);
        }
        headers = props.headers;
    }
    let msg = Arc::new(msg);

    // Replies to a direct reply-to name skip queues altogether.
    if m.exchange.is_empty() && m.routing_key.starts_with(reply_to::PREFIX) {
        let delivered = conn.ctx.deliver_reply(&m.routing_key, msg.clone());
        conn.ctx.broker.messages.add(Stat::Publish, 1);
        if !delivered {
            conn.ctx.broker.messages.add(Stat::Unroutable, 1);
        }
        if !delivered && m.mandatory {
            send_return(conn, ch.id, &msg);
        }
        if let Some(seq) = seq {
            confirm(conn, ch, seq, true, Vec::new());
        }
        return Ok(());
    }

    let vh = conn.vhost()?;
    conn.grant()?
        .check_topic_write(&vh, &m.exchange, &m.routing_key)
        .map_err(|e| err_on(e.into()))?;
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let mut queues = Vec::new();
    vh.route(&m.exchange, &key_refs, headers.as_ref(), &mut queues)
        .map_err(|e| err_on(e.into()))?;

    if let Some(tx) = ch.tx.as_mut() {
        // Routed again at commit: queues may change in between.
        tx.publishes.push(TxPublish {
            exchange: m.exchange,
            keys,
            headers,
            message: msg,
            mandatory: m.mandatory,
        });
        return Ok(());
    }
    let mut tickets = Vec::new();
    let accepted = enqueue(conn, ch.id, &queues, &msg, m.mandatory, &mut tickets);
    if let Some(seq) = seq {
        confirm(conn, ch, seq, accepted, tickets);
    }
    Ok(())
}

/// Put `msg` in `queues`; false if a queue refused it (x-overflow
/// reject-publish, or its store failed), which the publisher hears as a
/// nack. Queues that wrote it to disk add a ticket to `tickets`.
fn enqueue(
    conn: &mut Conn,
    channel: u16,
    queues: &[Arc<warren_core::queue::Queue>],
    msg: &Arc<Message>,
    mandatory: bool,
    tickets: &mut Vec<Ticket>,
) -> bool {
    let counters = &conn.ctx.broker.messages;
    counters.add(Stat::Publish, 1);
    if queues.is_empty() {
        counters.add(Stat::Unroutable, 1);
        if mandatory {
            send_return(conn, channel, msg);
        }
        return true;
    }
    let mut accepted = true;
    for q in queues {
        let (outcome, mut effects) = q.publish(msg.clone());
        if effects.flow {
            conn.flow(q);
        }
        if let Some(t) = effects.sync.take() {
            tickets.push(t);
        }
        conn.apply(q, effects);
        if outcome == PublishOutcome::Rejected {
            accepted = false;
        }
    }
    accepted
}

fn send_return(conn: &mut Conn, channel: u16, msg: &Message) {
    let ret = Method::BasicReturn(BasicReturn {
        reply_code: 312,
        reply_text: "NO_ROUTE".into(),
        exchange: msg.exchange.clone(),
        routing_key: msg.routing_key.clone(),
    });
    write_method(&mut conn.wbuf, channel, &ret);
    write_content_header_raw(
        &mut conn.wbuf,
        channel,
        60,
        msg.body.len() as u64,
        &msg.raw_properties,
    );
    write_body(&mut conn.wbuf, channel, &msg.body, conn.frame_max);
}

/// Decide the confirm of publish `seq`: at once, or once `tickets` are
/// synced (a persistent message is confirmed only when on disk).
fn confirm(conn: &mut Conn, ch: &mut Channel, seq: u64, ack: bool, tickets: Vec<Ticket>) {
    if tickets.is_empty() && ch.unsynced.is_empty() {
        if ch.confirms.is_empty() {
            conn.confirm_dirty.push(ch.id);
        }
        ch.confirms.push((seq, ack));
    } else {
        wait_for_sync(conn, ch, SyncedReply::Confirm { seq, ack }, tickets);
    }
}

fn wait_for_sync(conn: &mut Conn, ch: &mut Channel, reply: SyncedReply, tickets: Vec<Ticket>) {
    if ch.unsynced.is_empty() {
        conn.sync_channels.push(ch.id);
    }
    ch.unsynced.push_back(AfterSync { reply, tickets });
}

/// Send what waited for fsync and is now on disk; if anything still
/// waits, ask to be woken after the next sync round.
pub fn release_synced(conn: &mut Conn, channels: &mut HashMap<u16, Channel>) {
    if conn.sync_channels.is_empty() {
        return;
    }
    let ids = std::mem::take(&mut conn.sync_channels);
    for id in ids {
        let Some(ch) = channels.get_mut(&id) else { continue };
        while let Some(front) = ch.unsynced.front() {
            if let Some(t) = front.tickets.iter().find(|t| !t.is_done()) {
                // Woken when it may be done (next sync round, or the
                // queue's node answering).
                let syncer = conn.ctx.broker.config.storage.as_ref().map(|s| s.syncer());
                let me: Arc<dyn SyncWaiter> = conn.outbox.clone();
                t.wake(syncer, &me);
                break;
            }
            match front.reply {
                SyncedReply::Confirm { seq, ack } => {
                    // A queue on another node that could not take it
                    // makes it a nack.
                    let ack = ack && front.tickets.iter().all(|t| t.is_ok());
                    if ch.confirms.is_empty() {
                        conn.confirm_dirty.push(id);
                    }
                    ch.confirms.push((seq, ack));
                }
                SyncedReply::TxCommitOk => conn.send(id, TxCommitOk {}),
            }
            ch.unsynced.pop_front();
        }
        if !ch.unsynced.is_empty() {
            conn.sync_channels.push(id);
        }
    }
}

/// Send the confirms decided since the last flush, merged: a run of acks
/// (or nacks) over contiguous sequence numbers becomes one frame with
/// `multiple` set. Every earlier number is already confirmed, because
/// confirms go out in publish order.
pub fn flush_confirms(conn: &mut Conn, channels: &mut HashMap<u16, Channel>) {
    let dirty = std::mem::take(&mut conn.confirm_dirty);
    let mut acked = 0;
    for id in dirty {
        let Some(ch) = channels.get_mut(&id) else { continue };
        let confirms = std::mem::take(&mut ch.confirms);
        let mut i = 0;
        while i < confirms.len() {
            let (start, kind) = confirms[i];
            let mut j = i;
            while j + 1 < confirms.len()
                && confirms[j + 1].1 == kind
                && confirms[j + 1].0 == confirms[j].0 + 1
            {
                j += 1;
            }
            let (last, multiple) = (confirms[j].0, j > i);
            let _ = start;
            if kind {
                acked += (j - i + 1) as u64;
                conn.send(
                    id,
                    BasicAck {
                        delivery_tag: last,
                        multiple,
                    },
                );
            } else {
                conn.send(
                    id,
                    BasicNack {
                        delivery_tag: last,
                        multiple,
                        requeue: false,
                    },
                );
            }
            i = j + 1;
        }
    }
    conn.ctx.broker.messages.add(Stat::Confirm, acked);
}

pub fn tx_select(conn: &mut Conn, ch: &mut Channel) -> Result<()> {
    if ch.confirm {
        return Err(AmqpError::new(406, "cannot switch from confirm to tx mode"));
    }
    if ch.tx.is_none() {
        ch.tx = Some(TxState::default());
    }
    conn.send(ch.id, TxSelectOk {});
    Ok(())
}

pub fn tx_commit(conn: &mut Conn, ch: &mut Channel) -> Result<()> {
    let Some(tx) = ch.tx.as_mut() else {
        return Err(AmqpError::new(406, "channel is not transactional"));
    };
    let publishes = std::mem::take(&mut tx.publishes);
    let settles = std::mem::take(&mut tx.settles);
    let vh = conn.vhost()?;
    let mut tickets = Vec::new();
    for p in publishes {
        let keys: Vec<&[u8]> = p.keys.iter().map(|k| k.as_bytes()).collect();
        let mut queues = Vec::new();
        // An exchange deleted since the publish routes nowhere.
        let _ = vh.route(&p.exchange, &keys, p.headers.as_ref(), &mut queues);
        enqueue(conn, ch.id, &queues, &p.message, p.mandatory, &mut tickets);
    }
    consume::apply_settles(conn, ch, settles);
    if tickets.is_empty() && ch.unsynced.is_empty() {
        conn.send(ch.id, TxCommitOk {});
    } else {
        // commit-ok promises the persistent messages are on disk.
        wait_for_sync(conn, ch, SyncedReply::TxCommitOk, tickets);
    }
    Ok(())
}

pub fn tx_rollback(conn: &mut Conn, ch: &mut Channel) -> Result<()> {
    let Some(tx) = ch.tx.as_mut() else {
        return Err(AmqpError::new(406, "channel is not transactional"));
    };
    tx.publishes.clear();
    // Settlements are undone: the deliveries are unacked again.
    let settles = std::mem::take(&mut tx.settles);
    for (u, _) in settles {
        let at = ch.unacked.partition_point(|x| x.tag < u.tag);
        ch.unacked.insert(at, u);
    }
    conn.send(ch.id, TxRollbackOk {});
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_and_bcc_add_keys_and_bcc_is_removed() {
        let mut h = FieldTable::new();
        h.insert("CC", FieldValue::Array(vec!["a".into(), "b".into()]));
        h.insert("BCC", FieldValue::Array(vec!["c".into()]));
        let (keys, had_bcc) = sender_selected(&"rk".into(), Some(&mut h));
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        assert_eq!(keys, vec!["rk", "a", "b", "c"]);
        assert!(had_bcc);
        assert!(h.get("BCC").is_none());
        assert!(h.get("CC").is_some());
    }

    #[test]
    fn body_assembles_frames() {
        let mut b = Body::Empty;
        b.push(Bytes::from_static(b"ab"));
        assert!(matches!(b, Body::One(_)));
        b.push(Bytes::from_static(b"cd"));
        b.push(Bytes::from_static(b"e"));
        assert_eq!(&b.freeze()[..], b"abcde");
    }
}
