//! Topology methods (0-9-1 exchange and queue classes): declare, delete,
//! bind, unbind, purge. The rules live in `warren_core::VHost`; this module
//! resolves channel shortcuts, checks permissions (configure to declare
//! or delete; write on the destination and read on the source to bind;
//! read to purge), applies `nowait`, and writes replies. On a cluster a
//! change goes through the metadata group (`warren_node::topology`): the
//! method finishes, and replies, once a majority has it.

use warren_amqp091::methods::*;
use warren_amqp091::ShortStr;
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};
use warren_core::queue::Answer;
use warren_core::{Access, BrokerError, Resource};

use super::channel::Channel;
use super::error::Result;
use super::generated_name;
use crate::conn::{after_cluster, remote_home_up, Conn};
use warren_node::reply_to;
use warren_node::topology;

/// Is this node part of a cluster (topology changes go through it)?
fn clustered(conn: &Conn) -> bool {
    conn.ctx.meta.is_some()
}

// Class and method ids (0-9-1 spec): the methods that can wait.
const EXCHANGE_DECLARE: (u16, u16) = (40, 10);
const EXCHANGE_DELETE: (u16, u16) = (40, 20);
const EXCHANGE_BIND: (u16, u16) = (40, 30);
const EXCHANGE_UNBIND: (u16, u16) = (40, 40);
const QUEUE_DECLARE: (u16, u16) = (50, 10);
const QUEUE_BIND: (u16, u16) = (50, 20);
const QUEUE_PURGE: (u16, u16) = (50, 30);
const QUEUE_DELETE: (u16, u16) = (50, 40);
const QUEUE_UNBIND: (u16, u16) = (50, 50);

pub fn exchange_declare(conn: &mut Conn, ch: &mut Channel, m: ExchangeDeclare) -> Result<()> {
    let vh = conn.vhost()?;
    if m.passive {
        vh.check_exchange(&m.exchange)?;
    } else {
        conn.check_declare(Resource::Exchange, &m.exchange, &m.arguments)?;
        let d = ExchangeDecl {
            name: m.exchange,
            kind: m.kind,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            arguments: m.arguments,
        };
        if clustered(conn) {
            let ctx = conn.ctx.clone();
            let work = async move { topology::declare_exchange(&ctx, &vh, d).await };
            after_cluster(conn, ch, EXCHANGE_DECLARE, work, move |conn, ch, _| {
                if !m.no_wait {
                    conn.send(ch.id, ExchangeDeclareOk {});
                }
                Ok(())
            });
            return Ok(());
        }
        vh.declare_exchange(d)?;
    }
    if !m.no_wait {
        conn.send(ch.id, ExchangeDeclareOk {});
    }
    Ok(())
}

pub fn exchange_delete(conn: &mut Conn, ch: &mut Channel, m: ExchangeDelete) -> Result<()> {
    conn.check(Access::Configure, Resource::Exchange, &m.exchange)?;
    if clustered(conn) {
        let (ctx, vh) = (conn.ctx.clone(), conn.vhost()?);
        let work = async move { topology::delete_exchange(&ctx, &vh, &m.exchange, m.if_unused).await };
        after_cluster(conn, ch, EXCHANGE_DELETE, work, move |conn, ch, _| {
            if !m.no_wait {
                conn.send(ch.id, ExchangeDeleteOk {});
            }
            Ok(())
        });
        return Ok(());
    }
    conn.vhost()?.delete_exchange(&m.exchange, m.if_unused)?;
    if !m.no_wait {
        conn.send(ch.id, ExchangeDeleteOk {});
    }
    Ok(())
}

pub fn exchange_bind(conn: &mut Conn, ch: &mut Channel, m: ExchangeBind) -> Result<()> {
    let b = Binding {
        destination: Destination::Exchange(m.destination),
        routing_key: m.routing_key,
        arguments: m.arguments,
    };
    conn.check_bind(&m.source, &b)?;
    if clustered(conn) {
        let (ctx, vh) = (conn.ctx.clone(), conn.vhost()?);
        let work = async move { topology::bind(&ctx, &vh, &m.source, b).await };
        after_cluster(conn, ch, EXCHANGE_BIND, work, move |conn, ch, _| {
            if !m.no_wait {
                conn.send(ch.id, ExchangeBindOk {});
            }
            Ok(())
        });
        return Ok(());
    }
    conn.vhost()?.bind(&m.source, b)?;
    if !m.no_wait {
        conn.send(ch.id, ExchangeBindOk {});
    }
    Ok(())
}

pub fn exchange_unbind(conn: &mut Conn, ch: &mut Channel, m: ExchangeUnbind) -> Result<()> {
    let b = Binding {
        destination: Destination::Exchange(m.destination),
        routing_key: m.routing_key,
        arguments: m.arguments,
    };
    conn.check_bind(&m.source, &b)?;
    if clustered(conn) {
        let (ctx, vh) = (conn.ctx.clone(), conn.vhost()?);
        let work = async move { topology::unbind(&ctx, &vh, &m.source, b).await };
        after_cluster(conn, ch, EXCHANGE_UNBIND, work, move |conn, ch, _| {
            if !m.no_wait {
                conn.send(ch.id, ExchangeUnbindOk {});
            }
            Ok(())
        });
        return Ok(());
    }
    conn.vhost()?.unbind(&m.source, &b)?;
    if !m.no_wait {
        conn.send(ch.id, ExchangeUnbindOk {});
    }
    Ok(())
}

pub fn queue_declare(conn: &mut Conn, ch: &mut Channel, m: QueueDeclare) -> Result<()> {
    let vh = conn.vhost()?;
    // The direct reply-to pseudo-queue can only be declared passively.
    if m.queue.starts_with(reply_to::PSEUDO_QUEUE) {
        let alive = if m.queue.as_bytes() == reply_to::PSEUDO_QUEUE.as_bytes() {
            ch.reply_consumer.is_some()
        } else {
            conn.ctx.reply_alive(&m.queue)
        };
        if !alive {
            return Err(
                BrokerError::NotFound(format!("no queue '{}' in vhost '{}'", m.queue, vh.name)).into(),
            );
        }
        if !m.no_wait {
            conn.send(
                ch.id,
                QueueDeclareOk {
                    queue: m.queue,
                    message_count: 0,
                    consumer_count: 1,
                },
            );
        }
        return Ok(());
    }
    let (q, created) = if m.passive {
        let name = ch.queue_name(&m.queue)?;
        let q = vh.queue(&name, conn.id)?;
        remote_home_up(conn, &q)?;
        if !m.no_wait {
            q.touch();
        }
        (q, false)
    } else {
        let generated = m.queue.is_empty();
        let name = if generated {
            ShortStr::from(generated_name("amq.gen-"))
        } else {
            m.queue
        };
        conn.check_declare(Resource::Queue, &name, &m.arguments)?;
        let decl = QueueDecl {
            name,
            durable: m.durable,
            exclusive: m.exclusive,
            auto_delete: m.auto_delete,
            arguments: m.arguments,
        };
        if clustered(conn) {
            let (ctx, id) = (conn.ctx.clone(), conn.id);
            let exclusive = decl.exclusive;
            if exclusive {
                conn.exclusive_pending += 1;
            }
            let work = async move { topology::declare_queue(&ctx, &vh, decl, id, !generated).await };
            after_cluster(conn, ch, QUEUE_DECLARE, work, move |conn, ch, (q, created)| {
                if exclusive {
                    conn.exclusive_pending -= 1;
                }
                if created && q.exclusive_owner.is_some() {
                    conn.exclusive.push(q.clone());
                }
                declare_ok(conn, ch, &q, m.no_wait);
                Ok(())
            });
            return Ok(());
        }
        // Server-generated names carry the reserved prefix by design.
        if generated {
            vh.declare_queue_unchecked(decl, conn.id)?
        } else {
            vh.declare_queue(decl, conn.id)?
        }
    };
    if created {
        if q.exclusive_owner.is_some() {
            conn.exclusive.push(q.clone());
        }
        if q.needs_timer() {
            conn.ctx.timers.arm(&vh, &q);
        }
    }
    declare_ok(conn, ch, &q, m.no_wait);
    Ok(())
}

/// The channel's last queue is `q`; answer queue.declare.
fn declare_ok(conn: &mut Conn, ch: &mut Channel, q: &warren_core::queue::Queue, no_wait: bool) {
    ch.last_queue = Some(q.name.clone());
    if !no_wait {
        let s = q.stats();
        conn.send(
            ch.id,
            QueueDeclareOk {
                queue: q.name.clone(),
                message_count: s.ready as u32,
                consumer_count: s.consumers,
            },
        );
    }
}

/// The queue for bind/unbind: the shortcut resolved, and exclusive access
/// checked (a missing queue is reported by the bind itself, after the
/// exchange, as RabbitMQ orders it).
fn bind_target(conn: &Conn, ch: &Channel, queue: &ShortStr) -> Result<ShortStr> {
    let name = ch.queue_name(queue)?;
    match conn.vhost()?.queue(&name, conn.id) {
        Err(e @ BrokerError::ResourceLocked(_)) => Err(e.into()),
        _ => Ok(name),
    }
}

pub fn queue_bind(conn: &mut Conn, ch: &mut Channel, m: QueueBind) -> Result<()> {
    let name = bind_target(conn, ch, &m.queue)?;
    // Both empty: the routing key is the queue's name too.
    let key = if m.queue.is_empty() && m.routing_key.is_empty() {
        name.clone()
    } else {
        m.routing_key
    };
    let b = Binding {
        destination: Destination::Queue(name),
        routing_key: key,
        arguments: m.arguments,
    };
    conn.check_bind(&m.exchange, &b)?;
    if clustered(conn) {
        let (ctx, vh) = (conn.ctx.clone(), conn.vhost()?);
        let work = async move { topology::bind(&ctx, &vh, &m.exchange, b).await };
        after_cluster(conn, ch, QUEUE_BIND, work, move |conn, ch, _| {
            if !m.no_wait {
                conn.send(ch.id, QueueBindOk {});
            }
            Ok(())
        });
        return Ok(());
    }
    conn.vhost()?.bind(&m.exchange, b)?;
    if !m.no_wait {
        conn.send(ch.id, QueueBindOk {});
    }
    Ok(())
}

pub fn queue_unbind(conn: &mut Conn, ch: &mut Channel, m: QueueUnbind) -> Result<()> {
    let name = bind_target(conn, ch, &m.queue)?;
    let key = if m.queue.is_empty() && m.routing_key.is_empty() {
        name.clone()
    } else {
        m.routing_key
    };
    let b = Binding {
        destination: Destination::Queue(name),
        routing_key: key,
        arguments: m.arguments,
    };
    conn.check_bind(&m.exchange, &b)?;
    if clustered(conn) {
        let (ctx, vh) = (conn.ctx.clone(), conn.vhost()?);
        let work = async move { topology::unbind(&ctx, &vh, &m.exchange, b).await };
        after_cluster(conn, ch, QUEUE_UNBIND, work, |conn, ch, _| {
            conn.send(ch.id, QueueUnbindOk {});
            Ok(())
        });
        return Ok(());
    }
    conn.vhost()?.unbind(&m.exchange, &b)?;
    conn.send(ch.id, QueueUnbindOk {});
    Ok(())
}

pub fn queue_purge(conn: &mut Conn, ch: &mut Channel, m: QueuePurge) -> Result<()> {
    let name = ch.queue_name(&m.queue)?;
    conn.check(Access::Read, Resource::Queue, &name)?;
    let q = conn.vhost()?.queue(&name, conn.id)?;
    if let (Some(home), Some(client)) = (q.forward_home(), conn.ctx.queue_client.clone()) {
        // Its home (a quorum queue's leader) purges it.
        let work = async move { client.purge(&q, &home).await };
        after_cluster(conn, ch, QUEUE_PURGE, work, move |conn, ch, n| {
            purge_ok(conn, ch.id, m.no_wait, n);
            Ok(())
        });
        return Ok(());
    }
    let (n, effects) = q.purge();
    conn.apply(&q, effects);
    match n {
        Answer::Now(n) => purge_ok(conn, ch.id, m.no_wait, n),
        // A quorum queue's, once applied.
        later => {
            let work = async move { Ok(later.wait().await.unwrap_or(0)) };
            after_cluster(conn, ch, QUEUE_PURGE, work, move |conn, ch, n| {
                purge_ok(conn, ch.id, m.no_wait, n);
                Ok(())
            });
        }
    }
    Ok(())
}

fn purge_ok(conn: &mut Conn, channel: u16, no_wait: bool, purged: u64) {
    if !no_wait {
        conn.send(
            channel,
            QueuePurgeOk {
                message_count: purged as u32,
            },
        );
    }
}

pub fn queue_delete(conn: &mut Conn, ch: &mut Channel, m: QueueDelete) -> Result<()> {
    let name = ch.queue_name(&m.queue)?;
    conn.check(Access::Configure, Resource::Queue, &name)?;
    if clustered(conn) {
        let (ctx, vh, id) = (conn.ctx.clone(), conn.vhost()?, conn.id);
        let n2 = name.clone();
        let work = async move { topology::delete_queue(&ctx, &vh, &n2, m.if_unused, m.if_empty, id).await };
        after_cluster(conn, ch, QUEUE_DELETE, work, move |conn, ch, n| {
            queue_deleted(conn, ch, &name, n, m.no_wait);
            Ok(())
        });
        return Ok(());
    }
    let n = conn
        .vhost()?
        .delete_queue(&name, m.if_unused, m.if_empty, conn.id)?;
    queue_deleted(conn, ch, &name, n, m.no_wait);
    Ok(())
}

fn queue_deleted(conn: &mut Conn, ch: &mut Channel, name: &ShortStr, n: u64, no_wait: bool) {
    conn.exclusive.retain(|q| q.name != *name);
    if !no_wait {
        conn.send(
            ch.id,
            QueueDeleteOk {
                message_count: n as u32,
            },
        );
    }
}
