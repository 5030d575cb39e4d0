//! A channel's methods handed to their handlers ([`dispatch`]), and what
//! a closing channel gives back ([`cleanup`]).

use warren_amqp091::methods::*;
use warren_amqp091::Method;

use crate::channel::{Channel, How, Unacked};
use crate::conn::Conn;
use crate::error::{AmqpError, Result};
use crate::{consume, declare, publish};

/// Handle one method on an open channel.
pub fn dispatch(conn: &mut Conn, ch: &mut Channel, m: Method) -> Result<()> {
    let (class_id, method_id) = (m.class_id(), m.method_id());
    if ch.pending.is_some() {
        return Err(AmqpError::new(
            505,
            "expected content header for class 60, got non content header frame instead",
        ));
    }
    let r = match m {
        Method::ChannelOpen(_) => Err(AmqpError::new(504, "second 'channel.open' seen")),
        Method::ChannelFlow(f) => {
            if f.active {
                conn.send(ch.id, ChannelFlowOk { active: true });
                Ok(())
            } else {
                Err(AmqpError::new(540, "active=false"))
            }
        }
        Method::ChannelFlowOk(_) => Ok(()),
        Method::ExchangeDeclare(m) => declare::exchange_declare(conn, ch, m),
        Method::ExchangeDelete(m) => declare::exchange_delete(conn, ch, m),
        Method::ExchangeBind(m) => declare::exchange_bind(conn, ch, m),
        Method::ExchangeUnbind(m) => declare::exchange_unbind(conn, ch, m),
        Method::QueueDeclare(m) => declare::queue_declare(conn, ch, m),
        Method::QueueBind(m) => declare::queue_bind(conn, ch, m),
        Method::QueueUnbind(m) => declare::queue_unbind(conn, ch, m),
        Method::QueuePurge(m) => declare::queue_purge(conn, ch, m),
        Method::QueueDelete(m) => declare::queue_delete(conn, ch, m),
        Method::BasicQos(m) => consume::basic_qos(conn, ch, m),
        Method::BasicConsume(m) => consume::basic_consume(conn, ch, m),
        Method::BasicCancel(m) => consume::basic_cancel(conn, ch, m),
        Method::BasicPublish(m) => publish::basic_publish(conn, ch, m),
        Method::BasicGet(m) => consume::basic_get(conn, ch, m),
        Method::BasicAck(m) => consume::settle(conn, ch, m.delivery_tag, m.multiple, How::Ack),
        Method::BasicNack(m) => consume::settle(conn, ch, m.delivery_tag, m.multiple, How::reject(m.requeue)),
        Method::BasicReject(m) => {
            let how = if m.requeue {
                How::RequeueFailed
            } else {
                How::Discard
            };
            consume::settle(conn, ch, m.delivery_tag, false, how)
        }
        Method::BasicRecover(m) => consume::basic_recover(conn, ch, m.requeue, true),
        Method::BasicRecoverAsync(m) => consume::basic_recover(conn, ch, m.requeue, false),
        Method::TxSelect(_) => publish::tx_select(conn, ch),
        Method::TxCommit(_) => publish::tx_commit(conn, ch),
        Method::TxRollback(_) => publish::tx_rollback(conn, ch),
        Method::ConfirmSelect(m) => {
            if ch.tx.is_some() {
                Err(AmqpError::new(406, "cannot switch from tx to confirm mode"))
            } else {
                ch.confirm = true;
                if !m.nowait {
                    conn.send(ch.id, ConfirmSelectOk {});
                }
                Ok(())
            }
        }
        // Methods only a server sends, or connection methods on a channel.
        _ => Err(AmqpError::new(503, "unimplemented method")),
    };
    r.map_err(|e| e.on(class_id, method_id))
}

/// Release everything a channel holds: cancel its consumers (first, so
/// requeued messages do not come straight back to them), then requeue its
/// unacknowledged messages and forget its direct reply-to name.
pub fn cleanup(conn: &mut Conn, ch: &mut Channel) {
    ch.pending = None;
    ch.tx = None;
    for (_, rec) in ch.consumers.drain() {
        let (_, effects) = rec.queue.cancel(rec.id);
        conn.apply(&rec.queue, effects);
    }
    let unacked: Vec<Unacked> = ch.unacked.drain(..).collect();
    consume::settle_entries(conn, unacked, warren_core::queue::Settle::Requeue);
    if let Some((name, _)) = ch.reply_consumer.take() {
        conn.ctx.replies.unregister(&name);
    }
    ch.confirms.clear();
}
