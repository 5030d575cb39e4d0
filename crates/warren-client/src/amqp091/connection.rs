//! A connection: the handshake (PLAIN), then the reader and writer tasks
//! (`io.rs`) and the table of open channels they share with the handles.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, FieldValue, Frame, FrameType, Method, PROTOCOL_HEADER};

use super::channel::{Channel, ChannelState};
use super::error::Error;
use crate::uri::AmqpUri;

/// The largest frame this client asks for (RabbitMQ's default).
const FRAME_MAX: u32 = 131_072;
/// Frames queued for the writer before publishers wait.
const WRITER_QUEUE: usize = 1024;
/// How long a close waits for the broker's close-ok.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the handles and the two tasks of one connection share.
pub(crate) struct Shared {
    /// Encoded frames for the writer task, in the order they must go out.
    pub(crate) writer: mpsc::Sender<Bytes>,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    pub(crate) channels: Mutex<HashMap<u16, Arc<ChannelState>>>,
    /// Why the connection ended, once it has.
    pub(crate) ended: Mutex<Option<Error>>,
    /// Told when the broker answers this side's connection.close.
    pub(crate) close_ok: Mutex<Option<oneshot::Sender<()>>>,
    /// Set once the connection has ended: the writer writes what is
    /// queued and stops, which closes the socket.
    pub(crate) stop: watch::Sender<bool>,
}

impl Shared {
    /// Queue encoded frames for the writer.
    pub(crate) async fn send(&self, frames: Bytes) -> Result<(), Error> {
        if self.writer.send(frames).await.is_err() {
            return Err(self.ended_error());
        }
        Ok(())
    }

    /// The error every call on an ended connection gets.
    pub(crate) fn ended_error(&self) -> Error {
        self.ended
            .lock()
            .clone()
            .unwrap_or_else(|| Error::ConnectionLost("the connection's writer stopped".into()))
    }

    /// The connection ended: every channel learns why.
    pub(crate) fn end(&self, why: Error) {
        {
            let mut e = self.ended.lock();
            if e.is_none() {
                *e = Some(why.clone());
            }
        }
        let channels: Vec<_> = self.channels.lock().drain().map(|(_, c)| c).collect();
        for c in channels {
            c.closed(why.clone());
        }
        if let Some(tx) = self.close_ok.lock().take() {
            let _ = tx.send(());
        }
        self.stop.send_replace(true);
    }
}

/// An open AMQP 0-9-1 connection. [`Connection::close`] ends it with the
/// broker's agreement; dropping it ends it too (a connection.close is
/// sent, not waited for), and its channels with it.
pub struct Connection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    /// Connect to `uri` (`amqp://user:pass@host:port/vhost`), log in with
    /// PLAIN and open the virtual host.
    pub async fn open(uri: &str) -> Result<Connection, Error> {
        let uri = AmqpUri::parse(uri)?;
        let limit = uri.connection_timeout;
        tokio::time::timeout(limit, Self::open_uri(&uri))
            .await
            .map_err(|_| Error::Timeout(limit))?
    }

    async fn open_uri(uri: &AmqpUri) -> Result<Connection, Error> {
        let mut stream = TcpStream::connect((uri.host.as_str(), uri.port)).await?;
        stream.set_nodelay(true)?;
        let mut hs = Handshake {
            stream: &mut stream,
            rbuf: BytesMut::with_capacity(4096),
        };
        let tuned = hs.run(uri).await?;
        let rbuf = hs.rbuf;
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            writer: tx,
            frame_max: tuned.frame_max,
            channel_max: tuned.channel_max,
            channels: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            close_ok: Mutex::new(None),
            stop,
        });
        let beat = (tuned.heartbeat > 0).then(|| Duration::from_secs(tuned.heartbeat as u64));
        tokio::spawn(super::io::write_loop(
            rx,
            write,
            beat.map(|b| b / 2),
            stopped,
            shared.clone(),
        ));
        tokio::spawn(super::io::read_loop(
            read,
            rbuf,
            beat.map(|b| b * 2),
            shared.clone(),
        ));
        Ok(Connection { shared })
    }

    /// Open a channel.
    pub async fn channel(&self) -> Result<Channel, Error> {
        let state = {
            let mut chans = self.shared.channels.lock();
            if let Some(e) = self.shared.ended.lock().clone() {
                return Err(e);
            }
            let id = (1..=self.shared.channel_max)
                .find(|id| !chans.contains_key(id))
                .ok_or_else(|| Error::Protocol("every channel number is in use".into()))?;
            let state = Arc::new(ChannelState::new(id));
            chans.insert(id, state.clone());
            state
        };
        let ch = Channel::new(state, self.shared.clone());
        ch.open().await?;
        Ok(ch)
    }

    /// Close the connection (reply code 200) and wait for the broker's
    /// answer. Its channels end with [`Error::ClosedByClient`].
    pub async fn close(&self) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        *self.shared.close_ok.lock() = Some(tx);
        self.shared.send(close_frame("closed by the application")).await?;
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, rx).await;
        self.shared.end(Error::ClosedByClient);
        Ok(())
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.ended.lock().is_some()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.shared.ended.lock().is_some() {
            return;
        }
        let _ = self
            .shared
            .writer
            .try_send(close_frame("connection dropped by the application"));
        self.shared.end(Error::ClosedByClient);
    }
}

/// A connection.close with reply code 200.
fn close_frame(text: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let close = ConnectionClose {
        reply_code: 200,
        reply_text: text.into(),
        class_id: 0,
        method_id: 0,
    };
    write_method(&mut buf, 0, &Method::ConnectionClose(close));
    buf.freeze()
}

/// What connection.tune settled.
struct Tuned {
    frame_max: u32,
    channel_max: u16,
    heartbeat: u16,
}

/// The connection's opening exchange, on the socket before it is split.
struct Handshake<'a> {
    stream: &'a mut TcpStream,
    rbuf: BytesMut,
}

impl Handshake<'_> {
    async fn run(&mut self, uri: &AmqpUri) -> Result<Tuned, Error> {
        self.stream.write_all(PROTOCOL_HEADER).await?;
        let Method::ConnectionStart(start) = self.method().await? else {
            return Err(Error::Protocol("expected connection.start".into()));
        };
        let offered = String::from_utf8_lossy(&start.mechanisms).into_owned();
        if !offered.split(' ').any(|m| m == "PLAIN") {
            return Err(Error::Protocol(format!(
                "the broker does not offer PLAIN (it offers {offered})"
            )));
        }
        let response = format!("\0{}\0{}", uri.user, uri.password);
        self.send(ConnectionStartOk {
            client_properties: client_properties(),
            mechanism: "PLAIN".into(),
            response: Bytes::from(response),
            locale: "en_US".into(),
        })
        .await?;
        let Method::ConnectionTune(t) = self.method().await? else {
            return Err(Error::Protocol("expected connection.tune".into()));
        };
        let pick = |ours: u32, theirs: u32| match (ours, theirs) {
            (0, t) => t,
            (o, 0) => o,
            (o, t) => o.min(t),
        };
        let frame_max = pick(uri.frame_max.unwrap_or(FRAME_MAX), t.frame_max).max(4096);
        let channel_max = match pick(uri.channel_max.unwrap_or(2047) as u32, t.channel_max as u32) {
            0 => 2047,
            n => n.min(u16::MAX as u32) as u16,
        };
        let heartbeat = match uri.heartbeat {
            Some(h) => h,
            None => t.heartbeat,
        };
        self.send(ConnectionTuneOk {
            channel_max,
            frame_max,
            heartbeat,
        })
        .await?;
        self.send(ConnectionOpen {
            virtual_host: uri.vhost.as_str().into(),
            ..Default::default()
        })
        .await?;
        let Method::ConnectionOpenOk(_) = self.method().await? else {
            return Err(Error::Protocol("expected connection.open-ok".into()));
        };
        Ok(Tuned {
            frame_max,
            channel_max,
            heartbeat,
        })
    }

    async fn send(&mut self, m: impl Into<Method>) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        write_method(&mut buf, 0, &m.into());
        self.stream.write_all(&buf).await?;
        Ok(())
    }

    /// The next method on channel 0; a connection.close is the error it
    /// carries (a refused login ends this way).
    async fn method(&mut self) -> Result<Method, Error> {
        loop {
            if let Some(f) = Frame::parse(&mut self.rbuf, FRAME_MAX)? {
                if f.kind != FrameType::Method || f.channel != 0 {
                    continue;
                }
                return match Method::decode(f.payload)? {
                    Method::ConnectionClose(c) => Err(Error::ConnectionClosed {
                        code: c.reply_code,
                        text: c.reply_text.to_str_lossy().into_owned(),
                    }),
                    m => Ok(m),
                };
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                return Err(Error::ConnectionLost(
                    "the broker closed the socket during the handshake (a refused login, with RabbitMQ 3.x)"
                        .into(),
                ));
            }
        }
    }
}

/// What the client tells the broker about itself.
fn client_properties() -> FieldTable {
    let mut caps = FieldTable::new();
    for cap in [
        "publisher_confirms",
        "consumer_cancel_notify",
        "connection.blocked",
        "basic.nack",
        "exchange_exchange_bindings",
        "authentication_failure_close",
    ] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    props.insert(
        "product",
        FieldValue::LongStr(Bytes::from_static(b"warren-client")),
    );
    props.insert(
        "version",
        FieldValue::LongStr(Bytes::from_static(env!("CARGO_PKG_VERSION").as_bytes())),
    );
    props.insert("platform", FieldValue::LongStr(Bytes::from_static(b"Rust")));
    props.insert("capabilities", FieldValue::Table(caps));
    props
}
