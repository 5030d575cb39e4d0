//! A super stream consumer: a consumer on each partition, built with the
//! same settings, read as one `Stream` of deliveries that say their
//! partition. As single active consumers, the members of a group spread
//! over the partitions: the broker makes each application instance
//! active on its share, and moves partitions when instances come and go.

use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::consumer::{Consumer, ConsumerBuilder, Delivery};
use super::environment::Environment;
use super::error::Error;
use super::offset::OffsetSpecification;
use super::single_active::ConsumerUpdate;
use super::tracking::Tracking;

/// A super stream consumer's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
pub struct SuperStreamConsumerBuilder {
    base: ConsumerBuilder,
}

impl Environment {
    /// A consumer of every partition of a super stream.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let mut consumer = env
    ///     .super_stream_consumer()
    ///     .name("invoicing")
    ///     .single_active_consumer(true)
    ///     .build("invoices")
    ///     .await?;
    /// while let Some(d) = consumer.next().await {
    ///     let d = d?;
    ///     println!("{} {}: {:?}", d.partition(), d.offset(), d.body()?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn super_stream_consumer(&self) -> SuperStreamConsumerBuilder {
        SuperStreamConsumerBuilder {
            base: self.consumer(),
        }
    }
}

impl SuperStreamConsumerBuilder {
    /// See [`ConsumerBuilder::name`]: every partition's consumer has it.
    pub fn name(mut self, name: impl Into<String>) -> SuperStreamConsumerBuilder {
        self.base = self.base.name(name);
        self
    }

    /// See [`ConsumerBuilder::single_active_consumer`]: the members of
    /// the group share the partitions out.
    pub fn single_active_consumer(mut self, on: bool) -> SuperStreamConsumerBuilder {
        self.base = self.base.single_active_consumer(on);
        self
    }

    /// See [`ConsumerBuilder::consumer_update`] (called for each
    /// partition; [`ConsumerUpdate::stream`] says which).
    pub fn consumer_update<F, A>(mut self, f: F) -> SuperStreamConsumerBuilder
    where
        F: Fn(ConsumerUpdate) -> A + Send + Sync + 'static,
        A: std::future::Future<Output = OffsetSpecification> + Send + 'static,
    {
        self.base = self.base.consumer_update(f);
        self
    }

    /// See [`ConsumerBuilder::filter`] (on every partition).
    pub fn filter<I, S, F>(mut self, values: I, post_filter: F) -> SuperStreamConsumerBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(&Delivery) -> bool + Send + Sync + 'static,
    {
        self.base = self.base.filter(values, post_filter);
        self
    }

    /// See [`ConsumerBuilder::match_unfiltered`].
    pub fn match_unfiltered(mut self, on: bool) -> SuperStreamConsumerBuilder {
        self.base = self.base.match_unfiltered(on);
        self
    }

    /// See [`ConsumerBuilder::offset`].
    pub fn offset(mut self, offset: OffsetSpecification) -> SuperStreamConsumerBuilder {
        self.base = self.base.offset(offset);
        self
    }

    /// See [`ConsumerBuilder::tracking`]. With automatic tracking, each
    /// partition stores every `messages / partitions` messages, as the
    /// Java client does.
    pub fn tracking(mut self, tracking: Tracking) -> SuperStreamConsumerBuilder {
        self.base = self.base.tracking(tracking);
        self
    }

    /// See [`ConsumerBuilder::initial_credit`] (for each partition).
    pub fn initial_credit(mut self, chunks: u16) -> SuperStreamConsumerBuilder {
        self.base = self.base.initial_credit(chunks);
        self
    }

    /// See [`ConsumerBuilder::recovery`].
    pub fn recovery(mut self, on: bool) -> SuperStreamConsumerBuilder {
        self.base = self.base.recovery(on);
        self
    }

    /// Subscribe to every partition of `super_stream`.
    pub async fn build(self, super_stream: &str) -> Result<SuperStreamConsumer, Error> {
        let env = self.base.environment().clone();
        let partitions = env.partitions(super_stream).await?;
        if partitions.is_empty() {
            return Err(Error::Misconfigured(format!(
                "super stream '{super_stream}' has no partition"
            )));
        }
        let mut base = self.base.of_super_stream(super_stream);
        if let Some(Tracking::Automatic { messages, interval }) = base.tracking_of() {
            base = base.tracking(Tracking::Automatic {
                messages: (messages / partitions.len() as u32).max(1),
                interval,
            });
        }
        let mut members = Vec::with_capacity(partitions.len());
        for p in &partitions {
            members.push((Arc::<str>::from(p.as_str()), base.clone().build(p).await?));
        }
        Ok(SuperStreamConsumer {
            super_stream: super_stream.to_string(),
            members,
            next: 0,
        })
    }
}

/// A message read from a partition of a super stream: a [`Delivery`]
/// (which it dereferences to) and its partition.
#[derive(Debug, Clone)]
pub struct PartitionDelivery {
    partition: Arc<str>,
    delivery: Delivery,
}

impl PartitionDelivery {
    /// The partition stream it was read from.
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// The delivery itself.
    pub fn into_delivery(self) -> Delivery {
        self.delivery
    }
}

impl Deref for PartitionDelivery {
    type Target = Delivery;

    fn deref(&self) -> &Delivery {
        &self.delivery
    }
}

/// Reads every partition of a super stream: a `Stream` of
/// [`PartitionDelivery`], each partition in offset order, the partitions
/// taken in turn. An error of one partition's consumer is handed out once,
/// and the others go on.
pub struct SuperStreamConsumer {
    super_stream: String,
    members: Vec<(Arc<str>, Consumer)>,
    /// The partition polled first next time (for fairness).
    next: usize,
}

impl SuperStreamConsumer {
    /// The super stream.
    pub fn super_stream(&self) -> &str {
        &self.super_stream
    }

    /// Its partitions.
    pub fn partitions(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(p, _)| &**p)
    }

    /// Store `offset` as the consumers' place in `partition` (see
    /// [`Consumer::store_offset`]).
    pub fn store_offset(&self, partition: &str, offset: u64) -> Result<(), Error> {
        match self.members.iter().find(|(p, _)| &**p == partition) {
            Some((_, c)) => c.store_offset(offset),
            None => Err(Error::Misconfigured(format!(
                "'{partition}' is not a partition of '{}'",
                self.super_stream
            ))),
        }
    }

    /// Close every partition's consumer.
    pub async fn close(self) -> Result<(), Error> {
        let mut result = Ok(());
        for (_, c) in self.members {
            if let Err(e) = c.close().await {
                result = Err(e);
            }
        }
        result
    }
}

impl Stream for SuperStreamConsumer {
    type Item = Result<PartitionDelivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let n = this.members.len();
        let mut ended = 0;
        for k in 0..n {
            let i = (this.next + k) % n;
            let (partition, consumer) = &mut this.members[i];
            match Pin::new(consumer).poll_next(cx) {
                Poll::Pending => {}
                Poll::Ready(None) => ended += 1,
                Poll::Ready(Some(r)) => {
                    this.next = (i + 1) % n;
                    let partition = partition.clone();
                    return Poll::Ready(Some(r.map(|delivery| PartitionDelivery { partition, delivery })));
                }
            }
        }
        if ended == n {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}
