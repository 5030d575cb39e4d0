//! One socket's life: the state the reader and writer tasks of one TCP
//! connection share with the handles using it. A [`super::Connection`]
//! outlives its wires: when one ends, recovery opens the next.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{broadcast, oneshot, watch, Notify};

use super::channel::ChannelState;
use super::error::Error;
use super::events::Event;
use super::handshake::Opened;
use super::socket::WriteHalf;

/// A sender writes its frames itself only if the socket has been quiet
/// this long (µs): a lone publish or ack then saves the writer task's
/// wake-up, while a busy connection keeps batching in the writer (one
/// write for many frames, where writing each would cost a system call).
const DIRECT_AFTER_QUIET_US: u64 = 50;
/// Bytes of frames waiting for the writer before senders wait.
const OUTBOX_LIMIT: usize = 1 << 20;

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

/// One TCP connection, open on its virtual host.
pub(crate) struct Wire {
    /// Encoded frames waiting for the writer task, in the order they must
    /// go out. Senders encode straight into it (no buffer, queue slot or
    /// copy of their own); the writer swaps it for an empty one and
    /// writes what it took in one go.
    outbox: Mutex<BytesMut>,
    /// Told when the outbox goes from empty to not: the writer waits on it.
    pub(crate) outbox_filled: Notify,
    /// Told when the writer takes the outbox: senders waiting for room.
    outbox_taken: Notify,
    /// The socket's sending half: the writer task's, or a sender's that
    /// finds the outbox empty and the socket quiet (see `write_direct`).
    pub(crate) out: tokio::sync::Mutex<WriteHalf>,
    /// When the socket was last written to (µs since `born`): a sender
    /// writes directly only after a pause (see `write_direct`).
    last_write: AtomicU64,
    born: Instant,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    /// The channels open on this wire, by number, for the reader.
    channels: Mutex<ChannelMap<Arc<ChannelState>>>,
    /// Why the wire ended, once it has.
    ended: Mutex<Option<Error>>,
    /// Told when the broker answers this side's connection.close.
    pub(crate) close_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Told when the broker accepts a connection.update-secret.
    pub(crate) update_secret_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Set once the wire has ended: the writer writes what is queued and
    /// stops, which closes the socket.
    stop: watch::Sender<bool>,
    pub(crate) signals: Arc<Signals>,
}

impl Wire {
    /// Start the reader and writer tasks on an opened socket.
    pub(crate) fn start(opened: Opened, signals: Arc<Signals>, busy_poll: Option<Duration>) -> Arc<Wire> {
        let Opened { stream, rbuf, tuned } = opened;
        let (read, write) = stream.split();
        let (stop, stopped) = watch::channel(false);
        let wire = Arc::new(Wire {
            outbox: Mutex::new(BytesMut::with_capacity(64 * 1024)),
            outbox_filled: Notify::new(),
            outbox_taken: Notify::new(),
            out: tokio::sync::Mutex::new(write),
            last_write: AtomicU64::new(0),
            born: Instant::now(),
            frame_max: tuned.frame_max,
            channel_max: tuned.channel_max,
            channels: Mutex::new(ChannelMap::default()),
            ended: Mutex::new(None),
            close_ok: Mutex::new(None),
            update_secret_ok: Mutex::new(None),
            stop,
            signals,
        });
        let beat = (tuned.heartbeat > 0).then(|| Duration::from_secs(tuned.heartbeat as u64));
        tokio::spawn(super::io::write_loop(beat.map(|b| b / 2), stopped, wire.clone()));
        tokio::spawn(super::io::read_loop(
            read,
            rbuf,
            beat.map(|b| b * 2),
            busy_poll,
            wire.clone(),
        ));
        wire
    }

    /// Send encoded frames (waiting while the outbox is over its limit).
    pub(crate) async fn send(&self, frames: Bytes) -> Result<(), Error> {
        self.send_with(|buf| buf.extend_from_slice(&frames)).await
    }

    /// Send the frames `encode` appends to the buffer it is given,
    /// waiting while the outbox is over its limit. Nothing is written
    /// half: `encode` runs whole under the outbox's lock, and dropping
    /// this future before it runs sends nothing.
    pub(crate) async fn send_with<R>(&self, encode: impl FnOnce(&mut BytesMut) -> R) -> Result<R, Error> {
        let mut encode = Some(encode);
        loop {
            let room = self.outbox_taken.notified();
            tokio::pin!(room);
            // Registered before looking, so a take in between is seen.
            room.as_mut().enable();
            if let Some(r) = self.try_send_with(&mut encode)? {
                return Ok(r);
            }
            room.await;
        }
    }

    /// [`Self::send`] without waiting (false if the outbox is full or the
    /// wire ended).
    pub(crate) fn try_send(&self, frames: Bytes) -> bool {
        matches!(
            self.try_send_with(&mut Some(|buf: &mut BytesMut| buf.extend_from_slice(&frames))),
            Ok(Some(()))
        )
    }

    /// Run `encode` (taken from the option) on the outbox now, if it has
    /// room: `Ok(None)` if it has not, an error if the wire has ended.
    /// With the outbox empty before and the socket quiet a while, the
    /// frames are written at once by the caller (one task wake-up less
    /// for a lone publish or ack: what a request/response pace is made
    /// of); otherwise the writer is told. Callers may hold a channel's
    /// locks: this takes only the outbox's (and tries the socket's).
    pub(crate) fn try_send_with<R>(
        &self,
        encode: &mut Option<impl FnOnce(&mut BytesMut) -> R>,
    ) -> Result<Option<R>, Error> {
        let mut outbox = self.outbox.lock();
        if self.is_ended() {
            return Err(self.ended_error());
        }
        if outbox.len() >= OUTBOX_LIMIT {
            return Ok(None);
        }
        let was_empty = outbox.is_empty();
        let r = (encode.take().expect("an encoder runs once"))(&mut outbox);
        if was_empty && !self.write_direct(&mut outbox) {
            self.outbox_filled.notify_one();
        }
        Ok(Some(r))
    }

    /// Wait until the outbox has room (or the wire has ended).
    pub(crate) async fn room(&self) {
        let room = self.outbox_taken.notified();
        tokio::pin!(room);
        room.as_mut().enable();
        if self.outbox.lock().len() < OUTBOX_LIMIT || self.is_ended() {
            return;
        }
        room.await;
    }

    /// Write the outbox (holding only what was just added) to the socket
    /// now, if the socket has been quiet and is free; true if all of it
    /// went. A failed write is left to the writer task to find and end
    /// the wire (ending it here, under the outbox's lock, would take the
    /// channels' locks a sender may hold).
    fn write_direct(&self, outbox: &mut BytesMut) -> bool {
        let now = self.born.elapsed().as_micros() as u64;
        if now.saturating_sub(self.last_write.load(Ordering::Relaxed)) < DIRECT_AFTER_QUIET_US {
            return false;
        }
        let Ok(out) = self.out.try_lock() else {
            return false;
        };
        self.last_write.store(now, Ordering::Relaxed);
        match out.try_write(outbox) {
            Ok(n) if n == outbox.len() => {
                outbox.clear();
                true
            }
            Ok(n) => {
                outbox.advance(n);
                false
            }
            Err(_) => false,
        }
    }

    /// The writer's turn: swap the outbox's frames into `spare` (empty),
    /// telling senders waiting for room; false if there were none.
    pub(crate) fn take_outbox(&self, spare: &mut BytesMut) -> bool {
        {
            let mut outbox = self.outbox.lock();
            if outbox.is_empty() {
                return false;
            }
            std::mem::swap(&mut *outbox, spare);
        }
        self.outbox_taken.notify_waiters();
        true
    }

    /// Note a write to the socket now.
    pub(crate) fn wrote(&self) {
        let now = self.born.elapsed().as_micros() as u64;
        self.last_write.store(now, Ordering::Relaxed);
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.lock().is_some()
    }

    /// Why the wire ended (or that its writer stopped).
    pub(crate) fn ended_error(&self) -> Error {
        self.ended
            .lock()
            .clone()
            .unwrap_or_else(|| Error::ConnectionLost("the connection's writer stopped".into()))
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
        {
            let mut e = self.ended.lock();
            if e.is_some() {
                return;
            }
            *e = Some(why.clone());
        }
        let channels: Vec<_> = self.channels.lock().drain().map(|(_, c)| c).collect();
        for c in channels {
            c.wire_lost(&why);
        }
        if let Some(tx) = self.close_ok.lock().take() {
            let _ = tx.send(());
        }
        // Senders waiting for room learn the wire ended.
        self.outbox_taken.notify_waiters();
        self.stop.send_replace(true);
    }

    /// A receiver told when the wire ends.
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// How long since the socket was last written to.
    pub(crate) fn since_last_write(&self) -> Duration {
        let now = self.born.elapsed().as_micros() as u64;
        Duration::from_micros(now.saturating_sub(self.last_write.load(Ordering::Relaxed)))
    }

    /// Wait until the wire has ended.
    pub(crate) async fn ended(&self) {
        let mut stopped = self.stop.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }
}
