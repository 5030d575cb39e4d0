//! Stream filtering through the stream client: producers give messages
//! filter values (Publish version 2), the broker sends a filtering
//! consumer only the chunks whose Bloom filter holds its values, and the
//! post-filter keeps the messages wanted. Against an in-process Warren;
//! against the RabbitMQ 3.10 anchor (no filtering before 3.13, run by
//! tests/client/rabbitmq.sh) both sides are refused before anything is
//! sent.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use support::{stream_brokers, unique, within};
use warren_client::stream::{
    Consumer, Delivery, Environment, Error, Message, OffsetSpecification, StreamOptions,
};

fn region(m: &Message) -> Option<String> {
    m.application_property_value("region").map(str::to_string)
}

/// Every (region, body) a consumer hands out until it is quiet.
async fn drain(consumer: &mut Consumer) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(700), consumer.next()).await {
        let d = d.unwrap();
        let r = d.application_property("region").unwrap().unwrap_or_default();
        got.push((r, String::from_utf8(d.body().unwrap().to_vec()).unwrap()));
    }
    got
}

#[tokio::test]
async fn a_filtering_consumer_gets_the_chunks_of_its_values_and_keeps_what_it_wants() {
    let (uris, _broker) = stream_brokers().await;
    for (n, uri) in uris.iter().enumerate() {
        let warren = n == 0;
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("filter");
        within(env.create_stream(&s, &StreamOptions::default().max_length_bytes(100_000_000)))
            .await
            .unwrap();
        let built = env.producer().filter_value(region).build(&s).await;
        if !warren {
            assert!(
                matches!(built, Err(Error::Misconfigured(_))),
                "{uri}: {:?}",
                built.err()
            );
            let c = env.consumer().filter(["eu"], |_: &Delivery| true).build(&s).await;
            assert!(matches!(c, Err(Error::Misconfigured(_))), "{uri}");
            within(env.delete_stream(&s)).await.unwrap();
            env.close().await;
            continue;
        }
        let producer = built.unwrap();
        // Each batch confirmed before the next: a chunk of its own.
        for (batch, r) in [(0, Some("eu")), (1, Some("us")), (2, Some("eu")), (3, None)] {
            let messages = (0..100).map(|i| {
                let m = Message::new(format!("b{batch}-{i}"));
                match r {
                    Some(r) => m.application_property("region", r),
                    None => m,
                }
            });
            for c in within(producer.send_batch(messages)).await.unwrap() {
                assert!(within(c).await.unwrap().is_confirmed());
            }
        }
        within(producer.close()).await.unwrap();

        // The broker's filter alone (a post-filter that keeps all): the
        // "us" chunk is not sent.
        let mut all_sent = within(
            env.consumer()
                .offset(OffsetSpecification::First)
                .filter(["eu"], |_: &Delivery| true)
                .build(&s),
        )
        .await
        .unwrap();
        let got = drain(&mut all_sent).await;
        assert_eq!(got.len(), 200, "{got:?}");
        assert!(got.iter().all(|(r, _)| r == "eu"));

        // Unfiltered chunks too.
        let mut with_unfiltered = within(
            env.consumer()
                .offset(OffsetSpecification::First)
                .filter(["eu"], |_: &Delivery| true)
                .match_unfiltered(true)
                .build(&s),
        )
        .await
        .unwrap();
        let got = drain(&mut with_unfiltered).await;
        assert_eq!(got.len(), 300);
        assert_eq!(got.iter().filter(|(r, _)| r.is_empty()).count(), 100);

        // The post-filter decides among what the broker sends.
        let mut picky = within(
            env.consumer()
                .offset(OffsetSpecification::First)
                .filter(["eu", "us"], |d: &Delivery| {
                    d.body().is_ok_and(|b| b.ends_with(b"-7"))
                })
                .build(&s),
        )
        .await
        .unwrap();
        let got = drain(&mut picky).await;
        let bodies: Vec<&str> = got.iter().map(|(_, b)| b.as_str()).collect();
        assert_eq!(bodies, vec!["b0-7", "b1-7", "b2-7"]);

        // Filter values do not go with sub-entry batching.
        let both = env
            .producer()
            .filter_value(region)
            .sub_entry_size(10)
            .build(&s)
            .await;
        assert!(matches!(both, Err(Error::Misconfigured(_))));
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}
