//! One stream protocol connection, opened: a writer task that drains an
//! outbox of encoded frames (frames of every producer batched into one
//! write) and sends heartbeats when idle, and a reader task that routes
//! what the broker sends: responses to the requests waiting on them (by
//! correlation id), confirms and errors to producers (by publisher id),
//! chunks and consumer updates to subscriptions (by subscription id), a
//! metadata update to the producers and consumers of its stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use warren_stream::command::{code, key, parse_frame, Command, Response};

use super::commands::{self, ConsumerUpdateRequest};
use super::confirms::Confirms;
use super::error::{Error, ResponseCode};
use super::handshake::{self, Opened, CALL_TIMEOUT, READ_FRAME_MAX};
use super::metadata::{self, Endpoint, Placement, Role};
use super::outbox::Outbox;
use super::read_buffer::ReadBuffer;
use crate::awaiting::Awaiting;
use crate::socket::{ReadHalf, WriteHalf};
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// Bytes of frames waiting for the writer before senders wait.
const OUTBOX_LIMIT: usize = 4 << 20;

/// A producer on this connection: its stream and its confirms.
struct Publisher {
    stream: String,
    confirms: Arc<Confirms>,
}

/// A subscription on this connection: its stream and where its events go.
struct Subscription {
    stream: String,
    events: mpsc::Sender<Event>,
}

/// What the connection tells a subscription, in the order it came.
#[derive(Debug)]
pub(crate) enum Event {
    /// A chunk delivered, and the stream's committed chunk id when the
    /// broker says it (Deliver version 2).
    Chunk { chunk: Bytes, committed: Option<u64> },
    /// The broker made it the active consumer of its group (or asks it
    /// to step down): it answers this correlation id.
    Update { correlation_id: u32, active: bool },
    /// The subscription ended.
    Ended(Error),
}

pub(crate) struct Connection {
    outbox: Mutex<Outbox>,
    filled: Notify,
    taken: Notify,
    calls: Mutex<HashMap<u32, oneshot::Sender<Response>>>,
    next_call: AtomicU32,
    publishers: Mutex<HashMap<u8, Publisher>>,
    subscriptions: Mutex<HashMap<u8, Subscription>>,
    /// Why the connection ended, once it has.
    ended: Mutex<Option<Error>>,
    done: watch::Sender<bool>,
    /// The largest frame this side may send.
    pub(crate) frame_max: u32,
    /// Producers may lend large bodies to their frames (the writer
    /// gathers pieces in one vectored write).
    pub(crate) lends: bool,
    /// What the broker said of itself when the connection opened.
    pub(crate) server_properties: Vec<(String, String)>,
    /// The commands and versions the broker takes, once asked.
    versions: tokio::sync::OnceCell<Vec<(u16, u16, u16)>>,
}

impl Connection {
    /// Connect, open the URI's virtual host and start the tasks.
    pub(crate) async fn open(
        uri: &AmqpUri,
        name: &str,
        tls: Option<&TlsOptions>,
    ) -> Result<Arc<Connection>, Error> {
        let Opened {
            socket,
            rbuf,
            frame_max,
            heartbeat,
            properties,
        } = handshake::open(uri, name, tls).await?;
        let (read, write) = socket.split();
        let lends = write.gathers();
        let (done, _) = watch::channel(false);
        let c = Arc::new(Connection {
            outbox: Mutex::new(Outbox::with_capacity(64 * 1024)),
            filled: Notify::new(),
            taken: Notify::new(),
            calls: Mutex::new(HashMap::new()),
            next_call: AtomicU32::new(1),
            publishers: Mutex::new(HashMap::new()),
            subscriptions: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            done,
            frame_max,
            lends,
            server_properties: properties,
            versions: tokio::sync::OnceCell::new(),
        });
        let beat = (heartbeat > 0).then(|| Duration::from_secs(heartbeat as u64));
        tokio::spawn(write_loop(c.clone(), write, beat));
        tokio::spawn(read_loop(c.clone(), read, rbuf, beat.map(|b| b * 2)));
        // Versions agreed before any subscription: the broker sends
        // Deliver version 2 (with the committed chunk id) from then on.
        c.supports(key::DELIVER, 2).await?;
        Ok(c)
    }

    /// Producers (for the leader's role) or consumers on it.
    pub(crate) fn users(&self, role: Role) -> usize {
        match role {
            Role::Leader => self.publishers.lock().len(),
            Role::Replica => self.subscriptions.lock().len(),
        }
    }

    /// The node it reached, as the node advertises itself
    /// (`advertised_host`, `advertised_port`).
    pub(crate) fn advertised(&self) -> Option<Endpoint> {
        let get = |k: &str| {
            self.server_properties
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        Some(Endpoint {
            host: get("advertised_host")?,
            port: get("advertised_port")?.parse().ok()?,
        })
    }

    /// Whether the broker takes command `k` at `version`: asked once
    /// (ExchangeCommandVersions) of a broker that knows the question
    /// (RabbitMQ 3.11 and later, by the version it gives); older ones take
    /// version 1 of everything.
    pub(crate) async fn supports(&self, k: u16, version: u16) -> Result<bool, Error> {
        let versions = self
            .versions
            .get_or_try_init(|| async {
                if !self.server_at_least(3, 11) {
                    return Ok(Vec::new());
                }
                // Ours: version 1 of every command, 2 of Publish (filter
                // values) and Deliver (the committed chunk id).
                let ours: Vec<(u16, u16, u16)> = (key::DECLARE_PUBLISHER..=key::DELETE_SUPER_STREAM)
                    .map(|k| {
                        (
                            k,
                            1,
                            if k == key::PUBLISH || k == key::DELIVER {
                                2
                            } else {
                                1
                            },
                        )
                    })
                    .collect();
                let r = self
                    .request(
                        "exchange command versions",
                        key::EXCHANGE_COMMAND_VERSIONS,
                        |out| commands::put_versions(out, &ours),
                    )
                    .await?;
                commands::versions(r.rest)
            })
            .await?;
        Ok(version == 1
            || versions
                .iter()
                .any(|(key, min, max)| *key == k && (*min..=*max).contains(&version)))
    }

    /// Whether the broker's `version` property is at least `major.minor`.
    fn server_at_least(&self, major: u32, minor: u32) -> bool {
        let Some((_, v)) = self.server_properties.iter().find(|(k, _)| k == "version") else {
            return false;
        };
        let mut parts = v
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (a, b) >= (major, minor)
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.lock().is_some()
    }

    fn ended_error(&self) -> Error {
        self.ended
            .lock()
            .clone()
            .unwrap_or_else(|| Error::ConnectionLost("the connection ended".into()))
    }

    /// Queue the frames `encode` appends, waiting while the outbox is
    /// over its limit. `encode` runs whole under the outbox's lock, so
    /// frames of one call are never interleaved with another's.
    pub(crate) async fn send_with<R>(&self, encode: impl FnOnce(&mut Outbox) -> R) -> Result<R, Error> {
        let mut encode = Some(encode);
        loop {
            let room = self.taken.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut outbox = self.outbox.lock();
                if self.is_ended() {
                    return Err(self.ended_error());
                }
                if outbox.len() < OUTBOX_LIMIT {
                    let was_empty = outbox.is_empty();
                    let r = (encode.take().expect("runs once"))(&mut outbox);
                    if was_empty {
                        self.filled.notify_one();
                    }
                    return Ok(r);
                }
            }
            room.await;
        }
    }

    /// Queue a small control frame (credit, unsubscribe) now, whatever
    /// the outbox holds: it never waits (a consumer's poll and `drop`
    /// send these), and such frames are few.
    pub(crate) fn push(&self, c: &Command) {
        self.push_with(|out| c.encode(out))
    }

    /// [`Self::push`] for frames `encode` writes.
    pub(crate) fn push_with(&self, encode: impl FnOnce(&mut BytesMut)) {
        let mut outbox = self.outbox.lock();
        if self.is_ended() {
            return;
        }
        let was_empty = outbox.is_empty();
        encode(&mut outbox);
        if was_empty {
            self.filled.notify_one();
        }
    }

    /// Send a request and wait for its response; a code other than OK
    /// is [`Error::Refused`] naming `operation`.
    pub(crate) async fn call(
        &self,
        operation: &'static str,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<Response, Error> {
        let r = self.call_any(make).await?;
        match r.code {
            code::OK => Ok(r),
            c => Err(Error::Refused {
                operation,
                code: ResponseCode::from_u16(c),
            }),
        }
    }

    /// A request and its response, whatever its code.
    pub(crate) async fn call_any(&self, make: impl FnOnce(u32) -> Command) -> Result<Response, Error> {
        self.call_encoded(|out, id| make(id).encode(out)).await
    }

    /// A request of the commands the codec does not carry (`body` writes
    /// what follows the correlation id) and its response; a code other
    /// than OK is [`Error::Refused`] naming `operation`.
    pub(crate) async fn request(
        &self,
        operation: &'static str,
        k: u16,
        body: impl FnOnce(&mut BytesMut),
    ) -> Result<Response, Error> {
        let r = self
            .call_encoded(|out, id| commands::request(out, k, id, body))
            .await?;
        match r.code {
            code::OK => Ok(r),
            c => Err(Error::Refused {
                operation,
                code: ResponseCode::from_u16(c),
            }),
        }
    }

    /// Where `streams` live (a Metadata request).
    pub(crate) async fn metadata(
        &self,
        streams: &[&str],
    ) -> Result<HashMap<String, Result<Placement, ResponseCode>>, Error> {
        let r = self
            .call_encoded(|out, id| metadata::encode_request(out, id, streams))
            .await?;
        metadata::parse_response(r.rest)
    }

    /// A request `encode` writes with the correlation id it is given, and
    /// its response.
    async fn call_encoded(&self, encode: impl FnOnce(&mut BytesMut, u32)) -> Result<Response, Error> {
        let id = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let _awaiting = Awaiting::insert(&self.calls, id, tx);
        self.send_with(|out| encode(out, id)).await?;
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(self.ended_error()),
            Err(_) => Err(Error::Timeout(CALL_TIMEOUT)),
        }
    }

    /// A free publisher id for a producer on `stream`.
    pub(crate) fn add_publisher(&self, stream: &str, confirms: Arc<Confirms>) -> Result<u8, Error> {
        let p = Publisher {
            stream: stream.to_string(),
            confirms,
        };
        insert_free(&mut self.publishers.lock(), p).ok_or(Error::NoFreeId("publisher"))
    }

    pub(crate) fn remove_publisher(&self, id: u8) {
        self.publishers.lock().remove(&id);
    }

    /// A free subscription id for a consumer of `stream`, whose events go
    /// to `events`.
    pub(crate) fn add_subscription(&self, stream: &str, events: mpsc::Sender<Event>) -> Result<u8, Error> {
        let sub = Subscription {
            stream: stream.to_string(),
            events,
        };
        insert_free(&mut self.subscriptions.lock(), sub).ok_or(Error::NoFreeId("subscription"))
    }

    pub(crate) fn remove_subscription(&self, id: u8) {
        self.subscriptions.lock().remove(&id);
    }

    /// Delete publisher `id` without waiting and free the id. The request
    /// is queued first, so it reaches the broker before any request that
    /// takes the id next (a broker that never made it answers with an
    /// error nothing waits for).
    pub(crate) fn forget_publisher(&self, id: u8) {
        self.push(&Command::DeletePublisher {
            correlation_id: 0,
            publisher_id: id,
        });
        self.remove_publisher(id);
    }

    /// End subscription `id` without waiting and free the id, as
    /// [`Self::forget_publisher`] does.
    pub(crate) fn forget_subscription(&self, id: u8) {
        self.push(&Command::Unsubscribe {
            correlation_id: 0,
            subscription_id: id,
        });
        self.remove_subscription(id);
    }

    /// Close the connection (the broker answers, then the socket goes).
    pub(crate) async fn close(&self) {
        if self.is_ended() {
            return;
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.call_any(|id| Command::Close {
                correlation_id: id,
                code: code::OK,
                reason: "closed by the application".into(),
            }),
        )
        .await;
        self.end(Error::Closed);
    }

    /// The connection ended: requests, producers and consumers learn why
    /// and the writer stops, which closes the socket.
    pub(crate) fn end(&self, why: Error) {
        {
            let mut e = self.ended.lock();
            if e.is_some() {
                return;
            }
            *e = Some(why.clone());
        }
        self.calls.lock().clear();
        self.lose(|_| true, &why);
        self.taken.notify_waiters();
        self.done.send_replace(true);
    }

    /// Where subscription `id`'s events go.
    fn events_of(&self, id: u8) -> Option<mpsc::Sender<Event>> {
        self.subscriptions.lock().get(&id).map(|s| s.events.clone())
    }

    /// The broker says `stream` is no longer available here (its leader
    /// moved, or it was deleted): its producers and consumers end.
    fn stream_gone(&self, stream: &str, code: u16) {
        let why = Error::Refused {
            operation: "metadata update",
            code: ResponseCode::from_u16(code),
        };
        self.lose(|s| s == stream, &why);
    }

    /// The producers and consumers of the streams `which` picks leave
    /// this connection, told `why` (a producer may recover; a consumer
    /// finds the error after its chunks).
    fn lose(&self, which: impl Fn(&str) -> bool, why: &Error) {
        let ps = take_where(&mut self.publishers.lock(), |p| which(&p.stream));
        for p in ps {
            p.confirms.lost(why.clone());
        }
        let ss = take_where(&mut self.subscriptions.lock(), |s| which(&s.stream));
        for s in ss {
            let _ = s.events.try_send(Event::Ended(why.clone()));
        }
    }

    /// One frame from the broker; an error ends the connection.
    async fn route(&self, frame: Bytes) -> Result<bool, Error> {
        if frame.len() >= 2 && u16::from_be_bytes([frame[0], frame[1]]) == key::METADATA_UPDATE {
            let mut r = warren_stream::wire::Reader::new(frame.slice(4..));
            let code = r.u16()?;
            let stream = r.string()?;
            self.stream_gone(&stream, code);
            return Ok(true);
        }
        if frame.len() >= 8 && u16::from_be_bytes([frame[0], frame[1]]) == key::METADATA | key::RESPONSE {
            // No response code at the top of a metadata response.
            let correlation_id = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            if let Some(tx) = self.calls.lock().remove(&correlation_id) {
                let _ = tx.send(Response {
                    key: key::METADATA,
                    correlation_id,
                    code: code::OK,
                    rest: frame.slice(8..),
                });
            }
            return Ok(true);
        }
        if frame.len() >= 4 && frame[..4] == [0, key::DELIVER as u8, 0, 2] {
            // Deliver version 2: the committed chunk id before the chunk.
            let mut r = warren_stream::wire::Reader::new(frame.slice(4..));
            let subscription_id = r.u8()?;
            let committed = r.u64()?;
            if let Some(tx) = self.events_of(subscription_id) {
                let _ = tx
                    .send(Event::Chunk {
                        chunk: r.rest(),
                        committed: Some(committed),
                    })
                    .await;
            }
            return Ok(true);
        }
        if frame.len() >= 2 && u16::from_be_bytes([frame[0], frame[1]]) == key::CONSUMER_UPDATE {
            let u = ConsumerUpdateRequest::decode(frame)?;
            match self.events_of(u.subscription_id) {
                Some(tx) => {
                    let _ = tx
                        .send(Event::Update {
                            correlation_id: u.correlation_id,
                            active: u.active,
                        })
                        .await;
                }
                None => {
                    let _ = self
                        .send_with(|o| commands::consumer_update_unknown(o, u.correlation_id))
                        .await;
                }
            }
            return Ok(true);
        }
        match Command::decode(frame)? {
            Command::Response(r) => {
                if let Some(tx) = self.calls.lock().remove(&r.correlation_id) {
                    let _ = tx.send(r);
                }
            }
            Command::Deliver {
                subscription_id,
                chunk,
            } => {
                if let Some(tx) = self.events_of(subscription_id) {
                    // The channel holds the subscription's credit in
                    // chunks, so this waits only for a broker sending
                    // beyond its credit; waiting holds the socket back.
                    let _ = tx
                        .send(Event::Chunk {
                            chunk,
                            committed: None,
                        })
                        .await;
                }
            }
            Command::PublishConfirm { publisher_id, ids } => {
                let c = self
                    .publishers
                    .lock()
                    .get(&publisher_id)
                    .map(|p| p.confirms.clone());
                if let Some(c) = c {
                    c.confirmed(&ids);
                }
            }
            Command::PublishError { publisher_id, errors } => {
                let c = self
                    .publishers
                    .lock()
                    .get(&publisher_id)
                    .map(|p| p.confirms.clone());
                if let Some(c) = c {
                    for (id, code) in errors {
                        c.rejected(id, code);
                    }
                }
            }
            Command::CreditError {
                code,
                subscription_id,
            } => {
                tracing::warn!(subscription_id, code, "the broker refused a credit");
            }
            Command::Close {
                correlation_id,
                code,
                reason,
            } => {
                let mut out = BytesMut::new();
                let at = warren_stream::command::begin_frame(&mut out);
                bytes::BufMut::put_u16(&mut out, key::CLOSE | key::RESPONSE);
                bytes::BufMut::put_u16(&mut out, 1);
                bytes::BufMut::put_u32(&mut out, correlation_id);
                bytes::BufMut::put_u16(&mut out, code::OK);
                warren_stream::command::end_frame(&mut out, at);
                let _ = self.send_with(|o| o.extend_from_slice(&out)).await;
                self.end(Error::ConnectionLost(format!(
                    "the broker closed the connection: {code} {reason}"
                )));
                return Ok(false);
            }
            Command::Heartbeat | Command::Tune { .. } => {}
            other => {
                tracing::debug!("a stream frame ignored: {other:?}");
            }
        }
        Ok(true)
    }
}

/// Put `v` under the lowest id not in use; None when all 256 are.
fn insert_free<T>(map: &mut HashMap<u8, T>, v: T) -> Option<u8> {
    let id = (0..=u8::MAX).find(|i| !map.contains_key(i))?;
    map.insert(id, v);
    Some(id)
}

/// Take out of `map` the entries `pick` picks.
fn take_where<T>(map: &mut HashMap<u8, T>, pick: impl Fn(&T) -> bool) -> Vec<T> {
    let ids: Vec<u8> = map.iter().filter(|(_, v)| pick(v)).map(|(i, _)| *i).collect();
    ids.iter().filter_map(|i| map.remove(i)).collect()
}

async fn write_loop(c: Arc<Connection>, mut out: WriteHalf, heartbeat: Option<Duration>) {
    let mut stopped = c.done.subscribe();
    let mut taken = Vec::new();
    let idle = heartbeat.unwrap_or(Duration::from_secs(3600));
    let mut beat = tokio::time::interval(idle / 2);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_write = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = c.filled.notified() => {}
            _ = stopped.changed() => {}
            _ = beat.tick(), if heartbeat.is_some() => {
                if last_write.elapsed() >= idle / 2 {
                    let _ = c.send_with(|o| Command::Heartbeat.encode(o)).await;
                }
            }
        }
        loop {
            {
                let mut outbox = c.outbox.lock();
                if outbox.is_empty() {
                    break;
                }
                outbox.take(&mut taken);
            }
            c.taken.notify_waiters();
            last_write = Instant::now();
            if let Err(e) = out.write_all_pieces(&mut taken).await {
                c.end(Error::ConnectionLost(format!("writing: {e}")));
                break;
            }
        }
        if *stopped.borrow() {
            break;
        }
    }
    let _ = out.shutdown().await;
}

async fn read_loop(c: Arc<Connection>, mut input: ReadHalf, rbuf: BytesMut, silence: Option<Duration>) {
    let mut rbuf = ReadBuffer::new(rbuf);
    let mut stopped = c.done.subscribe();
    let mut check = tokio::time::interval(silence.unwrap_or(Duration::from_secs(3600)) / 4);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_read = Instant::now();
    let why = loop {
        loop {
            let frame = match parse_frame(&mut rbuf.buf, READ_FRAME_MAX) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return c.end(e.into()),
            };
            match c.route(frame).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!("stream connection failed: {e}");
                    return c.end(e);
                }
            }
        }
        // Room for the rest of a frame begun (its size is known), made
        // once: a read stops at its end (see ReadBuffer).
        let most = rbuf.prepare_read(READ_FRAME_MAX as usize);
        let mut room = bytes::BufMut::limit(&mut rbuf.buf, most);
        tokio::select! {
            n = input.read_buf(&mut room) => match n {
                Ok(0) => break Error::ConnectionLost("the broker closed the socket".into()),
                Ok(_) => last_read = Instant::now(),
                Err(e) => break Error::ConnectionLost(format!("reading: {e}")),
            },
            _ = stopped.changed() => return,
            _ = check.tick(), if silence.is_some() => {
                let limit = silence.expect("checked");
                if last_read.elapsed() > limit {
                    break Error::ConnectionLost(format!("no heartbeat from the broker in {limit:?}"));
                }
            }
        }
    };
    c.end(why);
}
