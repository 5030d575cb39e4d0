//! At-least-once dead-lettering of a quorum queue, as RabbitMQ's
//! rabbit_fifo_dlx_worker does it: a dead-lettered message stays in the
//! replicated state as a discard (warren-fifo), and the leader's worker
//! routes it through the dead-letter exchange, waits until every target
//! queue has it (each target's publish ticket: an fsync, or the confirm
//! of a queue on another node), and only then proposes `SettleDlx`, which
//! removes it on every member. A dead letter that went nowhere, or that a
//! target refused, or whose confirms do not come, is sent again later.
//! A new leader starts again from every discard, so a dead letter may
//! reach its targets more than once, never less.
//!
//! This type holds only the leader's bookkeeping; what is discarded is
//! the state machine's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_fifo::MsgId;

use super::dead_letter::Delivery;

/// Dead letters under way at once (RabbitMQ's worker takes 32 at a time:
/// `dead_letter_worker_consumer_prefetch`).
pub const IN_FLIGHT: usize = 32;
/// A dead letter that went nowhere, or that a target refused, is sent
/// again after this.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// One whose targets have not all confirmed after this is sent again.
const CONFIRM_AFTER: Duration = Duration::from_secs(60);
/// How often the leader looks at the tickets under way.
const LOOK_EVERY: Duration = Duration::from_millis(20);

#[derive(Debug)]
enum Try {
    /// To be sent from then on.
    Due(Instant),
    Sending {
        delivery: Arc<Delivery>,
        since: Instant,
    },
    /// `SettleDlx` proposed; it goes when that applies.
    Settling(Instant),
}

#[derive(Debug, Default)]
pub struct DlxWorker {
    tries: BTreeMap<MsgId, Try>,
}

impl DlxWorker {
    /// No longer leading: a later leader starts again.
    pub fn clear(&mut self) {
        self.tries.clear();
    }

    pub fn is_idle(&self) -> bool {
        self.tries.is_empty()
    }

    /// A message was dead-lettered: to be sent now.
    pub fn discarded(&mut self, id: MsgId, now: Instant) {
        self.tries.insert(id, Try::Due(now));
    }

    /// These discards are settled (or left the queue): done with them.
    pub fn settled(&mut self, ids: &[MsgId]) {
        if self.tries.is_empty() {
            return;
        }
        for id in ids {
            self.tries.remove(id);
        }
    }

    /// Look at what is under way at `now`: the discards every target has
    /// (to settle), and those to send now, oldest first, within
    /// [`IN_FLIGHT`].
    pub fn poll(&mut self, now: Instant) -> (Vec<MsgId>, Vec<MsgId>) {
        let mut settle = Vec::new();
        let mut sending = 0;
        for (id, t) in self.tries.iter_mut() {
            match t {
                Try::Sending { delivery, since } => match delivery.outcome() {
                    Some(true) => {
                        settle.push(*id);
                        *t = Try::Settling(now);
                    }
                    Some(false) => *t = Try::Due(now + RETRY_AFTER),
                    None if now.duration_since(*since) >= CONFIRM_AFTER => *t = Try::Due(now),
                    None => sending += 1,
                },
                // Its SettleDlx was lost with a leader that did not last.
                Try::Settling(at) if now.duration_since(*at) >= CONFIRM_AFTER => *t = Try::Due(now),
                _ => {}
            }
        }
        let send = self
            .tries
            .iter()
            .filter(|(_, t)| matches!(t, Try::Due(at) if *at <= now))
            .map(|(id, _)| *id)
            .take(IN_FLIGHT.saturating_sub(sending))
            .collect();
        (settle, send)
    }

    /// `id` was routed (or is being): `delivery` says when its targets
    /// have it.
    pub fn sending(&mut self, id: MsgId, delivery: Arc<Delivery>, now: Instant) {
        self.tries.insert(id, Try::Sending { delivery, since: now });
    }

    /// When the leader should look again.
    pub fn next_look(&self, now: Instant) -> Option<Instant> {
        self.tries
            .values()
            .map(|t| match t {
                Try::Due(at) => (*at).max(now),
                Try::Sending { .. } => now + LOOK_EVERY,
                Try::Settling(at) => *at + CONFIRM_AFTER,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{RemoteConfirm, Ticket};

    #[test]
    fn settles_once_every_target_has_it_and_retries_what_went_nowhere() {
        let mut w = DlxWorker::default();
        let t0 = Instant::now();
        for id in 1..=40 {
            w.discarded(id, t0);
        }
        let (settle, send) = w.poll(t0);
        assert!(settle.is_empty());
        assert_eq!(send, (1..=IN_FLIGHT as u64).collect::<Vec<_>>());
        // 1: two targets, one confirmed so far; 2: routed nowhere.
        let (a, b) = (RemoteConfirm::new(), RemoteConfirm::new());
        let d1 = Delivery::new();
        d1.routed(vec![Ticket::Remote(a.clone()), Ticket::Remote(b.clone())]);
        let d2 = Delivery::new();
        d2.routed(vec![]);
        w.sending(1, d1, t0);
        w.sending(2, d2, t0);
        a.resolve(true);
        let (settle, send) = w.poll(t0);
        assert!(settle.is_empty());
        // One under way (2 went nowhere): room for 31 more, from 3 on.
        assert_eq!(send.len(), IN_FLIGHT - 1);
        assert_eq!(send[0], 3);
        b.resolve(true);
        let (settle, _) = w.poll(t0);
        assert_eq!(settle, [1]);
        // 2 waits RETRY_AFTER, then goes again.
        assert!(!w.poll(t0).1.contains(&2));
        assert!(w.poll(t0 + RETRY_AFTER).1.contains(&2));
        w.settled(&[1]);
        assert_eq!(w.next_look(t0), Some(t0));
        w.clear();
        assert!(w.is_idle());
    }
}
