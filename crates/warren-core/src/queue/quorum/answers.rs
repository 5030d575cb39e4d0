//! What a member does with its own clients' gets and purges once their
//! entries are applied (the asker hears then, in the log's order), and
//! a return that carries a message's new properties (a modified
//! outcome's annotations), which every member stores anew.

use std::time::Instant;

use bytes::Bytes;
use warren_fifo::{Command, Effect, MsgId};

use super::super::{Ctx, Entry, Promise};
use super::{encode_message, with_delivery_count, QuorumQueue};
use crate::message::Message;

/// A get or purge of this node's clients, proposed and waiting to be
/// applied (answered then, in the log's order).
#[derive(Debug)]
pub(super) enum Waiting {
    Get {
        no_ack: bool,
        promise: Promise<Option<(Entry, u64)>>,
        at: Instant,
    },
    Purge {
        promise: Promise<u64>,
        at: Instant,
    },
}

impl Waiting {
    pub(super) fn at(&self) -> Instant {
        match self {
            Waiting::Get { at, .. } | Waiting::Purge { at, .. } => *at,
        }
    }
}

impl QuorumQueue {
    /// Message `id` takes new properties (kept in its body, as every
    /// member keeps it).
    pub(super) fn reannotate(&mut self, id: MsgId, properties: Bytes) {
        let Some(old) = self.bodies.take(id, true) else {
            return;
        };
        let mut m = Message::clone(&old);
        m.raw_properties = properties;
        let mut raw = Vec::with_capacity(m.memory_size());
        encode_message(&m, &mut raw);
        if let Err(e) = self.bodies.insert(id, Bytes::from(raw)) {
            tracing::error!(
                group = self.group,
                id,
                "a re-annotated message that does not decode: {e}"
            );
        }
    }

    /// This node's get or purge is applied: its asker hears what it did.
    /// A get's message is taken out of `effects` (what is left there of
    /// this node's gets is what no one waits for any more).
    pub(super) fn answer(&mut self, ctx: &mut Ctx, w: Waiting, effects: &mut Vec<Effect>) {
        match w {
            Waiting::Purge { promise, .. } => {
                let n = effects
                    .iter()
                    .find_map(|e| match e {
                        Effect::Purged(n) => Some(*n),
                        _ => None,
                    })
                    .unwrap_or(0);
                let _ = promise.keep(n);
            }
            Waiting::Get { no_ack, promise, .. } => {
                let getter = self.getter();
                let at = effects
                    .iter()
                    .position(|e| matches!(e, Effect::Dequeued { consumer, .. } if *consumer == getter));
                let Some(at) = at else {
                    let _ = promise.keep(None);
                    return;
                };
                let Effect::Dequeued { header: h, .. } = effects.remove(at) else {
                    unreachable!("found above")
                };
                let Some(mut message) = self.bodies.get(h.id) else {
                    // Lost (a segment record found corrupt): settled, so
                    // it holds nothing.
                    tracing::error!(
                        group = self.group,
                        id = h.id,
                        "a quorum queue message without its body, dropped"
                    );
                    let _ = promise.keep(None);
                    if !no_ack {
                        self.propose(
                            0,
                            &Command::Settle {
                                consumer: getter,
                                ids: vec![h.id],
                            },
                        );
                    }
                    return;
                };
                if h.delivery_count > 0 {
                    message = with_delivery_count(&message, h.delivery_count);
                }
                let entry = Entry {
                    seq: h.id,
                    message,
                    redelivered: h.acquired_count > 1,
                    delivery_count: h.delivery_count,
                    expires_at: None,
                    stored: false,
                    annotated: false,
                };
                ctx.queue.count_get(&entry, no_ack);
                if promise.keep(Some((entry, self.fifo.ready() as u64))).is_err() && !no_ack {
                    // The asker is gone (its channel closed): back it goes.
                    self.propose(
                        0,
                        &Command::Return {
                            consumer: getter,
                            ids: vec![h.id],
                            failed: false,
                            now: 0,
                            until: 0,
                        },
                    );
                }
            }
        }
    }
}
