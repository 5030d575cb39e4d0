//! The stream client against an in-process Warren and, when
//! tests/client/rabbitmq.sh runs them, the RabbitMQ 3.10 anchor: streams
//! created and deleted, confirmed publishing, reading from each offset
//! specification, named producers' sequences and deduplication, and the
//! broker's refusals as typed errors.

mod support;

use futures_util::StreamExt;
use support::{stream_brokers, unique, within};
use warren_client::stream::{
    Compression, Consumer, Environment, Error, Message, OffsetSpecification, ResponseCode, StreamOptions,
    Tracking,
};

/// The next `n` deliveries: (offset, body).
async fn read(consumer: &mut Consumer, n: usize) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let d = within(consumer.next())
            .await
            .expect("the stream goes on")
            .expect("a delivery");
        got.push((d.offset(), d.body().unwrap().to_vec()));
    }
    got
}

#[tokio::test]
async fn published_messages_are_confirmed_and_read_back_in_order() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-order");
        within(env.create_stream(&s, &StreamOptions::default().max_length_bytes(100_000_000)))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        let confirms = within(producer.send_batch((0..1000).map(|i| Message::new(format!("m{i}")))))
            .await
            .unwrap();
        for m in 1000..1050 {
            let c =
                within(producer.send(Message::new(format!("m{m}")).application_property("n", m.to_string())))
                    .await
                    .unwrap();
            assert!(within(c).await.unwrap().is_confirmed(), "{uri}");
        }
        for c in confirms {
            assert!(within(c).await.unwrap().is_confirmed(), "{uri}");
        }
        assert_eq!(producer.unconfirmed(), 0);

        let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let got = read(&mut consumer, 1050).await;
        for (i, (offset, body)) in got.iter().enumerate() {
            assert_eq!(*offset, i as u64, "{uri}");
            assert_eq!(body, format!("m{i}").as_bytes(), "{uri}");
        }
        within(consumer.close()).await.unwrap();
        let mut last = within(env.consumer().offset(OffsetSpecification::Offset(1040)).build(&s))
            .await
            .unwrap();
        let d = within(last.next()).await.unwrap().unwrap();
        assert_eq!(d.offset(), 1040, "{uri}: Offset(n) starts at n exactly");
        assert_eq!(
            d.application_properties().unwrap(),
            vec![("n".to_string(), "1040".to_string())]
        );
        within(producer.close()).await.unwrap();
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn a_consumer_at_next_sees_only_what_comes_after_it() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-next");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        for c in within(producer.send_batch((0..10).map(|i| Message::new(format!("old{i}")))))
            .await
            .unwrap()
        {
            within(c).await.unwrap();
        }
        let mut consumer = within(env.consumer().offset(OffsetSpecification::Next).build(&s))
            .await
            .unwrap();
        let c = within(producer.send(Message::new("new"))).await.unwrap();
        within(c).await.unwrap();
        let got = read(&mut consumer, 1).await;
        assert_eq!(got, vec![(10, b"new".to_vec())], "{uri}");
        drop(consumer);
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn a_named_producer_carries_on_its_sequence_and_repeats_are_not_stored() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-dedup");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let first = within(env.producer().name("writer").build(&s)).await.unwrap();
        assert_eq!(first.next_publishing_id(), 1, "{uri}: nothing stored yet");
        for c in within(first.send_batch((1..=10).map(|i| Message::new(format!("m{i}")))))
            .await
            .unwrap()
        {
            assert!(within(c).await.unwrap().is_confirmed());
        }
        within(first.close()).await.unwrap();

        let again = within(env.producer().name("writer").build(&s)).await.unwrap();
        assert_eq!(again.next_publishing_id(), 11, "{uri}: the broker's sequence");
        // A message sent again after a failure: confirmed, not stored.
        let repeat = within(again.send(Message::new("m5").publishing_id(5)))
            .await
            .unwrap();
        within(repeat).await.unwrap();
        let fresh = within(again.send(Message::new("m11"))).await.unwrap();
        assert!(within(fresh).await.unwrap().is_confirmed());

        let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let got = read(&mut consumer, 11).await;
        let bodies: Vec<Vec<u8>> = got.into_iter().map(|(_, b)| b).collect();
        let want: Vec<Vec<u8>> = (1..=11).map(|i| format!("m{i}").into_bytes()).collect();
        assert_eq!(bodies, want, "{uri}");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(500), consumer.next())
                .await
                .is_err(),
            "{uri}: nothing stored twice"
        );
        drop(consumer);
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn the_brokers_refusals_are_errors_to_match_on() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-refusals");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let again = within(env.create_stream(&s, &StreamOptions::default())).await;
        assert!(
            matches!(
                again,
                Err(Error::Refused {
                    code: ResponseCode::StreamAlreadyExists,
                    ..
                })
            ),
            "{uri}: {again:?}"
        );
        let missing = unique("no-such-stream");
        let p = within(env.producer().build(&missing)).await;
        assert!(
            matches!(
                p,
                Err(Error::Refused {
                    code: ResponseCode::StreamDoesNotExist,
                    ..
                })
            ),
            "{uri}: {:?}",
            p.err()
        );
        let c = within(env.consumer().build(&missing)).await;
        assert!(
            matches!(
                c,
                Err(Error::Refused {
                    code: ResponseCode::StreamDoesNotExist,
                    ..
                })
            ),
            "{uri}: {:?}",
            c.err()
        );
        // The connection is fine after refusals.
        within(env.delete_stream(&s)).await.unwrap();
        let bad = uri.replacen("guest:guest", "guest:wrong", 1);
        let refused = within(Environment::connect(&bad)).await;
        assert!(
            matches!(
                refused,
                Err(Error::Refused {
                    code: ResponseCode::AuthenticationFailure,
                    ..
                })
            ),
            "{uri}: {:?}",
            refused.err()
        );
        env.close().await;
    }
}

#[tokio::test]
async fn sub_entry_batches_with_every_codec_read_back_as_their_messages() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-sub-entries");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        let mut want = Vec::new();
        for (k, codec) in codecs.into_iter().enumerate() {
            let producer = within(env.producer().sub_entry_size(10).compression(codec).build(&s))
                .await
                .unwrap();
            // 95: nine whole sub-entries and one of five.
            let bodies: Vec<String> = (0..95)
                .map(|i| format!("{codec:?} message {i} ").repeat(k + 1))
                .collect();
            let confirms = within(producer.send_batch(bodies.iter().map(|b| Message::new(b.clone()))))
                .await
                .unwrap();
            assert_eq!(confirms.len(), 95);
            for c in confirms {
                assert!(within(c).await.unwrap().is_confirmed(), "{uri} {codec:?}");
            }
            want.extend(bodies);
        }
        let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let got = read(&mut consumer, want.len()).await;
        for (i, ((offset, body), w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(*offset, i as u64, "{uri}");
            assert_eq!(body, w.as_bytes(), "{uri}");
        }
        drop(consumer);
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn a_named_consumer_carries_on_after_its_stored_offset() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-tracking");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        for c in within(producer.send_batch((0..100).map(|i| Message::new(format!("m{i}")))))
            .await
            .unwrap()
        {
            within(c).await.unwrap();
        }
        assert_eq!(
            within(env.query_offset("reader", &s)).await.unwrap(),
            None,
            "{uri}"
        );

        // Automatic: every 10 messages, and on close.
        let auto = Tracking::Automatic {
            messages: 10,
            interval: std::time::Duration::from_secs(3600),
        };
        let mut c1 = within(
            env.consumer()
                .name("reader")
                .tracking(auto)
                .offset(OffsetSpecification::First)
                .build(&s),
        )
        .await
        .unwrap();
        let got = read(&mut c1, 25).await;
        assert_eq!(got.last().unwrap().0, 24);
        within(c1.close()).await.unwrap();
        let stored = within(async {
            loop {
                match env.query_offset("reader", &s).await.unwrap() {
                    Some(24) => return 24,
                    _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        assert_eq!(stored, 24, "{uri}");
        let mut c2 = within(
            env.consumer()
                .name("reader")
                .offset(OffsetSpecification::First)
                .build(&s),
        )
        .await
        .unwrap();
        assert_eq!(read(&mut c2, 1).await[0].0, 25, "{uri}: carries on after 24");
        drop(c2);

        // Manual: only what the application stores.
        let c3 = within(
            env.consumer()
                .name("manual")
                .tracking(Tracking::Manual)
                .offset(OffsetSpecification::First)
                .build(&s),
        )
        .await
        .unwrap();
        c3.store_offset(7).unwrap();
        let stored = within(async {
            loop {
                if let Some(o) = env.query_offset("manual", &s).await.unwrap() {
                    return o;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        assert_eq!(stored, 7, "{uri}");
        drop(c3);
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn streams_are_found_through_metadata_or_through_a_load_balancer() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-located");
        assert!(!within(env.stream_exists(&s)).await.unwrap(), "{uri}");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        assert!(within(env.stream_exists(&s)).await.unwrap(), "{uri}");
        // Every connection through the URI's address, kept once it is on
        // the node the stream's metadata names.
        let balanced = within(
            Environment::builder()
                .uri(uri.as_str())
                .load_balancer_mode(true)
                .build(),
        )
        .await
        .unwrap();
        let producer = within(balanced.producer().build(&s)).await.unwrap();
        let c = within(producer.send(Message::new("through the balancer")))
            .await
            .unwrap();
        assert!(within(c).await.unwrap().is_confirmed(), "{uri}");
        let mut consumer = within(balanced.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        assert_eq!(
            read(&mut consumer, 1).await[0].1,
            b"through the balancer",
            "{uri}"
        );
        drop(consumer);
        drop(producer);
        balanced.close().await;
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[derive(Default)]
struct Counts {
    published: std::sync::atomic::AtomicU64,
    confirmed: std::sync::atomic::AtomicU64,
    chunk_records: std::sync::atomic::AtomicU64,
    consumed: std::sync::atomic::AtomicU64,
    lags: std::sync::atomic::AtomicU64,
}

impl warren_client::stream::Metrics for Counts {
    fn published(&self, _: &str, n: u64) {
        self.published.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    fn confirmed(&self, _: &str, n: u64) {
        self.confirmed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    fn chunk(&self, _: &str, n: u64) {
        self.chunk_records
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    fn consumed(&self, _: &str, n: u64) {
        self.consumed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    fn lag(&self, _: &str, _: u64) {
        self.lags.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[tokio::test]
async fn metrics_hooks_count_what_producers_and_consumers_do() {
    use std::sync::atomic::Ordering::Relaxed;
    let (uris, _broker) = stream_brokers().await;
    for (n, uri) in uris.iter().enumerate() {
        let counts = std::sync::Arc::new(Counts::default());
        let env = within(Environment::builder().uri(uri).metrics(counts.clone()).build())
            .await
            .unwrap();
        let s = unique("metrics");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        for c in within(producer.send_batch((0..250).map(|i| Message::new(format!("m{i}")))))
            .await
            .unwrap()
        {
            assert!(within(c).await.unwrap().is_confirmed());
        }
        assert_eq!(counts.published.load(Relaxed), 250, "{uri}");
        assert_eq!(counts.confirmed.load(Relaxed), 250, "{uri}");
        // Starting at offset 100: the chunk holding it is read whole,
        // the messages before 100 are not handed out.
        let mut consumer = within(env.consumer().offset(OffsetSpecification::Offset(100)).build(&s))
            .await
            .unwrap();
        let got = read(&mut consumer, 150).await;
        assert_eq!(got[0].0, 100);
        assert_eq!(counts.consumed.load(Relaxed), 150, "{uri}");
        assert!(counts.chunk_records.load(Relaxed) >= 150, "{uri}");
        // Warren (as RabbitMQ 3.11 and later) says the committed chunk
        // with each chunk; RabbitMQ 3.10 does not.
        assert_eq!(consumer.lag().is_some(), n == 0, "{uri}");
        assert_eq!(counts.lags.load(Relaxed) > 0, n == 0, "{uri}");
        within(consumer.close()).await.unwrap();
        within(producer.close()).await.unwrap();
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn send_all_resolves_once_for_every_message_of_a_batch() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("send-all");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        // More than one frame's worth, and a small in-flight limit the
        // batch must wait on.
        let producer = within(env.producer().max_unconfirmed(300).build(&s))
            .await
            .unwrap();
        let all = within(producer.send_all((0..1000).map(|i| Message::new(format!("m{i}")))))
            .await
            .unwrap();
        let outcome = within(all).await;
        assert!(outcome.all_confirmed(), "{uri}: {outcome:?}");
        assert_eq!(outcome.confirmed, 1000, "{uri}");
        assert_eq!(producer.unconfirmed(), 0);
        let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let got = read(&mut consumer, 1000).await;
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, (o, b))| *o == i as u64 && b == format!("m{i}").as_bytes()));
        within(consumer.close()).await.unwrap();
        within(producer.close()).await.unwrap();
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

#[tokio::test]
async fn with_manual_credit_chunks_come_only_as_credit_is_given() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("manual-credit");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        // Each batch confirmed before the next: a chunk of its own.
        for batch in 0..3 {
            let all = within(producer.send_all((0..50).map(|i| Message::new(format!("b{batch}-{i}")))))
                .await
                .unwrap();
            assert!(within(all).await.all_confirmed());
        }
        let mut consumer = within(
            env.consumer()
                .offset(OffsetSpecification::First)
                .manual_credit(true)
                .initial_credit(1)
                .build(&s),
        )
        .await
        .unwrap();
        // Whatever the chunks, nothing comes past the credit: read until
        // quiet, then give one chunk's credit, until all 150 are read.
        let mut got = Vec::new();
        let mut credits = 0;
        while got.len() < 150 {
            let before = got.len();
            while let Ok(Some(d)) =
                tokio::time::timeout(std::time::Duration::from_millis(700), consumer.next()).await
            {
                got.push(d.unwrap().offset());
            }
            assert!(
                got.len() > before || credits == 0,
                "{uri}: a credit brings a chunk"
            );
            if got.len() < 150 {
                assert!(got.len() > before, "{uri}: the initial credit brings a chunk");
                consumer.credit(1);
                credits += 1;
            }
        }
        assert_eq!(got, (0..150).collect::<Vec<u64>>(), "{uri}");
        assert!(
            credits >= 2,
            "{uri}: three chunks need two credits more at least, {credits} given"
        );
        within(consumer.close()).await.unwrap();
        within(producer.close()).await.unwrap();
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}

/// A message read: its offset, body and application properties.
type Read = (u64, Vec<u8>, Vec<(String, String)>);

/// Up to `n` messages read in place, chunk by chunk, from `consumer`:
/// (offset, body, application properties); a chunk is left part read
/// when `n` is reached.
async fn read_in_place(consumer: &mut Consumer, n: usize) -> Vec<Read> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let mut chunk = within(consumer.next_chunk())
            .await
            .expect("the stream goes on")
            .expect("a chunk");
        while got.len() < n {
            let Some(m) = chunk.next_message() else { break };
            let m = m.expect("a message");
            got.push((
                m.offset(),
                m.body().unwrap().to_vec(),
                m.application_properties().unwrap(),
            ));
        }
    }
    got
}

/// Large chunks (MiBs of Deliver frame) arrive over many reads; the
/// reader grows its buffer to the frame's size once and hands the
/// messages out whole.
#[tokio::test]
async fn large_chunks_read_back_whole() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-large-chunks");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let producer = within(env.producer().build(&s)).await.unwrap();
        let body = |i: usize| {
            let mut b = vec![(i % 251) as u8; 4096];
            b[..8].copy_from_slice(&(i as u64).to_be_bytes());
            b
        };
        let confirm = within(producer.send_all((0..2_000).map(|i| Message::new(body(i)))))
            .await
            .unwrap();
        assert_eq!(within(confirm).await.confirmed, 2_000, "{uri}");
        let mut c = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let got = read(&mut c, 2_000).await;
        for (i, (offset, b)) in got.into_iter().enumerate() {
            assert_eq!(offset, i as u64, "{uri}");
            assert!(b == body(i), "{uri}: message {i} differs");
        }
    }
}

/// Producers of one environment share its connection; what they send in
/// turn, without waiting for confirms, the stream holds in that order
/// (RabbitMQ's reader hands each Publish frame on as it comes).
#[tokio::test]
async fn producers_sharing_a_connection_keep_its_order() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-shared-order");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        let a = within(env.producer().build(&s)).await.unwrap();
        let b = within(env.producer().build(&s)).await.unwrap();
        let mut sent = Vec::new();
        let mut confirms = Vec::new();
        for k in 0..2_000u32 {
            // Runs of one producer, of varying length.
            let p = if (k * 7919) % 5 < 3 { &a } else { &b };
            let batch: Vec<Message> = (0..10).map(|i| Message::new(format!("{k}:{i}"))).collect();
            sent.extend(batch.iter().map(|m| m.body.to_vec()));
            confirms.extend(within(p.send_batch(batch)).await.unwrap());
        }
        for c in confirms {
            assert!(within(c).await.unwrap().is_confirmed(), "{uri}");
        }
        let mut c = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        let stored: Vec<Vec<u8>> = read(&mut c, sent.len())
            .await
            .into_iter()
            .map(|(_, b)| b)
            .collect();
        let first_moved = sent.iter().zip(&stored).position(|(x, y)| x != y);
        assert_eq!(
            first_moved, None,
            "{uri}: the stream's order is not the connection's"
        );
    }
}

#[tokio::test]
async fn chunks_read_in_place_hold_what_deliveries_hold() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();
        let s = unique("stream-in-place");
        within(env.create_stream(&s, &StreamOptions::default()))
            .await
            .unwrap();
        // Plain entries with and without properties, then sub-entry
        // batches, compressed and not.
        let plain = within(env.producer().build(&s)).await.unwrap();
        let mut want = Vec::new();
        let mut confirms = Vec::new();
        for i in 0..300 {
            let mut m = Message::new(vec![b'p'; i % 300]);
            if i % 3 == 0 {
                m = m.application_property("i", i.to_string());
            }
            want.push(m.clone());
            confirms.push(within(plain.send(m)).await.unwrap());
        }
        let mut producers = vec![plain];
        for codec in [Compression::None, Compression::Zstd] {
            let p = within(env.producer().sub_entry_size(7).compression(codec).build(&s))
                .await
                .unwrap();
            let batch: Vec<Message> = (0..50).map(|i| Message::new(format!("{codec:?} {i}"))).collect();
            want.extend(batch.iter().cloned());
            confirms.extend(within(p.send_batch(batch)).await.unwrap());
            producers.push(p);
        }
        for c in confirms {
            assert!(within(c).await.unwrap().is_confirmed(), "{uri}");
        }
        let want: Vec<Read> = want
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u64, m.body.to_vec(), m.application_properties.clone()))
            .collect();

        // In place, as owned deliveries say.
        let mut c = within(env.consumer().offset(OffsetSpecification::First).build(&s))
            .await
            .unwrap();
        assert_eq!(read_in_place(&mut c, want.len()).await, want, "{uri}");
        drop(c);

        // From an offset inside a chunk: the chunk's earlier messages are
        // skipped; ways of reading mixed, a chunk left part read carries
        // on where it stopped.
        let mut c = within(env.consumer().offset(OffsetSpecification::Offset(37)).build(&s))
            .await
            .unwrap();
        let mut got = read_in_place(&mut c, 5).await;
        got.extend(
            read(&mut c, 3)
                .await
                .into_iter()
                .map(|(o, b)| (o, b, want[o as usize].2.clone())),
        );
        got.extend(read_in_place(&mut c, want.len() - 37 - 8).await);
        assert_eq!(got, want[37..].to_vec(), "{uri}");
        drop(c);

        // Messages lent count as handed out: automatic tracking stores
        // the last on close.
        let auto = Tracking::Automatic {
            messages: 10,
            interval: std::time::Duration::from_secs(3600),
        };
        let mut c = within(
            env.consumer()
                .name("in-place")
                .tracking(auto)
                .offset(OffsetSpecification::First)
                .build(&s),
        )
        .await
        .unwrap();
        assert_eq!(read_in_place(&mut c, 25).await.last().unwrap().0, 24);
        within(c.close()).await.unwrap();
        let stored = within(async {
            loop {
                match env.query_offset("in-place", &s).await.unwrap() {
                    Some(o) => return o,
                    None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        assert_eq!(stored, 24, "{uri}");
        within(env.delete_stream(&s)).await.unwrap();
        env.close().await;
    }
}
