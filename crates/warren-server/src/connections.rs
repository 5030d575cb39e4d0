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
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
    login: Mutex<Option<Arc<Login>>>,
    close: watch::Sender<bool>,
    reason: Mutex<Option<String>>,
    /// Octets read from and written to the socket, and how many reads
    /// and writes carried them (RabbitMQ's recv_cnt / send_cnt).
    pub recv_oct: AtomicU64,
    pub send_oct: AtomicU64,
    pub recv_cnt: AtomicU64,
    pub send_cnt: AtomicU64,
    /// Octets per second over the last statistics interval.
    rates: Mutex<OctetRates>,
    /// Open 0-9-1 channels, by number.
    channels: Mutex<Vec<Arc<ChannelInfo>>>,
    /// Open AMQP 1.0 sessions (listed as channels, as RabbitMQ counts them).
    sessions: AtomicU32,
    /// What the TLS handshake agreed, on a TLS listener's connections.
    tls: OnceLock<Box<crate::tls::peer::TlsInfo>>,
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

/// Who the connection is and what it agreed with the broker, once logged
/// in: what `/api/connections` shows beside the socket's addresses.
#[derive(Debug, Clone, Default)]
pub struct Login {
    /// "AMQP 0-9-1", "AMQP 1.0", "RabbitMQ Stream".
    pub protocol: &'static str,
    pub user: String,
    pub vhost: String,
    /// The SASL mechanism it logged in with ("PLAIN", "AMQPLAIN", ...).
    pub auth_mechanism: String,
    /// What the client said of itself: 0-9-1 start-ok's client-properties,
    /// AMQP 1.0 open's properties, the stream protocol's PeerProperties.
    /// Monitoring tools find connections by `connection_name` here.
    pub client_properties: serde_json::Map<String, serde_json::Value>,
    pub frame_max: u32,
    pub channel_max: u32,
    /// Heartbeat (0-9-1, stream) or idle time-out (1.0), in seconds.
    pub timeout: u32,
    /// AMQP 1.0's container-id (from open).
    pub container_id: Option<String>,
}

impl Login {
    /// The name the application gave its connection (RabbitMQ's
    /// `user_provided_name`, from the `connection_name` property).
    pub fn user_provided_name(&self) -> Option<&str> {
        self.client_properties
            .get("connection_name")
            .and_then(|v| v.as_str())
    }
}

/// Octet counts at the last sample and the rates since the one before.
#[derive(Debug)]
struct OctetRates {
    at: Instant,
    recv: u64,
    send: u64,
    recv_rate: f64,
    send_rate: f64,
}

impl Entry {
    /// RabbitMQ's connection name: "PEER -> LOCAL".
    pub fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }

    /// The TLS session, once its handshake is done (set once).
    pub fn set_tls(&self, info: crate::tls::peer::TlsInfo) {
        let _ = self.tls.set(Box::new(info));
    }

    pub fn tls(&self) -> Option<&crate::tls::peer::TlsInfo> {
        self.tls.get().map(|b| &**b)
    }

    pub fn logged_in(&self, login: Login) {
        *self.login.lock() = Some(Arc::new(login));
    }

    pub fn login(&self) -> Option<Arc<Login>> {
        self.login.lock().clone()
    }

    /// Take a sample of the octet counters (once per statistics interval).
    pub fn sample(&self, now: Instant) {
        let (recv, send) = (
            self.recv_oct.load(Ordering::Relaxed),
            self.send_oct.load(Ordering::Relaxed),
        );
        let mut r = self.rates.lock();
        let secs = now.duration_since(r.at).as_secs_f64();
        if secs > 0.0 {
            r.recv_rate = recv.saturating_sub(r.recv) as f64 / secs;
            r.send_rate = send.saturating_sub(r.send) as f64 / secs;
        }
        (r.at, r.recv, r.send) = (now, recv, send);
    }

    /// Octets per second received and sent over the last interval.
    pub fn rates(&self) -> (f64, f64) {
        let r = self.rates.lock();
        (r.recv_rate, r.send_rate)
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
        self.recv_cnt.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_send(&self, n: usize) {
        self.send_oct.fetch_add(n as u64, Ordering::Relaxed);
        self.send_cnt.fetch_add(1, Ordering::Relaxed);
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
            recv_cnt: AtomicU64::new(0),
            send_cnt: AtomicU64::new(0),
            rates: Mutex::new(OctetRates {
                at: Instant::now(),
                recv: 0,
                send: 0,
                recv_rate: 0.0,
                send_rate: 0.0,
            }),
            channels: Mutex::new(Vec::new()),
            sessions: AtomicU32::new(0),
            tls: OnceLock::new(),
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
