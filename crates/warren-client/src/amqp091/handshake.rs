//! The opening exchange on a fresh socket: protocol header, PLAIN login,
//! tuning and connection.open, before the socket is split between the
//! reader and writer tasks.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, FieldValue, Frame, FrameType, Method, PROTOCOL_HEADER};

use super::error::Error;
use crate::socket::Socket;
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// The largest frame this client asks for (RabbitMQ's default).
const FRAME_MAX: u32 = 131_072;

/// A socket that has opened its virtual host, and what it was tuned to.
pub(crate) struct Opened {
    pub(crate) stream: Socket,
    /// Bytes read past connection.open-ok.
    pub(crate) rbuf: BytesMut,
    pub(crate) tuned: Tuned,
}

/// Connect to `uri` and open its virtual host, within its connection
/// timeout; `name` is shown by the broker's management as the
/// connection's.
pub(crate) async fn open(
    uri: &AmqpUri,
    name: Option<&str>,
    tls: Option<&TlsOptions>,
) -> Result<Opened, Error> {
    let limit = uri.connection_timeout;
    tokio::time::timeout(limit, async {
        let mut stream = Socket::connect(uri, tls).await?;
        let mut hs = Handshake {
            stream: &mut stream,
            rbuf: BytesMut::with_capacity(4096),
        };
        let tuned = hs.run(uri, name).await?;
        let rbuf = hs.rbuf;
        Ok(Opened { stream, rbuf, tuned })
    })
    .await
    .map_err(|_| Error::Timeout(limit))?
}

/// What connection.tune settled.
pub(crate) struct Tuned {
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    pub(crate) heartbeat: u16,
}

/// The connection's opening exchange, on the socket before it is split.
struct Handshake<'a> {
    stream: &'a mut Socket,
    rbuf: BytesMut,
}

impl Handshake<'_> {
    async fn run(&mut self, uri: &AmqpUri, name: Option<&str>) -> Result<Tuned, Error> {
        self.stream.write_all(PROTOCOL_HEADER).await?;
        self.stream.flush().await?;
        let Method::ConnectionStart(start) = self.method().await? else {
            return Err(Error::Protocol("expected connection.start".into()));
        };
        let offered = String::from_utf8_lossy(&start.mechanisms).into_owned();
        // EXTERNAL when asked for: the broker takes the user from the
        // client certificate, and the response is empty.
        let (mechanism, response) = match uri.auth_mechanism.as_deref() {
            Some("external") => ("EXTERNAL", Bytes::new()),
            _ => ("PLAIN", Bytes::from(format!("\0{}\0{}", uri.user, uri.password))),
        };
        if !offered.split(' ').any(|m| m == mechanism) {
            return Err(Error::Protocol(format!(
                "the broker does not offer {mechanism} (it offers {offered})"
            )));
        }
        self.send(ConnectionStartOk {
            client_properties: client_properties(name),
            mechanism: mechanism.into(),
            response,
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
        self.stream.flush().await?;
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
fn client_properties(name: Option<&str>) -> FieldTable {
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
    if let Some(n) = name {
        props.insert(
            "connection_name",
            FieldValue::LongStr(Bytes::copy_from_slice(n.as_bytes())),
        );
    }
    props
}
