//! The registry of open client connections, every protocol: what the
//! management API lists (`/api/connections`) and closes (DELETE, as
//! `rabbitmqctl close_connection` does).
//!
//! Each accepted socket gets an [`Entry`] and its own shutdown signal (a
//! `watch` the connection already selects on for broker shutdown): closing
//! one connection sets its signal, closing all sets every one. The entry
//! goes when the connection's task ends ([`Registered`] is dropped). The
//! front ends fill in the login (protocol, user, vhost) once it succeeds,
//! count the bytes they read and write, and keep their channels' numbers
//! (0-9-1) or session count (1.0) current for `/api/channels`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::watch;

/// One open connection.
#[derive(Debug)]
pub struct Entry {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Milliseconds since the epoch.
    pub connected_at: u64,
    login: Mutex<Option<Login>>,
    close: watch::Sender<bool>,
    reason: Mutex<Option<String>>,
    /// Octets read from and written to the socket.
    pub recv_oct: AtomicU64,
    pub send_oct: AtomicU64,
    /// Open 0-9-1 channels, by number.
    channels: Mutex<Vec<Arc<ChannelInfo>>>,
    /// Open AMQP 1.0 sessions (listed as channels, as RabbitMQ counts them).
    sessions: AtomicU32,
}

/// A 0-9-1 channel as `/api/channels` shows it. The connection that owns
/// the channel stores its numbers after each wakeup that changed them
/// (relaxed atomics: the API reads a recent value, never a torn one).
#[derive(Debug, Default)]
pub struct ChannelInfo {
    pub number: u16,
    pub prefetch: AtomicU32,
    pub global_prefetch: AtomicU32,
    pub confirm: AtomicBool,
    pub transactional: AtomicBool,
    pub consumers: AtomicU32,
    pub unacked: AtomicU64,
}

/// Who the connection is, once logged in.
#[derive(Debug, Clone)]
pub struct Login {
    /// "AMQP 0-9-1", "AMQP 1.0", "RabbitMQ Stream".
    pub protocol: &'static str,
    pub user: String,
    pub vhost: String,
}

impl Entry {
    /// RabbitMQ's connection name: "PEER -> LOCAL".
    pub fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }

    pub fn logged_in(&self, protocol: &'static str, user: &str, vhost: &str) {
        *self.login.lock() = Some(Login {
            protocol,
            user: user.to_string(),
            vhost: vhost.to_string(),
        });
    }

    pub fn login(&self) -> Option<Login> {
        self.login.lock().clone()
    }

    /// A channel was opened: its entry, for the connection to update.
    pub fn open_channel(&self, number: u16) -> Arc<ChannelInfo> {
        let info = Arc::new(ChannelInfo {
            number,
            ..Default::default()
        });
        let mut chs = self.channels.lock();
        chs.retain(|c| c.number != number);
        chs.push(info.clone());
        info
    }

    pub fn close_channel(&self, number: u16) {
        self.channels.lock().retain(|c| c.number != number);
    }

    /// Open channels, by number.
    pub fn channels(&self) -> Vec<Arc<ChannelInfo>> {
        let mut v = self.channels.lock().clone();
        v.sort_by_key(|c| c.number);
        v
    }

    /// Channels (0-9-1) or sessions (1.0) open on this connection.
    pub fn channel_count(&self) -> usize {
        self.channels.lock().len() + self.sessions.load(Ordering::Relaxed) as usize
    }

    /// The AMQP 1.0 connection's session count changed.
    pub fn set_sessions(&self, n: usize) {
        self.sessions.store(n as u32, Ordering::Relaxed);
    }

    pub fn count_recv(&self, n: usize) {
        self.recv_oct.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn count_send(&self, n: usize) {
        self.send_oct.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Why the connection is being closed, when the management API asked.
    pub fn close_reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }

    fn close(&self, reason: Option<String>) {
        *self.reason.lock() = reason;
        let _ = self.close.send(true);
    }
}

#[derive(Debug, Default, Clone)]
pub struct Registry {
    map: Arc<Mutex<HashMap<u64, Arc<Entry>>>>,
}

/// A registered connection: its entry and its shutdown signal; dropping
/// it removes the entry.
pub struct Registered {
    pub entry: Arc<Entry>,
    pub shutdown: watch::Receiver<bool>,
    map: Arc<Mutex<HashMap<u64, Arc<Entry>>>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.map.lock().remove(&self.entry.id);
    }
}

impl Registry {
    pub fn register(&self, id: u64, peer: SocketAddr, local: SocketAddr) -> Registered {
        let (tx, rx) = watch::channel(false);
        let entry = Arc::new(Entry {
            id,
            peer,
            local,
            connected_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            login: Mutex::new(None),
            close: tx,
            reason: Mutex::new(None),
            recv_oct: AtomicU64::new(0),
            send_oct: AtomicU64::new(0),
            channels: Mutex::new(Vec::new()),
            sessions: AtomicU32::new(0),
        });
        self.map.lock().insert(id, entry.clone());
        Registered {
            entry,
            shutdown: rx,
            map: self.map.clone(),
        }
    }

    /// Every open connection, oldest first.
    pub fn list(&self) -> Vec<Arc<Entry>> {
        let mut v: Vec<_> = self.map.lock().values().cloned().collect();
        v.sort_by_key(|e| e.id);
        v
    }

    /// Close the connection named `name` (see [`Entry::name`]); false if
    /// there is none.
    pub fn close_named(&self, name: &str, reason: Option<String>) -> bool {
        match self.list().into_iter().find(|e| e.name() == name) {
            Some(e) => {
                e.close(reason);
                true
            }
            None => false,
        }
    }

    /// Close every connection (broker shutdown).
    pub fn close_all(&self) {
        for e in self.list() {
            e.close(None);
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The connection whose id (the front end's connection id) is `id`.
    pub fn get(&self, id: u64) -> Option<Arc<Entry>> {
        self.map.lock().get(&id).cloned()
    }
}
