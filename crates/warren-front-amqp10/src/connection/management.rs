//! The links of RabbitMQ 4's management node (`/management`): a client
//! attaches a pair with one name, a sending link for requests and a
//! receiving link for responses. Requests are answered in order on the
//! response link of the same name, pre-settled, as credit and the
//! session window allow. Responses waiting for credit are bounded: past
//! `BACKLOG` the request link gets no new credit, so a client that asks
//! without reading slows itself down, not the broker.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use warren_amqp10::performative::{AmqpError, Attach, Flow};
use warren_core::queue::SyncWaiter;

use super::receive::write_transfer;
use super::{Conn, Failure};
use crate::management;
use crate::publish::Publisher;

/// Credit a request link holds.
pub(super) const CREDIT: u32 = 8;
/// Responses waiting for credit past which requests get no more credit.
pub(super) const BACKLOG: usize = 16;

/// The response half of a management link pair (our sending end).
#[derive(Debug)]
pub(super) struct Responder {
    pub name: String,
    pub delivery_count: u32,
    pub credit: u32,
    pub pending: VecDeque<Reply>,
}

/// A response in its place in the order: ready, or to be filled in by a
/// task once the answer is known (a purge the queue answers once done).
#[derive(Debug)]
pub(super) enum Reply {
    Ready(Bytes),
    Waiting(Arc<Mutex<Option<Bytes>>>),
}

impl Conn {
    /// The client's request link: we are its receiver.
    pub(super) fn attach_management_requests(&mut self, channel: u16, a: Attach) {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let out = s.outgoing;
        let mut p = Publisher::management(a.name.clone(), a.initial_delivery_count.unwrap_or(0));
        if !self.blocked {
            p.credit = CREDIT;
        }
        let (dc, credit) = (p.delivery_count, p.credit);
        s.publishers.insert(a.handle, p);
        let handle = a.handle;
        self.accept_sending_link(out, a);
        self.send_flow(channel, Some((handle, dc, credit)));
    }

    /// The client's response link: we send on it, pre-settled.
    pub(super) fn attach_management_responses(&mut self, channel: u16, a: Attach) {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let out = s.outgoing;
        s.responders.insert(
            a.handle,
            Responder {
                name: a.name.clone(),
                delivery_count: 0,
                credit: 0,
                pending: VecDeque::new(),
            },
        );
        self.accept_receiving_link(out, a, 1);
    }

    /// `PUT /auth/tokens` (RabbitMQ 4): a connection that logged in with
    /// an OAuth 2 token sends a fresh one, as binary, before the old one
    /// expires. It must verify and be for the same user; its expiry and
    /// scopes replace the old ones. 204, or 401 with the reason.
    fn update_token(&mut self, vhost: &str, body: &warren_amqp10::Value) -> management::Response {
        let refuse = |why: String| management::Response {
            status: 401,
            body: warren_amqp10::Value::String(why),
        };
        if !self.token_login {
            return refuse("this connection did not log in with a token".into());
        }
        let secret = match body {
            warren_amqp10::Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
            warren_amqp10::Value::String(s) => s.clone(),
            _ => return refuse("the body must be the token, as binary".into()),
        };
        let name = self.grant.as_ref().map(|g| g.user.clone()).unwrap_or_default();
        let fresh = match warren_node::login::refresh(&self.ctx, &name, &secret) {
            Ok(u) => u,
            Err(why) => {
                tracing::warn!(user = %name, "token update refused: {why}");
                return refuse(why);
            }
        };
        match warren_node::login::renew(&self.ctx, &self.entry, &fresh, vhost) {
            Ok(grant) => {
                self.grant = Some(grant);
                management::Response {
                    status: 204,
                    body: warren_amqp10::Value::Null,
                }
            }
            Err(e) => refuse(e.to_string()),
        }
    }

    /// One complete request from the link `handle` named `name`: carry it
    /// out and queue the response on the paired link.
    pub(super) fn management_request(
        &mut self,
        channel: u16,
        handle: u32,
        name: &str,
        message: &[u8],
    ) -> Result<(), Failure> {
        let (Some(vh), Some(grant)) = (self.vhost.clone(), self.grant.clone()) else {
            return Ok(());
        };
        let Some(s) = self.sessions.get(&channel) else {
            return Ok(());
        };
        // The pair shares a name; a lone response link serves any.
        let responder = s
            .responders
            .iter()
            .find(|(_, r)| r.name == name)
            .or_else(|| {
                (s.responders.len() == 1)
                    .then(|| s.responders.iter().next())
                    .flatten()
            })
            .map(|(&h, _)| h);
        let Some(responder) = responder else {
            return Err(Failure::Link(
                handle,
                AmqpError::new(
                    "amqp:illegal-state",
                    "a management request needs a response link (source /management) attached first",
                ),
            ));
        };
        let mut out = BytesMut::new();
        match management::parse(message) {
            Ok(req) if req.method == "PUT" && req.path == "/auth/tokens" => {
                let r = self.update_token(&vh.name, &req.body);
                management::encode(req.message_id.as_ref(), &r, &mut out);
            }
            Ok(req) => {
                let done = management::handle(&self.ctx, &vh, &grant, self.id, &req);
                if let Some(q) = done.exclusive {
                    self.exclusive.push(q);
                }
                if let Some(q) = done.created.filter(|q| q.needs_timer()) {
                    self.ctx.timers.arm(&vh, &q);
                }
                if let Some(later) = done.later {
                    let slot = Arc::new(Mutex::new(None));
                    let (filled, wake, id) = (slot.clone(), self.wake.clone(), req.message_id.clone());
                    tokio::spawn(async move {
                        let r = later.0.await;
                        let mut out = BytesMut::new();
                        management::encode(id.as_ref(), &r, &mut out);
                        *filled.lock() = Some(out.freeze());
                        wake.synced();
                    });
                    self.replies_waiting = true;
                    if let Some(r) = self
                        .sessions
                        .get_mut(&channel)
                        .and_then(|s| s.responders.get_mut(&responder))
                    {
                        r.pending.push_back(Reply::Waiting(slot));
                    }
                    return Ok(());
                } else if let Some(r) = done.response {
                    tracing::debug!(method = %req.method, path = %req.path, status = r.status, "management request");
                    management::encode(req.message_id.as_ref(), &r, &mut out);
                }
            }
            Err(e) => {
                let r = management::Response {
                    status: 400,
                    body: warren_amqp10::Value::String(e),
                };
                management::encode(None, &r, &mut out);
            }
        }
        if let Some(r) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.responders.get_mut(&responder))
        {
            r.pending.push_back(Reply::Ready(out.freeze()));
        }
        self.send_responses(channel);
        Ok(())
    }

    /// Woken: responses that were waiting for an answer go if it came.
    pub(super) fn send_waiting_replies(&mut self) {
        if !self.replies_waiting {
            return;
        }
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            self.send_responses(channel);
        }
        self.replies_waiting = self.sessions.values().any(|s| {
            s.responders
                .values()
                .any(|r| r.pending.iter().any(|p| matches!(p, Reply::Waiting(_))))
        });
    }

    /// A flow for a response link: credit (§2.6.7), drain and echo.
    pub(super) fn responder_flow(&mut self, channel: u16, handle: u32, f: &Flow) {
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let Some(r) = s.responders.get_mut(&handle) else {
            return;
        };
        r.credit = sender_credit(r.delivery_count, f);
        self.send_responses(channel);
        let Some(r) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.responders.get_mut(&handle))
        else {
            return;
        };
        if f.drain {
            r.delivery_count = r.delivery_count.wrapping_add(r.credit);
            r.credit = 0;
        }
        if f.drain || f.echo {
            let (dc, credit, available) = (r.delivery_count, r.credit, r.pending.len() as u32);
            self.send_flow_link(channel, handle, dc, credit, f.drain, available);
        }
    }

    /// Send waiting responses while credit and the peer's window allow.
    pub(super) fn send_responses(&mut self, channel: u16) {
        let max_frame = self.peer_max_frame as usize;
        let Some(s) = self.sessions.get_mut(&channel) else {
            return;
        };
        let out = s.outgoing;
        let handles: Vec<u32> = s.responders.keys().copied().collect();
        for handle in handles {
            loop {
                let Some(s) = self.sessions.get_mut(&channel) else {
                    return;
                };
                if s.remote_incoming_window == 0 {
                    return;
                }
                let Some(r) = s.responders.get_mut(&handle) else {
                    break;
                };
                if r.credit == 0 {
                    break;
                }
                let payload = match r.pending.front() {
                    None => break,
                    Some(Reply::Ready(_)) => match r.pending.pop_front() {
                        Some(Reply::Ready(b)) => b,
                        _ => unreachable!("looked at above"),
                    },
                    Some(Reply::Waiting(slot)) => {
                        let Some(b) = slot.lock().take() else { break };
                        r.pending.pop_front();
                        b
                    }
                };
                r.credit -= 1;
                r.delivery_count = r.delivery_count.wrapping_add(1);
                let id = s.next_delivery_id;
                s.next_delivery_id = s.next_delivery_id.wrapping_add(1);
                let frames = write_transfer(&mut self.wbuf, out, max_frame, handle, id, true, &payload);
                s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames);
                s.remote_incoming_window = s.remote_incoming_window.saturating_sub(frames);
            }
        }
    }
}

/// A sending link's credit after the receiver's flow (§2.6.7: its
/// delivery-count plus link-credit, less ours; none if that is behind).
pub(super) fn sender_credit(ours: u32, f: &Flow) -> u32 {
    let theirs = f.delivery_count.unwrap_or(ours);
    let ahead = theirs.wrapping_add(f.link_credit.unwrap_or(0)).wrapping_sub(ours);
    if ahead < 1 << 31 {
        ahead
    } else {
        0
    }
}

/// Is this terminus the management node?
pub(super) fn is_node(address: Option<&str>) -> bool {
    address == Some(management::ADDRESS)
}
