//! A connection's events as the application reads them, for every
//! protocol of the crate: each protocol's `Event` enum says what can
//! happen; [`Events`] is the reader.

use tokio::sync::broadcast;

/// A connection's events, in order. Events the reader falls behind on by
/// more than a few hundred are skipped, never buffered without bound.
#[derive(Debug)]
pub struct Events<E> {
    pub(crate) rx: broadcast::Receiver<E>,
}

impl<E: Clone> Events<E> {
    /// The next event; None once the connection is gone.
    pub async fn next(&mut self) -> Option<E> {
        loop {
            match self.rx.recv().await {
                Ok(e) => return Some(e),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
