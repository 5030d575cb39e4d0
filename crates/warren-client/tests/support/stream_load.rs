//! The load under the stream recovery tests: a named producer confirming
//! every message (unique ids, batches of 20) and a consumer reading from
//! the start, then the checker: every confirmed message seen by the
//! consumer once and in order, and stored once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use warren_client::stream::{Environment, Message, OffsetSpecification, Producer};

pub struct Load {
    confirmed: Arc<Mutex<Vec<u64>>>,
    failed: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<(u64, u64)>>>,
    stop: Arc<AtomicBool>,
    publishing: JoinHandle<Producer>,
    consuming: JoinHandle<()>,
}

fn id_of(body: &[u8]) -> u64 {
    u64::from_be_bytes(body[..8].try_into().unwrap())
}

impl Load {
    pub async fn start(env: &Environment, stream: &str) -> Load {
        let confirmed = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let producer = env.producer().name("survivor").build(stream).await.unwrap();
        let publishing = {
            let (confirmed, failed, stop) = (confirmed.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut next = 0u64;
                while !stop.load(Ordering::Relaxed) && next < 10_000_000 {
                    let ids: Vec<u64> = (next..next + 20).collect();
                    next += 20;
                    let messages: Vec<Message> = ids
                        .iter()
                        .map(|i| Message::new(i.to_be_bytes().to_vec()))
                        .collect();
                    let confirms = match producer.send_batch(messages).await {
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
        let mut consumer = env
            .consumer()
            .offset(OffsetSpecification::First)
            .build(stream)
            .await
            .unwrap();
        let consuming = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Some(d) = consumer.next().await {
                    let d = d.expect("the consumer recovers rather than fail");
                    seen.lock().push((d.offset(), id_of(&d.body().unwrap())));
                }
            })
        };
        Load {
            confirmed,
            failed,
            seen,
            stop,
            publishing,
            consuming,
        }
    }

    pub fn confirmed(&self) -> usize {
        self.confirmed.lock().len()
    }

    /// Stop publishing and check; (confirmed, stored).
    pub async fn finish(self, env: &Environment, stream: &str) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let producer = tokio::time::timeout(Duration::from_secs(120), self.publishing)
            .await
            .expect("the publisher finishes")
            .unwrap();
        let confirmed: Vec<u64> = self.confirmed.lock().clone();
        assert!(
            self.failed.lock().is_empty(),
            "confirms failed: {:?}",
            &self.failed.lock()[..]
        );
        assert!(confirmed.len() > 100, "the load never got going");

        // The consumer catches up with every confirmed message.
        let want: HashSet<u64> = confirmed.iter().copied().collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let have: HashSet<u64> = self.seen.lock().iter().map(|(_, id)| *id).collect();
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
        self.consuming.abort();
        let seen = self.seen.lock().clone();
        assert!(
            seen.windows(2).all(|w| w[0].0 < w[1].0),
            "the consumer saw an offset twice or out of order"
        );

        // Read again from the start: every confirmed message, none twice.
        let mut again = env
            .consumer()
            .offset(OffsetSpecification::First)
            .build(stream)
            .await
            .unwrap();
        let last = seen.last().map(|(o, _)| *o).unwrap_or(0);
        let mut ids = Vec::new();
        while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_secs(5), again.next()).await {
            ids.push(id_of(&d.body().unwrap()));
            if d.offset() >= last {
                break;
            }
        }
        let distinct: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "a message stored twice");
        assert!(
            want.is_subset(&distinct),
            "a confirmed message missing from the stream"
        );
        drop(producer);
        (confirmed.len(), ids.len())
    }
}
