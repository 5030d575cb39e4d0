//! Consuming: a [`Consumer`] is a stream of [`Delivery`]s. Its buffer is
//! bounded by the channel's prefetch (the broker sends no more than that
//! unacknowledged), so a slow consumer holds the broker back, not the
//! client's heap. Each delivery carries an [`Acker`] usable from any task.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, Method};

use super::channel::Channel;
use super::error::Error;

/// A message delivered to a consumer (or got with basic.get).
#[derive(Debug)]
pub struct Delivery {
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: String,
    pub routing_key: String,
    /// The consumer's tag (empty for basic.get).
    pub consumer_tag: String,
    pub properties: BasicProperties,
    /// The body, as it came off the socket.
    pub body: Bytes,
    pub(crate) acker: Acker,
}

impl Delivery {
    /// Acknowledge this delivery.
    pub async fn ack(&self) -> Result<(), Error> {
        self.acker.ack(false).await
    }

    /// Reject it; `requeue` puts it back in the queue, otherwise it is
    /// dead-lettered or dropped.
    pub async fn nack(&self, requeue: bool) -> Result<(), Error> {
        self.acker.nack(false, requeue).await
    }

    /// The handle that settles this delivery, to move to another task.
    pub fn acker(&self) -> Acker {
        self.acker.clone()
    }
}

/// Settles one delivery (and, with `multiple`, every earlier one of its
/// channel).
#[derive(Debug, Clone)]
pub struct Acker {
    pub(crate) writer: mpsc::Sender<Bytes>,
    pub(crate) channel: u16,
    pub(crate) tag: u64,
}

impl Acker {
    async fn send(&self, m: Method) -> Result<(), Error> {
        let mut buf = BytesMut::with_capacity(32);
        write_method(&mut buf, self.channel, &m);
        self.writer
            .send(buf.freeze())
            .await
            .map_err(|_| Error::ConnectionLost("the connection ended before the ack".into()))
    }

    /// basic.ack. After the connection that brought the delivery was
    /// lost this is [`Error::ConnectionLost`]: the broker has put the
    /// message back and delivers it again.
    pub async fn ack(&self, multiple: bool) -> Result<(), Error> {
        self.send(Method::BasicAck(BasicAck {
            delivery_tag: self.tag,
            multiple,
        }))
        .await
    }

    /// basic.nack.
    pub async fn nack(&self, multiple: bool, requeue: bool) -> Result<(), Error> {
        self.send(Method::BasicNack(BasicNack {
            delivery_tag: self.tag,
            multiple,
            requeue,
        }))
        .await
    }

    /// basic.reject.
    pub async fn reject(&self, requeue: bool) -> Result<(), Error> {
        self.send(Method::BasicReject(BasicReject {
            delivery_tag: self.tag,
            requeue,
        }))
        .await
    }
}

/// A consumer: a stream of deliveries, which ends when the consumer is
/// cancelled (by this side or the broker) or its channel ends. It goes on
/// across a recovered connection.
pub struct Consumer {
    pub(crate) tag: String,
    /// Shared with the channel, which drops what is buffered when the
    /// connection is lost (those deliveries can no longer be acked).
    pub(crate) rx: Arc<Mutex<mpsc::Receiver<Delivery>>>,
    pub(crate) channel: Channel,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// The consumer tag (the broker's choice when none was given).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The next delivery; None once the consumer has ended.
    pub async fn next(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.rx.lock().poll_recv(cx)).await
    }

    /// basic.cancel: no more deliveries after those already sent.
    pub async fn cancel(self) -> Result<(), Error> {
        self.channel.cancel(&self.tag).await
    }
}

impl futures_core::Stream for Consumer {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.rx.lock().poll_recv(cx)
    }
}
