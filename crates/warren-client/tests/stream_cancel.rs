//! The stream producer's sends are cancel-safe: a send dropped while it
//! waits (for room in a full outbox, for the producer to recover) gives
//! back the places it took under the in-flight limit, so the limit's
//! whole window stays usable. Against Warren through a proxy that stops
//! passing the client's bytes on.

mod support;

use std::time::Duration;

use support::proxy::Proxy;
use support::{stream_brokers, unique, within};
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
