//! The floor under confirmed publishing on this machine: no client
//! library, no async runtime. One thread with a blocking socket writes
//! raw frames and reads the confirms: per read one system call and one
//! thread wake-up, what any client that sleeps while it waits must pay.
//! Whatever separates a client from this is the client's own cost; a
//! client cannot beat a rival by more than the rival's distance from it.
//! Test rig only: it stops at the first thing it does not expect.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use warren_amqp091::frame::{write_basic_publish, write_body, write_content_header_raw, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Frame, FrameType, Method};

use crate::Outcome;

const FRAME_MAX: u32 = 131_072;

struct Raw {
    sock: TcpStream,
    rbuf: BytesMut,
}

impl Raw {
    fn send(&mut self, m: Method, channel: u16) {
        let mut buf = BytesMut::new();
        write_method(&mut buf, channel, &m);
        self.sock.write_all(&buf).expect("writes");
    }

    /// The next frame, reading as needed.
    fn frame(&mut self) -> Frame {
        loop {
            if let Some(f) = Frame::parse(&mut self.rbuf, FRAME_MAX).expect("a frame") {
                return f;
            }
            self.fill();
        }
    }

    fn fill(&mut self) {
        let at = self.rbuf.len();
        self.rbuf.resize(at + 65_536, 0);
        let n = self.sock.read(&mut self.rbuf[at..]).expect("reads");
        assert!(n > 0, "the broker closed the socket");
        self.rbuf.truncate(at + n);
    }

    fn method(&mut self) -> Method {
        let f = self.frame();
        assert_eq!(f.kind, FrameType::Method, "a method frame");
        Method::decode(f.payload).expect("a method")
    }
}

/// `amqp://user:pass@host:port/%2f`, the parts this rig needs.
fn parse(uri: &str) -> (String, String, String) {
    let rest = uri.strip_prefix("amqp://").expect("amqp://");
    let (creds, rest) = rest.split_once('@').expect("user:pass@");
    let (user, pass) = creds.split_once(':').expect("user:pass");
    let addr = rest.split('/').next().expect("host:port");
    (addr.to_string(), user.to_string(), pass.to_string())
}

fn open(uri: &str) -> Raw {
    let (addr, user, pass) = parse(uri);
    let sock = TcpStream::connect(addr).expect("connects");
    sock.set_nodelay(true).expect("nodelay");
    let mut raw = Raw {
        sock,
        rbuf: BytesMut::with_capacity(65_536),
    };
    raw.sock.write_all(b"AMQP\x00\x00\x09\x01").expect("writes");
    let Method::ConnectionStart(_) = raw.method() else {
        panic!("connection.start")
    };
    let mut response = vec![0u8];
    response.extend_from_slice(user.as_bytes());
    response.push(0);
    response.extend_from_slice(pass.as_bytes());
    raw.send(
        ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: "PLAIN".into(),
            response: Bytes::from(response),
            locale: "en_US".into(),
        }
        .into(),
        0,
    );
    let Method::ConnectionTune(t) = raw.method() else {
        panic!("connection.tune")
    };
    raw.send(
        ConnectionTuneOk {
            channel_max: t.channel_max,
            frame_max: FRAME_MAX.min(t.frame_max.max(4096)),
            heartbeat: 0,
        }
        .into(),
        0,
    );
    raw.send(
        ConnectionOpen {
            virtual_host: "/".into(),
            ..Default::default()
        }
        .into(),
        0,
    );
    let Method::ConnectionOpenOk(_) = raw.method() else {
        panic!("connection.open-ok")
    };
    raw.send(ChannelOpen::default().into(), 1);
    let Method::ChannelOpenOk(_) = raw.method() else {
        panic!("channel.open-ok")
    };
    raw.send(ConfirmSelect::default().into(), 1);
    let Method::ConfirmSelectOk(_) = raw.method() else {
        panic!("confirm.select-ok")
    };
    raw
}

/// Publish `body` to `q` with confirms, at most `in_flight` unconfirmed,
/// for `secs`: each read's confirms free slots, refilled in one write.
pub fn publish(uri: &str, q: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let mut raw = open(uri);
    // Empty properties: flags 0.
    let props = [0u8, 0u8];
    let mut out = BytesMut::new();
    let (mut published, mut confirmed) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        let running = start.elapsed() < secs;
        while running && published - confirmed < in_flight as u64 {
            write_basic_publish(&mut out, 1, b"", q.as_bytes(), false, false);
            write_content_header_raw(&mut out, 1, 60, body.len() as u64, &props);
            write_body(&mut out, 1, body, FRAME_MAX);
            published += 1;
        }
        if !out.is_empty() {
            raw.sock.write_all(&out).expect("writes");
            out.clear();
        }
        if confirmed == published {
            break;
        }
        // One read, then every confirm it brought.
        raw.fill();
        while let Some(f) = Frame::parse(&mut raw.rbuf, FRAME_MAX).expect("a frame") {
            match Method::decode(f.payload).expect("a method") {
                Method::BasicAck(a) if a.multiple => {
                    assert!(a.delivery_tag >= confirmed, "confirms go forward");
                    confirmed = a.delivery_tag;
                }
                Method::BasicAck(a) => {
                    // One queue: single acks come in order (checked).
                    assert_eq!(a.delivery_tag, confirmed + 1, "in order");
                    confirmed += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let elapsed = start.elapsed();
    raw.send(
        ConnectionClose {
            reply_code: 200,
            ..Default::default()
        }
        .into(),
        0,
    );
    Outcome {
        messages: confirmed,
        elapsed,
        note: String::new(),
    }
}
