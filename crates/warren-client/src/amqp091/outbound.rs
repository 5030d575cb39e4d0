//! A socket's sending half and whether it has ended: the outbox senders
//! encode their frames into, the writer task's turn at it, the direct
//! write of a lone frame or of a publishing task's batch
//! ([`super::deferral`]), and the end of the socket's life. Channels,
//! acks and the writer use this; [`super::wire::Wire`] adds the routes
//! from channel numbers to channels that the reader needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch, Notify};

use super::deferral::{owe_here, split_at, Deferral, Owing, Queued, Tick, TickState};
use super::error::Error;
use super::events::Signals;
use crate::socket::WriteHalf;

/// A sender writes its frames itself only if the socket has been quiet
/// this long (µs): a lone publish or ack then saves the writer task's
/// wake-up, while a busy connection keeps batching in the writer (one
/// write for many frames, where writing each would cost a system call).
const DIRECT_AFTER_QUIET_US: u64 = 50;
/// Bytes of frames waiting for the writer before senders wait.
const OUTBOX_LIMIT: usize = 1 << 20;

/// The sending half of one TCP connection, open on its virtual host.
pub(crate) struct Outbound {
    /// Encoded frames waiting for the writer task, in the order they must
    /// go out. Senders encode straight into it (no buffer, queue slot or
    /// copy of their own); the writer swaps it for an empty one and
    /// writes what it took in one go.
    outbox: Mutex<BytesMut>,
    /// Told when the outbox holds frames the writer is to take: the
    /// writer waits on it.
    pub(crate) outbox_filled: Notify,
    /// Publishes whose frames their task writes when it waits.
    pub(crate) deferral: Deferral,
    /// This, for the lists of wires owed frames (set by [`Self::shared`]).
    me: Weak<dyn Owing>,
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
    /// Why the wire ended, once it has.
    ended: Mutex<Option<Error>>,
    /// Told when the broker answers this side's connection.close.
    pub(crate) close_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Told when the broker accepts a connection.update-secret.
    pub(crate) update_secret_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Set once the wire has ended: the writer writes what is queued and
    /// stops, which closes the socket.
    done: watch::Sender<bool>,
    pub(crate) signals: Arc<Signals>,
}

impl Outbound {
    /// The sending half of a socket just opened.
    pub(crate) fn new(write: WriteHalf, frame_max: u32, channel_max: u16, signals: Arc<Signals>) -> Outbound {
        let (done, _) = watch::channel(false);
        Outbound {
            outbox: Mutex::new(BytesMut::with_capacity(64 * 1024)),
            outbox_filled: Notify::new(),
            deferral: Deferral::default(),
            me: Weak::<Outbound>::new(),
            outbox_taken: Notify::new(),
            out: tokio::sync::Mutex::new(write),
            last_write: AtomicU64::new(0),
            born: Instant::now(),
            frame_max,
            channel_max,
            ended: Mutex::new(None),
            close_ok: Mutex::new(None),
            update_secret_ok: Mutex::new(None),
            done,
            signals,
        }
    }

    /// This sending half shared, knowing itself (for [`owe_here`]).
    pub(crate) fn shared(mut self) -> Arc<Outbound> {
        Arc::new_cyclic(|me: &Weak<Outbound>| {
            self.me = me.clone();
            self
        })
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
    /// With nothing queued before that the writer knows of, and the
    /// socket quiet a while, the frames are written at once by the caller
    /// (one task wake-up less for a lone ack or method: what a
    /// request/response pace is made of); otherwise the writer is told.
    /// Callers may hold a channel's locks: this takes only the outbox's
    /// (and tries the socket's).
    pub(crate) fn try_send_with<R>(
        &self,
        encode: &mut Option<impl FnOnce(&mut BytesMut) -> R>,
    ) -> Result<Option<R>, Error> {
        self.queue(encode, None)
    }

    /// [`Self::try_send_with`] for a publish in confirm mode on a channel
    /// allowing `max_in_flight` unconfirmed: its frames may be left for
    /// its task to write when it waits on a confirm or for room
    /// ([`Self::flush_deferred`]), or when its batch reaches half that
    /// limit (see [`super::deferral`]).
    pub(crate) fn try_publish_with<R>(
        &self,
        encode: &mut Option<impl FnOnce(&mut BytesMut) -> R>,
        max_in_flight: usize,
    ) -> Result<Option<R>, Error> {
        self.queue(encode, Some(split_at(max_in_flight)))
    }

    fn queue<R>(
        &self,
        encode: &mut Option<impl FnOnce(&mut BytesMut) -> R>,
        publish: Option<usize>,
    ) -> Result<Option<R>, Error> {
        let mut outbox = self.outbox.lock();
        if self.is_ended() {
            return Err(self.ended_error());
        }
        if outbox.len() >= OUTBOX_LIMIT {
            return Ok(None);
        }
        // The writer knows of what is queued unless it was deferred.
        let told = !outbox.is_empty() && !self.deferral.owes();
        let r = (encode.take().expect("an encoder runs once"))(&mut outbox);
        let queued = match publish {
            Some(split) => self.deferral.publish(told, outbox.len(), split),
            None => Queued::Send,
        };
        match queued {
            Queued::Deferred { first: true } => owe_here(&self.me),
            Queued::Deferred { first: false } => {}
            // As a flush: the task writes, whether or not the socket was
            // quiet (the writer would only wake to write the same).
            Queued::Split => self.write_or_tell(&mut outbox, false),
            Queued::ArmWriter => self.outbox_filled.notify_one(),
            Queued::Send if told => {}
            Queued::Send => {
                self.deferral.settle();
                self.write_or_tell(&mut outbox, true);
            }
        }
        Ok(Some(r))
    }

    /// A publishing task is about to wait: write the frames it (or
    /// another) deferred, or tell the writer if the socket is busy.
    pub(crate) fn flush_deferred(&self) {
        Owing::flush_deferred(self)
    }
    /// The writer's fallback tick (see [`super::deferral`]).
    pub(crate) fn deferral_tick(&self, t: &mut TickState) -> Tick {
        let _outbox = self.outbox.lock();
        self.deferral.tick(t)
    }

    /// Wait until the outbox has room (or the wire has ended).
    pub(crate) async fn room(&self) {
        self.flush_deferred();
        let room = self.outbox_taken.notified();
        tokio::pin!(room);
        room.as_mut().enable();
        if self.outbox.lock().len() < OUTBOX_LIMIT || self.is_ended() {
            return;
        }
        room.await;
    }

    /// Write the outbox to the socket now, if the socket is free (and,
    /// with `after_quiet`, has been quiet a while: a busy connection
    /// batches better in the writer); true if all of it went. A failed
    /// write is left to the writer task to find and end the wire (ending
    /// it here, under the outbox's lock, would take the channels' locks a
    /// sender may hold).
    fn write_direct(&self, outbox: &mut BytesMut, after_quiet: bool) -> bool {
        let now = self.born.elapsed().as_micros() as u64;
        if after_quiet && now.saturating_sub(self.last_write.load(Ordering::Relaxed)) < DIRECT_AFTER_QUIET_US
        {
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

    /// Write the outbox now ([`Self::write_direct`]), or tell the writer
    /// what is left.
    fn write_or_tell(&self, outbox: &mut BytesMut, after_quiet: bool) {
        if !self.write_direct(outbox, after_quiet) {
            self.outbox_filled.notify_one();
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
            // Deferred frames taken with the rest are owed no more.
            self.deferral.settle();
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

    /// Note why the socket ended; false if it had already ended (the
    /// first reason stands). [`Self::stop`] follows once the channels
    /// have been told.
    pub(crate) fn set_ended(&self, why: Error) -> bool {
        let mut e = self.ended.lock();
        if e.is_some() {
            return false;
        }
        *e = Some(why);
        true
    }

    /// After [`Self::set_ended`]: a close waiting for its answer, senders
    /// waiting for room and the writer (which writes what is queued and
    /// closes the socket) learn that the socket ended.
    pub(crate) fn stop(&self) {
        if let Some(tx) = self.close_ok.lock().take() {
            let _ = tx.send(());
        }
        self.outbox_taken.notify_waiters();
        self.done.send_replace(true);
    }

    /// A receiver told when the wire ends.
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }

    /// How long since the socket was last written to.
    pub(crate) fn since_last_write(&self) -> Duration {
        let now = self.born.elapsed().as_micros() as u64;
        Duration::from_micros(now.saturating_sub(self.last_write.load(Ordering::Relaxed)))
    }

    /// Wait until the wire has ended.
    pub(crate) async fn ended(&self) {
        let mut stopped = self.done.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }
}

impl Owing for Outbound {
    fn flush_deferred(&self) {
        if !self.deferral.owes() {
            return;
        }
        let mut outbox = self.outbox.lock();
        if self.deferral.settle() && !outbox.is_empty() {
            self.write_or_tell(&mut outbox, false);
        }
    }
}
