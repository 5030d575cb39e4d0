//! The queue protocol: how a node uses a queue whose home is another node.
//! The node a client is connected to (the *client node*) publishes to,
//! consumes from, settles with, gets from and purges the queue's *home
//! node*, which runs the queue; confirms, deliveries and answers come
//! back the same way. All of it travels on the node pair's one link, in
//! order, so a settle never overtakes the delivery it settles.
//!
//! Flow control is credit, as RabbitMQ's between a channel and a queue
//! process: a client node has a bounded number of publishes to a home
//! unconfirmed (the home confirms every publish, once it is enqueued and,
//! when persistent in a durable queue, on disk), and a home a bounded
//! number of deliveries to a remote consumer that the client node has not
//! passed on (the client node grants more as its connection takes them).
//!
//! Names here are byte strings (0-9-1 short strings need not be UTF-8),
//! at most 255 bytes, as on the 0-9-1 wire.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::wire::{put_blob, put_name, Reader};

/// Frame kinds of the queue protocol.
pub mod kind {
    pub const PUBLISH: u8 = 0x40;
    pub const CONFIRM: u8 = 0x41;
    pub const CONSUME: u8 = 0x42;
    pub const CANCEL: u8 = 0x43;
    pub const DELIVER: u8 = 0x44;
    pub const CREDIT: u8 = 0x45;
    pub const SETTLE: u8 = 0x46;
    pub const CANCELLED: u8 = 0x47;
    pub const GET: u8 = 0x48;
    pub const GOT: u8 = 0x49;
    pub const PURGE: u8 = 0x4a;
    pub const ANSWER: u8 = 0x4b;
    pub const FIGURES: u8 = 0x4c;
    pub const REPLY: u8 = 0x4d;
    pub const DRAIN: u8 = 0x4e;
    pub const DRAINED: u8 = 0x4f;
}

/// A message as it crosses a link: what a 0-9-1 publish carries, so the
/// home rebuilds it exactly (properties are the 0-9-1 property list as
/// on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMessage {
    pub exchange: Bytes,
    pub routing_key: Bytes,
    pub properties: Bytes,
    pub body: Bytes,
}

/// How a delivery was settled (0-9-1 ack, reject or nack with requeue, or
/// without).
pub mod settle {
    pub const ACK: u8 = 0;
    pub const REQUEUE: u8 = 1;
    pub const DISCARD: u8 = 2;
}

/// One queue's figures as its home reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub vhost: String,
    pub queue: Bytes,
    pub ready: u64,
    pub unacked: u64,
    pub consumers: u32,
    pub ready_bytes: u64,
    /// A quorum queue's leader and members as the reporting member sees
    /// them (node names), so a node without a member shows them too.
    pub view: Option<View>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Empty: no leader known.
    pub leader: String,
    pub members: Vec<String>,
    pub online: Vec<String>,
}

/// Bytes a [`Figures`] takes at least (empty names, no view).
const FIGURES_MIN: usize = 2 + 8 + 8 + 4 + 8 + 1;

fn put_names(out: &mut BytesMut, names: &[String]) {
    let names = &names[..names.len().min(255)];
    out.put_u8(names.len() as u8);
    for n in names {
        put_name(out, n);
    }
}

fn names(r: &mut Reader, what: &'static str) -> Result<Vec<String>, CodecError> {
    let n = r.u8(what)? as usize;
    (0..n).map(|_| r.name(what)).collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueMsg {
    /// Client node → home: enqueue `message` on `queue`. `id` counts up by
    /// one per publish on the link.
    Publish {
        id: u64,
        vhost: String,
        queue: Bytes,
        message: WireMessage,
    },
    /// Home → client node: publishes `first..first+count` are done; `ok`
    /// false when the queue refused them (x-overflow reject-publish, a
    /// failed store, a queue that is gone).
    Confirm { first: u64, count: u32, ok: bool },
    /// Client node → home: add a consumer; answered with `Answer { req }`.
    /// `consumer` is the client node's id for it.
    Consume {
        req: u64,
        consumer: u64,
        vhost: String,
        queue: Bytes,
        tag: Bytes,
        no_ack: bool,
        exclusive: bool,
        prefetch: u32,
        priority: i32,
        /// Deliveries the home may send before the client node grants
        /// more.
        credit: u32,
        /// The consumer's arguments, a 0-9-1 field table as on the wire.
        arguments: Bytes,
    },
    /// Client node → home: the consumer is gone (its unsettled deliveries
    /// may still be settled).
    Cancel { consumer: u64 },
    /// Home → client node: one delivery to `consumer`; `seq` identifies it
    /// in the settle.
    Deliver {
        consumer: u64,
        seq: u64,
        redelivered: bool,
        message: WireMessage,
    },
    /// Client node → home: `consumer` may take `credit` more deliveries.
    Credit { consumer: u64, credit: u32 },
    /// Client node → home: deliveries `seqs` to `consumer` (0: handles of
    /// gets) are settled `how` ([`settle`]).
    Settle { consumer: u64, how: u8, seqs: Vec<u64> },
    /// Home → client node: the home ended the consumer (its queue was
    /// deleted).
    Cancelled { consumer: u64 },
    /// Client node → home: an AMQP 1.0 drain (§2.6.7): deliver to
    /// `consumer` what the queue has, within the credit granted, then
    /// answer `Drained` and hold no credit for it.
    Drain { consumer: u64 },
    /// Home → client node: the drain of `consumer` is done; every
    /// delivery it led to came before this.
    Drained { consumer: u64 },
    /// Client node → home: basic.get; answered with `Got` or `Answer`
    /// (value 0: empty).
    Get {
        req: u64,
        vhost: String,
        queue: Bytes,
        no_ack: bool,
    },
    /// Home → client node: the message got; `handle` settles it.
    Got {
        req: u64,
        handle: u64,
        redelivered: bool,
        remaining: u64,
        message: WireMessage,
    },
    /// Client node → home: drop the queue's ready messages; answered with
    /// `Answer { value: how many }`.
    Purge { req: u64, vhost: String, queue: Bytes },
    /// Home → client node: the answer to a request. `code` 0 is success;
    /// otherwise a 0-9-1 reply code and `text` why.
    Answer {
        req: u64,
        code: u16,
        text: String,
        value: u64,
    },
    /// Home → every other node, now and then: the figures of its queues
    /// that changed since the last report to that node, so listings and
    /// declare-ok elsewhere show them.
    Figures { queues: Vec<Figures> },
    /// Any node → the node of a direct reply-to consumer: a reply
    /// published to its name (`amq.rabbitmq.reply-to.…`), which carries
    /// that node. Neither confirmed nor answered, as a local one.
    Reply { name: Bytes, message: WireMessage },
}

/// Bytes a delivery or publish takes on the wire besides its names and
/// its message's: a sender checks a message fits a frame with it.
pub const MESSAGE_OVERHEAD: usize = 64 + 3 * 256;

pub(crate) fn put_short(out: &mut BytesMut, b: &[u8]) {
    let b = &b[..b.len().min(255)];
    out.put_u8(b.len() as u8);
    out.put_slice(b);
}

pub(crate) fn short(r: &mut Reader, what: &'static str) -> Result<Bytes, CodecError> {
    let n = r.u8(what)? as usize;
    r.bytes(n, what)
}

fn put_message(out: &mut BytesMut, m: &WireMessage) {
    put_short(out, &m.exchange);
    put_short(out, &m.routing_key);
    put_blob(out, &m.properties);
    put_blob(out, &m.body);
}

fn message(r: &mut Reader) -> Result<WireMessage, CodecError> {
    Ok(WireMessage {
        exchange: short(r, "message exchange")?,
        routing_key: short(r, "message routing key")?,
        properties: r.blob("message properties")?,
        body: r.blob("message body")?,
    })
}

impl QueueMsg {
    pub fn kind(&self) -> u8 {
        match self {
            QueueMsg::Publish { .. } => kind::PUBLISH,
            QueueMsg::Confirm { .. } => kind::CONFIRM,
            QueueMsg::Consume { .. } => kind::CONSUME,
            QueueMsg::Cancel { .. } => kind::CANCEL,
            QueueMsg::Deliver { .. } => kind::DELIVER,
            QueueMsg::Credit { .. } => kind::CREDIT,
            QueueMsg::Settle { .. } => kind::SETTLE,
            QueueMsg::Cancelled { .. } => kind::CANCELLED,
            QueueMsg::Drain { .. } => kind::DRAIN,
            QueueMsg::Drained { .. } => kind::DRAINED,
            QueueMsg::Get { .. } => kind::GET,
            QueueMsg::Got { .. } => kind::GOT,
            QueueMsg::Purge { .. } => kind::PURGE,
            QueueMsg::Answer { .. } => kind::ANSWER,
            QueueMsg::Figures { .. } => kind::FIGURES,
            QueueMsg::Reply { .. } => kind::REPLY,
        }
    }

    pub fn is_queue_kind(kind: u8) -> bool {
        (kind::PUBLISH..=kind::DRAINED).contains(&kind)
    }

    /// The fields, after the frame's kind.
    pub(crate) fn encode_fields(&self, out: &mut BytesMut) {
        match self {
            QueueMsg::Publish {
                id,
                vhost,
                queue,
                message,
            } => {
                out.put_u64(*id);
                put_name(out, vhost);
                put_short(out, queue);
                put_message(out, message);
            }
            QueueMsg::Confirm { first, count, ok } => {
                out.put_u64(*first);
                out.put_u32(*count);
                out.put_u8(*ok as u8);
            }
            QueueMsg::Consume {
                req,
                consumer,
                vhost,
                queue,
                tag,
                no_ack,
                exclusive,
                prefetch,
                priority,
                credit,
                arguments,
            } => {
                out.put_u64(*req);
                out.put_u64(*consumer);
                put_name(out, vhost);
                put_short(out, queue);
                put_short(out, tag);
                out.put_u8(*no_ack as u8);
                out.put_u8(*exclusive as u8);
                out.put_u32(*prefetch);
                out.put_i32(*priority);
                out.put_u32(*credit);
                put_blob(out, arguments);
            }
            QueueMsg::Cancel { consumer }
            | QueueMsg::Cancelled { consumer }
            | QueueMsg::Drain { consumer }
            | QueueMsg::Drained { consumer } => out.put_u64(*consumer),
            QueueMsg::Deliver {
                consumer,
                seq,
                redelivered,
                message,
            } => {
                out.put_u64(*consumer);
                out.put_u64(*seq);
                out.put_u8(*redelivered as u8);
                put_message(out, message);
            }
            QueueMsg::Credit { consumer, credit } => {
                out.put_u64(*consumer);
                out.put_u32(*credit);
            }
            QueueMsg::Settle { consumer, how, seqs } => {
                out.put_u64(*consumer);
                out.put_u8(*how);
                out.put_u32(seqs.len() as u32);
                for s in seqs {
                    out.put_u64(*s);
                }
            }
            QueueMsg::Get {
                req,
                vhost,
                queue,
                no_ack,
            } => {
                out.put_u64(*req);
                put_name(out, vhost);
                put_short(out, queue);
                out.put_u8(*no_ack as u8);
            }
            QueueMsg::Got {
                req,
                handle,
                redelivered,
                remaining,
                message,
            } => {
                out.put_u64(*req);
                out.put_u64(*handle);
                out.put_u8(*redelivered as u8);
                out.put_u64(*remaining);
                put_message(out, message);
            }
            QueueMsg::Purge { req, vhost, queue } => {
                out.put_u64(*req);
                put_name(out, vhost);
                put_short(out, queue);
            }
            QueueMsg::Answer {
                req,
                code,
                text,
                value,
            } => {
                out.put_u64(*req);
                out.put_u16(*code);
                put_name(out, text);
                out.put_u64(*value);
            }
            QueueMsg::Figures { queues } => {
                out.put_u32(queues.len() as u32);
                for f in queues {
                    put_name(out, &f.vhost);
                    put_short(out, &f.queue);
                    out.put_u64(f.ready);
                    out.put_u64(f.unacked);
                    out.put_u32(f.consumers);
                    out.put_u64(f.ready_bytes);
                    match &f.view {
                        None => out.put_u8(0),
                        Some(v) => {
                            out.put_u8(1);
                            put_name(out, &v.leader);
                            put_names(out, &v.members);
                            put_names(out, &v.online);
                        }
                    }
                }
            }
            QueueMsg::Reply { name, message } => {
                put_short(out, name);
                put_message(out, message);
            }
        }
    }

    /// Decode a queue-protocol frame's fields (the caller checks nothing
    /// is left over).
    pub(crate) fn decode_fields(kind: u8, r: &mut Reader) -> Result<QueueMsg, CodecError> {
        Ok(match kind {
            kind::PUBLISH => QueueMsg::Publish {
                id: r.u64("publish id")?,
                vhost: r.name("publish vhost")?,
                queue: short(r, "publish queue")?,
                message: message(r)?,
            },
            kind::CONFIRM => QueueMsg::Confirm {
                first: r.u64("confirm first")?,
                count: r.u32("confirm count")?,
                ok: r.bool("confirm ok")?,
            },
            kind::CONSUME => QueueMsg::Consume {
                req: r.u64("consume req")?,
                consumer: r.u64("consume consumer")?,
                vhost: r.name("consume vhost")?,
                queue: short(r, "consume queue")?,
                tag: short(r, "consume tag")?,
                no_ack: r.bool("consume no_ack")?,
                exclusive: r.bool("consume exclusive")?,
                prefetch: r.u32("consume prefetch")?,
                priority: r.u32("consume priority")? as i32,
                credit: r.u32("consume credit")?,
                arguments: r.blob("consume arguments")?,
            },
            kind::CANCEL => QueueMsg::Cancel {
                consumer: r.u64("cancel consumer")?,
            },
            kind::DELIVER => QueueMsg::Deliver {
                consumer: r.u64("deliver consumer")?,
                seq: r.u64("deliver seq")?,
                redelivered: r.bool("deliver redelivered")?,
                message: message(r)?,
            },
            kind::CREDIT => QueueMsg::Credit {
                consumer: r.u64("credit consumer")?,
                credit: r.u32("credit credit")?,
            },
            kind::SETTLE => {
                let consumer = r.u64("settle consumer")?;
                let how = r.u8("settle how")?;
                if how > settle::DISCARD {
                    return Err(CodecError::Invalid(format!("settle how {how}")));
                }
                let n = r.u32("settle count")? as usize;
                // A count the frame cannot hold is refused before
                // anything is reserved.
                if n > r.remaining() / 8 {
                    return Err(CodecError::Invalid(format!(
                        "settle of {n} deliveries in {} bytes",
                        r.remaining()
                    )));
                }
                let mut seqs = Vec::with_capacity(n);
                for _ in 0..n {
                    seqs.push(r.u64("settle seq")?);
                }
                QueueMsg::Settle { consumer, how, seqs }
            }
            kind::CANCELLED => QueueMsg::Cancelled {
                consumer: r.u64("cancelled consumer")?,
            },
            kind::DRAIN => QueueMsg::Drain {
                consumer: r.u64("drain consumer")?,
            },
            kind::DRAINED => QueueMsg::Drained {
                consumer: r.u64("drained consumer")?,
            },
            kind::GET => QueueMsg::Get {
                req: r.u64("get req")?,
                vhost: r.name("get vhost")?,
                queue: short(r, "get queue")?,
                no_ack: r.bool("get no_ack")?,
            },
            kind::GOT => QueueMsg::Got {
                req: r.u64("got req")?,
                handle: r.u64("got handle")?,
                redelivered: r.bool("got redelivered")?,
                remaining: r.u64("got remaining")?,
                message: message(r)?,
            },
            kind::PURGE => QueueMsg::Purge {
                req: r.u64("purge req")?,
                vhost: r.name("purge vhost")?,
                queue: short(r, "purge queue")?,
            },
            kind::ANSWER => QueueMsg::Answer {
                req: r.u64("answer req")?,
                code: r.u16("answer code")?,
                text: r.name("answer text")?,
                value: r.u64("answer value")?,
            },
            kind::FIGURES => {
                let n = r.u32("figures count")? as usize;
                if n > r.remaining() / FIGURES_MIN {
                    return Err(CodecError::Invalid(format!(
                        "figures of {n} queues in {} bytes",
                        r.remaining()
                    )));
                }
                let mut queues = Vec::with_capacity(n);
                for _ in 0..n {
                    queues.push(Figures {
                        vhost: r.name("figures vhost")?,
                        queue: short(r, "figures queue")?,
                        ready: r.u64("figures ready")?,
                        unacked: r.u64("figures unacked")?,
                        consumers: r.u32("figures consumers")?,
                        ready_bytes: r.u64("figures ready_bytes")?,
                        view: match r.u8("figures view")? {
                            0 => None,
                            1 => Some(View {
                                leader: r.name("figures leader")?,
                                members: names(r, "figures members")?,
                                online: names(r, "figures online")?,
                            }),
                            x => return Err(CodecError::Invalid(format!("figures view flag {x}"))),
                        },
                    });
                }
                QueueMsg::Figures { queues }
            }
            kind::REPLY => QueueMsg::Reply {
                name: short(r, "reply name")?,
                message: message(r)?,
            },
            k => return Err(CodecError::UnknownKind(k)),
        })
    }
}

#[cfg(test)]
pub(crate) fn examples() -> Vec<QueueMsg> {
    let m = WireMessage {
        exchange: Bytes::from_static(b"amq.direct"),
        routing_key: Bytes::from_static(b"\xffkey"),
        properties: Bytes::from_static(&[0x10, 0x00, 2]),
        body: Bytes::from_static(b"hello"),
    };
    vec![
        QueueMsg::Publish {
            id: 1,
            vhost: "/".into(),
            queue: Bytes::from_static(b"q"),
            message: m.clone(),
        },
        QueueMsg::Confirm {
            first: 1,
            count: 3,
            ok: false,
        },
        QueueMsg::Consume {
            req: 2,
            consumer: 9,
            vhost: "v".into(),
            queue: Bytes::from_static(b"q"),
            tag: Bytes::from_static(b"amq.ctag-1"),
            no_ack: false,
            exclusive: true,
            prefetch: 10,
            priority: -5,
            credit: 256,
            arguments: Bytes::new(),
        },
        QueueMsg::Cancel { consumer: 9 },
        QueueMsg::Deliver {
            consumer: 9,
            seq: 77,
            redelivered: true,
            message: m.clone(),
        },
        QueueMsg::Credit {
            consumer: 9,
            credit: 64,
        },
        QueueMsg::Settle {
            consumer: 9,
            how: settle::REQUEUE,
            seqs: vec![1, 2, u64::MAX],
        },
        QueueMsg::Cancelled { consumer: 9 },
        QueueMsg::Drain { consumer: 10 },
        QueueMsg::Drained { consumer: 11 },
        QueueMsg::Get {
            req: 3,
            vhost: "/".into(),
            queue: Bytes::new(),
            no_ack: true,
        },
        QueueMsg::Got {
            req: 3,
            handle: 4,
            redelivered: false,
            remaining: 10,
            message: m,
        },
        QueueMsg::Purge {
            req: 5,
            vhost: "/".into(),
            queue: Bytes::from_static(b"q"),
        },
        QueueMsg::Answer {
            req: 5,
            code: 404,
            text: "NOT_FOUND".into(),
            value: 0,
        },
        QueueMsg::Figures {
            queues: vec![Figures {
                vhost: "/".into(),
                queue: Bytes::from_static(b"q"),
                ready: 3,
                unacked: 2,
                consumers: 1,
                ready_bytes: 300,
                view: None,
            }],
        },
        QueueMsg::Figures {
            queues: vec![Figures {
                vhost: "/".into(),
                queue: Bytes::from_static(b"qq"),
                ready: 0,
                unacked: 0,
                consumers: 0,
                ready_bytes: 0,
                view: Some(View {
                    leader: "warren@b".into(),
                    members: vec!["warren@a".into(), "warren@b".into()],
                    online: vec!["warren@b".into()],
                }),
            }],
        },
        QueueMsg::Figures { queues: vec![] },
        QueueMsg::Reply {
            name: Bytes::from_static(b"amq.rabbitmq.reply-to.bm9kZQ.abc"),
            message: WireMessage {
                exchange: Bytes::new(),
                routing_key: Bytes::from_static(b"amq.rabbitmq.reply-to.bm9kZQ.abc"),
                properties: Bytes::new(),
                body: Bytes::from_static(b"42"),
            },
        },
    ]
}
