//! A stream protocol client connection over `warren-stream`: the opening
//! sequence (peer properties, SASL PLAIN, tune, open), request/response
//! calls for set-up, and non-blocking frame I/O for the hot loops.

use std::time::Duration;

use bytes::Bytes;
use warren_stream::command::{code, parse_frame, Command, Response};
use warren_stream::CodecError;

use crate::net::Socket;
use crate::options::Uri;

const FRAME_MAX: u32 = 1 << 20;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame from the broker: {0}")]
    Codec(#[from] CodecError),
    #[error("the broker refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, StreamError>;

pub struct Conn {
    io: Socket,
    next_correlation: u32,
    /// Responses read while waiting for another (set-up only).
    parked: Vec<Response>,
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
            next_correlation: 1,
            parked: Vec::new(),
        };
        let props = vec![
            ("product".to_string(), "warren-perf".to_string()),
            ("connection_name".to_string(), name.to_string()),
        ];
        c.ok(
            |id| Command::PeerProperties {
                correlation_id: id,
                properties: props.clone(),
            },
            "peer properties",
        )
        .await?;
        c.ok(
            |id| Command::SaslHandshake { correlation_id: id },
            "SASL handshake",
        )
        .await?;
        let data = Bytes::from(format!("\0{}\0{}", uri.user, uri.pass));
        c.ok(
            |id| Command::SaslAuthenticate {
                correlation_id: id,
                mechanism: "PLAIN".into(),
                data: data.clone(),
            },
            "authentication",
        )
        .await?;
        // The broker proposes frame-max and heartbeat; we answer with ours.
        let (frame_max, _) = loop {
            match c.next_command().await? {
                Command::Tune { frame_max, heartbeat } => break (frame_max, heartbeat),
                other => c.handle_other(other)?,
            }
        };
        // The answer is a Tune too, under the same key (clients send 0x0014).
        Command::Tune {
            frame_max: if frame_max == 0 {
                FRAME_MAX
            } else {
                frame_max.min(FRAME_MAX)
            },
            heartbeat: 0,
        }
        .encode(&mut c.wbuf);
        let vhost = uri.vhost.clone();
        c.ok(
            |id| Command::Open {
                correlation_id: id,
                vhost: vhost.clone(),
            },
            "open",
        )
        .await?;
        Ok(c)
    }

    /// Send a request and wait for its response.
    pub async fn call(&mut self, make: impl FnOnce(u32) -> Command) -> Result<Response> {
        let id = self.next_correlation;
        self.next_correlation += 1;
        make(id).encode(&mut self.wbuf);
        self.flush().await?;
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            if let Some(i) = self.parked.iter().position(|r| r.correlation_id == id) {
                return Ok(self.parked.remove(i));
            }
            match tokio::time::timeout_at(deadline, self.next_command()).await {
                Err(_) => {
                    return Err(StreamError::Protocol(
                        "no response from the broker in 30 s".into(),
                    ))
                }
                Ok(r) => match r? {
                    Command::Response(r) => self.parked.push(r),
                    other => self.handle_other(other)?,
                },
            }
        }
    }

    async fn ok(&mut self, make: impl FnOnce(u32) -> Command, what: &str) -> Result<Response> {
        let r = self.call(make).await?;
        if r.code != code::OK {
            return Err(StreamError::Refused(format!(
                "{what}: response code {:#x}",
                r.code
            )));
        }
        Ok(r)
    }

    async fn next_command(&mut self) -> Result<Command> {
        loop {
            if let Some(c) = self.parse()? {
                return Ok(c);
            }
            self.io.readable().await?;
            self.try_read()?;
        }
    }

    /// What the loops do with frames they do not expect: heartbeats pass,
    /// a close or an error from the broker ends the run.
    pub fn handle_other(&mut self, c: Command) -> Result<()> {
        match c {
            Command::Heartbeat | Command::Tune { .. } => Ok(()),
            Command::Close { code, reason, .. } => {
                Err(StreamError::Refused(format!("closed: {code} {reason}")))
            }
            Command::CreditError { code, .. } => {
                Err(StreamError::Refused(format!("credit refused: {code:#x}")))
            }
            Command::Response(r) => {
                self.parked.push(r);
                if self.parked.len() > 64 {
                    self.parked.remove(0);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub fn parse(&mut self) -> Result<Option<Command>> {
        // Deliver frames carry whole chunks, which the broker does not cut
        // to frame-max; accept large ones, but not without bound.
        match parse_frame(&mut self.io.rbuf, 64 << 20)? {
            Some(f) => Ok(Some(Command::decode(f)?)),
            None => Ok(None),
        }
    }

    /// Close, waiting briefly for the broker's response.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.call(|id| Command::Close {
                correlation_id: id,
                code: 1,
                reason: "bye".into(),
            })
            .await
        })
        .await;
    }
}
