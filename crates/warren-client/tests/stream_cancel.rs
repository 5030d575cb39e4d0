//! The stream client's calls are cancel-safe. A send dropped while it
//! waits (for room in a full outbox, for the producer to recover) gives
//! back the places it took under the in-flight limit, so the limit's
//! whole window stays usable (against Warren through a proxy that stops
//! passing the client's bytes on). A producer or consumer `build`
//! dropped after its request went leaves nothing on the broker: the
//! publisher is deleted, the subscription ended (against a scripted
//! broker that holds the answer back and tells what it was asked).

mod support;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use support::proxy::Proxy;
use support::scripted_stream::{frame, ok, opening};
use support::{stream_brokers, unique, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use warren_client::stream::{Environment, Message, StreamOptions};

/// Larger than the outbox and the sockets hold of 256 KB messages.
const WINDOW: usize = 200;

#[tokio::test]
async fn a_send_dropped_while_the_outbox_is_full_gives_its_places_back() {
    let (_, warren) = stream_brokers().await;
    let proxy = Proxy::start(warren.stream_addr.unwrap()).await;
    let uri = format!("rabbitmq-stream://guest:guest@127.0.0.1:{}/%2f", proxy.port);
    let env = within(Environment::builder().uri(uri).load_balancer_mode(true).build())
        .await
        .unwrap();
    let s = unique("stream-cancel");
    within(env.create_stream(&s, &StreamOptions::default()))
        .await
        .unwrap();
    let producer = within(env.producer().max_unconfirmed(WINDOW).build(&s))
        .await
        .unwrap();

    // Stop the client's bytes; send until sends wait for room, then drop
    // some of them there.
    proxy.pause(true);
    let body = vec![7u8; 256 * 1024];
    let mut confirms = Vec::new();
    let mut dropped = 0;
    while dropped < 10 && confirms.len() < WINDOW {
        match tokio::time::timeout(
            Duration::from_millis(50),
            producer.send(Message::new(body.clone())),
        )
        .await
        {
            Ok(sent) => confirms.push(sent.unwrap()),
            Err(_) => dropped += 1,
        }
    }
    assert_eq!(dropped, 10, "sends never waited for room");

    // Let the bytes through: what was sent is confirmed, and a whole
    // window's worth goes out again.
    proxy.pause(false);
    for c in confirms {
        assert!(within(c).await.unwrap().is_confirmed());
    }
    let all = tokio::time::timeout(
        Duration::from_secs(10),
        producer.send_all((0..WINDOW).map(|i| Message::new(format!("after {i}")))),
    )
    .await
    .expect("the window's places came back from the dropped sends")
    .unwrap();
    assert!(within(all).await.all_confirmed());
    assert_eq!(producer.unconfirmed(), 0);
    env.close().await;
}

const DECLARE_PUBLISHER: u16 = 0x0001;
const DELETE_PUBLISHER: u16 = 0x0006;
const SUBSCRIBE: u16 = 0x0007;
const UNSUBSCRIBE: u16 = 0x000c;

/// Metadata: stream "s" led by this broker, with no replicas.
fn metadata(id: u32, port: u16) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u32(id);
    b.put_i32(1);
    b.put_u16(0);
    b.put_i16(9);
    b.put_slice(b"127.0.0.1");
    b.put_u32(port as u32);
    b.put_i32(1);
    b.put_i16(1);
    b.put_slice(b"s");
    b.put_u16(1);
    b.put_u16(0);
    b.put_i32(0);
    frame(0x800f, &b)
}

/// A broker that opens connections, answers metadata, never answers a
/// publisher's declaration or a subscription, and tells `asked` of
/// those and of deletions and unsubscriptions: (key, id).
async fn serve(mut s: TcpStream, port: u16, asked: mpsc::UnboundedSender<(u16, u8)>) {
    let empty_map = 0i32.to_be_bytes();
    loop {
        let Ok(size) = s.read_u32().await else { return };
        let mut f = vec![0u8; size as usize];
        if s.read_exact(&mut f).await.is_err() {
            return;
        }
        let key = u16::from_be_bytes([f[0], f[1]]);
        let id = f
            .get(4..8)
            .map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap()));
        if let Some(reply) = opening(key, id) {
            if s.write_all(&reply).await.is_err() {
                return;
            }
            continue;
        }
        let reply = match key {
            0x0015 => ok(key, id, &empty_map),
            0x000f => metadata(id, port),
            DECLARE_PUBLISHER | SUBSCRIBE => {
                let _ = asked.send((key, f[8]));
                continue;
            }
            DELETE_PUBLISHER | UNSUBSCRIBE => {
                let _ = asked.send((key, f[8]));
                ok(key, id, &[])
            }
            0x001b => ok(key, id, &0i32.to_be_bytes()),
            _ => continue,
        };
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_build_dropped_after_its_request_leaves_nothing_on_the_broker() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, mut asked) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, port, tx.clone()));
        }
    });
    let env = within(Environment::connect(&format!(
        "rabbitmq-stream://guest:guest@127.0.0.1:{port}/%2f"
    )))
    .await
    .unwrap();

    // Each build is dropped once the broker has its request.
    for (asked_for, undone) in [(SUBSCRIBE, UNSUBSCRIBE), (DECLARE_PUBLISHER, DELETE_PUBLISHER)] {
        let id = tokio::select! {
            _ = async {
                if asked_for == SUBSCRIBE {
                    let _ = env.consumer().build("s").await;
                } else {
                    let _ = env.producer().build("s").await;
                }
            } => panic!("the broker never answers"),
            got = within(asked.recv()) => {
                let (key, id) = got.unwrap();
                assert_eq!(key, asked_for);
                id
            }
        };
        let then = tokio::time::timeout(Duration::from_secs(5), asked.recv())
            .await
            .expect("the dropped build's request was undone");
        assert_eq!(then, Some((undone, id)));
    }
}
