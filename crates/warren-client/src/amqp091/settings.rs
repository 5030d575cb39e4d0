//! What the application's builder set for a connection, kept by the
//! connection for its recoveries.

use std::time::Duration;

use super::options::RecoveryOptions;
use crate::tls::TlsOptions;
use crate::token::TokenSource;

/// What a [`super::ConnectionBuilder`] sets beyond its addresses, kept by the
/// connection for its recoveries.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) name: Option<String>,
    pub(crate) tls: Option<TlsOptions>,
    pub(crate) recovery: RecoveryOptions,
    /// How many deliveries `Consumer::run` handles at once.
    pub(crate) consumer_concurrency: usize,
    /// Publishes inside a [`TraceContext`](crate::trace::TraceContext) scope carry a child of it.
    pub(crate) trace_propagation: bool,
    pub(crate) token_source: Option<TokenSource>,
    /// How long the reader keeps polling a quiet socket before it sleeps.
    pub(crate) busy_poll: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            name: None,
            tls: None,
            recovery: RecoveryOptions::default(),
            consumer_concurrency: 1,
            busy_poll: None,
            trace_propagation: true,
            token_source: None,
        }
    }
}
