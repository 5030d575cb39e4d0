//! The channel handle applications call ([`Channel`]): declares, binds,
//! QoS, transactions, publishes, gets and consumes, each recorded for
//! recovery where it changes the topology. Calls that expect a reply are
//! one at a time per channel, as AMQP 0-9-1 requires; publishes and acks
//! do not wait for them. The state they share with the reader is in
//! `channel_state.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Method, ShortStr};

use super::channel_state::{ChannelState, ConsumerEntry, Reply};
use super::core::Core;
use super::delivery::{Acker, Delivery};
use super::error::Error;
use super::options::{ExchangeKind, ExchangeOptions, QueueOptions};
use super::outbound::Outbound;

use super::topology::{RecordedBinding, RecordedExchange, RecordedQueue, Topology};
use super::wire::Wire;

/// A queue as queue.declare answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredQueue {
    /// Its name (the broker's choice when declared with an empty one).
    pub name: String,
    /// Messages ready in it.
    pub message_count: u32,
    /// Consumers on it.
    pub consumer_count: u32,
}

/// A message taken with basic.get, and how many were left behind it.
#[derive(Debug)]
pub struct GetMessage {
    /// The message.
    pub delivery: Delivery,
    /// Messages still ready in the queue.
    pub message_count: u32,
}

pub(super) struct Inner {
    pub(super) state: Arc<ChannelState>,
    pub(super) core: Arc<Core>,
}

/// An open channel. Clones share it; it is usable from any task. It
/// survives a recovered connection: calls made while the connection is
/// recovering wait for it.
#[derive(Clone)]
pub struct Channel {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.inner.state.id)
            .finish()
    }
}

/// The reply a call expects, or a protocol error naming what came.
macro_rules! expect_reply {
    ($reply:expr, $variant:ident) => {
        match $reply {
            Reply::Method(Method::$variant(ok)) => Ok(ok),
            Reply::Method(other) => Err(Error::Protocol(format!(
                "expected {}, got {other:?}",
                stringify!($variant)
            ))),
            Reply::Got(_) => Err(Error::Protocol(format!(
                "expected {}, got basic.get-ok",
                stringify!($variant)
            ))),
        }
    };
}
pub(super) use expect_reply;

impl Channel {
    pub(crate) fn new(state: Arc<ChannelState>, core: Arc<Core>) -> Channel {
        Channel {
            inner: Arc::new(Inner { state, core }),
        }
    }

    /// The channel's number on its connection.
    pub fn id(&self) -> u16 {
        self.inner.state.id
    }

    /// How many publishes may await their confirms at once before
    /// `publish` waits ([`super::DEFAULT_IN_FLIGHT`] unless set). It applies at
    /// once: publishes already in flight count against the new limit.
    pub fn set_max_in_flight(&self, n: usize) {
        self.inner.state.confirms.lock().max = n.max(1);
        self.inner.state.slot_freed.notify_waiters();
    }

    /// The connection's default consumer concurrency.
    pub(crate) fn default_concurrency(&self) -> usize {
        self.inner.core.settings.consumer_concurrency
    }

    /// Send `m` and wait for its reply, on the wire in use (waiting out a
    /// recovery first).
    pub(super) async fn call(&self, m: impl Into<Method>) -> Result<Reply, Error> {
        self.call_on(m.into(), None).await.map(|(reply, _)| reply)
    }

    /// [`Self::call`], also saying which wire answered; `starting` is the
    /// consumer a basic.consume starts.
    pub(super) async fn call_on(
        &self,
        m: Method,
        starting: Option<ConsumerEntry>,
    ) -> Result<(Reply, Arc<Outbound>), Error> {
        let span = tracing::debug_span!("amqp091.call", channel = self.inner.state.id, method = m.name());
        let call = async {
            loop {
                self.inner.state.check()?;
                let wire = self.inner.core.wire().await?;
                let _one = self.inner.state.calls.lock().await;
                // A recovery may have come between: then wait for it.
                if !self.inner.core.is_current(&wire) {
                    continue;
                }
                let reply = self.inner.state.exchange(&wire.outbound, m, starting).await?;
                return Ok((reply, wire.outbound.clone()));
            }
        };
        tracing::Instrument::instrument(call, span).await
    }

    fn record(&self, f: impl FnOnce(&mut Topology)) {
        f(&mut self.inner.core.topology.lock());
    }

    pub(crate) async fn open(&self, wire: &Wire) -> Result<(), Error> {
        let _one = self.inner.state.calls.lock().await;
        let reply = self
            .inner
            .state
            .exchange(&wire.outbound, ChannelOpen::default().into(), None)
            .await?;
        expect_reply!(reply, ChannelOpenOk).map(|_| ())
    }

    /// Close the channel (reply code 200).
    pub async fn close(&self) -> Result<(), Error> {
        let reply = self
            .call(ChannelClose {
                reply_code: 200,
                reply_text: "closed by the application".into(),
                class_id: 0,
                method_id: 0,
            })
            .await?;
        expect_reply!(reply, ChannelCloseOk)?;
        let id = self.inner.state.id;
        self.inner.core.channels.lock().remove(&id);
        if let Ok(wire) = self.inner.core.wire().await {
            wire.unregister(id);
        }
        self.inner.state.closed(Error::ClosedByClient);
        Ok(())
    }

    /// exchange.declare. Recorded (unless passive) and declared again
    /// after a recovery.
    pub async fn exchange_declare(
        &self,
        name: &str,
        kind: ExchangeKind,
        options: ExchangeOptions,
    ) -> Result<(), Error> {
        let reply = self
            .call(ExchangeDeclare {
                exchange: name.into(),
                kind: kind.as_str().into(),
                passive: options.passive,
                durable: options.durable,
                auto_delete: options.auto_delete,
                internal: options.internal,
                arguments: options.arguments.clone(),
                ..Default::default()
            })
            .await?;
        expect_reply!(reply, ExchangeDeclareOk)?;
        if !options.passive {
            self.record(|t| {
                t.exchange(RecordedExchange {
                    name: name.to_string(),
                    kind,
                    options,
                })
            });
        }
        Ok(())
    }

    /// exchange.delete.
    pub async fn exchange_delete(&self, name: &str, if_unused: bool) -> Result<(), Error> {
        let reply = self
            .call(ExchangeDelete {
                exchange: name.into(),
                if_unused,
                ..Default::default()
            })
            .await?;
        expect_reply!(reply, ExchangeDeleteOk)?;
        self.record(|t| t.exchange_deleted(name));
        Ok(())
    }

    /// exchange.bind: route what `source` routes with `routing_key` on to
    /// `destination` (a RabbitMQ extension).
    pub async fn exchange_bind(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.binding(true, binding(true, destination, source, routing_key, arguments))
            .await
    }

    /// exchange.unbind.
    pub async fn exchange_unbind(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.binding(false, binding(true, destination, source, routing_key, arguments))
            .await
    }

    /// queue.declare; an empty `name` asks the broker for one. Recorded
    /// (unless passive) and declared again after a recovery, a
    /// broker-named queue under a new name
    /// ([`super::Event::QueueRenamed`]).
    pub async fn queue_declare(&self, name: &str, options: QueueOptions) -> Result<DeclaredQueue, Error> {
        let reply = self
            .call(QueueDeclare {
                queue: name.into(),
                passive: options.passive,
                durable: options.durable,
                exclusive: options.exclusive,
                auto_delete: options.auto_delete,
                arguments: options.arguments.clone(),
                ..Default::default()
            })
            .await?;
        let ok = expect_reply!(reply, QueueDeclareOk)?;
        let declared = DeclaredQueue {
            name: ok.queue.to_str_lossy().into_owned(),
            message_count: ok.message_count,
            consumer_count: ok.consumer_count,
        };
        if !options.passive {
            self.record(|t| {
                t.queue(RecordedQueue {
                    name: declared.name.clone(),
                    options,
                    server_named: name.is_empty(),
                })
            });
        }
        Ok(declared)
    }

    /// queue.bind.
    pub async fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.binding(true, binding(false, queue, exchange, routing_key, arguments))
            .await
    }

    /// queue.unbind.
    pub async fn queue_unbind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.binding(false, binding(false, queue, exchange, routing_key, arguments))
            .await
    }

    /// Make (`bind`) or remove binding `b`, and record that for recovery.
    async fn binding(&self, bind: bool, b: RecordedBinding) -> Result<(), Error> {
        let (destination, source) = (b.destination.as_str().into(), b.source.as_str().into());
        let (routing_key, arguments) = (b.routing_key.as_str().into(), b.arguments.clone());
        let m: Method = match (b.to_exchange, bind) {
            (true, true) => ExchangeBind {
                destination,
                source,
                routing_key,
                arguments,
                ..Default::default()
            }
            .into(),
            (true, false) => ExchangeUnbind {
                destination,
                source,
                routing_key,
                arguments,
                ..Default::default()
            }
            .into(),
            (false, true) => QueueBind {
                queue: destination,
                exchange: source,
                routing_key,
                arguments,
                ..Default::default()
            }
            .into(),
            (false, false) => QueueUnbind {
                queue: destination,
                exchange: source,
                routing_key,
                arguments,
                ..Default::default()
            }
            .into(),
        };
        match self.call(m).await? {
            Reply::Method(
                Method::ExchangeBindOk(_)
                | Method::ExchangeUnbindOk(_)
                | Method::QueueBindOk(_)
                | Method::QueueUnbindOk(_),
            ) => {}
            Reply::Method(other) => {
                return Err(Error::Protocol(format!("expected a binding's ok, got {other:?}")))
            }
            Reply::Got(_) => {
                return Err(Error::Protocol(
                    "expected a binding's ok, got basic.get-ok".into(),
                ))
            }
        }
        self.record(|t| match bind {
            true => t.bind(b),
            false => t.unbind(&b),
        });
        Ok(())
    }

    /// queue.purge: how many messages went.
    pub async fn queue_purge(&self, queue: &str) -> Result<u32, Error> {
        let reply = self
            .call(QueuePurge {
                queue: queue.into(),
                ..Default::default()
            })
            .await?;
        expect_reply!(reply, QueuePurgeOk).map(|ok| ok.message_count)
    }

    /// queue.delete: how many messages went with it.
    pub async fn queue_delete(&self, queue: &str, if_unused: bool, if_empty: bool) -> Result<u32, Error> {
        let reply = self
            .call(QueueDelete {
                queue: queue.into(),
                if_unused,
                if_empty,
                ..Default::default()
            })
            .await?;
        let ok = expect_reply!(reply, QueueDeleteOk)?;
        self.record(|t| t.queue_deleted(queue));
        Ok(ok.message_count)
    }

    /// basic.qos for this channel's consumers: at most `prefetch`
    /// unacknowledged deliveries each (0: no limit). Consumers started
    /// after it buffer that many.
    pub async fn basic_qos(&self, prefetch: u16) -> Result<(), Error> {
        let reply = self
            .call(BasicQos {
                prefetch_count: prefetch,
                ..Default::default()
            })
            .await?;
        expect_reply!(reply, BasicQosOk)?;
        self.inner.state.prefetch.store(prefetch, Ordering::Relaxed);
        Ok(())
    }

    /// basic.recover: the broker delivers again every message this
    /// channel has not acknowledged (`requeue` true puts them back in
    /// their queues for any consumer; RabbitMQ refuses false).
    pub async fn basic_recover(&self, requeue: bool) -> Result<(), Error> {
        expect_reply!(self.call(BasicRecover { requeue }).await?, BasicRecoverOk).map(|_| ())
    }

    /// confirm.select: from now on each publish's [`super::Confirm`] resolves to
    /// the broker's answer.
    pub async fn confirm_select(&self) -> Result<(), Error> {
        let reply = self.call(ConfirmSelect::default()).await?;
        expect_reply!(reply, ConfirmSelectOk)?;
        self.inner.state.confirms.lock().enable();
        Ok(())
    }

    /// tx.select.
    pub async fn tx_select(&self) -> Result<(), Error> {
        expect_reply!(self.call(TxSelect {}).await?, TxSelectOk)?;
        self.inner.state.transactional.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// tx.commit.
    pub async fn tx_commit(&self) -> Result<(), Error> {
        expect_reply!(self.call(TxCommit {}).await?, TxCommitOk).map(|_| ())
    }

    /// tx.rollback.
    pub async fn tx_rollback(&self) -> Result<(), Error> {
        expect_reply!(self.call(TxRollback {}).await?, TxRollbackOk).map(|_| ())
    }

    /// basic.get: the next message, if any.
    pub async fn get(&self, queue: &str, no_ack: bool) -> Result<Option<GetMessage>, Error> {
        let get = BasicGet {
            queue: queue.into(),
            no_ack,
            ..Default::default()
        };
        // Acknowledged on the wire that brought it: nothing waited for
        // between the reply and handing it over (cancel-safe).
        let (reply, wire) = self.call_on(get.into(), None).await?;
        let c = match reply {
            Reply::Method(Method::BasicGetEmpty(_)) => return Ok(None),
            Reply::Got(c) => c,
            Reply::Method(other) => {
                return Err(Error::Protocol(format!("expected basic.get-ok, got {other:?}")))
            }
        };
        let Method::BasicGetOk(ok) = c.method else {
            return Err(Error::Protocol("a get answered with another content".into()));
        };
        Ok(Some(GetMessage {
            message_count: ok.message_count,
            delivery: Delivery::new(
                ok.delivery_tag,
                ok.redelivered,
                ok.exchange,
                ok.routing_key,
                ShortStr::default(),
                c.properties,
                c.body,
                Acker {
                    wire,
                    channel: self.inner.state.id,
                    tag: ok.delivery_tag,
                },
            ),
        }))
    }
}

fn binding(
    to_exchange: bool,
    destination: &str,
    source: &str,
    routing_key: &str,
    arguments: FieldTable,
) -> RecordedBinding {
    RecordedBinding {
        to_exchange,
        destination: destination.to_string(),
        source: source.to_string(),
        routing_key: routing_key.to_string(),
        arguments,
    }
}
