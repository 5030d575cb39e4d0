//! The stream client's recovery against a `warren` process killed with
//! SIGKILL and started again on the same ports and data directory, under
//! a named producer confirming every message and a consumer reading
//! from the start. Each time: both recover by themselves, no confirm
//! fails, and at the end the consumer has seen every confirmed message
//! once, in order, and the stream holds none twice (the producer's
//! unconfirmed entries went again under their publishing ids, and the
//! broker deduplicated them).
//!
//! `WARREN_CLIENT_STREAM_KILL_ROUNDS` sets the number of kills (3 by
//! default).

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Mutex;
use support::broker::{free_port, BrokerProcess};
use warren_client::stream::{Environment, Message, OffsetSpecification, StreamOptions};

fn rounds() -> u32 {
    std::env::var("WARREN_CLIENT_STREAM_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_and_a_consumer_recover_from_kill9_and_lose_and_double_nothing() {
    let dir = std::env::temp_dir().join(format!("warren-client-stream-recovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = BrokerProcess::start(free_port(), &dir).await;
    let uri = format!(
        "rabbitmq-stream://guest:guest@127.0.0.1:{}/%2f",
        broker.stream_port
    );
    let env = Environment::connect(&uri).await.unwrap();
    env.create_stream("recovering", &StreamOptions::default())
        .await
        .unwrap();

    let confirmed = Arc::new(Mutex::new(Vec::<u64>::new()));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = env.producer().name("survivor").build("recovering").await.unwrap();
    let publishing = {
        let (confirmed, failed, stop) = (confirmed.clone(), failed.clone(), stop.clone());
        tokio::spawn(async move {
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) && next < 1_000_000 {
                let ids: Vec<u64> = (next..next + 20).collect();
                next += 20;
                let messages: Vec<Message> = ids
                    .iter()
                    .map(|i| Message::new(i.to_be_bytes().to_vec()))
                    .collect();
                let sent = producer.send_batch(messages).await;
                let confirms = match sent {
                    Ok(c) => c,
                    Err(e) => {
                        failed.lock().push(format!("send: {e}"));
                        continue;
                    }
                };
                for (id, c) in ids.iter().zip(confirms) {
                    match tokio::time::timeout(Duration::from_secs(60), c).await {
                        Ok(Ok(s)) if s.is_confirmed() => confirmed.lock().push(*id),
                        other => failed.lock().push(format!("{id}: {other:?}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            producer
        })
    };
    let seen = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let mut consumer = env
        .consumer()
        .offset(OffsetSpecification::First)
        .build("recovering")
        .await
        .unwrap();
    let consuming = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(d) = consumer.next().await {
                let d = d.expect("the consumer recovers rather than fail");
                let body = d.body().unwrap();
                seen.lock()
                    .push((d.offset(), u64::from_be_bytes(body[..8].try_into().unwrap())));
            }
        })
    };

    for round in 0..rounds() {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        broker.kill9();
        tokio::time::sleep(Duration::from_millis(300)).await;
        broker.restart().await;
        eprintln!("round {round}: {} confirmed", confirmed.lock().len());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let producer = tokio::time::timeout(Duration::from_secs(120), publishing)
        .await
        .expect("the publisher finishes")
        .unwrap();
    let confirmed: Vec<u64> = confirmed.lock().clone();
    assert!(
        failed.lock().is_empty(),
        "confirms failed: {:?}",
        &failed.lock()[..]
    );
    assert!(confirmed.len() > 100, "the load never got going");

    // The consumer catches up with every confirmed message.
    let want: HashSet<u64> = confirmed.iter().copied().collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let have: HashSet<u64> = seen.lock().iter().map(|(_, id)| *id).collect();
        if want.is_subset(&have) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer is missing {} confirmed messages",
            want.difference(&have).count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consuming.abort();
    let seen = seen.lock().clone();
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "the consumer saw an offset twice or out of order"
    );

    // Read again from the start: every confirmed message, none twice.
    let mut again = env
        .consumer()
        .offset(OffsetSpecification::First)
        .recovery(false)
        .build("recovering")
        .await
        .unwrap();
    let stored = seen.last().map(|(o, _)| *o).unwrap_or(0);
    let mut ids = Vec::new();
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_secs(2), again.next()).await {
        ids.push(u64::from_be_bytes(d.body().unwrap()[..8].try_into().unwrap()));
        if d.offset() >= stored {
            break;
        }
    }
    let distinct: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "a message stored twice");
    assert!(
        want.is_subset(&distinct),
        "a confirmed message missing from the stream"
    );
    eprintln!(
        "stream recovery: {} kills, {} confirmed, {} stored, 0 lost, 0 twice",
        rounds(),
        confirmed.len(),
        ids.len()
    );
    drop(producer);
    env.close().await;
}
