//! Single active consumer: consumers of one stream built with the same
//! name and [`super::ConsumerBuilder::single_active_consumer`] form a
//! group in which the broker lets one at a time read. It tells a member
//! it became active, or must step down, with a ConsumerUpdate; the
//! member answers where it reads from. The application may decide that
//! answer ([`super::ConsumerBuilder::consumer_update`]); by default an
//! active member carries on after the offset stored under the group's
//! name, and with automatic tracking a member stepping down stores the
//! last offset it handed out first, so the next one starts just after.
//!
//! RabbitMQ 3.11 and later serve it (and Warren); RabbitMQ 3.10 ignores
//! the request and every member reads.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use warren_stream::command::Command;

use super::connection::Connection;
use super::environment::Environment;
use super::error::Error;
use super::offset::OffsetSpecification;

/// What the broker told a member of a single-active-consumer group, for
/// the application's [`super::ConsumerBuilder::consumer_update`].
pub struct ConsumerUpdate {
    pub(crate) stream: String,
    pub(crate) name: String,
    pub(crate) active: bool,
    pub(crate) last_offset: Option<u64>,
    pub(crate) env: Environment,
    pub(crate) conn: Arc<Connection>,
}

impl ConsumerUpdate {
    /// The stream the consumer reads.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The group's name (the consumers' name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if the consumer became active; false if it steps down (then
    /// the offset returned is not used).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The last offset this consumer handed out, if any.
    pub fn last_offset(&self) -> Option<u64> {
        self.last_offset
    }

    /// The offset stored under the group's name, if any.
    pub async fn stored_offset(&self) -> Result<Option<u64>, Error> {
        self.env.query_offset(&self.name, &self.stream).await
    }

    /// Store `offset` under the group's name (for manual tracking: a
    /// member stepping down says where the next one starts).
    pub fn store_offset(&self, offset: u64) {
        self.conn.push(&Command::StoreOffset {
            reference: self.name.clone(),
            stream: self.stream.clone(),
            offset,
        });
    }
}

/// The application's answer to a consumer update: where to read from.
pub(crate) type Answer = Pin<Box<dyn Future<Output = OffsetSpecification> + Send>>;

/// A consumer-update callback, stored.
pub(crate) type OnUpdate = Arc<dyn Fn(ConsumerUpdate) -> Answer + Send + Sync>;

/// How long a member stepping down waits for the offset it stored to be
/// readable before it answers (after which the next member may start
/// before it, and read a few messages again).
const STORED_WAIT: Duration = Duration::from_secs(5);

/// The answer to an update: the application's, or [`default_answer`];
/// a member stepping down that stored offset `flushed` first waits until
/// the broker has it, so the next member starts just after it.
pub(crate) fn answer(
    update: ConsumerUpdate,
    flushed: Option<u64>,
    on_update: Option<&OnUpdate>,
    initial: OffsetSpecification,
) -> Answer {
    let decide = match on_update {
        Some(f) => f.clone(),
        None => Arc::new(move |u| default_answer(u, initial)) as OnUpdate,
    };
    Box::pin(async move {
        if let Some(o) = flushed {
            let deadline = tokio::time::Instant::now() + STORED_WAIT;
            while tokio::time::Instant::now() < deadline {
                match update.stored_offset().await {
                    Ok(Some(s)) if s >= o => break,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    Err(_) => break,
                }
            }
        }
        decide(update).await
    })
}

/// The answer when the application gives none: after the offset stored
/// under the group's name, else where the consumer was built to start.
fn default_answer(update: ConsumerUpdate, initial: OffsetSpecification) -> Answer {
    Box::pin(async move {
        if !update.active {
            return initial;
        }
        match update.stored_offset().await {
            Ok(Some(o)) => OffsetSpecification::Offset(o + 1),
            Ok(None) => initial,
            Err(e) => {
                tracing::warn!(stream = %update.stream, "no stored offset read for the active consumer: {e}");
                initial
            }
        }
    })
}
