//! One consumer: its own environment, reading one stream from the run's
//! offset specification, counting what it gets and each message's
//! latency (its send time is in its first 8 body bytes), a chunk at a
//! time, read in place. Counts go to the shared statistics once per
//! chunk.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warren_client::stream::{Error, OffsetSpecification, Tracking};

use crate::options::{Options, Uri};
use crate::stats::{now_nanos, Stats};

/// How often a waiting consumer looks at the stop signal.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// Room for a chunk's latencies (more grows it).
const BURST: usize = 4096;

pub struct ConsumerSpec {
    pub uri: Uri,
    pub stream: String,
    pub offset: OffsetSpecification,
    pub name: Option<String>,
    pub limit: u64,
}

pub async fn run(
    opts: &Options,
    spec: ConsumerSpec,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<(), Error> {
    let env = super::environment(opts, &spec.uri, "warren-perf consumer").await?;
    let mut builder = env.consumer().offset(spec.offset).check_crc(opts.crc_check);
    if let Some(n) = &spec.name {
        builder = builder.name(n.clone()).tracking(Tracking::default());
    }
    let mut consumer = builder.build(&spec.stream).await?;
    let mut received = 0u64;
    let mut latencies = Vec::with_capacity(BURST);
    while !stop.load(Ordering::Relaxed) && (spec.limit == 0 || received < spec.limit) {
        let mut chunk = match tokio::time::timeout(STOP_CHECK, consumer.next_chunk()).await {
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(c)) => c?,
        };
        // Each message looked at in place as it comes.
        let now = now_nanos();
        latencies.clear();
        let mut burst = 0u64;
        while let Some(m) = chunk.next_message() {
            burst += 1;
            if let Some(ts) = super::sent_at(m?.raw()) {
                latencies.push(now.saturating_sub(ts) / 1000);
            }
        }
        received += burst;
        stats.received.fetch_add(burst, Ordering::Relaxed);
        stats.consumer_latencies(&latencies);
    }
    let _ = consumer.close().await;
    env.close().await;
    Ok(())
}
