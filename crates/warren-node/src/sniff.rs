//! Telling the protocols on the AMQP port apart by their 8-byte protocol
//! header (AMQP 0-9-1 §4.2.2; AMQP 1.0 §2.2 and §5.3.2), before any byte
//! is consumed, so the chosen front end reads the header itself.

use std::io;
use std::time::Duration;

use bytes::BytesMut;

use tokio::net::TcpStream;
use warren_amqp10::{AMQP_HEADER, SASL_HEADER};

use crate::transport::Transport;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// AMQP 1.0 with a SASL layer first.
    Amqp10Sasl,
    /// AMQP 1.0 straight away (no SASL).
    Amqp10,
    /// Everything else goes to the 0-9-1 front end, which answers an
    /// unknown header with its own and hangs up, as RabbitMQ does.
    Amqp091,
}

/// The first byte of a TLS record carrying a handshake (RFC 8446 §5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Wait (at most `timeout`) for the first 8 bytes and classify them.
/// None if the peer went away or stayed silent.
pub async fn sniff(stream: &mut Transport, timeout: Duration) -> Option<Protocol> {
    let mut head = [0u8; 8];
    let n = peek_head(stream, &mut head, timeout).await?;
    if n < 8 && could_be_header(&head[..n]) {
        return None;
    }
    if head[0] == TLS_HANDSHAKE_RECORD && matches!(stream, Transport::Plain(_)) {
        tracing::info!(
            peer = ?stream.tcp().peer_addr().ok(),
            "a TLS handshake on a plain AMQP listener: refused (the TLS port is a different one)"
        );
    }
    Some(if n == 8 && &head == SASL_HEADER {
        Protocol::Amqp10Sasl
    } else if n == 8 && &head == AMQP_HEADER {
        Protocol::Amqp10
    } else {
        Protocol::Amqp091
    })
}

/// Could these bytes begin a 1.0 header? (Anything else is settled at once.)
pub fn could_be_header(got: &[u8]) -> bool {
    AMQP_HEADER.starts_with(got) || SASL_HEADER.starts_with(got)
}

/// The first bytes on a plain socket, without consuming them: all 8, or
/// fewer that can no longer be a 1.0 header. None if the peer went away or
/// stayed silent.
pub async fn peek(stream: &TcpStream, head: &mut [u8; 8], timeout: Duration) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(head))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        // A header split across segments: the rest is on its way. (peek
        // leaves the socket readable, so waiting on readiness would spin.)
        if n >= 8 || !could_be_header(&head[..n]) {
            return Some(n);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The first `buf.len()` bytes of the stream, left to be read again
/// (AMQP's protocol header picks the front end). None if the peer went
/// away, stayed silent for `timeout`, or sent fewer bytes that match
/// no 1.0 header (then `buf` holds what came).
async fn peek_head(stream: &mut Transport, buf: &mut [u8; 8], timeout: Duration) -> Option<usize> {
    match stream {
        Transport::Plain(s) => peek(s, buf, timeout).await,
        Transport::Tls(t) => {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut got = BytesMut::new();
            while got.len() < buf.len() {
                let room = buf.len() - got.len();
                match t.try_read_buf(&mut got, room) {
                    Ok(0) => break,
                    Ok(_) => {
                        if !could_be_header(&got) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        match tokio::time::timeout_at(deadline, t.tcp.readable()).await {
                            Ok(Ok(())) => {}
                            _ => break,
                        }
                    }
                    Err(_) => break,
                }
            }
            t.unread(&got);
            buf[..got.len()].copy_from_slice(&got);
            (!got.is_empty()).then_some(got.len())
        }
    }
}
