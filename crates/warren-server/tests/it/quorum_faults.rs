//! The quorum queue fault run (issue 17): three `warren` processes, a
//! quorum queue with every node a member, a publisher (confirms, unique
//! ids, at most 50 in flight) and a consumer (prefetch 100, acks) that
//! reconnect to a live node whenever theirs goes, while a node chosen at
//! random is killed with SIGKILL and started again, paused with SIGSTOP
//! for 3 s, or cut off from the other two for 5 s (every link between a
//! pair of nodes runs through a proxy here, which blackholes: the nodes
//! see only silence). While a node is cut off, a publisher of its own
//! sends to it, and none of its publishes may be confirmed until the
//! partition heals (the minority never confirms). Then the main publisher
//! stops, the consumer drains the queue, and the checker counts: no
//! confirmed message may be lost; duplicates (redeliveries) are counted,
//! not failed.
//!
//! CI runs a short version (3 kill cycles, 1 pause, 2 partitions);
//! `QUORUM_FAULT_KILLS`, `QUORUM_FAULT_PAUSES` and
//! `QUORUM_FAULT_PARTITIONS` make it longer (`tools/quorum-faults.sh`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::Confirmation;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use parking_lot::Mutex;
use rand::Rng;
use reqwest::Client;

use crate::cluster::free_ports;
use crate::cluster_kill::get;
use crate::common::*;
use crate::faults::{declare, env_count, inflict, start_proxied};

/// A connection to any node that answers, trying them from a random one.
async fn connect_any(amqp: &[u16]) -> Option<Connection> {
    let start = rand::thread_rng().gen_range(0..amqp.len());
    for k in 0..amqp.len() {
        let port = amqp[(start + k) % amqp.len()];
        let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
        let c = tokio::time::timeout(
            Duration::from_secs(3),
            Connection::connect(&uri, ConnectionProperties::default()),
        )
        .await;
        if let Ok(Ok(c)) = c {
            return Some(c);
        }
    }
    None
}

#[derive(Default)]
struct Tally {
    confirmed: BTreeSet<u64>,
    nacked: u64,
    /// Acked but returned as unroutable (mandatory): the queue was not
    /// there where the publisher was; not counted as confirmed.
    returned: u64,
    received: HashMap<u64, u32>,
}

/// Publish ids 0, 1, ... until `stop`; confirmed ones go in the tally.
async fn publisher(amqp: Vec<u16>, tally: Arc<Mutex<Tally>>, stop: Arc<AtomicBool>) {
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = connect_any(&amqp).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Ok(Ok(ch)) = tokio::time::timeout(Duration::from_secs(5), c.create_channel()).await else {
            eprintln!("publisher: no channel");
            continue;
        };
        if !matches!(
            tokio::time::timeout(
                Duration::from_secs(5),
                ch.confirm_select(ConfirmSelectOptions::default())
            )
            .await,
            Ok(Ok(_))
        ) {
            eprintln!("publisher: no confirm.select-ok");
            continue;
        }
        'conn: while !stop.load(Ordering::Relaxed) {
            let mut batch = Vec::new();
            for _ in 0..50 {
                let id = next;
                next += 1;
                let p = tokio::time::timeout(
                    Duration::from_secs(5),
                    ch.basic_publish(
                        "".into(),
                        "faults".into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &id.to_be_bytes(),
                        BasicProperties::default().with_delivery_mode(2),
                    ),
                )
                .await;
                match p {
                    Ok(Ok(confirm)) => batch.push((id, confirm)),
                    other => {
                        eprintln!("publisher: publish failed: {other:?}");
                        break 'conn;
                    }
                }
            }
            for (id, confirm) in batch {
                match tokio::time::timeout(Duration::from_secs(10), confirm).await {
                    Ok(Ok(Confirmation::Ack(None))) => {
                        tally.lock().confirmed.insert(id);
                    }
                    Ok(Ok(Confirmation::Ack(Some(_)))) => tally.lock().returned += 1,
                    Ok(Ok(_)) => tally.lock().nacked += 1,
                    // Unanswered: neither confirmed nor counted lost.
                    other => {
                        eprintln!("publisher: id {id} unconfirmed: {other:?}");
                        break 'conn;
                    }
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), c.close(200, "".into())).await;
    }
}

/// Consume and ack until `stop` and nothing has come for 3 s.
async fn consumer(amqp: Vec<u16>, tally: Arc<Mutex<Tally>>, stop: Arc<AtomicBool>) {
    let mut quiet_since = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) && quiet_since.elapsed() > Duration::from_secs(3) {
            return;
        }
        let Some(c) = connect_any(&amqp).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Ok(Ok(ch)) = tokio::time::timeout(Duration::from_secs(5), c.create_channel()).await else {
            continue;
        };
        if !matches!(
            tokio::time::timeout(
                Duration::from_secs(5),
                ch.basic_qos(100, BasicQosOptions::default())
            )
            .await,
            Ok(Ok(_))
        ) {
            continue;
        }
        let Ok(Ok(mut deliveries)) = tokio::time::timeout(
            Duration::from_secs(5),
            ch.basic_consume(
                "faults".into(),
                "checker".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            ),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        loop {
            match tokio::time::timeout(Duration::from_secs(1), deliveries.next()).await {
                Ok(Some(Ok(d))) => {
                    quiet_since = Instant::now();
                    let id = u64::from_be_bytes(d.data[..8].try_into().unwrap());
                    *tally.lock().received.entry(id).or_insert(0) += 1;
                    if !matches!(
                        tokio::time::timeout(Duration::from_secs(5), d.ack(BasicAckOptions::default())).await,
                        Ok(Ok(_))
                    ) {
                        break;
                    }
                }
                // Cancelled, or the connection went: another node.
                Ok(_) => break,
                Err(_) => {
                    if stop.load(Ordering::Relaxed) && quiet_since.elapsed() > Duration::from_secs(3) {
                        let _ = tokio::time::timeout(Duration::from_secs(2), c.close(200, "".into())).await;
                        return;
                    }
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), c.close(200, "".into())).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_and_sigstop_under_load_lose_no_confirmed_message() {
    let kills = env_count("QUORUM_FAULT_KILLS", 3);
    let pauses = env_count("QUORUM_FAULT_PAUSES", 1);
    let partitions = env_count("QUORUM_FAULT_PARTITIONS", 2);
    let dir = temp_dir("qfaults");
    std::fs::create_dir_all(&dir).unwrap();
    let ports = free_ports(9);
    let (cluster, rest) = ports.split_at(3);
    let (http, amqp) = rest.split_at(3);
    let (mut nodes, proxies) = start_proxied(&dir, cluster, http, Some(amqp), |_, _| {}).await;
    let c = Client::new();
    let body = serde_json::json!({"durable": true, "arguments": {"x-queue-type": "quorum"}});
    declare(&c, &nodes[0], "/api/queues/%2F/faults", body).await;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop_publishing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let p = tokio::spawn(publisher(amqp.to_vec(), tally.clone(), stop_publishing.clone()));
    let q = tokio::spawn(consumer(amqp.to_vec(), tally.clone(), stop_consuming.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut minority_confirmed = 0usize;
    for cycle in 0..kills + pauses + partitions {
        let (victim, confirmed) = inflict(cycle, kills, pauses, &mut nodes, &proxies, |v| {
            minority_publishes(amqp[v], Duration::from_millis(3500))
        })
        .await;
        minority_confirmed += confirmed;
        let t = tally.lock();
        eprintln!(
            "cycle {cycle} (node {victim}): {} confirmed, {} nacked, {} received",
            t.confirmed.len(),
            t.nacked,
            t.received.len()
        );
    }
    stop_publishing.store(true, Ordering::Relaxed);
    eprintln!("faults done; {} confirmed so far", tally.lock().confirmed.len());
    within_secs(60, p).await.unwrap();
    eprintln!(
        "publisher stopped; {} received so far",
        tally.lock().received.len()
    );
    // Drain: the consumer stops once the queue has been quiet for 3 s.
    stop_consuming.store(true, Ordering::Relaxed);
    within_secs(120, q).await.unwrap();

    let (_, v) = get(&c, &nodes[0].url("/api/queues/%2F/faults"))
        .await
        .unwrap_or_default();
    let (confirmed, lost) = {
        let t = tally.lock();
        let lost: Vec<u64> = t
            .confirmed
            .iter()
            .copied()
            .filter(|id| !t.received.contains_key(id))
            .collect();
        let duplicates: u32 = t.received.values().map(|n| n - 1).sum();
        eprintln!(
            "quorum faults: {kills} kill -9, {pauses} SIGSTOP, {partitions} partitions: {minority_confirmed} confirmed by a minority, {} confirmed, {} nacked, {} returned, {} received, {} lost, {duplicates} duplicates, {} left in the queue",
            t.confirmed.len(),
            t.nacked,
            t.returned,
            t.received.len(),
            lost.len(),
            v["messages"]
        );
        (t.confirmed.len(), lost)
    };
    if !lost.is_empty() {
        // Where they went: runs of ids lost on the publishing side, or
        // scattered ones the queue dropped; and what each member holds.
        let runs = id_runs(&lost);
        eprintln!(
            "lost ids in {} runs: {:?}",
            runs.len(),
            &runs[..runs.len().min(20)]
        );
        for n in &nodes {
            let (_, v) = get(&c, &n.url("/api/queues/%2F/faults"))
                .await
                .unwrap_or_default();
            eprintln!("{}: {} messages, leader {}", n.name, v["messages"], v["leader"]);
        }
        for n in &nodes {
            // What the nodes said of their queues (not link up and down).
            let text = std::fs::read_to_string(&n.log).unwrap_or_default();
            let said: Vec<&str> = text
                .lines()
                .filter(|l| (l.contains("ERROR") || l.contains("WARN")) && !l.contains("inter-node link"))
                .take(20)
                .collect();
            eprintln!("{} said:\n{}", n.name, said.join("\n"));
        }
        eprintln!("node logs kept in {}", dir.display());
    }
    assert!(confirmed > 100, "the load never got going");
    assert_eq!(minority_confirmed, 0, "a cut-off node confirmed publishes");
    assert!(
        lost.is_empty(),
        "confirmed and lost: {:?}",
        &lost[..lost.len().min(20)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Publish to the node on `port` (cut off from the others) for `time`,
/// with confirms; how many were confirmed within it (0 if the node is
/// alone: a majority never has them).
async fn minority_publishes(port: u16, time: Duration) -> usize {
    let t0 = Instant::now();
    let Some(c) = connect_any(&[port]).await else {
        return 0;
    };
    let Ok(Ok(ch)) = tokio::time::timeout(Duration::from_secs(2), c.create_channel()).await else {
        return 0;
    };
    if !matches!(
        tokio::time::timeout(
            Duration::from_secs(2),
            ch.confirm_select(ConfirmSelectOptions::default())
        )
        .await,
        Ok(Ok(_))
    ) {
        return 0;
    }
    let mut pending = Vec::new();
    for n in 0..20u64 {
        let body = (u64::MAX - n).to_be_bytes();
        if let Ok(Ok(confirm)) = tokio::time::timeout(
            Duration::from_secs(1),
            ch.basic_publish(
                "".into(),
                "faults".into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        {
            pending.push(confirm);
        }
    }
    let mut confirmed = 0;
    for confirm in pending {
        let left = time.saturating_sub(t0.elapsed());
        if let Ok(Ok(c)) = tokio::time::timeout(left, confirm).await {
            if c.is_ack() {
                confirmed += 1;
            }
        }
    }
    // Dropped, not closed: the node may be unreachable for the close.
    drop(c);
    confirmed
}

/// Sorted ids as (first, last) runs of consecutive ones.
fn id_runs(ids: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == id => *last = id,
            _ => runs.push((id, id)),
        }
    }
    runs
}

async fn within_secs<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("timed out")
}
