//! Deferred publishes. A publish in confirm mode is queued without
//! waking the writer task, and the publishing task writes the queue
//! itself when it next waits, on a confirm or for in-flight room: one
//! write for everything it published in between, as a blocking client
//! writes a batch and then reads. The broker then answers the batch with
//! one confirm, so the pace settles into batches rather than a stream of
//! single frames, each costing a write, a read and two thread wake-ups.
//! One batch per window would make the pace stop-and-wait, though (the
//! broker idle while the task fills the window, the task idle while the
//! broker answers), so a batch reaching half a channel's in-flight limit
//! is written at once ([`split_at`]): at least two batches are in
//! flight, and the broker works on one while the task fills the other.
//!
//! Nothing may wait on the application, so the writer keeps a fallback
//! while publishes are deferred: a tick every [`TICK`] that writes frames
//! left waiting a whole tick. A task descheduled between its publish and
//! its wait is late now and then; one that publishes and then waits on
//! something else is late every time, so a second late batch within
//! [`STRIKE_BATCHES`] stops deferring on that wire for good (such a task
//! is kept waiting twice, by at most two ticks each). The tick is armed
//! only while a wire defers and disarmed after [`IDLE_TICKS`] without a
//! deferred publish, so an idle connection is not woken a thousand times
//! a second.
//!
//! A task knows which wires it owes frames to through a short list kept
//! per thread ([`owe_here`], [`flush_here`]): a [`super::Confirm`] polled
//! or dropped writes what that thread's publishes left, with no handle of
//! its own (a reference count per publish cost a tenth of the rate of
//! batch publishing). A task moved to another thread in between finds
//! nothing to write there, and the fallback sends its batch.
//!
//! The state lives beside the outbox ([`super::outbound::Outbound`]) and
//! changes only under its lock; the atomics let a waiting task see
//! without the lock that it owes nothing.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Weak;
use std::time::Duration;

/// The writer's fallback tick.
pub(crate) const TICK: Duration = Duration::from_millis(1);
/// Ticks without a deferred publish before the writer disarms.
const IDLE_TICKS: u32 = 100;
/// A late batch within this many of the last one stops deferring.
const STRIKE_BATCHES: u64 = 16;
/// Frames queued past this are the writer's at once: a batch this size
/// is worth a write, and a task publishing faster than it waits does not
/// hold frames back for a whole tick.
pub(crate) const DEFER_LIMIT: usize = 16 * 1024;
/// The least in-flight limit whose batches are split in two: below it
/// the halves are too small to be worth a write each (measured: at 5 in
/// flight splitting cost about 5 %, at 20 it gained half again with a
/// consumer on the same core).
const SPLIT_FROM: usize = 16;

/// After how many deferred publishes a batch is written at once, for a
/// channel allowing `max_in_flight` unconfirmed (0: never). At one in
/// flight there is nothing to batch: each publish is written by its task
/// at once, and the writer's tick is not armed for it.
pub(crate) fn split_at(max_in_flight: usize) -> usize {
    match max_in_flight {
        1 => 1,
        n if n >= SPLIT_FROM => n / 2,
        _ => 0,
    }
}

/// Whether publishes are deferred on one wire, and what is owed.
#[derive(Default)]
pub(crate) struct Deferral {
    /// The writer's fallback tick is armed: publishes may be deferred.
    armed: AtomicBool,
    /// A publish found the tick unarmed: the writer arms it on its turn.
    wanted: AtomicBool,
    /// A deferred batch waited a whole tick: this wire defers no more.
    off: AtomicBool,
    /// Frames are queued that the writer was not told of.
    owed: AtomicBool,
    /// Batches owed so far: the tick tells a batch that has waited since
    /// the last tick from a new one.
    batches: AtomicU64,
    /// Publishes in the batch owed now (see [`split_at`]).
    held: AtomicUsize,
}

/// What a publish in confirm mode does with the frames it queued.
#[derive(Debug, PartialEq)]
pub(crate) enum Queued {
    /// Left for the publishing task to write when it waits; `first` if
    /// it began a batch (the wire is then owed on this thread).
    Deferred { first: bool },
    /// The batch reached [`split_at`]: the publishing task writes it now.
    Split,
    /// The writer is to be told; first, it is to arm its tick.
    ArmWriter,
    /// As any other frames: written now or the writer told.
    Send,
}

/// What the writer's tick found.
#[derive(Debug, PartialEq)]
pub(crate) enum Tick {
    /// Nothing owed for long: keep ticking.
    Keep,
    /// Frames waited a whole tick: the writer writes them, and if they
    /// were late too often (`off`), this wire defers no more.
    Late { off: bool },
    /// Idle: the tick is disarmed.
    Disarm,
}

/// The writer's side of the tick: what it saw last.
#[derive(Default)]
pub(crate) struct TickState {
    /// `batches` at the last tick.
    seen: u64,
    idle: u32,
    /// `batches` when a batch was last late (0: none yet).
    late: u64,
}

impl Deferral {
    /// Frames were just queued by a publish in confirm mode, the outbox
    /// holding `queued` bytes now; `told` if the writer already knows of
    /// what was queued before; `split` from [`split_at`]. Called under the
    /// outbox's lock.
    pub(crate) fn publish(&self, told: bool, queued: usize, split: usize) -> Queued {
        if told {
            return Queued::Send;
        }
        if split == 1 {
            // All queued goes with it, another channel's deferred too.
            self.settle();
            return Queued::Split;
        }
        if self.armed.load(Relaxed) && queued < DEFER_LIMIT {
            let first = !self.owed.swap(true, Relaxed);
            let held = if first {
                self.batches.fetch_add(1, Relaxed);
                1
            } else {
                self.held.load(Relaxed) + 1
            };
            if split > 0 && held >= split {
                self.owed.store(false, Relaxed);
                return Queued::Split;
            }
            self.held.store(held, Relaxed);
            return Queued::Deferred { first };
        }
        self.owed.store(false, Relaxed);
        if !self.armed.load(Relaxed) && !self.off.load(Relaxed) && !self.wanted.swap(true, Relaxed) {
            return Queued::ArmWriter;
        }
        Queued::Send
    }

    /// Whether frames are owed (a hint, without the lock).
    pub(crate) fn owes(&self) -> bool {
        self.owed.load(Relaxed)
    }

    /// The frames owed are being written or the writer told: take the
    /// debt (under the outbox's lock); false if there was none.
    pub(crate) fn settle(&self) -> bool {
        // Read first: most sends owe nothing, and a swap would write the
        // line the publishing and writing threads both read.
        self.owed.load(Relaxed) && self.owed.swap(false, Relaxed)
    }

    /// The writer's turn: arm the tick if a publish asked and this wire
    /// still defers; true if it is to start ticking now.
    pub(crate) fn arm(&self) -> bool {
        if self.wanted.load(Relaxed)
            && self.wanted.swap(false, Relaxed)
            && !self.off.load(Relaxed)
            && !self.armed.load(Relaxed)
        {
            self.armed.store(true, Relaxed);
            return true;
        }
        false
    }

    /// The writer's tick, under the outbox's lock.
    pub(crate) fn tick(&self, t: &mut TickState) -> Tick {
        let batches = self.batches.load(Relaxed);
        if self.owed.load(Relaxed) && batches == t.seen {
            // Owed since before the last tick: its task was descheduled,
            // or waits on something else.
            self.owed.store(false, Relaxed);
            let off = t.late != 0 && batches - t.late < STRIKE_BATCHES;
            t.late = batches;
            if off {
                self.off.store(true, Relaxed);
                self.armed.store(false, Relaxed);
            }
            return Tick::Late { off };
        }
        if batches != t.seen {
            t.seen = batches;
            t.idle = 0;
            return Tick::Keep;
        }
        t.idle += 1;
        if t.idle < IDLE_TICKS {
            return Tick::Keep;
        }
        // Nothing is owed here (a debt is a batch newer than the last
        // tick, or a stale one, both handled above), and a publish reads
        // `armed` under the same lock: none is deferred after this.
        self.armed.store(false, Relaxed);
        Tick::Disarm
    }

    #[cfg(test)]
    fn armed(&self) -> bool {
        self.armed.load(Relaxed)
    }
}

/// A wire's sending half, as the per-thread list knows it.
pub(crate) trait Owing: Send + Sync {
    /// Write the frames deferred on this wire (see `Outbound`).
    fn flush_deferred(&self);
}

thread_local! {
    /// The wires this thread's publishes left frames on since it last
    /// waited: as many entries as wires, each once.
    static OWED_HERE: RefCell<Vec<Weak<dyn Owing>>> = const { RefCell::new(Vec::new()) };
}

/// A publish on this thread began a batch on `wire`.
pub(crate) fn owe_here(wire: &Weak<dyn Owing>) {
    OWED_HERE.with(|owed| {
        let mut owed = owed.borrow_mut();
        if !owed.iter().any(|w| Weak::ptr_eq(w, wire)) {
            owed.push(wire.clone());
        }
    });
}

/// A task on this thread is about to wait: write what publishes here
/// left on any wire.
pub(crate) fn flush_here() {
    let owed = OWED_HERE.with(|owed| {
        let mut owed = owed.borrow_mut();
        (!owed.is_empty()).then(|| std::mem::take(&mut *owed))
    });
    // Outside the borrow: a flush could (through a waker) run code that
    // publishes on this thread.
    for wire in owed.into_iter().flatten() {
        if let Some(wire) = wire.upgrade() {
            wire.flush_deferred();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_asks_the_writer_to_arm_once_then_defers() {
        let d = Deferral::default();
        assert_eq!(d.publish(false, 100, 0), Queued::ArmWriter);
        assert_eq!(d.publish(false, 100, 0), Queued::Send, "asked once");
        assert!(d.arm());
        assert!(!d.arm(), "armed once");
        assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
        assert!(d.owes());
        assert_eq!(
            d.publish(false, 200, 0),
            Queued::Deferred { first: false },
            "the same batch"
        );
        assert!(d.settle());
        assert!(!d.owes());
        assert_eq!(d.publish(true, 200, 0), Queued::Send, "the writer knows already");
    }

    #[test]
    fn a_batch_of_half_the_in_flight_limit_is_written_at_once() {
        assert_eq!(split_at(5), 0, "small windows are not split");
        assert_eq!(split_at(20), 10);
        assert_eq!(split_at(1), 1, "nothing to batch at one in flight");
        let lone = Deferral::default();
        assert_eq!(lone.publish(false, 100, 1), Queued::Split, "written at once");
        assert!(!lone.arm(), "and the writer's tick not asked for");
        let d = Deferral::default();
        d.publish(false, 1, 0);
        d.arm();
        for round in 0..2 {
            assert_eq!(
                d.publish(false, 100, 3),
                Queued::Deferred { first: true },
                "round {round}"
            );
            assert_eq!(d.publish(false, 100, 3), Queued::Deferred { first: false });
            assert_eq!(d.publish(false, 100, 3), Queued::Split);
            assert!(!d.owes(), "the task writes the batch itself");
        }
        assert_eq!(d.publish(false, 100, 3), Queued::Deferred { first: true });
        assert!(d.settle(), "written when its task waited");
        assert_eq!(
            d.publish(false, 100, 3),
            Queued::Deferred { first: true },
            "a new batch counts from one"
        );
    }

    #[test]
    fn a_batch_past_the_limit_goes_to_the_writer() {
        let d = Deferral::default();
        d.publish(false, 1, 0);
        d.arm();
        assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
        assert_eq!(d.publish(false, DEFER_LIMIT, 0), Queued::Send);
        assert!(!d.owes(), "the writer is told of all of it");
    }

    #[test]
    fn batches_owed_a_whole_tick_are_written_and_late_twice_running_the_wire_defers_no_more() {
        let d = Deferral::default();
        let mut t = TickState::default();
        d.publish(false, 1, 0);
        d.arm();
        assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
        assert_eq!(d.tick(&mut t), Tick::Keep, "a new batch");
        assert_eq!(
            d.tick(&mut t),
            Tick::Late { off: false },
            "still owed a tick later"
        );
        assert!(!d.owes() && d.armed(), "once late: still deferring");
        assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
        assert_eq!(d.tick(&mut t), Tick::Keep);
        assert_eq!(d.tick(&mut t), Tick::Late { off: true }, "late again at once");
        assert!(!d.owes() && !d.armed());
        assert_eq!(d.publish(false, 100, 0), Queued::Send, "off for good");
        assert!(!d.arm());
    }

    #[test]
    fn a_late_batch_now_and_then_keeps_it_deferring() {
        let d = Deferral::default();
        let mut t = TickState::default();
        d.publish(false, 1, 0);
        d.arm();
        for _ in 0..3 {
            d.publish(false, 100, 0);
            d.tick(&mut t);
            assert_eq!(d.tick(&mut t), Tick::Late { off: false });
            for _ in 0..STRIKE_BATCHES {
                assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
                assert!(d.settle());
            }
        }
        assert!(d.armed());
    }

    #[test]
    fn batches_flushed_between_ticks_keep_it_armed_and_idleness_disarms() {
        let d = Deferral::default();
        let mut t = TickState::default();
        d.publish(false, 1, 0);
        d.arm();
        for _ in 0..10 {
            assert_eq!(d.publish(false, 100, 0), Queued::Deferred { first: true });
            assert_eq!(d.tick(&mut t), Tick::Keep);
            assert!(d.settle(), "the task wrote it when it waited");
        }
        for _ in 1..IDLE_TICKS {
            assert_eq!(d.tick(&mut t), Tick::Keep);
        }
        assert_eq!(d.tick(&mut t), Tick::Disarm);
        assert!(!d.armed());
        assert_eq!(d.publish(false, 100, 0), Queued::ArmWriter, "armed again on use");
    }
}
