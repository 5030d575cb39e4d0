//! Raw-byte protocol tests: what the broker does with bad input. Each test
//! speaks AMQP 0-9-1 by hand over a TCP socket and checks the exact reply,
//! and that the broker goes on serving other connections.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use warren_amqp091::frame::{write_method, FRAME_END};
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Frame, FrameType, Method, PROTOCOL_HEADER};

use crate::common::*;

pub(crate) struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            s,
            buf: BytesMut::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    pub(crate) fn send_method(&mut self, channel: u16, m: impl Into<Method>) {
        let mut b = BytesMut::new();
        write_method(&mut b, channel, &m.into());
        self.send(&b);
    }

    /// The next frame, or None when the server closed the socket.
    fn frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = Frame::parse(&mut self.buf, 1 << 20).expect("server frames are valid") {
                return Some(f);
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub(crate) fn method(&mut self) -> Method {
        loop {
            let f = self.frame().expect("a frame");
            if f.kind == FrameType::Method {
                return Method::decode(f.payload).unwrap();
            }
        }
    }

    /// Log in as guest and open vhost "/" with the given heartbeat.
    pub(crate) fn handshake(port: u16, heartbeat: u16) -> Raw {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        assert!(matches!(r.method(), Method::ConnectionStart(_)));
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            },
        );
        let Method::ConnectionTune(t) = r.method() else {
            panic!("expected tune")
        };
        assert_eq!((t.channel_max, t.frame_max, t.heartbeat), (2047, 131072, 60));
        r.send_method(
            0,
            ConnectionTuneOk {
                channel_max: t.channel_max,
                frame_max: t.frame_max,
                heartbeat,
            },
        );
        r.send_method(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
                ..Default::default()
            },
        );
        assert!(matches!(r.method(), Method::ConnectionOpenOk(_)));
        r
    }

    pub(crate) fn open_channel(&mut self, ch: u16) {
        self.send_method(ch, ChannelOpen::default());
        assert!(matches!(self.method(), Method::ChannelOpenOk(_)));
    }

    /// Expect connection.close with `code`; returns its text. Answers
    /// close-ok and checks the server then hangs up.
    fn expect_connection_close(&mut self, code: u16) -> String {
        let m = self.method();
        let Method::ConnectionClose(c) = m else {
            panic!("expected connection.close, got {m:?}")
        };
        assert_eq!(c.reply_code, code, "{}", c.reply_text);
        self.send_method(0, ConnectionCloseOk {});
        assert!(self.frame().is_none(), "socket closed after close-ok");
        c.reply_text.to_string()
    }
}

/// The broker still serves a fresh connection.
async fn still_serving(b: &Broker) {
    let (_c, ch) = b.channel().await;
    declare(&ch, "", lapin::types::FieldTable::default()).await;
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test]
async fn bad_protocol_header_gets_ours_and_a_close() {
    let b = Broker::start().await;
    let port = b.port;
    let (reply, closed) = blocking(move || {
        let mut r = Raw::connect(port);
        r.send(b"AMQP\x01\x01\x00\x0a");
        let mut got = [0u8; 8];
        r.s.read_exact(&mut got).unwrap();
        let mut more = [0u8; 1];
        (got, matches!(r.s.read(&mut more), Ok(0)))
    })
    .await;
    assert_eq!(&reply, PROTOCOL_HEADER);
    assert!(closed);
    still_serving(&b).await;
}

#[tokio::test]
async fn oversized_frame_is_a_frame_error() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        // A body frame announcing 1 GiB: refused from its header alone.
        r.send(&[3, 0, 1, 0x40, 0, 0, 0]);
        r.expect_connection_close(501)
    })
    .await;
    assert!(text.starts_with("FRAME_ERROR - frame size"), "{text}");
    still_serving(&b).await;
}

#[tokio::test]
async fn huge_frame_before_tune_is_refused_without_buffering() {
    let b = Broker::start().await;
    let port = b.port;
    let closed = blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        assert!(matches!(r.method(), Method::ConnectionStart(_)));
        // 4 GiB announced before tune: the server hangs up at once.
        r.send(&[1, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        r.frame().is_none()
    })
    .await;
    assert!(closed);
    still_serving(&b).await;
}

#[tokio::test]
async fn bad_frame_end_is_a_frame_error() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.send(&[8, 0, 0, 0, 0, 0, 0, 0x00]);
        r.expect_connection_close(501);
    })
    .await;
}

#[tokio::test]
async fn unknown_method_is_not_implemented() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        let mut f = BytesMut::new();
        f.put_slice(&[1, 0, 1, 0, 0, 0, 4]);
        f.put_u16(60);
        f.put_u16(999);
        f.put_u8(FRAME_END);
        r.send(&f);
        r.expect_connection_close(540)
    })
    .await;
    assert_eq!(text, "NOT_IMPLEMENTED - unknown method class 60 method 999");
    still_serving(&b).await;
}

#[tokio::test]
async fn truncated_method_arguments_are_a_syntax_error() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        // queue.declare whose queue name claims 200 octets but has 3
        let mut f = BytesMut::new();
        f.put_slice(&[1, 0, 1, 0, 0, 0, 10]);
        f.put_u16(50);
        f.put_u16(10);
        f.put_u16(0);
        f.put_u8(200);
        f.put_slice(b"abc");
        f.put_u8(FRAME_END);
        r.send(&f);
        r.expect_connection_close(502);
    })
    .await;
}

#[tokio::test]
async fn frame_on_a_closed_channel_is_a_channel_error() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.send_method(
            1,
            ChannelClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        assert!(matches!(r.method(), Method::ChannelCloseOk(_)));
        r.send_method(
            1,
            QueueDeclare {
                queue: "q".into(),
                ..Default::default()
            },
        );
        r.expect_connection_close(504)
    })
    .await;
    assert_eq!(text, "CHANNEL_ERROR - expected 'channel.open'");
}

#[tokio::test]
async fn content_without_a_method_is_unexpected() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.send(&[3, 0, 1, 0, 0, 0, 2, b'h', b'i', FRAME_END]);
        r.expect_connection_close(505);
    })
    .await;
}

#[tokio::test]
async fn heartbeat_on_a_channel_is_unexpected() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.send(&[8, 0, 5, 0, 0, 0, 0, FRAME_END]);
        r.expect_connection_close(505);
    })
    .await;
}

#[tokio::test]
async fn channel_error_leaves_the_connection_usable() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.send_method(
            1,
            QueueDeclare {
                queue: "nope".into(),
                passive: true,
                ..Default::default()
            },
        );
        let Method::ChannelClose(c) = r.method() else {
            panic!()
        };
        assert_eq!((c.reply_code, c.class_id, c.method_id), (404, 50, 10));
        // anything but close-ok is ignored on a closing channel
        r.send_method(
            1,
            QueueDeclare {
                queue: "x".into(),
                ..Default::default()
            },
        );
        r.send_method(1, ChannelCloseOk {});
        r.open_channel(1);
        r.send_method(
            1,
            QueueDeclare {
                queue: "x".into(),
                ..Default::default()
            },
        );
        assert!(matches!(r.method(), Method::QueueDeclareOk(_)));
    })
    .await;
}

/// A publish to a missing exchange followed at once by the client's own
/// channel.close: the broker's close (404) and the client's cross. The
/// broker answers the client's close with close-ok, takes the client's
/// close-ok to its own, and the connection's other channels go on
/// (0-9-1 §4.2.6; RabbitMQ 3.10 does the same).
#[tokio::test]
async fn crossing_channel_closes_leave_other_channels_open() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.open_channel(2);
        let mut out = BytesMut::new();
        write_method(
            &mut out,
            1,
            &BasicPublish {
                exchange: "no-such-exchange".into(),
                routing_key: "k".into(),
                ..Default::default()
            }
            .into(),
        );
        // content header (class 60, body size 2, no properties) and body
        let header = [0u8, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0];
        out.put_u8(2);
        out.put_u16(1);
        out.put_u32(header.len() as u32);
        out.extend_from_slice(&header);
        out.put_u8(FRAME_END);
        out.extend_from_slice(&[3, 0, 1, 0, 0, 0, 2, b'h', b'i', FRAME_END]);
        write_method(
            &mut out,
            1,
            &ChannelClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            }
            .into(),
        );
        r.send(&out);
        let m = r.method();
        let Method::ChannelClose(c) = m else {
            panic!("expected the broker's channel.close, got {m:?}")
        };
        assert_eq!(
            (c.reply_code, c.class_id, c.method_id),
            (404, 60, 40),
            "{}",
            c.reply_text
        );
        let m = r.method();
        assert!(
            matches!(m, Method::ChannelCloseOk(_)),
            "close-ok to ours, got {m:?}"
        );
        // Our close-ok to the broker's close.
        r.send_method(1, ChannelCloseOk {});
        r.send_method(
            2,
            QueueDeclare {
                queue: "still-here".into(),
                ..Default::default()
            },
        );
        let m = r.method();
        assert!(
            matches!(m, Method::QueueDeclareOk(_)),
            "channel 2 goes on, got {m:?}"
        );
        r.open_channel(1);
    })
    .await;
    still_serving(&b).await;
}

/// A client that takes the close-ok to its own close as the channel's end
/// (and sends no close-ok to the broker's) may open the number again.
#[tokio::test]
async fn a_crossed_channel_may_be_opened_again() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.send_method(
            1,
            QueueDeclare {
                queue: "nope".into(),
                passive: true,
                ..Default::default()
            },
        );
        r.send_method(
            1,
            ChannelClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        assert!(matches!(r.method(), Method::ChannelClose(_)));
        assert!(matches!(r.method(), Method::ChannelCloseOk(_)));
        r.open_channel(1);
        r.send_method(
            1,
            QueueDeclare {
                queue: "x".into(),
                ..Default::default()
            },
        );
        assert!(matches!(r.method(), Method::QueueDeclareOk(_)));
    })
    .await;
}

#[tokio::test]
async fn channel_max_is_enforced() {
    let b = Broker::start_with(|c| c.channel_max = 2).await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        r.method();
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            },
        );
        let Method::ConnectionTune(t) = r.method() else {
            panic!()
        };
        assert_eq!(t.channel_max, 2);
        r.send_method(
            0,
            ConnectionTuneOk {
                channel_max: 2,
                frame_max: 131072,
                heartbeat: 0,
            },
        );
        r.send_method(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
                ..Default::default()
            },
        );
        r.method();
        r.open_channel(1);
        r.open_channel(2);
        r.send_method(3, ChannelOpen::default());
        r.expect_connection_close(504);
    })
    .await;
}

#[tokio::test]
async fn silent_peer_is_dropped_after_two_heartbeats() {
    let b = Broker::start().await;
    let port = b.port;
    let (elapsed, heartbeats) = blocking(move || {
        let mut r = Raw::handshake(port, 1);
        let start = Instant::now();
        let mut heartbeats = 0;
        while let Some(f) = r.frame() {
            if f.kind == FrameType::Heartbeat {
                heartbeats += 1;
            }
        }
        (start.elapsed(), heartbeats)
    })
    .await;
    assert!(heartbeats >= 1, "the server sends heartbeats");
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn bad_login_with_authentication_failure_close() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        r.method();
        let mut caps = FieldTable::new();
        caps.insert(
            "authentication_failure_close",
            warren_amqp091::FieldValue::Bool(true),
        );
        let mut props = FieldTable::new();
        props.insert("capabilities", warren_amqp091::FieldValue::Table(caps));
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: props,
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0wrong"),
                locale: "en_US".into(),
            },
        );
        r.expect_connection_close(403)
    })
    .await;
    assert!(
        text.starts_with("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"),
        "{text}"
    );
}

#[tokio::test]
async fn unknown_vhost_is_not_allowed() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        r.method();
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            },
        );
        r.method();
        r.send_method(
            0,
            ConnectionTuneOk {
                channel_max: 2047,
                frame_max: 131072,
                heartbeat: 0,
            },
        );
        r.send_method(
            0,
            ConnectionOpen {
                virtual_host: "/nope".into(),
                ..Default::default()
            },
        );
        r.expect_connection_close(530)
    })
    .await;
    assert_eq!(text, "NOT_ALLOWED - vhost /nope not found");
}

#[tokio::test]
async fn unknown_delivery_tag_is_precondition_failed() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::handshake(port, 0);
        r.open_channel(1);
        r.send_method(
            1,
            BasicAck {
                delivery_tag: 42,
                multiple: false,
            },
        );
        let Method::ChannelClose(c) = r.method() else {
            panic!()
        };
        assert_eq!((c.reply_code, c.class_id, c.method_id), (406, 60, 80));
        assert_eq!(
            c.reply_text.to_string(),
            "PRECONDITION_FAILED - unknown delivery tag 42"
        );
    })
    .await;
}

/// Random frames after a good handshake, from many connections: whatever
/// the broker makes of them, it answers or closes, never dies, and keeps
/// serving everyone else.
#[tokio::test]
async fn random_frames_never_take_the_broker_down() {
    use rand::{Rng, SeedableRng};
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut r = Raw::handshake(port, 0);
            r.s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            r.open_channel(1);
            for _ in 0..40 {
                let kind = [1u8, 2, 3, 8, 1, 1][rng.gen_range(0..6)];
                let channel = rng.gen_range(0..3u16);
                let mut payload = BytesMut::new();
                if kind == 1 && rng.gen_bool(0.7) {
                    // a plausible method header with random arguments
                    payload.put_u16([10u16, 20, 40, 50, 60, 85, 90][rng.gen_range(0..7)]);
                    payload.put_u16(rng.gen_range(0..130));
                }
                let n = rng.gen_range(0..64);
                for _ in 0..n {
                    payload.put_u8(rng.gen());
                }
                let mut f = BytesMut::new();
                f.put_u8(kind);
                f.put_u16(channel);
                f.put_u32(payload.len() as u32);
                f.put_slice(&payload);
                f.put_u8(FRAME_END);
                if r.s.write_all(&f).is_err() {
                    break; // the broker hung up on us: fine
                }
            }
            // Drain whatever came back until the broker closes or goes quiet.
            let mut sink = [0u8; 4096];
            while let Ok(n) = r.s.read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
    })
    .await;
    still_serving(&b).await;
}

#[tokio::test]
async fn amqplain_login_and_prefetch_size_not_implemented() {
    let b = Broker::start().await;
    let port = b.port;
    let text = blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        r.method();
        // AMQPLAIN: a field table's entries without the table's length.
        let mut t = FieldTable::new();
        t.insert("LOGIN", "guest".into());
        t.insert("PASSWORD", "guest".into());
        let mut enc = BytesMut::new();
        t.encode(&mut enc);
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "AMQPLAIN".into(),
                response: enc.freeze().slice(4..),
                locale: "en_US".into(),
            },
        );
        assert!(matches!(r.method(), Method::ConnectionTune(_)));
        r.send_method(
            0,
            ConnectionTuneOk {
                channel_max: 10,
                frame_max: 8192,
                heartbeat: 0,
            },
        );
        r.send_method(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
                ..Default::default()
            },
        );
        assert!(matches!(r.method(), Method::ConnectionOpenOk(_)));
        r.open_channel(1);
        r.send_method(
            1,
            BasicQos {
                prefetch_size: 1000,
                prefetch_count: 0,
                global: false,
            },
        );
        r.expect_connection_close(540)
    })
    .await;
    assert_eq!(text, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)");
}

#[tokio::test]
async fn negotiated_frame_max_bounds_frames_both_ways() {
    let b = Broker::start().await;
    let port = b.port;
    blocking(move || {
        let mut r = Raw::connect(port);
        r.send(PROTOCOL_HEADER);
        r.method();
        r.send_method(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            },
        );
        r.method();
        r.send_method(
            0,
            ConnectionTuneOk {
                channel_max: 10,
                frame_max: 4096,
                heartbeat: 0,
            },
        );
        r.send_method(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
                ..Default::default()
            },
        );
        r.method();
        r.open_channel(1);
        // A 10,000-byte message comes back in body frames of at most 4096.
        r.send_method(
            1,
            QueueDeclare {
                queue: "fm".into(),
                ..Default::default()
            },
        );
        r.method();
        let mut f = BytesMut::new();
        write_method(
            &mut f,
            1,
            &BasicPublish {
                routing_key: "fm".into(),
                ..Default::default()
            }
            .into(),
        );
        warren_amqp091::frame::write_content_header(&mut f, 1, 60, 10_000, &Default::default());
        warren_amqp091::frame::write_body(&mut f, 1, &[9u8; 10_000], 4096);
        r.send(&f);
        r.send_method(
            1,
            BasicGet {
                queue: "fm".into(),
                no_ack: true,
                ..Default::default()
            },
        );
        assert!(matches!(r.method(), Method::BasicGetOk(_)));
        let mut body = 0;
        while body < 10_000 {
            let fr = r.frame().unwrap();
            if fr.kind == FrameType::Body {
                assert!(fr.payload.len() + 8 <= 4096);
                body += fr.payload.len();
            }
        }
        // A frame over the negotiated 4096 is a frame error.
        r.send(&[3, 0, 1, 0, 0, 0x10, 0x00]);
        r.expect_connection_close(501);
    })
    .await;
}
