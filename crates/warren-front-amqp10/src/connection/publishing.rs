//! A client's sending links (its publishers): the attach that finds or
//! refuses the target (a queue, an exchange and key, or the anonymous
//! terminus), and each transfer, assembled across frames, routed and
//! settled with its outcome once the queues have it (after fsync for a
//! persistent message on a durable queue).

use std::sync::Arc;

use bytes::Bytes;
use warren_amqp10::messaging::{self, Outcome};
use warren_amqp10::performative::{AmqpError, Attach, Role, Transfer};
use warren_amqp10::Performative;

use super::{second_not_supported, Conn, Failure, Fatal};
use crate::publish::{self, Publisher};

impl Conn {
    /// A client's sending link: resolve and check its target, attach,
    /// and grant credit (unless an alarm is on).
    pub(super) fn attach_publisher(&mut self, channel: u16, a: Attach) {
        let (Some(vh), Some(grant)) = (self.vhost.clone(), self.grant.as_ref()) else {
            return;
        };
        let address = a.target.as_ref().and_then(messaging::address);
        let out = self.sessions.get(&channel).map_or(channel, |s| s.outgoing);
        match publish::attach_target(&self.ctx, &vh, grant, address.as_deref(), self.id) {
            Ok(target) => {
                let handle = a.handle;
                let mut p = Publisher::new(target, a.initial_delivery_count.unwrap_or(0));
                self.accept_sending_link(
                    out,
                    Attach {
                        properties: None,
                        ..a
                    },
                );
                if !self.blocked {
                    p.credit = publish::LINK_CREDIT;
                }
                let (credit, dc) = (p.credit, p.delivery_count);
                if let Some(s) = self.sessions.get_mut(&channel) {
                    s.publishers.insert(handle, p);
                }
                self.send_flow(channel, Some((handle, dc, credit)));
            }
            Err(e) => {
                // §2.6.3: refusing a link is an attach with a null
                // terminus followed at once by a detach with the error.
                self.send(
                    out,
                    &Performative::Attach(Attach {
                        name: a.name,
                        handle: a.handle,
                        role: Role::Receiver,
                        source: a.source,
                        ..Default::default()
                    }),
                );
                self.detach_link(channel, a.handle, Some(e));
            }
        }
    }

    /// Accept a client's sending link (we receive): its settle mode echoed,
    /// receiver settle mode first, its termini and properties echoed.
    pub(super) fn accept_sending_link(&mut self, out: u16, a: Attach) {
        self.send(
            out,
            &Performative::Attach(Attach {
                name: a.name,
                handle: a.handle,
                role: Role::Receiver,
                snd_settle_mode: a.snd_settle_mode,
                rcv_settle_mode: Some(0),
                source: a.source,
                target: a.target,
                max_message_size: Some(self.ctx.config.max_message_size),
                properties: a.properties,
                ..Default::default()
            }),
        );
    }

    /// Accept a client's receiving link (we send) with our settle mode,
    /// its receiver settle mode echoed (second only with pre-settled
    /// deliveries, so nothing waits on it; RabbitMQ 4 echoes it too),
    /// delivery-count from 0, its termini and properties echoed.
    pub(super) fn accept_receiving_link(&mut self, out: u16, a: Attach, snd_settle_mode: u8) {
        self.send(
            out,
            &Performative::Attach(Attach {
                name: a.name,
                handle: a.handle,
                role: Role::Sender,
                snd_settle_mode: Some(snd_settle_mode),
                rcv_settle_mode: Some(a.rcv_settle_mode.unwrap_or(0)),
                source: a.source,
                target: a.target,
                initial_delivery_count: Some(0),
                properties: a.properties,
                ..Default::default()
            }),
        );
    }

    pub(super) fn transfer(&mut self, channel: u16, t: Transfer, payload: Bytes) -> Result<(), Failure> {
        let (Some(vh), Some(grant)) = (self.vhost.clone(), self.grant.clone()) else {
            return Ok(());
        };
        let max = self.ctx.config.max_message_size;
        let Some(s) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        s.next_incoming_id = s.next_incoming_id.wrapping_add(1);
        // §2.5.6. While an alarm holds the window at 0 this still counts
        // down what we had granted before: transfers the peer sent before
        // it saw the closed window were within the rules.
        if s.incoming_window == 0 {
            return Err(Failure::Session(AmqpError::new(
                "amqp:session:window-violation",
                "transfer beyond the incoming window",
            )));
        }
        s.incoming_window -= 1;
        let out = s.outgoing;
        if s.detached.contains(&t.handle) {
            return Ok(()); // sent before the peer saw our detach
        }
        let Some(p) = s.publishers.get_mut(&t.handle) else {
            return Err(Failure::Session(AmqpError::new(
                "amqp:session:unattached-handle",
                format!("transfer on handle {} which is not attached", t.handle),
            )));
        };
        if p.credit == 0 && t.delivery_id.is_some() {
            let e = AmqpError::new(
                "amqp:link:transfer-limit-exceeded",
                "transfer without link credit",
            );
            // Under an alarm the peer was told to stop: one that sends on
            // past its credit is disconnected (seed 000, point 22).
            if self.blocked {
                return Err(Fatal(e).into());
            }
            return Err(Failure::Link(t.handle, e));
        }
        if t.rcv_settle_mode == Some(1) && t.settled != Some(true) && t.delivery_id.is_some() {
            // As at attach: an unsettled transfer asking for mode second.
            return Err(Failure::Link(t.handle, second_not_supported()));
        }
        let Some((delivery_id, settled, message)) = p
            .transfer(&t, payload, max)
            .map_err(|e| Failure::Link(t.handle, e))?
        else {
            return Ok(());
        };
        if let Some(name) = p.management.clone() {
            self.management_request(channel, t.handle, &name, &message)?;
            // RabbitMQ's clients send requests settled; others get them
            // accepted (the answer is the response message).
            if !settled {
                self.settles.push((out, delivery_id, Outcome::Accepted));
            }
            return Ok(());
        }
        let target = p.target.clone();
        let published = publish::publish(&self.ctx, &vh, &grant, &target, delivery_id, settled, &message)
            .map_err(|e| Failure::Link(t.handle, e))?;
        if let Some(p) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.publishers.get_mut(&t.handle))
        {
            for q in &published.flow {
                if !p.throttled_by.iter().any(|x| Arc::ptr_eq(x, q)) {
                    p.throttled_by.push(q.clone());
                }
            }
        }
        if let Some(outcome) = published.outcome {
            if published.tickets.is_empty() && self.unsynced.is_empty() {
                self.settles.push((out, delivery_id, outcome));
            } else {
                self.unsynced
                    .push_back((out, delivery_id, outcome, published.tickets));
            }
        }
        Ok(())
    }
}
