//! A "broker" that completes the handshake and then sends garbage:
//! random bytes, well-formed frames with random payloads, content out of
//! order, bodies longer than announced or announced at terabytes. Each
//! time the client ends the connection with an error, without a panic,
//! a hang or buffering what it was told to expect.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Method};
use warren_client::amqp091::{Connection, RecoveryOptions};

/// xorshift64*: reproducible garbage without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u8(kind);
    b.put_u16(channel);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.put_u8(0xCE);
    b.to_vec()
}

fn method(channel: u16, m: impl Into<Method>) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_method(&mut b, channel, &m.into());
    b.to_vec()
}

/// A content header frame: class 60, weight 0, body size, no properties.
fn header(channel: u16, size: u64) -> Vec<u8> {
    header_with(channel, size, &[0, 0])
}

/// A content header frame with `properties` (flags and list) as given.
fn header_with(channel: u16, size: u64, properties: &[u8]) -> Vec<u8> {
    let mut p = BytesMut::new();
    p.put_u16(60);
    p.put_u16(0);
    p.put_u64(size);
    p.put_slice(properties);
    frame(2, channel, &p)
}

fn deliver(channel: u16) -> Vec<u8> {
    method(
        channel,
        BasicDeliver {
            consumer_tag: "c".into(),
            delivery_tag: 1,
            exchange: "".into(),
            routing_key: "q".into(),
            ..Default::default()
        },
    )
}

/// Case `n`'s garbage.
fn garbage(n: u64) -> Vec<u8> {
    let mut r = Rng(n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    match n % 7 {
        0 => {
            let len = 1 + r.below(2000) as usize;
            r.bytes(len)
        }
        1 => {
            let kinds = [1u8, 2, 3, 8, r.next() as u8];
            let kind = kinds[r.below(5) as usize];
            let len = r.below(300) as usize;
            let channel = r.below(4) as u16;
            frame(kind, channel, &r.bytes(len))
        }
        // A body frame, then a header, with no method before them.
        2 => [frame(3, 0, b"body"), header(1, 4)].concat(),
        // A body longer than its header announced, on channel 0 and 1.
        3 => [deliver(r.below(2) as u16), header(1, 3), frame(3, 1, b"longer")].concat(),
        // A body announced at a terabyte.
        4 => [deliver(1), header(1, 1 << 40), frame(3, 1, &r.bytes(1000))].concat(),
        // Property flags announcing a content type and headers that are
        // not there (the properties are read lazily, their layout at once).
        5 => [
            deliver(1),
            header_with(1, 2, &[0xa0, 0, 4, b'j']),
            frame(3, 1, b"{}"),
        ]
        .concat(),
        // A method this client never expects on channel 0, then noise.
        _ => [method(0, BasicQosOk {}), r.bytes(50)].concat(),
    }
}

/// Accept one client, open it as a broker would, send `bytes`, and keep
/// the socket open (the client must end it itself) until it does.
async fn serve(listener: TcpListener, bytes: Vec<u8>) {
    let (mut s, _) = listener.accept().await.unwrap();
    let mut buf = vec![0u8; 8];
    s.read_exact(&mut buf).await.unwrap();
    let start = ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: FieldTable::new(),
        mechanisms: Bytes::from_static(b"PLAIN"),
        locales: Bytes::from_static(b"en_US"),
    };
    s.write_all(&method(0, start)).await.unwrap();
    let _ = read_some(&mut s).await; // start-ok
    let tune = ConnectionTune {
        channel_max: 16,
        frame_max: 131_072,
        heartbeat: 0,
    };
    s.write_all(&method(0, tune)).await.unwrap();
    let _ = read_some(&mut s).await; // tune-ok, open
    s.write_all(&method(0, ConnectionOpenOk::default()))
        .await
        .unwrap();
    s.write_all(&bytes).await.unwrap();
    // Until the client hangs up (reads fail or return 0).
    while read_some(&mut s).await > 0 {}
}

async fn read_some(s: &mut TcpStream) -> usize {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

#[tokio::test]
async fn garbage_after_the_handshake_ends_the_connection_cleanly() {
    for n in 0..70u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let bytes = garbage(n);
        let server = tokio::spawn(serve(listener, bytes.clone()));
        let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
            .recovery(RecoveryOptions::disabled())
            .open()
            .await
            .unwrap_or_else(|e| panic!("case {n}: the handshake: {e}"));
        // Random bytes may be a frame still short of its end: the client
        // then waits for more, which is right; every other case must end
        // the connection on its own.
        let ends = n % 7 != 0 && n % 7 != 1;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while ends && !conn.is_closed() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "case {n}: still open after {bytes:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(conn);
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .unwrap_or_else(|_| panic!("case {n}: the client never hung up"))
            .unwrap();
    }
}
