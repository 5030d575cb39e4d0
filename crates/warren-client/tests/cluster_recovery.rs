//! Recovery in a cluster: the client is given the three nodes'
//! addresses; under a confirming publisher and a consumer on a quorum
//! queue, the node the client is connected to is killed with SIGKILL.
//! The client moves to another node by itself, declares again and
//! consumes again there, and no acked message is lost. The killed node
//! is started again before the next round.
//!
//! `WARREN_CLIENT_CLUSTER_ROUNDS` sets the number of kills (2 by
//! default; `tests/client/recovery-soak.sh` runs more).

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use support::cluster::Cluster;
use warren_client::amqp091::{
    Channel, Confirm, Confirmation, Connection, ConsumeOptions, Event, Events, FieldTable, FieldValue,
    Properties, QueueOptions, RecoveryOptions,
};

const NAME: &str = "cluster-client";

async fn next_event(events: &mut Events, what: &str, limit: Duration, want: impl Fn(&Event) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.next()).await {
            Ok(Some(e)) if want(&e) => return,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the connection ended while waiting for {what}"),
            Err(_) => panic!("no {what} within {limit:?}"),
        }
    }
}

/// Which node the client's connection is on, from a live node's API.
async fn client_node(cluster: &Cluster, alive: &[bool]) -> usize {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for (i, n) in cluster.nodes.iter().enumerate().filter(|(i, _)| alive[*i]) {
            let Ok(r) = http
                .get(format!("http://127.0.0.1:{}/api/connections", n.http))
                .basic_auth("guest", Some("guest"))
                .send()
                .await
            else {
                continue;
            };
            let list: serde_json::Value = r.json().await.unwrap_or_default();
            for c in list.as_array().into_iter().flatten() {
                if c["client_properties"]["connection_name"].as_str() == Some(NAME) {
                    // Listed cluster-wide with its node, or by its own node.
                    let node = c["node"].as_str().and_then(|s| s.strip_prefix("warren@c"));
                    return node.and_then(|s| s.parse().ok()).unwrap_or(i);
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the client's connection is listed nowhere"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Declare the quorum queue once the cluster has a leader to take it.
async fn declare_quorum(ch: &Channel, q: &str) {
    let mut args = FieldTable::new();
    args.insert("x-queue-type", FieldValue::LongStr(Bytes::from_static(b"quorum")));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let options = QueueOptions {
            durable: true,
            arguments: args.clone(),
            ..Default::default()
        };
        match ch.queue_declare(q, options).await {
            Ok(_) => return,
            Err(e) => assert!(Instant::now() < deadline, "{q} not declared: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_killed_under_the_client_loses_nothing_confirmed() {
    let rounds: u32 = std::env::var("WARREN_CLIENT_CLUSTER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let dir = std::env::temp_dir().join(format!("warren-client-cluster-{}", std::process::id()));
    let mut cluster = Cluster::start(&dir).await;
    let uris = cluster.uris();
    let conn = Connection::builder(&uris[0])
        .address(&uris[1])
        .address(&uris[2])
        .name(NAME)
        .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(500)))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();
    // A channel the broker may close while the cluster forms is replaced.
    let q = "client-cluster-q";
    let setup = conn.channel().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let setup = loop {
        match tokio::time::timeout(Duration::from_secs(40), declare_quorum(&setup, q)).await {
            Ok(()) => break setup,
            Err(_) => assert!(Instant::now() < deadline),
        }
    };
    drop(setup);

    let cch = conn.channel().await.unwrap();
    cch.basic_qos(100).await.unwrap();
    let mut consumer = cch.consume(q, ConsumeOptions::default()).await.unwrap();
    let received = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    let rec = received.clone();
    let consuming = tokio::spawn(async move {
        while let Some(d) = consumer.next().await {
            let id: u64 = std::str::from_utf8(&d.body).unwrap().parse().unwrap();
            *rec.lock().entry(id).or_default() += 1;
            let _ = d.ack().await;
        }
    });

    let pch = conn.channel().await.unwrap();
    pch.confirm_select().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let (settle, mut to_settle) = tokio::sync::mpsc::channel::<(u64, Confirm)>(1024);
    let collecting = tokio::spawn(async move {
        let (mut acked, mut reported) = (BTreeSet::new(), 0u64);
        while let Some((id, c)) = to_settle.recv().await {
            match tokio::time::timeout(Duration::from_secs(90), c).await {
                Ok(Ok(Confirmation::Ack)) => {
                    acked.insert(id);
                }
                Ok(Ok(Confirmation::Nack)) => reported += 1,
                Ok(Ok(other)) => panic!("message {id}: {other:?}"),
                Ok(Err(_)) => reported += 1,
                Err(_) => panic!("message {id}: its confirm never resolved"),
            }
        }
        (acked, reported)
    });
    let (stopping, publishes) = (stop.clone(), published.clone());
    let publishing = tokio::spawn(async move {
        let mut id = 0u64;
        while !stopping.load(Ordering::Relaxed) && id < 1_000_000 {
            let props = Properties {
                delivery_mode: Some(2),
                ..Default::default()
            };
            match pch.publish("", q, props, Bytes::from(id.to_string())).await {
                Ok(c) => settle.send((id, c)).await.unwrap(),
                Err(e) => panic!("a publish on a recovering connection waits, it does not fail: {e}"),
            }
            id += 1;
            publishes.store(id, Ordering::Relaxed);
            if id.is_multiple_of(10) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });

    let mut alive = [true; 3];
    for round in 1..=rounds {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let victim = client_node(&cluster, &alive).await;
        cluster.kill9(victim);
        alive[victim] = false;
        next_event(&mut events, "Disconnected", Duration::from_secs(20), |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
        next_event(&mut events, "Recovered", Duration::from_secs(60), |e| {
            matches!(e, Event::Recovered)
        })
        .await;
        let now_on = client_node(&cluster, &alive).await;
        assert_ne!(now_on, victim, "round {round}: still on the killed node");
        // Messages flow again through the new node.
        let before = received.lock().len();
        let deadline = Instant::now() + Duration::from_secs(30);
        while received.lock().len() <= before {
            assert!(
                Instant::now() < deadline,
                "round {round}: nothing consumed after moving to node {now_on} ({} published)",
                published.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        cluster.restart(victim).await;
        alive[victim] = true;
    }

    stop.store(true, Ordering::Relaxed);
    publishing.await.unwrap();
    let (acked, reported) = collecting.await.unwrap();
    let duplicates = support::all_acked_arrive(
        &received,
        &acked,
        Duration::from_secs(60),
        Duration::from_millis(100),
    )
    .await;
    println!(
        "cluster rounds {rounds}: {} acked, {reported} reported unconfirmed, 0 lost, {duplicates} delivered again",
        acked.len()
    );
    assert!(!acked.is_empty());
    consuming.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
}
