//! A super stream producer: each message goes to the partition its
//! routing key picks ([`RoutingStrategy`]), through a producer per
//! partition made when the first message for it comes, with the settings
//! the super stream producer was built with (a named one's partition
//! producers share its name: deduplication is per stream).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::confirm::Confirm;
use super::environment::Environment;
use super::error::Error;
use super::message::Message;
use super::producer::{Compression, Producer, ProducerBuilder};
use super::super_stream::{hash_partition, RoutingStrategy};

/// Draws the routing key from a message.
type KeyOf = Arc<dyn Fn(&Message) -> String + Send + Sync>;

/// A super stream producer's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
pub struct SuperStreamProducerBuilder {
    base: ProducerBuilder,
    strategy: RoutingStrategy,
    key_of: KeyOf,
}

impl Environment {
    /// A super stream producer that routes each message by the key
    /// `routing_key` draws from it.
    ///
    /// ```no_run
    /// use warren_client::stream::{Message, RoutingStrategy};
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let producer = env
    ///     .super_stream_producer(|m: &Message| m.application_property_value("customer").unwrap_or_default().to_string())
    ///     .routing(RoutingStrategy::Hash)
    ///     .build("invoices")
    ///     .await?;
    /// let confirm = producer.send(Message::new("invoice 1").application_property("customer", "c-17")).await?;
    /// assert!(confirm.await?.is_confirmed());
    /// # Ok(()) }
    /// ```
    pub fn super_stream_producer<F>(&self, routing_key: F) -> SuperStreamProducerBuilder
    where
        F: Fn(&Message) -> String + Send + Sync + 'static,
    {
        SuperStreamProducerBuilder {
            base: self.producer(),
            strategy: RoutingStrategy::default(),
            key_of: Arc::new(routing_key),
        }
    }
}

impl SuperStreamProducerBuilder {
    /// How the key picks the partition (default [`RoutingStrategy::Hash`]).
    pub fn routing(mut self, strategy: RoutingStrategy) -> SuperStreamProducerBuilder {
        self.strategy = strategy;
        self
    }

    /// The partition producers' name (see [`ProducerBuilder::name`]).
    pub fn name(mut self, name: impl Into<String>) -> SuperStreamProducerBuilder {
        self.base = self.base.name(name);
        self
    }

    /// Each partition producer's in-flight limit (see
    /// [`ProducerBuilder::max_unconfirmed`]).
    pub fn max_unconfirmed(mut self, n: usize) -> SuperStreamProducerBuilder {
        self.base = self.base.max_unconfirmed(n);
        self
    }

    /// See [`ProducerBuilder::sub_entry_size`].
    pub fn sub_entry_size(mut self, n: u16) -> SuperStreamProducerBuilder {
        self.base = self.base.sub_entry_size(n);
        self
    }

    /// See [`ProducerBuilder::compression`].
    pub fn compression(mut self, compression: Compression) -> SuperStreamProducerBuilder {
        self.base = self.base.compression(compression);
        self
    }

    /// See [`ProducerBuilder::filter_value`].
    pub fn filter_value<F>(mut self, f: F) -> SuperStreamProducerBuilder
    where
        F: Fn(&Message) -> Option<String> + Send + Sync + 'static,
    {
        self.base = self.base.filter_value(f);
        self
    }

    /// See [`ProducerBuilder::recovery`].
    pub fn recovery(mut self, on: bool) -> SuperStreamProducerBuilder {
        self.base = self.base.recovery(on);
        self
    }

    /// Look the super stream's partitions up; its partition producers
    /// come as messages need them.
    pub async fn build(self, super_stream: &str) -> Result<SuperStreamProducer, Error> {
        let env = self.base.environment().clone();
        let partitions = env.partitions(super_stream).await?;
        if partitions.is_empty() {
            return Err(Error::Misconfigured(format!(
                "super stream '{super_stream}' has no partition"
            )));
        }
        Ok(SuperStreamProducer {
            env,
            super_stream: super_stream.to_string(),
            base: self.base,
            strategy: self.strategy,
            key_of: self.key_of,
            partitions,
            routes: Mutex::new(HashMap::new()),
            producers: tokio::sync::Mutex::new(HashMap::new()),
        })
    }
}

/// Publishes to a super stream's partitions.
pub struct SuperStreamProducer {
    env: Environment,
    super_stream: String,
    base: ProducerBuilder,
    strategy: RoutingStrategy,
    key_of: KeyOf,
    partitions: Vec<String>,
    /// Key routing's answers, by key.
    routes: Mutex<HashMap<String, Vec<String>>>,
    producers: tokio::sync::Mutex<HashMap<String, Arc<Producer>>>,
}

impl SuperStreamProducer {
    /// The super stream.
    pub fn super_stream(&self) -> &str {
        &self.super_stream
    }

    /// Its partitions, in order.
    pub fn partitions(&self) -> &[String] {
        &self.partitions
    }

    /// The partitions `message` goes to.
    pub async fn route(&self, message: &Message) -> Result<Vec<String>, Error> {
        let key = (self.key_of)(message);
        let streams = match self.strategy {
            RoutingStrategy::Hash => {
                vec![self.partitions[hash_partition(&key, self.partitions.len())].clone()]
            }
            RoutingStrategy::Key => {
                let known = self.routes.lock().get(&key).cloned();
                match known {
                    Some(s) => s,
                    None => {
                        let s = self.env.route(&key, &self.super_stream).await?;
                        self.routes.lock().insert(key.clone(), s.clone());
                        s
                    }
                }
            }
        };
        if streams.is_empty() {
            return Err(Error::NoRoute {
                super_stream: self.super_stream.clone(),
                routing_key: key,
            });
        }
        Ok(streams)
    }

    /// Publish `message` to its partition: once it is queued, the future
    /// of its confirm (a key bound to several partitions sends it to
    /// each, and the confirm waits for all).
    pub async fn send(&self, message: Message) -> Result<Confirm, Error> {
        let streams = self.route(&message).await?;
        if let [only] = &streams[..] {
            return self.producer(only).await?.send(message).await;
        }
        let mut confirms = Vec::with_capacity(streams.len());
        for s in &streams {
            confirms.push(self.producer(s).await?.send(message.clone()).await?);
        }
        Ok(Confirm::all(confirms))
    }

    /// The producer of partition `stream`, made if need be.
    async fn producer(&self, stream: &str) -> Result<Arc<Producer>, Error> {
        let mut producers = self.producers.lock().await;
        if let Some(p) = producers.get(stream) {
            return Ok(p.clone());
        }
        let p = Arc::new(self.base.clone().build(stream).await?);
        producers.insert(stream.to_string(), p.clone());
        Ok(p)
    }

    /// Close every partition producer.
    pub async fn close(self) -> Result<(), Error> {
        let producers: Vec<Arc<Producer>> = self.producers.lock().await.drain().map(|(_, p)| p).collect();
        let mut result = Ok(());
        for p in producers {
            if let Ok(p) = Arc::try_unwrap(p) {
                if let Err(e) = p.close().await {
                    result = Err(e);
                }
            }
        }
        result
    }
}
