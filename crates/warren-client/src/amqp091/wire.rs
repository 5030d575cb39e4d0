//! One socket's life: the state the reader and writer tasks of one TCP
//! connection share with the handles using it. A [`super::Connection`]
//! outlives its wires: when one ends, recovery opens the next.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::channel::ChannelState;
use super::error::Error;
use super::events::Event;
use super::handshake::Opened;

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
    pub(crate) writer: mpsc::Sender<Bytes>,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    /// The channels open on this wire, by number, for the reader.
    channels: Mutex<HashMap<u16, Arc<ChannelState>>>,
    /// Why the wire ended, once it has.
    ended: Mutex<Option<Error>>,
    /// Told when the broker answers this side's connection.close.
    pub(crate) close_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Set once the wire has ended: the writer writes what is queued and
    /// stops, which closes the socket.
    stop: watch::Sender<bool>,
    pub(crate) signals: Arc<Signals>,
}

impl Wire {
    /// Start the reader and writer tasks on an opened socket.
    pub(crate) fn start(opened: Opened, signals: Arc<Signals>) -> Arc<Wire> {
        let Opened { stream, rbuf, tuned } = opened;
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let (stop, stopped) = watch::channel(false);
        let wire = Arc::new(Wire {
            writer: tx,
            frame_max: tuned.frame_max,
            channel_max: tuned.channel_max,
            channels: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            close_ok: Mutex::new(None),
            stop,
            signals,
        });
        let beat = (tuned.heartbeat > 0).then(|| Duration::from_secs(tuned.heartbeat as u64));
        tokio::spawn(super::io::write_loop(
            rx,
            write,
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

    /// Queue encoded frames for the writer.
    pub(crate) async fn send(&self, frames: Bytes) -> Result<(), Error> {
        if self.writer.send(frames).await.is_err() {
            return Err(self.ended_error());
        }
        Ok(())
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

    /// Wait until the wire has ended.
    pub(crate) async fn ended(&self) {
        let mut stopped = self.stop.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }
}
