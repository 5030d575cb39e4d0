//! A minimal AMQP 0-9-1 client over the project's codec: the handshake
//! (PLAIN), synchronous calls for set-up, and non-blocking frame I/O for
//! the hot loops, which batch everything they produce into one write.
//! Written here rather than taken from lapin or amqprs because a load
//! generator must not be the bottleneck: no task or channel hop per
//! message, no per-message allocation beyond the frame bytes.

use std::time::Duration;

use bytes::Bytes;
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{CodecError, FieldTable, FieldValue, Frame, FrameType, Method, PROTOCOL_HEADER};

use crate::net::Socket;
use crate::options::Uri;

/// Largest frame we ask for (RabbitMQ's default).
const FRAME_MAX: u32 = 131_072;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame from the broker: {0}")]
    Codec(#[from] CodecError),
    #[error("the broker closed the {what}: {code} {text}")]
    Closed {
        what: &'static str,
        code: u16,
        text: String,
    },
    #[error("{0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, ClientError>;

pub struct Client {
    io: Socket,
    pub frame_max: u32,
}

impl std::ops::Deref for Client {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        &self.io
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Socket {
        &mut self.io
    }
}

fn closed_error(m: &Method) -> Option<ClientError> {
    match m {
        Method::ConnectionClose(c) => Some(ClientError::Closed {
            what: "connection",
            code: c.reply_code,
            text: c.reply_text.to_string(),
        }),
        Method::ChannelClose(c) => Some(ClientError::Closed {
            what: "channel",
            code: c.reply_code,
            text: c.reply_text.to_string(),
        }),
        _ => None,
    }
}

impl Client {
    pub async fn connect(uri: &Uri, name: &str) -> Result<Client> {
        let mut c = Client {
            io: Socket::connect(&uri.addr()).await?,
            frame_max: 4096,
        };
        c.wbuf.extend_from_slice(PROTOCOL_HEADER);
        c.flush().await?;
        let Method::ConnectionStart(_) = c.method(0).await? else {
            return Err(ClientError::Protocol("expected connection.start".into()));
        };
        let mut caps = FieldTable::new();
        for cap in [
            "publisher_confirms",
            "consumer_cancel_notify",
            "connection.blocked",
            "basic.nack",
        ] {
            caps.insert(cap, FieldValue::Bool(true));
        }
        let mut props = FieldTable::new();
        props.insert("product", FieldValue::LongStr(Bytes::from_static(b"warren-perf")));
        props.insert(
            "connection_name",
            FieldValue::LongStr(Bytes::from(name.to_string())),
        );
        props.insert("capabilities", FieldValue::Table(caps));
        let response = format!("\0{}\0{}", uri.user, uri.pass);
        c.send(
            0,
            ConnectionStartOk {
                client_properties: props,
                mechanism: "PLAIN".into(),
                response: Bytes::from(response),
                locale: "en_US".into(),
            },
        );
        c.flush().await?;
        let Method::ConnectionTune(t) = c.method(0).await? else {
            return Err(ClientError::Protocol("expected connection.tune".into()));
        };
        let frame_max = if t.frame_max == 0 {
            FRAME_MAX
        } else {
            t.frame_max.min(FRAME_MAX)
        };
        c.send(
            0,
            ConnectionTuneOk {
                channel_max: t.channel_max.min(16),
                frame_max,
                // No heartbeats: runs are short and both sides are busy.
                heartbeat: 0,
            },
        );
        c.frame_max = frame_max;
        c.send(
            0,
            ConnectionOpen {
                virtual_host: uri.vhost.as_str().into(),
                ..Default::default()
            },
        );
        c.flush().await?;
        let Method::ConnectionOpenOk(_) = c.method(0).await? else {
            return Err(ClientError::Protocol("expected connection.open-ok".into()));
        };
        Ok(c)
    }

    pub fn send(&mut self, channel: u16, m: impl Into<Method>) {
        write_method(&mut self.wbuf, channel, &m.into());
    }

    /// The next whole frame already read, if any.
    pub fn parse(&mut self) -> Result<Option<Frame>> {
        let max = self.frame_max.max(FRAME_MAX);
        Ok(Frame::parse(&mut self.io.rbuf, max)?)
    }

    /// The next method frame on `channel` (set-up only: content frames and
    /// other channels are not expected then).
    pub async fn method(&mut self, channel: u16) -> Result<Method> {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            while let Some(f) = self.parse()? {
                if f.kind != FrameType::Method {
                    continue;
                }
                let m = Method::decode(f.payload)?;
                if let Some(e) = closed_error(&m) {
                    return Err(e);
                }
                if f.channel == channel {
                    return Ok(m);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Protocol("no reply from the broker in 30 s".into()));
            }
            self.io.readable().await?;
            self.try_read()?;
        }
    }

    /// Send `m` on `channel` and wait for its reply.
    pub async fn call(&mut self, channel: u16, m: impl Into<Method>) -> Result<Method> {
        self.send(channel, m);
        self.flush().await?;
        self.method(channel).await
    }

    pub async fn open_channel(&mut self, channel: u16) -> Result<()> {
        match self.call(channel, ChannelOpen::default()).await? {
            Method::ChannelOpenOk(_) => Ok(()),
            other => Err(ClientError::Protocol(format!(
                "expected channel.open-ok, got {other:?}"
            ))),
        }
    }

    /// connection.close, waiting briefly for close-ok.
    pub async fn close(mut self) {
        self.send(
            0,
            ConnectionClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.flush().await?;
            loop {
                if let Method::ConnectionCloseOk(_) = self.method(0).await? {
                    return Ok::<_, ClientError>(());
                }
            }
        })
        .await;
    }

    /// Turn a connection.close or channel.close frame into an error.
    pub fn check_closed(m: &Method) -> Result<()> {
        match closed_error(m) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
