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
//!
//! The registry also counts what RabbitMQ's limits bound: connections per
//! vhost and per user, channels (and 1.0 sessions) per user. A login or a
//! channel is checked against its limit and counted under one lock, so
//! two racing opens cannot both take the last place.
//!
//! Connections that logged in with an OAuth 2 token carry its expiry; the
//! registry keeps them ordered by it, and [`Registry::close_expired`]
//! (called once a second) closes those whose token ran out and was not
//! replaced.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::watch;
use warren_core::limits::{Limits, MAX_CHANNELS, MAX_CONNECTIONS};

/// A limit that refused a connection or a channel, with the limit's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReached {
    VHostConnections(i64),
    UserConnections(i64),
    UserChannels(i64),
}

impl LimitReached {
    /// RabbitMQ's text for the refusal (rabbit_reader's, 3.10), without
    /// the `NOT_ALLOWED - ` its 0-9-1 reply adds.
    pub fn text(&self, user: &str, vhost: &str) -> String {
        match self {
            LimitReached::VHostConnections(n) => {
                format!("access to vhost '{vhost}' refused for user '{user}': connection limit ({n}) is reached")
            }
            LimitReached::UserConnections(n) => {
                format!("Connection refused for user '{user}': user connection limit ({n}) is reached")
            }
            LimitReached::UserChannels(n) => format!(
                "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({n})"
            ),
        }
    }
}

/// Open connections per vhost and per user, open channels per user.
#[derive(Debug, Default)]
struct Tally {
    vhost_connections: HashMap<String, usize>,
    user_connections: HashMap<String, usize>,
    user_channels: HashMap<String, usize>,
}

fn count(m: &HashMap<String, usize>, key: &str) -> usize {
    m.get(key).copied().unwrap_or(0)
}

/// One more under `key`; allocates the key only the first time.
fn more(m: &mut HashMap<String, usize>, key: &str) {
    match m.get_mut(key) {
        Some(c) => *c += 1,
        None => {
            m.insert(key.to_string(), 1);
        }
    }
}

fn less(m: &mut HashMap<String, usize>, key: &str, n: usize) {
    if let Some(c) = m.get_mut(key) {
        *c = c.saturating_sub(n);
        if *c == 0 {
            m.remove(key);
        }
    }
}

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
    tally: Arc<Mutex<Tally>>,
    /// The login token's expiry, seconds since the epoch (0: none).
    expires_at: AtomicU64,
    expiring: Expiring,
    /// The connection is being torn down (see [`Registry::is_open`]).
    ended: std::sync::atomic::AtomicBool,
}

/// Token-bearing connections by expiry: (expires_at, connection id).
type Expiring = Arc<Mutex<BTreeSet<(u64, u64)>>>;

/// Why a connection whose token expired is closed.
pub const TOKEN_EXPIRED: &str = "access token expired";

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

    /// The connection has opened its vhost: counted against the vhost's
    /// and the user's max-connections (checked in that order, as
    /// rabbit_reader does), or refused when either is reached.
    pub fn logged_in(
        &self,
        login: Login,
        vhost_limits: &Limits,
        user_limits: &Limits,
    ) -> Result<(), LimitReached> {
        let mut t = self.tally.lock();
        if let Some(n) = vhost_limits.reached(MAX_CONNECTIONS, count(&t.vhost_connections, &login.vhost)) {
            return Err(LimitReached::VHostConnections(n));
        }
        if let Some(n) = user_limits.reached(MAX_CONNECTIONS, count(&t.user_connections, &login.user)) {
            return Err(LimitReached::UserConnections(n));
        }
        more(&mut t.vhost_connections, &login.vhost);
        more(&mut t.user_connections, &login.user);
        *self.login.lock() = Some(Arc::new(login));
        Ok(())
    }

    /// The connection's credential expires at `at` (seconds since the
    /// epoch; None: never), replacing what it had: a fresh token moves it.
    pub fn set_expiry(&self, at: Option<u64>) {
        let at = at.unwrap_or(0);
        // Most connections never had a token: closing one takes no lock.
        if at == 0 && self.expires_at.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut set = self.expiring.lock();
        let old = self.expires_at.swap(at, Ordering::Relaxed);
        if old != 0 {
            set.remove(&(old, self.id));
        }
        if at != 0 {
            set.insert((at, self.id));
        }
    }

    /// One more channel (or 1.0 session) for the logged-in user, unless
    /// the user's max-channels is reached.
    fn count_channel(&self, user_limits: &Limits) -> Result<(), LimitReached> {
        let Some(login) = self.login() else {
            return Ok(());
        };
        let mut t = self.tally.lock();
        if let Some(n) = user_limits.reached(MAX_CHANNELS, count(&t.user_channels, &login.user)) {
            return Err(LimitReached::UserChannels(n));
        }
        more(&mut t.user_channels, &login.user);
        Ok(())
    }

    fn uncount_channels(&self, n: usize) {
        if let Some(login) = self.login() {
            less(&mut self.tally.lock().user_channels, &login.user, n);
        }
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

    /// A channel is opening: its entry, for the connection to update, or
    /// the user's channel limit that refuses it.
    pub fn open_channel(&self, number: u16, user_limits: &Limits) -> Result<Arc<ChannelInfo>, LimitReached> {
        self.count_channel(user_limits)?;
        let info = Arc::new(ChannelInfo {
            number,
            ..Default::default()
        });
        let mut chs = self.channels.lock();
        let before = chs.len();
        chs.retain(|c| c.number != number);
        let replaced = before - chs.len();
        chs.push(info.clone());
        drop(chs);
        self.uncount_channels(replaced);
        Ok(info)
    }

    /// The connection is being torn down: from now on it owns no new
    /// exclusive queue (see [`Registry::is_open`]).
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    pub fn close_channel(&self, number: u16) {
        let mut chs = self.channels.lock();
        let before = chs.len();
        chs.retain(|c| c.number != number);
        let gone = before - chs.len();
        drop(chs);
        self.uncount_channels(gone);
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

    /// An AMQP 1.0 session is beginning: counted as a channel (RabbitMQ 4
    /// counts sessions against max-channels), or refused.
    pub fn open_session(&self, user_limits: &Limits) -> Result<(), LimitReached> {
        self.count_channel(user_limits)?;
        self.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub fn close_session(&self) {
        self.sessions.fetch_sub(1, Ordering::Relaxed);
        self.uncount_channels(1);
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
    tally: Arc<Mutex<Tally>>,
    expiring: Expiring,
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
        self.entry.set_expiry(None);
        // What the connection still had open no longer counts.
        if let Some(login) = self.entry.login() {
            let channels = self.entry.channel_count();
            let mut t = self.entry.tally.lock();
            less(&mut t.vhost_connections, &login.vhost, 1);
            less(&mut t.user_connections, &login.user, 1);
            less(&mut t.user_channels, &login.user, channels);
        }
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
            ended: std::sync::atomic::AtomicBool::new(false),
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
            tally: self.tally.clone(),
            expires_at: AtomicU64::new(0),
            expiring: self.expiring.clone(),
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

    /// Close the connections whose token expired by `now` (seconds since
    /// the epoch). Returns how many.
    pub fn close_expired(&self, now: u64) -> usize {
        let due: Vec<u64> = {
            let mut set = self.expiring.lock();
            let mut due = Vec::new();
            while let Some(&(at, id)) = set.first() {
                if at > now {
                    break;
                }
                set.pop_first();
                due.push(id);
            }
            due
        };
        let n = due.len();
        for id in due {
            if let Some(e) = self.get(id) {
                tracing::info!(connection = %e.name(), "closing connection: {TOKEN_EXPIRED}");
                e.expires_at.store(0, Ordering::Relaxed);
                e.close(Some(TOKEN_EXPIRED.into()));
            }
        }
        n
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
    /// Is connection `id` open, not being torn down? A cluster change
    /// that made an exclusive queue for it asks, once applied: a
    /// connection that ended meanwhile has its queue removed (see
    /// `topology::declare_queue`).
    pub fn is_open(&self, id: u64) -> bool {
        self.get(id).is_some_and(|e| !e.ended.load(Ordering::Acquire))
    }

    pub fn get(&self, id: u64) -> Option<Arc<Entry>> {
        self.map.lock().get(&id).cloned()
    }
}
