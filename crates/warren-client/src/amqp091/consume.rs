//! Consuming: a [`Consumer`] is a stream of [`Delivery`]s. Its buffer is
//! bounded by the channel's prefetch (the broker sends no more than that
//! unacknowledged), so a slow consumer holds the broker back, not the
//! client's heap. Each delivery carries an [`super::Acker`] usable from
//! any task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use warren_amqp091::methods::{BasicCancel, BasicConsume};
use warren_amqp091::Method;

use super::channel::{expect_reply, Channel};
use super::channel_state::{ConsumerEntry, Reply};
use super::delivery::Delivery;
use super::error::Error;
use super::options::ConsumeOptions;

/// A consumer's buffer when the channel has no prefetch limit.
const UNLIMITED_BUFFER: usize = 256;

impl Channel {
    /// basic.consume: a stream of the queue's deliveries, buffered up to
    /// the channel's prefetch. The consumer is started again under its
    /// tag after a recovery; the stream goes on.
    pub async fn consume(&self, queue: &str, options: ConsumeOptions) -> Result<Consumer, Error> {
        let buffer = match self.inner.state.prefetch.load(Ordering::Relaxed) {
            0 => UNLIMITED_BUFFER,
            n => n as usize,
        };
        let (tx, rx) = mpsc::channel(buffer);
        let rx = Arc::new(Mutex::new(rx));
        let entry = ConsumerEntry::new(tx, rx.clone(), queue.to_string(), options.clone());
        let consume = BasicConsume {
            queue: queue.into(),
            consumer_tag: options.tag.as_str().into(),
            no_ack: options.no_ack,
            exclusive: options.exclusive,
            arguments: options.arguments,
            ..Default::default()
        };
        // The entry is filed with the request (and its consumer
        // cancelled if this is dropped before the ok comes).
        let (reply, _) = self.call_on(consume.into(), Some(entry)).await?;
        let ok = expect_reply!(reply, BasicConsumeOk)?;
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
        expect_reply!(reply, BasicCancelOk)?;
        let queue = self.inner.state.consumers.lock().remove(tag).map(|c| c.queue);
        if let Some(q) = queue {
            self.consumer_gone(&q);
        }
        Ok(())
    }

    /// A consumer of `queue` was cancelled. The broker deletes an
    /// auto-delete queue with its last consumer: recovery must not bring
    /// it back.
    fn consumer_gone(&self, queue: &str) {
        let core = &self.inner.core;
        let others = core.channels.lock().values().any(|c| {
            c.consumers
                .lock()
                .values()
                .any(|e| e.queue == queue && !e.dropped)
        });
        let mut t = core.topology.lock();
        if !others && t.is_auto_delete_queue(queue) {
            t.queue_deleted(queue);
        }
    }
}

/// A consumer: a stream of deliveries, which ends when the consumer is
/// cancelled (by this side or the broker) or its channel ends. It goes on
/// across a recovered connection. Dropping it cancels it without waiting:
/// the deliveries it had not handed out go back to the queue (unless
/// they were no-ack), and so do those still on their way.
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

    /// Run `handler` on each delivery, one at a time and in order, until
    /// the consumer ends. The connection's default concurrency
    /// ([`super::ConnectionBuilder::consumer_concurrency`]) applies when
    /// it is above 1, as [`Self::run_concurrently`].
    pub async fn run<F, Fut>(self, handler: F)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let n = self.channel.default_concurrency();
        self.run_concurrently(n, handler).await
    }

    /// Run `handler` on up to `concurrency` deliveries at once, until the
    /// consumer ends. The handlers are polled by the task running this
    /// (so they overlap wherever they wait: I/O, timers, other services);
    /// work that needs other cores belongs in `tokio::spawn` or
    /// `spawn_blocking` inside the handler. At 1 deliveries are handled in
    /// order on the caller's task. Each handler acks (or not) its own
    /// delivery; the broker's prefetch bounds what waits, so a slow
    /// handler holds the broker back rather than filling memory.
    ///
    /// ```no_run
    /// use warren_client::amqp091::{ConsumeOptions, Consumer};
    ///
    /// # async fn work(consumer: Consumer) {
    /// consumer
    ///     .run_concurrently(8, |d| async move {
    ///         // ... handle d.body ...
    ///         let _ = d.ack().await;
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn run_concurrently<F, Fut>(mut self, concurrency: usize, handler: F)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = |d: Delivery| traced(&handler, d);
        if concurrency <= 1 {
            while let Some(d) = self.next().await {
                handle(d).await;
            }
            return;
        }
        // In this task: no hand-off between tasks per delivery. A handler
        // with CPU-heavy work spawns it.
        let mut running = FuturesUnordered::new();
        // A handler's future is polled once where it is made; one done at
        // once (a fast handler) leaves its box to the next, so such
        // handlers cost no allocation or shared queue each.
        let mut spare: Option<Pin<Box<Handled<Fut>>>> = None;
        let mut ended = false;
        std::future::poll_fn(|cx| loop {
            while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
            if ended {
                return match running.is_empty() {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                };
            }
            if running.len() >= concurrency {
                return Poll::Pending;
            }
            let d = match self.rx.lock().poll_recv(cx) {
                Poll::Ready(Some(d)) => d,
                Poll::Ready(None) => {
                    ended = true;
                    continue;
                }
                Poll::Pending => return Poll::Pending,
            };
            let mut work = match spare.take() {
                Some(mut b) => {
                    b.as_mut().set(handle(d));
                    b
                }
                None => Box::pin(handle(d)),
            };
            // Pending: it goes to the set, which polls it (with its own
            // waker) at once and whenever it is woken.
            match work.as_mut().poll(cx) {
                Poll::Ready(()) => spare = Some(work),
                Poll::Pending => running.push(work),
            }
        })
        .await
    }
}

/// A handler's future for one delivery, as [`traced`] makes it.
type Handled<Fut> = Either<Fut, Pin<Box<dyn Future<Output = ()> + Send>>>;

/// `handler` on `d`, inside a `tracing` span for the delivery (when such
/// spans are recorded) and, if its publisher sent a trace context, that
/// context's scope: what the handler publishes continues the trace.
/// Without either it is the handler's own future, unwrapped: the common
/// case adds nothing to what a concurrent consumer keeps per delivery.
fn traced<F, Fut>(handler: &F, d: Delivery) -> Handled<Fut>
where
    F: Fn(Delivery) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let context = d.trace_context();
    if context.is_none() && !tracing::enabled!(tracing::Level::DEBUG) {
        return Either::Left(handler(d));
    }
    let span = tracing::debug_span!(
        "amqp091.deliver",
        consumer_tag = %d.consumer_tag,
        routing_key = %d.routing_key,
        delivery_tag = d.delivery_tag,
        trace_id = context.as_ref().map(|c| c.trace_id()),
    );
    let work = tracing::Instrument::instrument(handler(d), span);
    Either::Right(match context {
        Some(c) => Box::pin(c.scope(work)),
        None => Box::pin(work),
    })
}

impl futures_core::Stream for Consumer {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.rx.lock().poll_recv(cx)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let core = &self.channel.inner.core;
        let state = &self.channel.inner.state;
        let wire = || core.open_wire().map(|w| w.outbound.clone());
        if let Some(queue) = state.consumer_dropped(&self.tag, wire) {
            self.channel.consumer_gone(&queue);
        }
    }
}
