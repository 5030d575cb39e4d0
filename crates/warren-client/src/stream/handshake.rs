//! A stream connection's opening on a fresh socket, before it is split
//! between the reader and writer tasks: peer properties, SASL (PLAIN,
//! or EXTERNAL with a client certificate), the broker's tune answered,
//! and the virtual host opened.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_stream::command::{code, parse_frame, Command, Response};

use super::error::{Error, ResponseCode};
use crate::socket::Socket;
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// The largest frame this client asks for (RabbitMQ's default, 1 MiB).
pub(crate) const FRAME_MAX: u32 = 1 << 20;

/// Deliver frames carry whole chunks, which brokers do not cut to the
/// frame size: the reader accepts frames up to this.
pub(crate) const READ_FRAME_MAX: u32 = 64 << 20;

/// A socket that has opened its virtual host.
pub(crate) struct Opened {
    pub(crate) socket: Socket,
    /// Bytes read past the open's response.
    pub(crate) rbuf: BytesMut,
    /// The largest frame either side may send.
    pub(crate) frame_max: u32,
    /// Seconds between heartbeats (0: none).
    pub(crate) heartbeat: u32,
    /// What the broker said of itself: its peer properties (`product`,
    /// `version`, ...), then its open response's (`advertised_host`,
    /// `advertised_port`).
    pub(crate) properties: Vec<(String, String)>,
}

/// Connect to `uri` and open its virtual host within its connection
/// timeout; `name` is what the broker's management shows.
pub(crate) async fn open(uri: &AmqpUri, name: &str, tls: Option<&TlsOptions>) -> Result<Opened, Error> {
    let limit = uri.connection_timeout;
    tokio::time::timeout(limit, async {
        let socket = Socket::connect(uri, tls).await?;
        let mut hs = Handshake {
            socket,
            rbuf: BytesMut::with_capacity(4096),
            next: 1,
        };
        let props = vec![
            ("product".to_string(), "warren-client".to_string()),
            ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
            ("platform".to_string(), "Rust".to_string()),
            ("connection_name".to_string(), name.to_string()),
        ];
        let peer = hs
            .call("peer properties", |id| Command::PeerProperties {
                correlation_id: id,
                properties: props,
            })
            .await?;
        let mut properties = warren_stream::wire::Reader::new(peer.rest)
            .pairs()
            .unwrap_or_default();
        hs.call("SASL handshake", |id| Command::SaslHandshake {
            correlation_id: id,
        })
        .await?;
        let external = uri
            .auth_mechanism
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("external"));
        let (mechanism, data) = match external {
            true => ("EXTERNAL", Bytes::new()),
            false => ("PLAIN", Bytes::from(format!("\0{}\0{}", uri.user, uri.password))),
        };
        hs.call("authentication", |id| Command::SaslAuthenticate {
            correlation_id: id,
            mechanism: mechanism.into(),
            data,
        })
        .await?;
        // The broker proposes its limits; the answer takes the smaller.
        let (frame_max, heartbeat) = loop {
            match hs.command().await? {
                Command::Tune { frame_max, heartbeat } => break (frame_max, heartbeat),
                Command::Heartbeat => {}
                other => return Err(unexpected(&other)),
            }
        };
        let frame_max = match frame_max {
            0 => FRAME_MAX,
            n => n.min(FRAME_MAX),
        };
        hs.send(&Command::Tune { frame_max, heartbeat }).await?;
        let vhost = uri.vhost.clone();
        let open = hs
            .call("open", |id| Command::Open {
                correlation_id: id,
                vhost,
            })
            .await?;
        properties.extend(
            warren_stream::wire::Reader::new(open.rest)
                .pairs()
                .unwrap_or_default(),
        );
        Ok(Opened {
            socket: hs.socket,
            rbuf: hs.rbuf,
            frame_max,
            heartbeat,
            properties,
        })
    })
    .await
    .map_err(|_| Error::Timeout(limit))?
}

fn unexpected(c: &Command) -> Error {
    match c {
        Command::Close { code, reason, .. } => {
            Error::ConnectionLost(format!("the broker closed the connection: {code} {reason}"))
        }
        other => Error::Protocol(format!("unexpected while opening: {other:?}")),
    }
}

struct Handshake {
    socket: Socket,
    rbuf: BytesMut,
    next: u32,
}

impl Handshake {
    async fn send(&mut self, c: &Command) -> Result<(), Error> {
        let mut out = BytesMut::new();
        c.encode(&mut out);
        self.socket.write_all(&out).await?;
        self.socket.flush().await?;
        Ok(())
    }

    /// A request and its response, which must be OK.
    async fn call(
        &mut self,
        what: &'static str,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<Response, Error> {
        let id = self.next;
        self.next += 1;
        self.send(&make(id)).await?;
        loop {
            match self.command().await? {
                Command::Response(r) if r.correlation_id == id => {
                    return match r.code {
                        code::OK => Ok(r),
                        c => Err(Error::Refused {
                            operation: what,
                            code: ResponseCode::from_u16(c),
                        }),
                    };
                }
                Command::Heartbeat | Command::Response(_) => {}
                other => return Err(unexpected(&other)),
            }
        }
    }

    async fn command(&mut self) -> Result<Command, Error> {
        loop {
            if let Some(f) = parse_frame(&mut self.rbuf, FRAME_MAX)? {
                return Ok(Command::decode(f)?);
            }
            if self.socket.read_buf(&mut self.rbuf).await? == 0 {
                return Err(Error::ConnectionLost(
                    "the broker closed the socket while opening".into(),
                ));
            }
        }
    }
}

/// How long a request waits for its response.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
