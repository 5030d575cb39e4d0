//! What happens to a connection that the application may want to know:
//! losses, recoveries, blocked publishing, renamed queues.

use tokio::sync::{broadcast, watch};

use super::error::Error;

/// Something that happened to a connection. Read them with
/// [`super::Connection::events`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The connection was lost; recovery starts. Publishes not yet
    /// confirmed resolved to [`Error::ConnectionLost`].
    Disconnected {
        /// Why.
        error: Error,
    },
    /// A recovery attempt failed; another follows after a pause unless
    /// the attempts are used up (then the connection is closed).
    RecoveryFailed {
        /// Which attempt, from 1.
        attempt: u32,
        /// Why it failed.
        error: Error,
    },
    /// Declared again and consuming again: the connection is back.
    Recovered,
    /// An exchange, queue, binding or consumer could not be declared again
    /// during recovery (the rest were); `what` names it.
    TopologyRecoveryFailed {
        /// The exchange, queue, binding or channel.
        what: String,
        /// The broker's refusal.
        error: Error,
    },
    /// A queue the broker named was declared again under a new name; its
    /// bindings and consumers followed it.
    QueueRenamed {
        /// The name it had.
        old: String,
        /// The name the broker gave it now.
        new: String,
    },
    /// The broker stopped reading publishes (a resource alarm); publishing
    /// waits until [`Event::Unblocked`].
    Blocked {
        /// The broker's reason ("low on memory", "low on disk").
        reason: String,
    },
    /// Publishing may go on.
    Unblocked,
    /// The token source ([`super::ConnectionBuilder::token_source`])
    /// failed, or the broker refused its token; tried again shortly.
    TokenRefreshFailed {
        /// What went wrong.
        error: String,
    },
}

/// The events of an AMQP 0-9-1 connection ([`crate::events::Events`]).
pub type Events = crate::events::Events<Event>;

/// What every wire of a connection reports to: the blocked flag
/// publishers wait on, and the events applications read.
pub(crate) struct Signals {
    pub(crate) blocked: watch::Sender<bool>,
    pub(crate) events: broadcast::Sender<Event>,
}

impl Signals {
    pub(crate) fn emit(&self, e: Event) {
        // Nobody listening is fine.
        let _ = self.events.send(e);
    }
}
