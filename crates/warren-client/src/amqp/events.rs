//! What happens to an AMQP 1.0 connection that the application may want
//! to know: losses, recovery attempts, what could not be restored.

use super::error::Error;

/// Something that happened to a connection. Read them with
/// [`super::Connection::events`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The connection was lost; recovery starts. Publishes whose outcome
    /// had not come resolved to [`Error::ConnectionLost`].
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
    /// Connected again, topology declared again, links attached again.
    Recovered,
    /// A queue, exchange or binding could not be declared again, or a
    /// publisher, consumer or management link not attached again (its
    /// calls then fail with the reason); `what` names it.
    TopologyRecoveryFailed {
        /// The queue, exchange, binding or link.
        what: String,
        /// The broker's refusal.
        error: Error,
    },
    /// The token source ([`super::ConnectionBuilder::token_source`])
    /// failed, or the broker refused its token; tried again shortly.
    TokenRefreshFailed {
        /// What went wrong.
        error: String,
    },
}

/// The events of an AMQP 1.0 connection ([`crate::events::Events`]).
pub type Events = crate::events::Events<Event>;
