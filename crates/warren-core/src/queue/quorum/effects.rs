//! What a member does with the effects of an entry it applied (the
//! state machine decides; every member computes the same effects): its
//! own consumers' deliveries, bodies dropped once settled, dead-letters
//! sent at least once by the leader, discards and returns answered.

use std::time::Instant;

use warren_fifo::{Command, DeadLetterReason, Effect, MsgId};

use super::{dead_letter_reason, node_of, with_delivery_count, QuorumQueue, Role};
use crate::queue::{Ctx, Entry};

impl QuorumQueue {
    pub(super) fn effects(&mut self, ctx: &mut Ctx, effects: Vec<Effect>) {
        let leads = self.role == Role::Leader;
        let me = self.system.node_id();
        let mut lost = Vec::new();
        let mut discarded = false;
        for e in effects {
            match e {
                Effect::Deliver {
                    consumer,
                    header,
                    redelivered,
                    settled,
                } => {
                    // The consumer's node delivers it, from its own copy;
                    // only it reads a paged body back.
                    let mine = node_of(consumer) == me;
                    let body = if settled {
                        self.bodies.take(header.id, mine)
                    } else if mine {
                        self.bodies.get(header.id)
                    } else {
                        None
                    };
                    if !mine {
                        continue;
                    }
                    let Some(mut message) = body else {
                        // Lost (a segment record found corrupt): the
                        // consumer must not wait for it for ever.
                        tracing::error!(
                            group = self.group,
                            id = header.id,
                            "a quorum queue message without its body, dropped"
                        );
                        if !settled {
                            lost.push((consumer, header.id));
                        }
                        continue;
                    };
                    let Some(l) = self.locals.values_mut().find(|l| l.cid == consumer) else {
                        continue;
                    };
                    if header.delivery_count > 0 {
                        message = with_delivery_count(&message, header.delivery_count);
                    }
                    l.waiting.push_back(Entry {
                        seq: header.id,
                        message,
                        redelivered,
                        delivery_count: header.delivery_count,
                        expires_at: None,
                        stored: false,
                        annotated: false,
                    });
                }
                Effect::DeadLetter { header, reason } => {
                    if let Some(m) = self.bodies.take(header.id, leads) {
                        if leads {
                            ctx.dead_letter(&m, dead_letter_reason(reason));
                        }
                    }
                }
                Effect::Discarded { header, .. } => {
                    // Its body stays until every target has it.
                    if leads {
                        self.dlx.discarded(header.id, Instant::now());
                        discarded = true;
                    }
                }
                Effect::Purged(_) => {}
                Effect::Dequeued {
                    consumer,
                    header,
                    settled: false,
                } if consumer == self.getter() => {
                    // Taken for a get of this node that no one waits for
                    // any more (it timed out): back it goes.
                    self.propose(
                        0,
                        &Command::Return {
                            consumer,
                            ids: vec![header.id],
                            failed: false,
                            now: 0,
                            until: 0,
                        },
                    );
                }
                Effect::Dequeued { .. } => {}
                Effect::Rejected(id) | Effect::Duplicate(id) => {
                    self.bodies.take(id, false);
                }
                Effect::Dropped(ids) => {
                    self.dlx.settled(&ids);
                    for id in ids {
                        self.bodies.take(id, false);
                    }
                }
            }
        }
        for (consumer, id) in lost {
            self.propose(
                0,
                &Command::Settle {
                    consumer,
                    ids: vec![id],
                },
            );
        }
        self.deliver(ctx);
        self.top_up();
        // New dead letters go at once; what is under way is looked at on
        // the queue's timer, not on every entry applied (a scan of them).
        if discarded {
            self.pump_dlx(ctx);
        }
        if leads && self.fifo.next_expiry().is_some() {
            ctx.effects.arm_timer = true;
        }
    }

    /// Publishes waiting to apply that may never be heard of again (a
    /// leader changed, a snapshot replaced the state): nacked, so their
    /// publishers send them again (at least once).
    /// The leader's at-least-once dead-lettering (see `quorum_dlx.rs`):
    /// settle what every target has, send what is due.
    pub(super) fn pump_dlx(&mut self, ctx: &mut Ctx) {
        let now = Instant::now();
        let (settle, send) = self.dlx.poll(now);
        if !settle.is_empty() {
            self.propose(0, &Command::SettleDlx { ids: settle });
        }
        if !send.is_empty() {
            let want: std::collections::BTreeSet<MsgId> = send.into_iter().collect();
            let due: Vec<(MsgId, DeadLetterReason)> = self
                .fifo
                .discards()
                .iter()
                .filter(|(h, _)| want.contains(&h.id))
                .map(|(h, r)| (h.id, *r))
                .collect();
            let (dlx, key) = (
                ctx.config().dead_letter_exchange.clone(),
                ctx.config().dead_letter_routing_key.clone(),
            );
            let mut lost = Vec::new();
            for (id, reason) in due {
                let (Some(m), Some(dlx)) = (self.bodies.get(id), dlx.as_ref()) else {
                    // No body (a corrupt record) or no exchange any more:
                    // nothing can be sent; it goes.
                    tracing::error!(
                        group = self.group,
                        id,
                        "a dead letter that cannot be sent, dropped"
                    );
                    lost.push(id);
                    continue;
                };
                let mut dl = crate::queue::dead_letter::dead_letter(
                    &m,
                    &ctx.queue.name,
                    dead_letter_reason(reason),
                    dlx,
                    key.as_ref(),
                );
                let delivery = crate::queue::dead_letter::Delivery::new();
                dl.confirm = Some(delivery.clone());
                ctx.effects.dead_letters.push(dl);
                self.dlx.sending(id, delivery, now);
            }
            if !lost.is_empty() {
                self.propose(0, &Command::SettleDlx { ids: lost });
            }
        }
        if !self.dlx.is_idle() {
            ctx.effects.arm_timer = true;
        }
    }
}
