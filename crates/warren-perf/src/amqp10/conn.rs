//! An AMQP 1.0 client connection over the project's codec: SASL PLAIN,
//! open, one session, and frame I/O for the producer and consumer loops.
//! Session flow control (spec 2.5.6) is kept here: transfer ids, and the
//! peer's incoming window that bounds what we may send.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::performative::{Begin, Close, Open};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{CodecError, Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};

use crate::net::Socket;
use crate::options::Uri;

const MAX_FRAME: u32 = 131_072;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The incoming window we grant, and reopen whenever half is used.
pub const INCOMING_WINDOW: u32 = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum Amqp10Error {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame from the broker: {0}")]
    Codec(#[from] CodecError),
    #[error("the broker refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, Amqp10Error>;

pub struct Conn {
    io: Socket,
    /// The largest frame the broker takes from us (its open's max-frame-size).
    pub peer_max_frame: u32,
    /// Session: the next transfer id we send, and how many more the peer
    /// takes before it widens its window.
    pub next_outgoing_id: u32,
    pub remote_incoming_window: u32,
    /// Session: the next transfer id we expect, and our window left.
    pub next_incoming_id: u32,
    pub incoming_window: u32,
}

impl std::ops::Deref for Conn {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        &self.io
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Socket {
        &mut self.io
    }
}

impl Conn {
    pub async fn connect(uri: &Uri, name: &str) -> Result<Conn> {
        let mut c = Conn {
            io: Socket::connect(&uri.addr()).await?,
            peer_max_frame: 512,
            next_outgoing_id: 0,
            remote_incoming_window: 0,
            next_incoming_id: 0,
            incoming_window: INCOMING_WINDOW,
        };
        // SASL (5.3): header, mechanisms, init PLAIN, outcome.
        c.wbuf.extend_from_slice(SASL_HEADER);
        c.flush().await?;
        c.expect_header(SASL_HEADER).await?;
        match c.sasl().await? {
            Sasl::Mechanisms(m) if m.iter().any(|x| x == "PLAIN") => {}
            other => return Err(Amqp10Error::Protocol(format!("no PLAIN among {other:?}"))),
        }
        let init = Sasl::plain(&uri.user, &uri.pass).to_value().to_bytes();
        write_frame(&mut c.wbuf, FrameType::Sasl, 0, &[&init]);
        c.flush().await?;
        match c.sasl().await? {
            Sasl::Outcome { code: sasl::OK } => {}
            other => return Err(Amqp10Error::Refused(format!("SASL {other:?}"))),
        }
        // AMQP (2.4): header, open, begin.
        c.wbuf.extend_from_slice(AMQP_HEADER);
        c.flush().await?;
        c.expect_header(AMQP_HEADER).await?;
        let hostname = if uri.vhost == "/" {
            None
        } else {
            Some(format!("vhost:{}", uri.vhost))
        };
        c.send(
            0,
            &Performative::Open(Open {
                container_id: name.to_string(),
                hostname,
                max_frame_size: Some(MAX_FRAME),
                channel_max: Some(0),
                ..Default::default()
            }),
            &[],
        );
        c.send(
            0,
            &Performative::Begin(Begin {
                next_outgoing_id: 0,
                incoming_window: INCOMING_WINDOW,
                outgoing_window: u32::MAX,
                handle_max: Some(1),
                ..Default::default()
            }),
            &[],
        );
        c.flush().await?;
        match c.next().await? {
            (Performative::Open(o), _) => {
                c.peer_max_frame = o.max_frame_size.unwrap_or(u32::MAX).max(512);
            }
            (other, _) => return Err(Amqp10Error::Protocol(format!("expected open, got {other:?}"))),
        }
        match c.next().await? {
            (Performative::Begin(b), _) => {
                c.remote_incoming_window = b.incoming_window;
                c.next_incoming_id = b.next_outgoing_id;
            }
            (other, _) => return Err(Amqp10Error::Protocol(format!("expected begin, got {other:?}"))),
        }
        Ok(c)
    }

    async fn expect_header(&mut self, want: &[u8; 8]) -> Result<()> {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        while self.rbuf.len() < 8 {
            if tokio::time::Instant::now() >= deadline {
                return Err(Amqp10Error::Protocol("no protocol header from the broker".into()));
            }
            self.io.readable().await?;
            self.try_read()?;
        }
        let got = self.rbuf.split_to(8);
        if &got[..] != want {
            return Err(Amqp10Error::Protocol(format!(
                "broker answered with header {:?}",
                &got[..]
            )));
        }
        Ok(())
    }

    async fn sasl(&mut self) -> Result<Sasl> {
        let f = self.frame().await?;
        let mut s = &f.body[..];
        Ok(Sasl::from_value(&Value::decode(&mut s)?)?)
    }

    /// Write one performative (and payload) on the session's channel 0.
    pub fn send(&mut self, channel: u16, p: &Performative, payload: &[u8]) {
        let mut perf = BytesMut::new();
        p.encode(&mut perf);
        write_frame(&mut self.wbuf, FrameType::Amqp, channel, &[&perf, payload]);
    }

    /// The next whole frame already read (heartbeats skipped).
    pub fn parse(&mut self) -> Result<Option<Frame>> {
        loop {
            match Frame::parse(&mut self.io.rbuf, MAX_FRAME)? {
                Some(f) if f.body.is_empty() => continue,
                other => return Ok(other),
            }
        }
    }

    /// The next performative already read, with its payload; a close or
    /// end from the broker is an error.
    pub fn parse_performative(&mut self) -> Result<Option<(Performative, Bytes)>> {
        let Some(f) = self.parse()? else { return Ok(None) };
        let (p, payload) = Performative::decode(&f.body)?;
        match &p {
            Performative::Close(Close { error }) => {
                return Err(Amqp10Error::Refused(format!("connection closed: {error:?}")))
            }
            Performative::End(e) => {
                return Err(Amqp10Error::Refused(format!("session ended: {:?}", e.error)))
            }
            Performative::Detach(d) if d.error.is_some() => {
                return Err(Amqp10Error::Refused(format!("link detached: {:?}", d.error)))
            }
            _ => {}
        }
        Ok(Some((p, payload)))
    }

    async fn frame(&mut self) -> Result<Frame> {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            if let Some(f) = self.parse()? {
                return Ok(f);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Amqp10Error::Protocol("no reply from the broker in 30 s".into()));
            }
            self.io.readable().await?;
            self.try_read()?;
        }
    }

    /// Wait for the next performative (set-up only).
    pub async fn next(&mut self) -> Result<(Performative, Bytes)> {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            if let Some(p) = self.parse_performative()? {
                return Ok(p);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Amqp10Error::Protocol("no reply from the broker in 30 s".into()));
            }
            self.io.readable().await?;
            self.try_read()?;
        }
    }

    /// close, waiting briefly for the broker's close.
    pub async fn close(mut self) {
        self.send(0, &Performative::Close(Close::default()), &[]);
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.flush().await?;
            loop {
                match Frame::parse(&mut self.io.rbuf, MAX_FRAME)? {
                    Some(f) => {
                        if let Ok((Performative::Close(_), _)) = Performative::decode(&f.body) {
                            return Ok::<_, Amqp10Error>(());
                        }
                    }
                    None => {
                        self.io.readable().await?;
                        self.try_read()?;
                    }
                }
            }
        })
        .await;
    }
}
