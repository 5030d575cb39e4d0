//! Metrics hooks: what the environment's producers and consumers do,
//! told to an application's [`Metrics`] as it happens (counts by stream),
//! for Prometheus, OpenTelemetry or a log. Every method has an empty
//! default, so an implementation picks what it wants; they are called on
//! the client's tasks and should be quick (an atomic add).

/// Receives the counts of an [`super::Environment`]'s producers and
/// consumers ([`super::EnvironmentBuilder::metrics`]).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use warren_client::stream::Metrics;
///
/// #[derive(Default)]
/// struct Counts {
///     confirmed: AtomicU64,
///     consumed: AtomicU64,
/// }
///
/// impl Metrics for Counts {
///     fn confirmed(&self, _stream: &str, messages: u64) {
///         self.confirmed.fetch_add(messages, Ordering::Relaxed);
///     }
///     fn consumed(&self, _stream: &str, messages: u64) {
///         self.consumed.fetch_add(messages, Ordering::Relaxed);
///     }
/// }
///
/// let counts = Arc::new(Counts::default());
/// let builder = warren_client::stream::Environment::builder().metrics(counts.clone());
/// # drop(builder);
/// ```
pub trait Metrics: Send + Sync + 'static {
    /// `messages` went into a producer's outbox.
    fn published(&self, stream: &str, messages: u64) {
        let _ = (stream, messages);
    }

    /// The broker confirmed `messages`.
    fn confirmed(&self, stream: &str, messages: u64) {
        let _ = (stream, messages);
    }

    /// `messages` were refused by the broker (PublishError) or failed
    /// with their producer.
    fn errored(&self, stream: &str, messages: u64) {
        let _ = (stream, messages);
    }

    /// A consumer took a chunk of `messages` entries.
    fn chunk(&self, stream: &str, messages: u64) {
        let _ = (stream, messages);
    }

    /// A consumer handed `messages` out to the application.
    fn consumed(&self, stream: &str, messages: u64) {
        let _ = (stream, messages);
    }

    /// How far behind the stream's committed chunk a consumer's latest
    /// chunk is, in offsets (brokers that send it with each chunk:
    /// RabbitMQ 3.11 and later, and Warren).
    fn lag(&self, stream: &str, offsets: u64) {
        let _ = (stream, offsets);
    }
}
