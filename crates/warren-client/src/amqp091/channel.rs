//! A channel: its state as the reader task updates it ([`ChannelState`]:
//! the reply awaited, confirms, consumers) and the handle applications
//! call ([`Channel`]). Calls that expect a reply are one at a time per
//! channel, as AMQP 0-9-1 requires; publishes and acks do not wait for
//! them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Semaphore};
use warren_amqp091::frame::{write_body, write_content_header, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, FieldTable, Method};

use super::connection::Shared;
use super::consume::{Acker, Consumer, Delivery};
use super::error::Error;
use super::options::{ConsumeOptions, ExchangeKind, ExchangeOptions, PublishOptions, QueueOptions};
use super::publish::{Confirm, Confirms, Returned};

/// Publishes in flight per channel in confirm mode before `publish`
/// waits for confirms.
pub const DEFAULT_IN_FLIGHT: usize = 256;
/// A consumer's buffer when the channel has no prefetch limit.
const UNLIMITED_BUFFER: usize = 256;

/// A message with its method, as the reader assembled it.
pub(crate) struct Content {
    pub(crate) method: Method,
    pub(crate) properties: BasicProperties,
    pub(crate) body: Bytes,
}

/// What a call waits for.
enum Reply {
    Method(Method),
    Got(Box<Content>),
}

type ReplySlot = Mutex<Option<oneshot::Sender<Result<Reply, Error>>>>;

/// The channel as the reader task and the handles share it.
pub(crate) struct ChannelState {
    pub(crate) id: u16,
    reply: ReplySlot,
    pub(crate) confirms: Mutex<Confirms>,
    consumers: Mutex<HashMap<String, mpsc::Sender<Delivery>>>,
    /// The consumer whose basic.consume-ok has not come yet: the reader
    /// files it under its tag on the ok, before any delivery can follow.
    starting: Mutex<Option<mpsc::Sender<Delivery>>>,
    ended: Mutex<Option<Error>>,
    prefetch: AtomicU16,
}

impl ChannelState {
    pub(crate) fn new(id: u16) -> ChannelState {
        ChannelState {
            id,
            reply: Mutex::new(None),
            confirms: Mutex::new(Confirms::default()),
            consumers: Mutex::new(HashMap::new()),
            starting: Mutex::new(None),
            ended: Mutex::new(None),
            prefetch: AtomicU16::new(0),
        }
    }

    fn answer(&self, r: Result<Reply, Error>) {
        if let Some(tx) = self.reply.lock().take() {
            let _ = tx.send(r);
        }
    }

    /// A method from the broker (content methods go to [`Self::content`]).
    pub(crate) async fn method(&self, shared: &Shared, m: Method) {
        match m {
            Method::BasicAck(a) => self.confirms.lock().settle(a.delivery_tag, a.multiple, true),
            Method::BasicNack(n) => self.confirms.lock().settle(n.delivery_tag, n.multiple, false),
            // The broker cancelled a consumer (its queue was deleted):
            // its stream ends.
            Method::BasicCancel(c) => {
                self.consumers
                    .lock()
                    .remove(c.consumer_tag.to_str_lossy().as_ref());
            }
            Method::ChannelClose(c) => {
                let mut buf = BytesMut::new();
                write_method(&mut buf, self.id, &Method::ChannelCloseOk(ChannelCloseOk {}));
                let _ = shared.writer.send(buf.freeze()).await;
                shared.channels.lock().remove(&self.id);
                self.closed(Error::ChannelClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_str_lossy().into_owned(),
                });
            }
            Method::ChannelFlow(f) => {
                let mut buf = BytesMut::new();
                write_method(
                    &mut buf,
                    self.id,
                    &Method::ChannelFlowOk(ChannelFlowOk { active: f.active }),
                );
                let _ = shared.writer.send(buf.freeze()).await;
            }
            Method::BasicConsumeOk(ok) => {
                if let Some(tx) = self.starting.lock().take() {
                    self.consumers
                        .lock()
                        .insert(ok.consumer_tag.to_str_lossy().into_owned(), tx);
                }
                self.answer(Ok(Reply::Method(Method::BasicConsumeOk(ok))));
            }
            m => self.answer(Ok(Reply::Method(m))),
        }
    }

    /// A whole message from the broker.
    pub(crate) async fn content(&self, shared: &Shared, c: Content) {
        match c.method {
            Method::BasicDeliver(d) => {
                let tag = d.consumer_tag.to_str_lossy().into_owned();
                let Some(tx) = self.consumers.lock().get(&tag).cloned() else {
                    return;
                };
                let delivery = Delivery {
                    delivery_tag: d.delivery_tag,
                    redelivered: d.redelivered,
                    exchange: d.exchange.to_str_lossy().into_owned(),
                    routing_key: d.routing_key.to_str_lossy().into_owned(),
                    consumer_tag: tag,
                    properties: c.properties,
                    body: c.body,
                    acker: Acker {
                        writer: shared.writer.clone(),
                        channel: self.id,
                        tag: d.delivery_tag,
                    },
                };
                // Bounded: waiting here holds the socket back (TCP flow
                // control) rather than buffering without limit.
                let _ = tx.send(delivery).await;
            }
            Method::BasicReturn(r) => self.confirms.lock().returned(Returned {
                reply_code: r.reply_code,
                reply_text: r.reply_text.to_str_lossy().into_owned(),
                exchange: r.exchange.to_str_lossy().into_owned(),
                routing_key: r.routing_key.to_str_lossy().into_owned(),
                properties: c.properties,
                body: c.body,
            }),
            Method::BasicGetOk(_) => self.answer(Ok(Reply::Got(Box::new(c)))),
            _ => {}
        }
    }

    /// The channel ended: the call waiting, the publishes unconfirmed and
    /// the consumers learn it.
    pub(crate) fn closed(&self, why: Error) {
        {
            let mut e = self.ended.lock();
            if e.is_none() {
                *e = Some(why.clone());
            }
        }
        self.answer(Err(why.clone()));
        self.confirms.lock().fail_all(&why);
        self.consumers.lock().clear();
        self.starting.lock().take();
    }
}

/// A queue as queue.declare answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredQueue {
    /// Its name (the broker's choice when declared with an empty one).
    pub name: String,
    pub message_count: u32,
    pub consumer_count: u32,
}

/// A message taken with basic.get, and how many were left behind it.
#[derive(Debug)]
pub struct GetMessage {
    pub delivery: Delivery,
    pub message_count: u32,
}

struct Inner {
    state: Arc<ChannelState>,
    shared: Arc<Shared>,
    /// One call awaiting a reply at a time.
    calls: tokio::sync::Mutex<()>,
    /// Publishes numbered and queued in the same order.
    publishing: tokio::sync::Mutex<()>,
    in_flight: Arc<Semaphore>,
}

/// An open channel. Clones share it; it is usable from any task.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.inner.state.id)
            .finish()
    }
}

/// The reply a call expects, or a protocol error naming what came.
macro_rules! expect {
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

impl Channel {
    pub(crate) fn new(state: Arc<ChannelState>, shared: Arc<Shared>) -> Channel {
        Channel {
            inner: Arc::new(Inner {
                state,
                shared,
                calls: tokio::sync::Mutex::new(()),
                publishing: tokio::sync::Mutex::new(()),
                in_flight: Arc::new(Semaphore::new(DEFAULT_IN_FLIGHT)),
            }),
        }
    }

    /// The channel's number on its connection.
    pub fn id(&self) -> u16 {
        self.inner.state.id
    }

    fn check(&self) -> Result<(), Error> {
        match self.inner.state.ended.lock().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn send(&self, m: Method) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        write_method(&mut buf, self.inner.state.id, &m);
        self.inner.shared.send(buf.freeze()).await
    }

    async fn call(&self, m: impl Into<Method>) -> Result<Reply, Error> {
        let _one = self.inner.calls.lock().await;
        self.check()?;
        let (tx, rx) = oneshot::channel();
        *self.inner.state.reply.lock() = Some(tx);
        // Ended between the check and the slot: nobody would answer it.
        if let Err(e) = self.check() {
            self.inner.state.reply.lock().take();
            return Err(e);
        }
        self.send(m.into()).await?;
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(self
                .check()
                .err()
                .unwrap_or_else(|| self.inner.shared.ended_error())),
        }
    }

    pub(crate) async fn open(&self) -> Result<(), Error> {
        expect!(self.call(ChannelOpen::default()).await?, ChannelOpenOk).map(|_| ())
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
        expect!(reply, ChannelCloseOk)?;
        self.inner.shared.channels.lock().remove(&self.inner.state.id);
        self.inner.state.closed(Error::ClosedByClient);
        Ok(())
    }

    /// exchange.declare.
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
                arguments: options.arguments,
                ..Default::default()
            })
            .await?;
        expect!(reply, ExchangeDeclareOk).map(|_| ())
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
        expect!(reply, ExchangeDeleteOk).map(|_| ())
    }

    /// queue.declare; an empty `name` asks the broker for one.
    pub async fn queue_declare(&self, name: &str, options: QueueOptions) -> Result<DeclaredQueue, Error> {
        let reply = self
            .call(QueueDeclare {
                queue: name.into(),
                passive: options.passive,
                durable: options.durable,
                exclusive: options.exclusive,
                auto_delete: options.auto_delete,
                arguments: options.arguments,
                ..Default::default()
            })
            .await?;
        let ok = expect!(reply, QueueDeclareOk)?;
        Ok(DeclaredQueue {
            name: ok.queue.to_str_lossy().into_owned(),
            message_count: ok.message_count,
            consumer_count: ok.consumer_count,
        })
    }

    /// queue.bind.
    pub async fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        let reply = self
            .call(QueueBind {
                queue: queue.into(),
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                arguments,
                ..Default::default()
            })
            .await?;
        expect!(reply, QueueBindOk).map(|_| ())
    }

    /// queue.unbind.
    pub async fn queue_unbind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        let reply = self
            .call(QueueUnbind {
                queue: queue.into(),
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                arguments,
                ..Default::default()
            })
            .await?;
        expect!(reply, QueueUnbindOk).map(|_| ())
    }

    /// queue.purge: how many messages went.
    pub async fn queue_purge(&self, queue: &str) -> Result<u32, Error> {
        let reply = self
            .call(QueuePurge {
                queue: queue.into(),
                ..Default::default()
            })
            .await?;
        expect!(reply, QueuePurgeOk).map(|ok| ok.message_count)
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
        expect!(reply, QueueDeleteOk).map(|ok| ok.message_count)
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
        expect!(reply, BasicQosOk)?;
        self.inner.state.prefetch.store(prefetch, Ordering::Relaxed);
        Ok(())
    }

    /// confirm.select: from now on each publish's [`Confirm`] resolves to
    /// the broker's answer.
    pub async fn confirm_select(&self) -> Result<(), Error> {
        let reply = self.call(ConfirmSelect::default()).await?;
        expect!(reply, ConfirmSelectOk)?;
        self.inner.state.confirms.lock().enable();
        Ok(())
    }

    /// tx.select.
    pub async fn tx_select(&self) -> Result<(), Error> {
        expect!(self.call(TxSelect {}).await?, TxSelectOk).map(|_| ())
    }

    /// tx.commit.
    pub async fn tx_commit(&self) -> Result<(), Error> {
        expect!(self.call(TxCommit {}).await?, TxCommitOk).map(|_| ())
    }

    /// tx.rollback.
    pub async fn tx_rollback(&self) -> Result<(), Error> {
        expect!(self.call(TxRollback {}).await?, TxRollbackOk).map(|_| ())
    }

    /// Publish `body` to `exchange` with `routing_key`.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<Confirm, Error> {
        self.publish_with(exchange, routing_key, PublishOptions::default(), properties, body)
            .await
    }

    /// [`Self::publish`] with options (`mandatory`). In confirm mode it
    /// waits while [`DEFAULT_IN_FLIGHT`] publishes await their confirms.
    pub async fn publish_with(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<Confirm, Error> {
        let id = self.inner.state.id;
        let confirming = self.inner.state.confirms.lock().enabled;
        let permit = match confirming {
            true => Some(
                self.inner
                    .in_flight
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed"),
            ),
            false => None,
        };
        let mut buf = BytesMut::with_capacity(body.len() + 64 + exchange.len() + routing_key.len());
        let publish = BasicPublish {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            mandatory: options.mandatory,
            ..Default::default()
        };
        write_method(&mut buf, id, &Method::BasicPublish(publish));
        write_content_header(&mut buf, id, 60, body.len() as u64, &properties);
        write_body(&mut buf, id, &body, self.inner.shared.frame_max);
        let _order = self.inner.publishing.lock().await;
        self.check()?;
        let confirm = match permit {
            Some(p) => Confirm::waiting(self.inner.state.confirms.lock().push(p)),
            None => Confirm::sent(),
        };
        self.inner.shared.send(buf.freeze()).await?;
        Ok(confirm)
    }

    /// basic.get: the next message, if any.
    pub async fn get(&self, queue: &str, no_ack: bool) -> Result<Option<GetMessage>, Error> {
        let reply = self
            .call(BasicGet {
                queue: queue.into(),
                no_ack,
                ..Default::default()
            })
            .await?;
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
            delivery: Delivery {
                delivery_tag: ok.delivery_tag,
                redelivered: ok.redelivered,
                exchange: ok.exchange.to_str_lossy().into_owned(),
                routing_key: ok.routing_key.to_str_lossy().into_owned(),
                consumer_tag: String::new(),
                properties: c.properties,
                body: c.body,
                acker: Acker {
                    writer: self.inner.shared.writer.clone(),
                    channel: self.inner.state.id,
                    tag: ok.delivery_tag,
                },
            },
        }))
    }

    /// basic.consume: a stream of the queue's deliveries, buffered up to
    /// the channel's prefetch.
    pub async fn consume(&self, queue: &str, options: ConsumeOptions) -> Result<Consumer, Error> {
        let buffer = match self.inner.state.prefetch.load(Ordering::Relaxed) {
            0 => UNLIMITED_BUFFER,
            n => n as usize,
        };
        let (tx, rx) = mpsc::channel(buffer);
        *self.inner.state.starting.lock() = Some(tx);
        let reply = self
            .call(BasicConsume {
                queue: queue.into(),
                consumer_tag: options.tag.as_str().into(),
                no_ack: options.no_ack,
                exclusive: options.exclusive,
                arguments: options.arguments,
                ..Default::default()
            })
            .await?;
        let ok = expect!(reply, BasicConsumeOk)?;
        Ok(Consumer {
            tag: ok.consumer_tag.to_str_lossy().into_owned(),
            rx,
            channel: self.clone(),
        })
    }

    pub(crate) async fn cancel(&self, tag: &str) -> Result<(), Error> {
        let reply = self
            .call(BasicCancel {
                consumer_tag: tag.into(),
                ..Default::default()
            })
            .await?;
        expect!(reply, BasicCancelOk)?;
        self.inner.state.consumers.lock().remove(tag);
        Ok(())
    }
}
