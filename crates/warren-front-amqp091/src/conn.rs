//! A connection's state as its method handlers see it ([`Conn`]): the
//! login, the vhost and the user's grant, the write buffer, and what
//! waits (a method waiting for the cluster, confirms, flow control); with
//! the checks every handler makes first and the way a method waits for
//! the cluster ([`after_cluster`]). Channels live beside it, in the
//! connection task (`connection.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use warren_amqp091::frame::write_method;
use warren_amqp091::{FieldTable, Method, ShortStr};
use warren_core::exchange::Binding;
use warren_core::queue::{Effects, Queue};
use warren_core::{Access, BrokerError, Grant, Resource, User, VHost};
use warren_node::outbox::Outbox;
use warren_node::ServerCtx;

use crate::channel::Channel;
use crate::error::{AmqpError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Waiting for the 8-octet protocol header.
    Header,
    /// connection.start sent; waiting for start-ok.
    StartOk,
    /// connection.tune sent; waiting for tune-ok.
    TuneOk,
    /// Waiting for connection.open.
    Open,
    Running,
    /// We sent connection.close; only close-ok (or close) matters now.
    Closing,
    Done,
}

/// What the client said it can do (client-properties.capabilities).
#[derive(Debug, Default, Clone, Copy)]
pub struct ClientCaps {
    pub consumer_cancel_notify: bool,
    pub connection_blocked: bool,
    pub authentication_failure_close: bool,
}

/// Connection state that method handlers use; channels live beside it.
pub struct Conn {
    pub id: u64,
    /// Its entry in the connection registry (management API).
    pub entry: Arc<warren_node::connections::Entry>,
    pub ctx: Arc<ServerCtx>,
    pub peer: SocketAddr,
    pub wbuf: BytesMut,
    pub phase: Phase,
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat: u16,
    /// The shortest queue-specific consumer timeout (ms) among this
    /// connection's deliveries so far (its check runs at least as often
    /// as a quarter of it).
    pub shortest_timeout: Option<u64>,
    pub vhost: Option<Arc<VHost>>,
    pub user: Option<User>,
    /// The user's permissions in `vhost`, as they were at connection.open.
    pub grant: Option<Grant>,
    pub outbox: Arc<Outbox>,
    pub caps: ClientCaps,
    /// Exclusive queues this connection declared (deleted when it closes).
    pub exclusive: Vec<Arc<Queue>>,
    /// Exclusive declares sent to the cluster and not answered yet: if
    /// the connection ends first, its teardown looks for their queues.
    pub exclusive_pending: u32,
    /// Has this connection published? Only publishers are blocked by alarms.
    pub published: bool,
    /// connection.blocked sent and reading paused for the memory alarm.
    pub blocked: bool,
    /// Channels with confirms waiting for [`publish::flush_confirms`].
    pub confirm_dirty: Vec<u16>,
    /// Channels with replies waiting for fsync ([`publish::release_synced`]).
    pub sync_channels: Vec<u16>,
    /// Queues that asked this publisher to pause (flow control).
    pub flow_queues: Vec<Arc<Queue>>,
    /// What start-ok said (mechanism, client properties), kept until
    /// connection.open records the login.
    pub hello: Option<Box<warren_node::connections::Login>>,
    /// A method waiting for the cluster (see [`Pending`]).
    pub pending: Option<Pending>,
}

/// What finishes a method once the cluster has answered: its reply, and
/// whatever else the connection must note (an exclusive queue).
pub type Finish = Box<dyn FnOnce(&mut Conn, &mut Channel) -> Result<()> + Send>;

/// A method waiting for the cluster: a topology change proposed to the
/// metadata group, until a majority has it. The connection handles no
/// more input meanwhile (its later frames may depend on the change, as a
/// queue.bind on the queue just declared does), but goes on writing
/// deliveries and confirms.
pub struct Pending {
    pub channel: u16,
    pub work: std::pin::Pin<Box<dyn std::future::Future<Output = Finish> + Send>>,
}

impl Conn {
    /// Finish the current method on `channel` once `work` is done.
    pub fn wait_for(
        &mut self,
        channel: u16,
        work: impl std::future::Future<Output = Finish> + Send + 'static,
    ) {
        self.pending = Some(Pending {
            channel,
            work: Box::pin(work),
        });
    }
}

impl Conn {
    /// Queue a method frame for writing.
    pub fn send(&mut self, channel: u16, m: impl Into<Method>) {
        write_method(&mut self.wbuf, channel, &m.into());
    }

    pub fn vhost(&self) -> Result<Arc<VHost>> {
        self.vhost
            .clone()
            .ok_or_else(|| AmqpError::new(504, "connection not open"))
    }

    /// The permission check every operation on a named resource makes
    /// first (access-control guide; a refusal is 403, a channel error).
    pub fn check(&self, access: Access, kind: Resource, name: &ShortStr) -> Result<()> {
        Ok(self.grant()?.check(access, kind, &name.to_str_lossy())?)
    }

    pub fn grant(&self) -> Result<&Grant> {
        self.grant
            .as_ref()
            .ok_or_else(|| AmqpError::new(504, "connection not open"))
    }

    /// [`Grant::check_bind`]: write on the destination, read on the
    /// source, and read on the binding key when the source is a topic
    /// exchange with a topic permission.
    pub fn check_bind(&self, source: &ShortStr, b: &Binding) -> Result<()> {
        let vh = self.vhost()?;
        Ok(self
            .grant()?
            .check_bind(&vh, &source.to_str_lossy(), &b.destination, &b.routing_key)?)
    }

    /// [`Grant::check_declare`]: configure, and the dead letter or
    /// alternate exchange's checks.
    pub fn check_declare(&self, kind: Resource, name: &ShortStr, args: &FieldTable) -> Result<()> {
        Ok(self.grant()?.check_declare(kind, &name.to_str_lossy(), args)?)
    }

    /// Carry out a queue call's effects (dead letters, auto-delete, timers).
    pub fn apply(&self, queue: &Arc<Queue>, effects: Effects) {
        if effects.dead_letters.is_empty() && !effects.delete_queue && !effects.arm_timer {
            return;
        }
        let Some(vh) = self.vhost.as_ref() else { return };
        let timers = &self.ctx.timers;
        vh.apply(queue, effects, &mut |q| timers.arm(vh, q));
    }

    /// Note a queue's request to pause publishing (applied after the batch).
    pub fn flow(&mut self, queue: &Arc<Queue>) {
        if !self.flow_queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
            self.flow_queues.push(queue.clone());
        }
    }

    /// Before tune-ok, frames are limited to the spec minimum (0-9-1 §4.2.3).
    pub(crate) fn inbound_frame_max(&self) -> u32 {
        if self.phase < Phase::Open {
            4096
        } else {
            self.frame_max
        }
    }
}

/// Do `work` through the cluster, then `reply` with what it gave; an
/// error is the method's (`method`: its class and method ids).
pub fn after_cluster<T: Send + 'static>(
    conn: &mut Conn,
    ch: &Channel,
    method: (u16, u16),
    work: impl std::future::Future<Output = std::result::Result<T, BrokerError>> + Send + 'static,
    reply: impl FnOnce(&mut Conn, &mut Channel, T) -> Result<()> + Send + 'static,
) {
    conn.wait_for(ch.id, async move {
        let r = work.await;
        Box::new(move |conn: &mut Conn, ch: &mut Channel| {
            let v = r.map_err(|e| AmqpError::from(e).on(method.0, method.1))?;
            reply(conn, ch, v)
        }) as Finish
    });
}

/// A queue whose home node cannot be reached answers 404, as RabbitMQ's
/// do (its record is there; the queue is not).
pub fn remote_home_up(conn: &Conn, q: &Queue) -> Result<()> {
    if let (Some(home), Some(client)) = (&q.home, &conn.ctx.queue_client) {
        let home = home.to_str_lossy();
        if !client.is_up(&home) {
            return Err(warren_node::cluster::queue_client::home_down(q, &home).into());
        }
    }
    Ok(())
}
