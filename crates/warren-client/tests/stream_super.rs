//! Super streams through the stream client, against an in-process Warren
//! (RabbitMQ 3.10, the anchor, has neither super stream commands nor
//! single active consumer): creation and deletion, partitions and
//! routes, stream statistics, hash and key routing, a consumer of every
//! partition, and single active consumers sharing the partitions out as
//! members come.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use support::{stream_brokers, unique, within};
use warren_client::stream::{
    ConsumerUpdate, Environment, Error, Message, OffsetSpecification, ResponseCode, RoutingStrategy,
    StreamOptions, SuperStreamConsumer, SuperStreamSpec,
};

fn keyed(key: &str, body: String) -> Message {
    Message::new(body).application_property("key", key)
}

fn key_of(m: &Message) -> String {
    m.application_property_value("key")
        .unwrap_or_default()
        .to_string()
}

/// Read `n` deliveries: (partition, body).
async fn read(consumer: &mut SuperStreamConsumer, n: usize) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.len() < n {
        let d = within(consumer.next())
            .await
            .expect("the partitions go on")
            .expect("a delivery");
        got.push((
            d.partition().to_string(),
            String::from_utf8(d.body().unwrap().to_vec()).unwrap(),
        ));
    }
    got
}

#[tokio::test]
async fn messages_are_routed_by_hash_and_read_from_every_partition() {
    let (uris, _broker) = stream_brokers().await;
    let env = within(Environment::connect(&uris[0])).await.unwrap();
    let name = unique("super-hash");
    within(env.create_super_stream(&name, &SuperStreamSpec::partitions(3), &StreamOptions::default()))
        .await
        .unwrap();
    let partitions = within(env.partitions(&name)).await.unwrap();
    assert_eq!(partitions, SuperStreamSpec::partitions(3).streams(&name));
    assert_eq!(
        within(env.route("2", &name)).await.unwrap(),
        vec![format!("{name}-2")]
    );
    assert!(within(env.route("nowhere", &name)).await.unwrap().is_empty());
    let stats = within(env.stream_stats(&partitions[0])).await.unwrap();
    assert_eq!(stats.first_offset(), None, "empty");

    let producer = within(env.super_stream_producer(key_of).name("writer").build(&name))
        .await
        .unwrap();
    let mut routed = HashMap::new();
    let mut confirms = Vec::new();
    for i in 0..300 {
        let m = keyed(&format!("customer-{}", i % 40), format!("m{i}"));
        let to = within(producer.route(&m)).await.unwrap();
        assert_eq!(to.len(), 1);
        routed.insert(format!("m{i}"), to[0].clone());
        confirms.push(within(producer.send(m)).await.unwrap());
    }
    for c in confirms {
        assert!(within(c).await.unwrap().is_confirmed());
    }
    within(producer.close()).await.unwrap();

    let mut consumer = within(
        env.super_stream_consumer()
            .offset(OffsetSpecification::First)
            .build(&name),
    )
    .await
    .unwrap();
    let got = read(&mut consumer, 300).await;
    let mut per_partition: HashMap<String, usize> = HashMap::new();
    for (partition, body) in &got {
        assert_eq!(&routed[body], partition, "{body} read where it was routed");
        *per_partition.entry(partition.clone()).or_default() += 1;
    }
    assert_eq!(
        per_partition.len(),
        3,
        "40 keys reach every partition: {per_partition:?}"
    );
    let mut bodies: Vec<&String> = got.iter().map(|(_, b)| b).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 300, "each message once");
    let stats = within(env.stream_stats(&partitions[0])).await.unwrap();
    assert_eq!(stats.first_offset(), Some(0));
    assert!(stats.committed_chunk_id().is_some());
    within(consumer.close()).await.unwrap();

    within(env.delete_super_stream(&name)).await.unwrap();
    match within(env.partitions(&name)).await {
        Err(Error::Refused {
            code: ResponseCode::StreamDoesNotExist,
            ..
        }) => {}
        other => panic!("partitions of a deleted super stream: {other:?}"),
    }
    assert!(!within(env.stream_exists(&partitions[0])).await.unwrap());
    env.close().await;
}

#[tokio::test]
async fn key_routing_sends_to_the_partition_bound_under_the_key() {
    let (uris, _broker) = stream_brokers().await;
    let env = within(Environment::connect(&uris[0])).await.unwrap();
    let name = unique("super-key");
    let spec = SuperStreamSpec::binding_keys(["amer", "emea", "apac"]);
    within(env.create_super_stream(&name, &spec, &StreamOptions::default()))
        .await
        .unwrap();
    let producer = within(
        env.super_stream_producer(key_of)
            .routing(RoutingStrategy::Key)
            .build(&name),
    )
    .await
    .unwrap();
    for (i, region) in ["emea", "apac", "emea", "amer"].iter().enumerate() {
        let c = within(producer.send(keyed(region, format!("{region}-{i}"))))
            .await
            .unwrap();
        assert!(within(c).await.unwrap().is_confirmed());
    }
    match within(producer.send(keyed("mars", "lost".into()))).await {
        Err(Error::NoRoute { routing_key, .. }) => assert_eq!(routing_key, "mars"),
        other => panic!("an unbound key: {other:?}"),
    }
    let mut consumer = within(
        env.super_stream_consumer()
            .offset(OffsetSpecification::First)
            .build(&name),
    )
    .await
    .unwrap();
    let mut got = read(&mut consumer, 4).await;
    got.sort();
    let expected: Vec<(String, String)> = [
        ("amer", "amer-3"),
        ("apac", "apac-1"),
        ("emea", "emea-0"),
        ("emea", "emea-2"),
    ]
    .iter()
    .map(|(p, b)| (format!("{name}-{p}"), b.to_string()))
    .collect();
    assert_eq!(got, expected);
    within(consumer.close()).await.unwrap();
    within(env.delete_super_stream(&name)).await.unwrap();
    env.close().await;
}

/// Read a super stream consumer on a task of its own, passing on
/// (partition, body).
fn forward(mut consumer: SuperStreamConsumer) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let body = String::from_utf8(d.body().unwrap().to_vec()).unwrap();
            if tx.send((d.partition().to_string(), body)).is_err() {
                break;
            }
        }
    });
    rx
}

async fn take(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    n: usize,
) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.len() < n {
        got.push(within(rx.recv()).await.expect("the reader goes on"));
    }
    got
}

#[tokio::test]
async fn single_active_members_share_the_partitions_and_hand_over_where_they_stopped() {
    let (uris, _broker) = stream_brokers().await;
    let env = within(Environment::connect(&uris[0])).await.unwrap();
    let name = unique("super-sac");
    within(env.create_super_stream(&name, &SuperStreamSpec::partitions(3), &StreamOptions::default()))
        .await
        .unwrap();
    let parts = SuperStreamSpec::partitions(3).streams(&name);
    // Ten messages straight to each partition, tagged with the batch.
    let publish = |batch: &'static str| {
        let env = env.clone();
        let parts = parts.clone();
        async move {
            for p in &parts {
                let producer = within(env.producer().build(p)).await.unwrap();
                let confirms =
                    within(producer.send_batch((0..10).map(|i| Message::new(format!("{batch}-{p}-{i}")))))
                        .await
                        .unwrap();
                for c in confirms {
                    assert!(within(c).await.unwrap().is_confirmed());
                }
                within(producer.close()).await.unwrap();
            }
        }
    };
    publish("one").await;

    let member = |activated: Option<tokio::sync::mpsc::UnboundedSender<String>>| {
        env.super_stream_consumer()
            .name("invoicing")
            .single_active_consumer(true)
            .offset(OffsetSpecification::First)
            .consumer_update(move |u: ConsumerUpdate| {
                let activated = activated.clone();
                async move {
                    if let (Some(tx), true) = (activated, u.is_active()) {
                        let _ = tx.send(u.stream().to_string());
                    }
                    match u.stored_offset().await {
                        Ok(Some(o)) => OffsetSpecification::Offset(o + 1),
                        _ => OffsetSpecification::First,
                    }
                }
            })
    };
    // Alone, the first member is active on every partition.
    let mut a = forward(within(member(None).build(&name)).await.unwrap());
    let got = take(&mut a, 30).await;
    assert!(got.iter().all(|(_, b)| b.starts_with("one-")));

    // A second member takes partition 1 (index 1 of two members); the
    // first steps down there, storing where it stopped.
    let (activated, mut on) = tokio::sync::mpsc::unbounded_channel();
    let mut b = forward(within(member(Some(activated)).build(&name)).await.unwrap());
    let became = within(on.recv()).await.unwrap();
    assert_eq!(became, parts[1]);

    publish("two").await;
    let from_a = take(&mut a, 20).await;
    let from_b = take(&mut b, 10).await;
    assert!(
        from_a
            .iter()
            .all(|(p, b)| p != &parts[1] && b.starts_with("two-")),
        "{from_a:?}"
    );
    assert!(
        from_b
            .iter()
            .all(|(p, b)| p == &parts[1] && b.starts_with("two-")),
        "the second member starts after the first one's last: {from_b:?}"
    );
    // Nothing more for either.
    assert!(tokio::time::timeout(Duration::from_millis(500), a.recv())
        .await
        .is_err());
    assert!(tokio::time::timeout(Duration::from_millis(500), b.recv())
        .await
        .is_err());
    within(env.delete_super_stream(&name)).await.unwrap();
    env.close().await;
}
