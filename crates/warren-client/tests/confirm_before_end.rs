//! A broker that confirms a publish and, in the same write, breaks the
//! connection (a frame the client must refuse): the client routes the
//! confirm first, so the publish resolves to `Ack`, not to the error
//! that ended the connection. (Confirms are told once the read is
//! routed; a reader that stops must still tell those it routed.)

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Frame, Method};
use warren_client::amqp091::{Confirmation, Connection, Properties, RecoveryOptions};

const FRAME_MAX: u32 = 131_072;

fn method(channel: u16, m: impl Into<Method>) -> BytesMut {
    let mut b = BytesMut::new();
    write_method(&mut b, channel, &m.into());
    b
}

/// Read frames until a method that `wanted` accepts arrives.
async fn until(s: &mut TcpStream, buf: &mut BytesMut, wanted: impl Fn(&Method) -> bool) {
    loop {
        while let Some(f) = Frame::parse(buf, FRAME_MAX).unwrap() {
            if f.kind == warren_amqp091::FrameType::Method && wanted(&Method::decode(f.payload).unwrap()) {
                return;
            }
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client hung up early");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn broker(listener: TcpListener) {
    let (mut s, _) = listener.accept().await.unwrap();
    let mut header = [0u8; 8];
    s.read_exact(&mut header).await.unwrap();
    let mut buf = BytesMut::new();
    let start = ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: FieldTable::new(),
        mechanisms: Bytes::from_static(b"PLAIN"),
        locales: Bytes::from_static(b"en_US"),
    };
    s.write_all(&method(0, start)).await.unwrap();
    until(&mut s, &mut buf, |m| matches!(m, Method::ConnectionStartOk(_))).await;
    let tune = ConnectionTune {
        channel_max: 16,
        frame_max: FRAME_MAX,
        heartbeat: 0,
    };
    s.write_all(&method(0, tune)).await.unwrap();
    until(&mut s, &mut buf, |m| matches!(m, Method::ConnectionOpen(_))).await;
    s.write_all(&method(0, ConnectionOpenOk::default()))
        .await
        .unwrap();
    until(&mut s, &mut buf, |m| matches!(m, Method::ChannelOpen(_))).await;
    s.write_all(&method(1, ChannelOpenOk::default())).await.unwrap();
    until(&mut s, &mut buf, |m| matches!(m, Method::ConfirmSelect(_))).await;
    s.write_all(&method(1, ConfirmSelectOk {})).await.unwrap();
    until(&mut s, &mut buf, |m| matches!(m, Method::BasicPublish(_))).await;
    // The ack, then a frame of an unknown type, in one write.
    let mut last = method(
        1,
        BasicAck {
            delivery_tag: 1,
            multiple: false,
        },
    );
    last.extend_from_slice(&[9, 0, 1, 0, 0, 0, 0, 0xCE]);
    s.write_all(&last).await.unwrap();
    // Until the client hangs up.
    let mut rest = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(5), s.read(&mut rest)).await {
        if n == 0 {
            break;
        }
    }
}

#[tokio::test]
async fn a_confirm_routed_before_the_connection_breaks_resolves_to_ack() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(broker(listener));
    let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .recovery(RecoveryOptions::disabled())
        .open()
        .await
        .unwrap();
    let ch = conn.channel().await.unwrap();
    ch.confirm_select().await.unwrap();
    let confirm = ch
        .publish("", "q", Properties::default(), Bytes::from_static(b"m"))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), confirm)
        .await
        .expect("the confirm resolves");
    assert_eq!(outcome.unwrap(), Confirmation::Ack);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the client hangs up")
        .unwrap();
}
