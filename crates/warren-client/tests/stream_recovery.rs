//! The stream client's recovery against a `warren` process killed with
//! SIGKILL and started again on the same ports and data directory, under
//! a named producer confirming every message and a consumer reading
//! from the start (`support/stream_load.rs`). Each time both recover by
//! themselves and no confirm fails; at the end the consumer has seen
//! every confirmed message once, in order, and the stream holds none
//! twice (the producer's unconfirmed entries went again under their
//! publishing ids, and the broker deduplicated them).
//!
//! `WARREN_CLIENT_STREAM_KILL_ROUNDS` sets the number of kills (3 by
//! default).

mod support;

use std::time::Duration;

use support::broker::{free_port, BrokerProcess};
use support::stream_load::Load;
use warren_client::stream::{Environment, StreamOptions};

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
    let load = Load::start(&env, "recovering").await;
    for round in 0..rounds() {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        broker.kill9();
        tokio::time::sleep(Duration::from_millis(300)).await;
        broker.restart().await;
        eprintln!("round {round}: {} confirmed", load.confirmed());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (confirmed, stored) = load.finish(&env, "recovering").await;
    eprintln!(
        "stream recovery: {} kills, {confirmed} confirmed, {stored} stored, 0 lost, 0 twice",
        rounds()
    );
    env.close().await;
}
