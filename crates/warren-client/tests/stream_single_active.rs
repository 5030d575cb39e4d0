//! Single active consumer through the stream client, against an
//! in-process Warren (RabbitMQ 3.10, the anchor, has no single active
//! consumer: it came with 3.11). One member of a group reads; when it
//! goes the next carries on after the offset stored under the group's
//! name; an application's consumer-update callback decides where a member
//! that became active starts.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use support::{stream_brokers, unique, within};
use warren_client::stream::{
    Consumer, ConsumerUpdate, Environment, Message, OffsetSpecification, StreamOptions,
};

/// The bodies of the next `n` messages a consumer hands out, and the
/// first one's offset.
async fn read(consumer: &mut Consumer, n: usize) -> (Vec<String>, u64) {
    let mut got = Vec::with_capacity(n);
    let mut first = None;
    while got.len() < n {
        let d = within(consumer.next())
            .await
            .expect("the stream goes on")
            .expect("a delivery");
        first.get_or_insert(d.offset());
        got.push(String::from_utf8(d.body().unwrap().to_vec()).unwrap());
    }
    (got, first.unwrap_or(0))
}

/// The bodies `publish` sends, `from..to`.
fn bodies(tag: &str, r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("{tag}{i}")).collect()
}

/// True if the consumer hands out nothing for a while.
async fn quiet(consumer: &mut Consumer) -> bool {
    tokio::time::timeout(Duration::from_millis(700), consumer.next())
        .await
        .is_err()
}

async fn publish(env: &Environment, stream: &str, tag: &str, n: usize) {
    let producer = within(env.producer().build(stream)).await.unwrap();
    let confirms = within(producer.send_batch((0..n).map(|i| Message::new(format!("{tag}{i}")))))
        .await
        .unwrap();
    for c in confirms {
        assert!(within(c).await.unwrap().is_confirmed());
    }
    within(producer.close()).await.unwrap();
}

#[tokio::test]
async fn one_member_reads_and_the_next_carries_on_after_its_stored_offset() {
    let (uris, _broker) = stream_brokers().await;
    let env = within(Environment::connect(&uris[0])).await.unwrap();
    let s = unique("sac");
    within(env.create_stream(&s, &StreamOptions::default()))
        .await
        .unwrap();
    publish(&env, &s, "a", 300).await;

    let member = || {
        env.consumer()
            .name("billing")
            .single_active_consumer(true)
            .offset(OffsetSpecification::First)
    };
    let mut first = within(member().build(&s)).await.unwrap();
    let mut second = within(member().build(&s)).await.unwrap();
    assert_eq!(read(&mut first, 300).await, (bodies("a", 0..300), 0));
    assert!(quiet(&mut second).await, "the second member is not active");

    // Closing stores the last offset handed out (automatic tracking);
    // the second member becomes active and starts just after it. (The
    // stored offset takes an offset of its own in the log, as in
    // RabbitMQ, so the messages after it are at 301 on.)
    within(first.close()).await.unwrap();
    publish(&env, &s, "b", 100).await;
    let (got, _) = read(&mut second, 100).await;
    assert_eq!(
        got,
        bodies("b", 0..100),
        "the second batch, from its first message"
    );
    within(second.close()).await.unwrap();
    within(env.delete_stream(&s)).await.unwrap();
    env.close().await;
}

#[tokio::test]
async fn the_applications_consumer_update_decides_where_an_active_member_starts() {
    let (uris, _broker) = stream_brokers().await;
    let env = within(Environment::connect(&uris[0])).await.unwrap();
    let s = unique("sac-update");
    within(env.create_stream(&s, &StreamOptions::default()))
        .await
        .unwrap();
    publish(&env, &s, "a", 50).await;

    let (told, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let mut consumer = within(
        env.consumer()
            .name("audit")
            .single_active_consumer(true)
            .consumer_update(move |u: ConsumerUpdate| {
                let told = told.clone();
                async move {
                    let stored = u.stored_offset().await.unwrap();
                    let _ = told.send((
                        u.stream().to_string(),
                        u.name().to_string(),
                        u.is_active(),
                        stored,
                    ));
                    OffsetSpecification::Offset(10)
                }
            })
            .build(&s),
    )
    .await
    .unwrap();
    assert_eq!(read(&mut consumer, 40).await, (bodies("a", 10..50), 10));
    let (stream, name, active, stored) = updates.try_recv().expect("the callback ran");
    assert_eq!(
        (stream.as_str(), name.as_str(), active, stored),
        (s.as_str(), "audit", true, None)
    );
    within(consumer.close()).await.unwrap();

    // Not named: refused before anything is sent.
    assert!(env
        .consumer()
        .single_active_consumer(true)
        .build(&s)
        .await
        .is_err());
    within(env.delete_stream(&s)).await.unwrap();
    env.close().await;
}
