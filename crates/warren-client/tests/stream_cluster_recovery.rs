//! The stream client's recovery on three `warren` nodes: a replicated
//! stream (a member on each), a named producer and a consumer
//! (`support/stream_load.rs`) while the node leading the stream is
//! killed with SIGKILL and started again. The producer follows the new
//! leader, sending its unconfirmed entries again; the consumer
//! subscribes again on a member; nothing confirmed is lost or stored
//! twice, and the consumer sees every message once, in order.
//!
//! `WARREN_CLIENT_STREAM_CLUSTER_KILLS` sets the number of kills (2 by
//! default).

mod support;

use std::time::{Duration, Instant};

use support::cluster::Cluster;
use support::stream_load::Load;
use warren_client::stream::{Environment, StreamOptions};

/// The node leading `stream`, as any live node's API says.
async fn leader(cluster: &Cluster, alive: &[bool], stream: &str) -> usize {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for n in cluster
            .nodes
            .iter()
            .zip(alive)
            .filter(|(_, a)| **a)
            .map(|(n, _)| n)
        {
            let Ok(r) = http
                .get(format!("http://127.0.0.1:{}/api/queues/%2F/{stream}", n.http))
                .basic_auth("guest", Some("guest"))
                .send()
                .await
            else {
                continue;
            };
            let q: serde_json::Value = r.json().await.unwrap_or_default();
            let node = q["leader"].as_str().and_then(|s| s.strip_prefix("warren@c"));
            if let Some(i) = node.and_then(|s| s.parse::<usize>().ok()).filter(|i| alive[*i]) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no live node leads the stream");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn kills() -> u32 {
    std::env::var("WARREN_CLIENT_STREAM_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_leaders_node_killed_under_the_client_loses_and_doubles_nothing() {
    let dir = std::env::temp_dir().join(format!("warren-client-stream-cluster-{}", std::process::id()));
    let mut cluster = Cluster::start(&dir).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let env = loop {
        match Environment::builder().uris(cluster.stream_uris()).build().await {
            Ok(env) => break env,
            Err(e) => assert!(Instant::now() < deadline, "no node takes stream connections: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Once the cluster agrees on its metadata leader, the declare goes.
    loop {
        match env
            .create_stream("replicated", &StreamOptions::default().initial_cluster_size(3))
            .await
        {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "the stream is not created: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let load = Load::start(&env, "replicated").await;
    let mut alive = [true; 3];
    for round in 0..kills() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let l = leader(&cluster, &alive, "replicated").await;
        cluster.kill9(l);
        alive[l] = false;
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.restart(l).await;
        alive[l] = true;
        eprintln!("round {round}: killed node {l}, {} confirmed", load.confirmed());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (confirmed, stored) = load.finish(&env, "replicated").await;
    eprintln!(
        "stream cluster recovery: {} leader kills, {confirmed} confirmed, {stored} stored, 0 lost, 0 twice",
        kills()
    );
    env.close().await;
}
