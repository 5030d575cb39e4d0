//! One socket's life: the state the reader and writer tasks of one TCP
//! connection share with the handles using it. A [`super::Connection`]
//! outlives its wires: when one ends, recovery opens the next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

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
/// Frames queued for the writer before publishers wait.
const WRITER_QUEUE: usize = 1024;

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
    /// Encoded frames for the writer task, in the order they must go out.
    writer: mpsc::Sender<Bytes>,
    /// The socket's sending half: the writer task's, or a sender's that
    /// finds nothing queued (see `send`).
    pub(crate) out: tokio::sync::Mutex<WriteHalf>,
    /// Frames queued and not yet written. While any are, every sender
    /// queues, so frames keep the order they were sent in.
    pub(crate) queued: AtomicUsize,
    /// When the socket was last written to (µs since `born`): a sender
    /// writes directly only after a pause (see `write_now`).
    last_write: AtomicU64,
    born: Instant,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    /// The channels open on this wire, by number, for the reader.
    channels: Mutex<HashMap<u16, Arc<ChannelState>>>,
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
    pub(crate) fn start(opened: Opened, signals: Arc<Signals>) -> Arc<Wire> {
        let Opened { stream, rbuf, tuned } = opened;
        let (read, write) = stream.split();
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let (stop, stopped) = watch::channel(false);
        let wire = Arc::new(Wire {
            writer: tx,
            out: tokio::sync::Mutex::new(write),
            queued: AtomicUsize::new(0),
            last_write: AtomicU64::new(0),
            born: Instant::now(),
            frame_max: tuned.frame_max,
            channel_max: tuned.channel_max,
            channels: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            close_ok: Mutex::new(None),
            update_secret_ok: Mutex::new(None),
            stop,
            signals,
        });
        let beat = (tuned.heartbeat > 0).then(|| Duration::from_secs(tuned.heartbeat as u64));
        tokio::spawn(super::io::write_loop(
            rx,
            beat.map(|b| b / 2),
            stopped,
            wire.clone(),
        ));
        tokio::spawn(super::io::read_loop(
            read,
            rbuf,
            beat.map(|b| b * 2),
            wire.clone(),
        ));
        wire
    }

    /// Send encoded frames. With nothing queued and the socket free they
    /// are written at once by the caller (one task wake-up less for a
    /// lone publish or ack: what a request/response pace is made of);
    /// otherwise the writer task takes them, batched with the rest. The
    /// direct write never waits, so dropping this future never leaves a
    /// frame half written.
    pub(crate) async fn send(&self, frames: Bytes) -> Result<(), Error> {
        let frames = match self.write_now(frames) {
            Ok(()) => return Ok(()),
            Err(rest) => rest,
        };
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.writer.send(frames).await.is_err() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(self.ended_error());
        }
        Ok(())
    }

    /// [`Self::send`] without waiting (false if the queue is full or the
    /// wire ended).
    pub(crate) fn try_send(&self, frames: Bytes) -> bool {
        let frames = match self.write_now(frames) {
            Ok(()) => return true,
            Err(rest) => rest,
        };
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.writer.try_send(frames).is_err() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Write `frames` on the socket now if nothing is queued before them
    /// and the socket is free; what could not be written (all of it, or
    /// the tail of a short write, queued first in line) comes back.
    fn write_now(&self, frames: Bytes) -> Result<(), Bytes> {
        if self.queued.load(Ordering::SeqCst) != 0 || self.is_ended() {
            return Err(frames);
        }
        let now = self.born.elapsed().as_micros() as u64;
        if now.saturating_sub(self.last_write.load(Ordering::Relaxed)) < DIRECT_AFTER_QUIET_US {
            return Err(frames);
        }
        let Ok(out) = self.out.try_lock() else {
            return Err(frames);
        };
        // Checked again under the lock: the writer task empties the
        // queue only while it holds it.
        if self.queued.load(Ordering::SeqCst) != 0 {
            return Err(frames);
        }
        self.wrote();
        match out.try_write(&frames) {
            Ok(n) if n == frames.len() => Ok(()),
            Ok(n) => {
                // The rest must go before anything else: queue it while
                // still holding the socket, so no sender writes past it.
                self.queued.fetch_add(1, Ordering::SeqCst);
                if self.writer.try_send(frames.slice(n..)).is_err() {
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                    drop(out);
                    self.end(Error::ConnectionLost(
                        "the writer's queue refused a frame's tail".into(),
                    ));
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(frames),
            Err(e) => {
                drop(out);
                self.end(Error::ConnectionLost(format!("writing: {e}")));
                Ok(())
            }
        }
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
