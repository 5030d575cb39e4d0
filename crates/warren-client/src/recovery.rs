//! How a lost connection recovers, for every protocol of the crate:
//! the options an application sets ([`RecoveryOptions`]) and the pauses
//! between attempts they make (`Backoff`): the first after each
//! address has been tried once, each later one twice as long, up to a
//! most.

use std::time::Duration;

/// How a connection recovers. On by default.
///
/// ```
/// use std::time::Duration;
/// use warren_client::amqp091::RecoveryOptions;
///
/// let patient = RecoveryOptions::default().max_delay(Duration::from_secs(30));
/// let never = RecoveryOptions::disabled();
/// assert!(patient.enabled && !never.enabled);
/// ```
#[derive(Debug, Clone)]
pub struct RecoveryOptions {
    /// Recover at all (when false a lost connection is closed for good).
    pub enabled: bool,
    /// The pause after the first failed attempt; each later one doubles
    /// it, up to `max_delay`.
    pub initial_delay: Duration,
    /// The longest pause between attempts.
    pub max_delay: Duration,
    /// Give up (and close the connection) after this many failed
    /// attempts; None tries for ever.
    pub max_attempts: Option<u32>,
    /// AMQP 0-9-1: publish again, after a recovery, what was published in
    /// confirm mode and not yet confirmed when the connection was lost:
    /// its `Confirm` then waits for the new wire's answer instead of
    /// failing with [`ConnectionLost`](crate::amqp091::Error::ConnectionLost). The broker may already have had
    /// such a message, so it can arrive twice (at least once, not
    /// exactly once). Off by default.
    pub republish_unconfirmed: bool,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            enabled: true,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_attempts: None,
            republish_unconfirmed: false,
        }
    }
}

impl RecoveryOptions {
    /// No recovery: a lost connection ends, as it does with most clients.
    pub fn disabled() -> Self {
        RecoveryOptions {
            enabled: false,
            ..Default::default()
        }
    }

    /// The longest pause between attempts.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Publish unconfirmed messages again after a recovery (see
    /// [`Self::republish_unconfirmed`](RecoveryOptions#structfield.republish_unconfirmed)).
    pub fn republish_unconfirmed(mut self) -> Self {
        self.republish_unconfirmed = true;
        self
    }

    /// Give up after `n` failed attempts.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }
}

/// The pauses between recovery attempts over `addresses` addresses: none
/// until every address has been tried once in a round, then
/// `initial_delay`, doubling up to `max_delay`.
#[derive(Debug)]
pub(crate) struct Backoff {
    delay: Duration,
    max: Duration,
    addresses: usize,
    tried: usize,
}

impl Backoff {
    pub(crate) fn new(options: &RecoveryOptions, addresses: usize) -> Backoff {
        Backoff {
            delay: options.initial_delay,
            max: options.max_delay,
            addresses: addresses.max(1),
            tried: 0,
        }
    }

    /// Which address to try next (an index), counting it as tried.
    pub(crate) fn next_address(&mut self) -> usize {
        let i = self.tried % self.addresses;
        self.tried += 1;
        i
    }

    /// The pause before the next attempt (zero within a round).
    pub(crate) fn pause(&mut self) -> Duration {
        if !self.tried.is_multiple_of(self.addresses) {
            return Duration::ZERO;
        }
        let d = self.delay;
        self.delay = (self.delay * 2).min(self.max);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_after_each_round_doubling_to_the_most() {
        let o = RecoveryOptions::default().max_delay(Duration::from_millis(300));
        let mut b = Backoff::new(&o, 2);
        let mut seen = Vec::new();
        for _ in 0..6 {
            let a = b.next_address();
            seen.push((a, b.pause().as_millis()));
        }
        assert_eq!(seen, vec![(0, 0), (1, 100), (0, 0), (1, 200), (0, 0), (1, 300)]);
    }
}
