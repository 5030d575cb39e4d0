//! Metrics hooks: what a connection, its publishers and its consumers
//! do, told to an application's [`Metrics`] as it happens, for
//! Prometheus, OpenTelemetry or a log (the same events RabbitMQ's AMQP
//! 1.0 clients count). Every method has an empty default, so an
//! implementation picks what it wants; they are called on the client's
//! tasks, some under the session's lock, and should be quick (an atomic
//! add).

use super::session::Outcome;

/// How the application settled a delivery it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// [`Delivery::accept`](super::Delivery::accept).
    Accepted,
    /// [`Delivery::discard`](super::Delivery::discard) (or with
    /// annotations).
    Discarded,
    /// [`Delivery::requeue`](super::Delivery::requeue) (or with
    /// annotations).
    Requeued,
}

/// Receives what a [`Connection`](super::Connection) does
/// ([`ConnectionBuilder::metrics`](super::ConnectionBuilder::metrics)).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use warren_client::amqp::{Connection, Metrics, Outcome};
///
/// #[derive(Default)]
/// struct Counts {
///     published: AtomicU64,
///     accepted: AtomicU64,
/// }
///
/// impl Metrics for Counts {
///     fn published(&self) {
///         self.published.fetch_add(1, Ordering::Relaxed);
///     }
///     fn outcome(&self, outcome: &Outcome) {
///         if *outcome == Outcome::Accepted {
///             self.accepted.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let counts = Arc::new(Counts::default());
/// let builder = Connection::builder("amqp://guest:guest@127.0.0.1:5672/%2f").metrics(counts.clone());
/// # drop(builder);
/// ```
pub trait Metrics: Send + Sync + 'static {
    /// A connection to a broker was opened (the first, and each one
    /// recovery opens).
    fn connection_opened(&self) {}

    /// A connection to a broker ended (closed, or lost).
    fn connection_closed(&self) {}

    /// A publisher sent a message.
    fn published(&self) {}

    /// The broker told a published message's outcome.
    fn outcome(&self, outcome: &Outcome) {
        let _ = outcome;
    }

    /// A consumer handed a delivery to the application.
    fn consumed(&self) {}

    /// The application settled a delivery.
    fn settled(&self, settlement: Settlement) {
        let _ = settlement;
    }

    /// `bytes` were written to the socket.
    fn written(&self, bytes: u64) {
        let _ = bytes;
    }

    /// `bytes` were read from the socket.
    fn read(&self, bytes: u64) {
        let _ = bytes;
    }
}
