//! One socket's life: the state the reader and writer tasks of one TCP
//! connection share with the handles using it. A [`super::Connection`]
//! outlives its wires: when one ends, recovery opens the next.
//!
//! A wire is its sending half ([`Outbound`], which channels and acks
//! use, and which it dereferences to) and the routes from channel
//! numbers to channels, which the reader follows for every frame.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use super::channel_state::ChannelState;
use super::error::Error;
use super::outbound::Outbound;

/// A map keyed by channel number, hashed by one multiplication: the reader
/// looks a channel up for every frame, and SipHash's resistance to chosen
/// keys buys nothing for numbers this side hands out. (The multiplier
/// spreads small numbers over the high bits the table also uses.)
pub(crate) type ChannelMap<V> = HashMap<u16, V, BuildHasherDefault<ChannelNumberHasher>>;

/// The hasher of [`ChannelMap`].
#[derive(Default)]
pub(crate) struct ChannelNumberHasher(u64);

impl Hasher for ChannelNumberHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// One TCP connection, open on its virtual host.
pub(crate) struct Wire {
    /// Sending, and whether the socket has ended.
    pub(crate) outbound: Arc<Outbound>,
    /// The channels open on this wire, by number, for the reader.
    channels: Mutex<ChannelMap<Arc<ChannelState>>>,
}

impl Deref for Wire {
    type Target = Outbound;

    fn deref(&self) -> &Outbound {
        &self.outbound
    }
}

impl Wire {
    pub(crate) fn new(outbound: Outbound) -> Wire {
        Wire {
            outbound: outbound.shared(),
            channels: Mutex::new(ChannelMap::default()),
        }
    }

    /// Route this wire's frames for `state`'s number to it; false if the
    /// wire has ended (it would never tell the channel).
    pub(crate) fn register(&self, state: Arc<ChannelState>) -> bool {
        let mut chans = self.channels.lock();
        if self.is_ended() {
            return false;
        }
        chans.insert(state.id, state);
        true
    }

    pub(crate) fn unregister(&self, id: u16) {
        self.channels.lock().remove(&id);
    }

    pub(crate) fn channel(&self, id: u16) -> Option<Arc<ChannelState>> {
        self.channels.lock().get(&id).cloned()
    }

    /// The wire ended: each of its channels loses what was in flight on
    /// it (the call awaited, unconfirmed publishes, buffered deliveries).
    pub(crate) fn end(&self, why: Error) {
        if !self.outbound.set_ended(why.clone()) {
            return;
        }
        // Registering checks the end under this lock: no channel joins
        // after the drain unseen.
        let channels: Vec<_> = self.channels.lock().drain().map(|(_, c)| c).collect();
        for c in channels {
            c.wire_lost(&why);
        }
        self.outbound.stop();
    }
}
