//! Telling the protocols on the AMQP port apart by their 8-byte protocol
//! header (AMQP 0-9-1 §4.2.2; AMQP 1.0 §2.2 and §5.3.2), before any byte
//! is consumed, so the chosen front end reads the header itself.

use std::time::Duration;

use tokio::net::TcpStream;
use warren_amqp10::{AMQP_HEADER, SASL_HEADER};

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

/// Wait (at most `timeout`) for the first 8 bytes and classify them.
/// None if the peer went away or stayed silent.
pub async fn sniff(stream: &TcpStream, timeout: Duration) -> Option<Protocol> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut head = [0u8; 8];
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut head))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if n >= 8 {
            break;
        }
        // A header split across segments: the rest is on its way. (peek
        // leaves the socket readable, so waiting on readiness would spin.)
        if !AMQP_HEADER.starts_with(&head[..n]) && !SASL_HEADER.starts_with(&head[..n]) {
            return Some(Protocol::Amqp091);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Some(if &head == SASL_HEADER {
        Protocol::Amqp10Sasl
    } else if &head == AMQP_HEADER {
        Protocol::Amqp10
    } else {
        Protocol::Amqp091
    })
}
