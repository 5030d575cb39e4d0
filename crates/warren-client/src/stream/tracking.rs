//! Offset tracking: a named consumer's place in its stream, stored on the
//! broker (StoreOffset, under the consumer's name as its reference) so a
//! consumer of that name built later carries on after it. Automatic
//! tracking stores the last offset handed out every so many messages,
//! after a quiet spell once messages flow, and when the consumer closes;
//! manual tracking stores what the application says.

use std::time::{Duration, Instant};

/// How a named consumer's offset is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tracking {
    /// The last offset handed out, every `messages` messages, at least
    /// every `interval` while messages come, and on close (the Java
    /// client's defaults: 10,000 and 5 s).
    Automatic {
        /// Messages between stores.
        messages: u32,
        /// Time between stores while messages come.
        interval: Duration,
    },
    /// Only when the application calls
    /// [`super::Consumer::store_offset`].
    Manual,
}

impl Default for Tracking {
    fn default() -> Tracking {
        Tracking::Automatic {
            messages: 10_000,
            interval: Duration::from_secs(5),
        }
    }
}

/// What a consumer with automatic tracking keeps to decide when to store.
pub(crate) struct Tracker {
    messages: u32,
    interval: Duration,
    since_store: u32,
    stored_at: Instant,
    /// The last offset handed out, and whether it is stored.
    last: Option<(u64, bool)>,
}

impl Tracker {
    pub(crate) fn new(tracking: Tracking) -> Option<Tracker> {
        match tracking {
            Tracking::Automatic { messages, interval } => Some(Tracker {
                messages: messages.max(1),
                interval,
                since_store: 0,
                stored_at: Instant::now(),
                last: None,
            }),
            Tracking::Manual => None,
        }
    }

    /// `offset` was handed out: the offset to store now, if it is time.
    pub(crate) fn handed_out(&mut self, offset: u64) -> Option<u64> {
        self.since_store += 1;
        self.last = Some((offset, false));
        if self.since_store >= self.messages || self.stored_at.elapsed() >= self.interval {
            return self.stored();
        }
        None
    }

    /// The consumer closes: the last offset, unless it is stored.
    pub(crate) fn closing(&mut self) -> Option<u64> {
        match self.last {
            Some((_, false)) => self.stored(),
            _ => None,
        }
    }

    fn stored(&mut self) -> Option<u64> {
        let (offset, _) = self.last?;
        self.last = Some((offset, true));
        self.since_store = 0;
        self.stored_at = Instant::now();
        Some(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_n_messages_and_on_close_once() {
        let mut t = Tracker::new(Tracking::Automatic {
            messages: 3,
            interval: Duration::from_secs(3600),
        })
        .unwrap();
        let stored: Vec<Option<u64>> = (0..7).map(|o| t.handed_out(o)).collect();
        assert_eq!(stored, vec![None, None, Some(2), None, None, Some(5), None]);
        assert_eq!(t.closing(), Some(6));
        assert_eq!(t.closing(), None, "stored already");
        assert!(Tracker::new(Tracking::Manual).is_none());
    }
}
