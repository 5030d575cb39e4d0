//! Publishing over AMQP 1.0: a client's sending link (our receiving end)
//! to a target address. Transfers are assembled (multi-frame, aborted),
//! converted, routed and enqueued; each unsettled one is settled with its
//! outcome (§3.4): accepted once every queue took it (and, for persistent
//! messages on durable queues, once it is on disk), released when nothing
//! was routed, rejected when a queue refused it. Credit is granted per
//! link and topped up as messages arrive, never while a resource alarm is
//! on, so an alarm stops exactly the publishing links; and not while a
//! queue the link published into is over its backlog mark, so a slow queue
//! slows only the links that feed it (seed 000, points 18-24).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_amqp10::messaging::{self, Outcome};
use warren_amqp10::performative::{AmqpError, Transfer};
use warren_core::message::Message;
use warren_core::queue::{PublishOutcome, Queue, Ticket};
use warren_core::stats::Stat;
use warren_core::{Access, BrokerError, Grant, Resource, VHost};

use super::address::{self, Target};
use super::convert;
use warren_node::reply_to;
use warren_node::ServerCtx;

/// Credit a publishing link holds; topped up below half.
pub const LINK_CREDIT: u32 = 500;

/// A message arriving in more than one frame.
#[derive(Debug)]
struct Partial {
    delivery_id: u32,
    settled: bool,
    buf: BytesMut,
}

#[derive(Debug)]
pub struct Publisher {
    pub target: Target,
    /// Credit left, and the delivery-count it counts from (§2.6.7).
    pub credit: u32,
    pub delivery_count: u32,
    partial: Option<Partial>,
    /// Queues over their backlog mark that this link published into: its
    /// credit is not topped up until they drain (per-link flow control).
    pub throttled_by: Vec<Arc<Queue>>,
    /// A request link of the management node: its link name, which pairs
    /// it with the response link (its messages are requests, not
    /// publishes, and `target` is unused).
    pub management: Option<String>,
}

/// What became of one complete transfer.
#[derive(Debug)]
pub struct Published {
    pub delivery_id: u32,
    /// None when the sender settled it already (no disposition owed).
    pub outcome: Option<Outcome>,
    /// Persistent messages on durable queues: settle once these are synced.
    pub tickets: Vec<Ticket>,
    /// Queues that asked publishers to slow down (backlog over the mark).
    pub flow: Vec<Arc<Queue>>,
}

impl Publisher {
    pub fn new(target: Target, delivery_count: u32) -> Publisher {
        Publisher {
            target,
            credit: 0,
            delivery_count,
            partial: None,
            throttled_by: Vec::new(),
            management: None,
        }
    }

    /// The request link of a management link pair named `name`.
    pub fn management(name: String, delivery_count: u32) -> Publisher {
        Publisher {
            management: Some(name),
            ..Publisher::new(Target::PerMessage, delivery_count)
        }
    }

    /// Take one transfer frame; Some once the message is complete.
    pub fn transfer(
        &mut self,
        t: &Transfer,
        payload: Bytes,
        max_message_size: u64,
    ) -> Result<Option<(u32, bool, Bytes)>, AmqpError> {
        let mut p = match self.partial.take() {
            Some(p) => p,
            None => Partial {
                delivery_id: t.delivery_id.ok_or_else(|| {
                    AmqpError::new(
                        "amqp:invalid-field",
                        "the first transfer of a delivery needs a delivery-id",
                    )
                })?,
                settled: t.settled.unwrap_or(false),
                buf: BytesMut::new(),
            },
        };
        if t.aborted {
            // §2.6.14: an aborted delivery is discarded, unsettled.
            self.take_credit();
            return Ok(None);
        }
        if (p.buf.len() + payload.len()) as u64 > max_message_size {
            return Err(AmqpError::new(
                "amqp:link:message-size-exceeded",
                format!("message larger than the maximum of {max_message_size} bytes"),
            ));
        }
        p.buf.extend_from_slice(&payload);
        if t.more {
            self.partial = Some(p);
            return Ok(None);
        }
        self.take_credit();
        Ok(Some((p.delivery_id, p.settled, p.buf.freeze())))
    }

    fn take_credit(&mut self) {
        self.credit = self.credit.saturating_sub(1);
        self.delivery_count = self.delivery_count.wrapping_add(1);
    }
}

/// Resolve a target address at attach, checking that it exists and that
/// the user may write to it.
pub fn attach_target(
    ctx: &ServerCtx,
    vh: &VHost,
    grant: &Grant,
    address: Option<&str>,
    connection: u64,
) -> Result<Target, AmqpError> {
    let target = address::target(address).map_err(|e| AmqpError::new("amqp:invalid-field", e.to_string()))?;
    may_write(grant, &target)?;
    check(ctx, vh, &target, connection)?;
    Ok(target)
}

/// Publishing needs write on the exchange; a queue target publishes
/// through the default exchange (`amq.default`), as in RabbitMQ.
fn may_write(grant: &Grant, target: &Target) -> Result<(), AmqpError> {
    let exchange = match target {
        Target::Queue(_) => "",
        Target::Exchange { exchange, .. } => exchange,
        Target::PerMessage => return Ok(()),
    };
    grant
        .check(Access::Write, Resource::Exchange, exchange)
        .map_err(|e| AmqpError::new("amqp:unauthorized-access", e.to_string()))
}

fn check(ctx: &ServerCtx, vh: &VHost, target: &Target, connection: u64) -> Result<(), AmqpError> {
    match target {
        // A requester's direct reply-to name (RabbitMQ 4.2): there while
        // its link is.
        Target::Queue(q) if q.starts_with(reply_to::PREFIX) => {
            if ctx.reply_alive(q.as_bytes()) {
                Ok(())
            } else {
                Err(AmqpError::new(
                    "amqp:not-found",
                    format!("no queue '{q}' in vhost '{}'", vh.name),
                ))
            }
        }
        Target::Queue(q) => vh
            .queue(q.as_bytes(), connection)
            .map(|_| ())
            .map_err(|e| AmqpError::new("amqp:not-found", e.to_string())),
        Target::Exchange { exchange, .. } => vh
            .check_exchange(exchange.as_bytes())
            .map_err(|e| AmqpError::new("amqp:not-found", e.to_string())),
        Target::PerMessage => Ok(()),
    }
}

/// A reply to a requester's direct reply-to name: straight to its link
/// (here or on its node), accepted at once (RabbitMQ's volatile queue
/// confirms on receipt); released when the requester is gone.
fn reply(ctx: &ServerCtx, name: &str, c: convert::Converted, delivery_id: u32, settled: bool) -> Published {
    let raw = c.properties.to_bytes();
    let delivered = Message::from_publish("".into(), name.into(), raw, c.body)
        .map(|(m, _)| ctx.deliver_reply(name.as_bytes(), Arc::new(m)))
        .unwrap_or(false);
    let outcome = if delivered {
        Outcome::Accepted
    } else {
        Outcome::Released
    };
    Published {
        delivery_id,
        outcome: (!settled).then_some(outcome),
        tickets: Vec::new(),
        flow: Vec::new(),
    }
}

/// Route and enqueue one complete message.
pub fn publish(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    grant: &Grant,
    target: &Target,
    delivery_id: u32,
    settled: bool,
    message: &[u8],
) -> Result<Published, AmqpError> {
    let c = convert::from_amqp10(message).map_err(|e| AmqpError::new("amqp:decode-error", e.to_string()))?;
    let fixed = !matches!(target, Target::PerMessage);
    let target = match target {
        Target::PerMessage => {
            let to = c.to.as_deref();
            match address::target(to) {
                Ok(Target::PerMessage) | Err(_) => {
                    return Ok(Published {
                        delivery_id,
                        outcome: (!settled).then_some(Outcome::Released),
                        tickets: Vec::new(),
                        flow: Vec::new(),
                    })
                }
                Ok(t) => {
                    // The anonymous terminus: each message's `to` is
                    // checked as a link's target would be at attach.
                    may_write(grant, &t)?;
                    t
                }
            }
        }
        t => t.clone(),
    };
    if let Target::Queue(q) = &target {
        if q.starts_with(reply_to::PREFIX) {
            return Ok(reply(ctx, q, c, delivery_id, settled));
        }
    }
    let (exchange, key) = match &target {
        Target::Queue(q) => (String::new(), q.clone()),
        Target::Exchange {
            exchange,
            routing_key,
        } => (exchange.clone(), routing_key.clone()),
        Target::PerMessage => unreachable!("resolved above"),
    };
    grant
        .check_topic_write(vh, exchange.as_bytes(), key.as_bytes())
        .map_err(|e| AmqpError::new("amqp:unauthorized-access", e.to_string()))?;
    ctx.broker.messages.add(Stat::Publish, 1);
    let raw = c.properties.to_bytes();
    let (msg, _) = Message::from_publish(exchange.as_str().into(), key.as_str().into(), raw, c.body)
        .map_err(|e| AmqpError::new("amqp:invalid-field", e.to_string()))?;
    let msg = Arc::new(msg);
    let mut queues: Vec<Arc<Queue>> = Vec::new();
    let headers = c.properties.headers.as_ref();
    if let Err(e) = vh.route(exchange.as_bytes(), &[key.as_bytes()], headers, &mut queues) {
        if fixed {
            // The link's exchange was deleted: RabbitMQ 4 closes the link.
            return Err(AmqpError::new("amqp:not-found", e.to_string()));
        }
        return Ok(Published {
            delivery_id,
            outcome: (!settled).then_some(Outcome::Released),
            tickets: Vec::new(),
            flow: Vec::new(),
        });
    }
    if queues.is_empty() {
        if let (true, Target::Queue(q)) = (fixed, &target) {
            if let Err(BrokerError::NotFound(_)) = vh.queue(q.as_bytes(), 0) {
                // The link's queue was deleted: RabbitMQ 4 closes the
                // link (amqp:resource-deleted), so its publisher hears of
                // it instead of getting released for ever.
                return Err(AmqpError::new(
                    "amqp:resource-deleted",
                    format!("queue '{q}' was deleted"),
                ));
            }
        }
        ctx.broker.messages.add(Stat::Unroutable, 1);
        // RabbitMQ 4 releases a message that no queue took.
        return Ok(Published {
            delivery_id,
            outcome: (!settled).then_some(Outcome::Released),
            tickets: Vec::new(),
            flow: Vec::new(),
        });
    }
    let mut tickets = Vec::new();
    let mut flow = Vec::new();
    let mut accepted = true;
    for q in &queues {
        let (outcome, mut effects) = q.publish(msg.clone());
        if let Some(t) = effects.sync.take() {
            tickets.push(t);
        }
        if effects.flow {
            flow.push(q.clone());
        }
        let timers = &ctx.timers;
        vh.apply(q, effects, &mut |q| timers.arm(vh, q));
        if outcome == PublishOutcome::Rejected {
            accepted = false;
        }
    }
    Ok(Published {
        delivery_id,
        outcome: (!settled).then_some(if accepted {
            Outcome::Accepted
        } else {
            Outcome::Rejected
        }),
        tickets,
        flow,
    })
}

/// The delivery state for an outcome.
pub fn state(o: Outcome) -> warren_amqp10::Value {
    use warren_amqp10::composite::composite;
    match o {
        Outcome::Accepted => messaging::accepted(),
        Outcome::Released => messaging::released(),
        Outcome::Rejected => composite(messaging::REJECTED, vec![]),
        Outcome::Modified => composite(messaging::MODIFIED, vec![]),
        Outcome::Received => composite(messaging::RECEIVED, vec![]),
    }
}
