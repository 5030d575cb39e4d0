//! The metadata log is compacted, and a node that comes back after what it
//! missed was compacted away is sent the leader's state instead: it ends
//! with the same vhosts, users, grants, exchanges, queues and bindings as
//! the others, things deleted while it was away gone, and its own durable
//! queue still holding its messages.

use std::time::{Duration, Instant};

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use reqwest::Method;
use serde_json::{json, Value};
use warren_raft::Record;

use crate::cluster::{free_ports, meta, meta_leader, node_name, start_node_with, until_applied};
use crate::common::*;

const INTERVAL: u64 = 20;

async fn start(me: usize, ports: &[u16], dir: Option<std::path::PathBuf>) -> Broker {
    start_node_with("itest", "s3cret", me, ports, dir, |s| {
        s.snapshot_interval = INTERVAL
    })
    .await
}

/// The names `b` lists at `path` (an API listing), sorted.
async fn names(b: &Broker, path: &str) -> Vec<String> {
    let (_, list) = b.http(Method::GET, path, None).await;
    let mut n: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("{path}: {list}"))
        .iter()
        .map(|x| x["name"].as_str().unwrap_or_default().to_string())
        .collect();
    n.sort();
    n
}

/// (source, destination, routing key) of every binding in `/` from a
/// named exchange.
async fn bindings(b: &Broker) -> Vec<(String, String, String)> {
    let (_, bs) = b.http(Method::GET, "/api/bindings/%2F", None).await;
    let mut v: Vec<_> = bs
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["source"] != "")
        .map(|x| {
            let f = |k: &str| x[k].as_str().unwrap_or_default().to_string();
            (f("source"), f("destination"), f("routing_key"))
        })
        .collect();
    v.sort();
    v
}

async fn ok(b: &Broker, method: Method, path: &str, body: Option<Value>) {
    let (s, body) = b.http(method, path, body).await;
    assert!(s.is_success(), "{path}: {s} {body}");
}

fn wal_records(dir: &std::path::Path) -> Vec<Record> {
    let bytes = std::fs::read(dir.join("raft").join("raft.wal")).unwrap();
    warren_raft::wal::scan(&bytes).unwrap().0
}

/// Node 3 stops once it has applied everything so far (that index is
/// returned, with its data directory), and the other two agree on a
/// leader among themselves.
async fn stop_third(nodes: &mut [Broker]) -> (u64, std::path::PathBuf) {
    let before = meta(&nodes[0]).applied_index();
    until_applied(&nodes[2], before).await;
    let dir3 = std::mem::replace(&mut nodes[2].data_dir, "/nonexistent/warren-test".into());
    nodes[2].stop().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (a, b) = (meta(&nodes[0]).leader(), meta(&nodes[1]).leader());
        if a.is_some() && a == b && a != Some(node_name(2)) {
            break;
        }
        assert!(Instant::now() < deadline, "no leader of two: {a:?} {b:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (before, dir3)
}

/// Node 3 started again on `dir3`: it applies up to `last`, by installing
/// a snapshot (the log it missed was compacted).
async fn back_from_snapshot(ports: &[u16], dir3: std::path::PathBuf, last: u64) -> Broker {
    let node = start(2, ports, Some(dir3)).await;
    until_applied(&node, last).await;
    let installed = wal_records(&node.data_dir)
        .iter()
        .any(|r| matches!(r, Record::Snapshot(0, _)));
    assert!(installed, "node 3 caught up from a snapshot");
    node
}

/// Three nodes with a metadata leader, every pair linked.
async fn start_linked() -> (Vec<u16>, Vec<Broker>) {
    let ports = free_ports(3);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(start(i, &ports, None).await);
    }
    meta_leader(&nodes).await;
    crate::cluster::all_linked(&nodes).await;
    (ports, nodes)
}

/// Enough changes (filler queues) made through node 1 for the log to be
/// compacted while node 3 is away; the index they end at, once node 2
/// has applied it.
async fn compact_without_third(nodes: &[Broker]) -> u64 {
    for i in 0..3 * INTERVAL {
        ok(
            &nodes[0],
            Method::PUT,
            &format!("/api/queues/%2F/f-{i:03}"),
            Some(json!({"durable": true})),
        )
        .await;
    }
    let last = meta(&nodes[0]).applied_index();
    until_applied(&nodes[1], last).await;
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_after_the_log_was_compacted_catches_up_from_a_snapshot() {
    let ports = free_ports(3);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(start(i, &ports, None).await);
    }
    meta_leader(&nodes).await;
    // Before node 3 goes: things that will be deleted while it is away,
    // and a durable queue of its own with messages.
    ok(
        &nodes[0],
        Method::PUT,
        "/api/queues/%2F/gone",
        Some(json!({"durable": true})),
    )
    .await;
    ok(
        &nodes[0],
        Method::PUT,
        "/api/exchanges/%2F/x-gone",
        Some(json!({"type": "fanout"})),
    )
    .await;
    ok(
        &nodes[0],
        Method::PUT,
        "/api/users/olduser",
        Some(json!({"password": "o", "tags": ""})),
    )
    .await;
    let (conn, ch) = nodes[2].channel().await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("on-three".into(), durable, FieldTable::default())
        .await
        .unwrap();
    for i in 0..5 {
        ch.basic_publish(
            "".into(),
            "on-three".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    conn.close(200, "bye".into()).await.unwrap();
    let (before, dir3) = stop_third(&mut nodes).await;
    ok(&nodes[0], Method::DELETE, "/api/queues/%2F/gone", None).await;
    ok(&nodes[1], Method::DELETE, "/api/exchanges/%2F/x-gone", None).await;
    ok(&nodes[0], Method::DELETE, "/api/users/olduser", None).await;
    ok(&nodes[1], Method::PUT, "/api/vhosts/v2", None).await;
    ok(
        &nodes[0],
        Method::PUT,
        "/api/users/newuser",
        Some(json!({"password": "n", "tags": ""})),
    )
    .await;
    let grant = json!({"configure": ".*", "write": ".*", "read": "^r"});
    ok(&nodes[0], Method::PUT, "/api/permissions/v2/newuser", Some(grant)).await;
    ok(
        &nodes[1],
        Method::PUT,
        "/api/exchanges/%2F/x-new",
        Some(json!({"type": "topic"})),
    )
    .await;
    for i in 0..3 * INTERVAL {
        let q = format!("s-{i:03}");
        ok(
            &nodes[(i % 2) as usize],
            Method::PUT,
            &format!("/api/queues/%2F/{q}"),
            Some(json!({"durable": true})),
        )
        .await;
        if i % 10 == 0 {
            let b = json!({"routing_key": format!("k.{i}")});
            ok(
                &nodes[0],
                Method::POST,
                &format!("/api/bindings/%2F/e/x-new/q/{q}"),
                Some(b),
            )
            .await;
        }
    }
    let last = meta(&nodes[0]).applied_index();
    for b in &nodes[..2] {
        until_applied(b, last).await;
        let first = wal_records(&b.data_dir)
            .iter()
            .filter_map(|r| match r {
                Record::Compacted(0, index, _) => Some(*index),
                _ => None,
            })
            .max();
        assert!(
            first.is_some_and(|i| i > before),
            "the log was compacted past {before}: {first:?}"
        );
    }

    nodes[2] = back_from_snapshot(&ports, dir3, last).await;

    let deadline = Instant::now() + Duration::from_secs(10);
    for path in [
        "/api/queues",
        "/api/users",
        "/api/vhosts",
        "/api/exchanges/%2F",
        "/api/permissions",
    ] {
        let want = names(&nodes[0], path).await;
        loop {
            let got = names(&nodes[2], path).await;
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{path} on node 3: {got:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let queues = names(&nodes[2], "/api/queues").await;
    assert!(!queues.contains(&"gone".to_string()));
    assert_eq!(
        queues.iter().filter(|q| q.starts_with("s-")).count(),
        3 * INTERVAL as usize
    );
    let users = names(&nodes[2], "/api/users").await;
    assert!(users.contains(&"newuser".into()) && !users.contains(&"olduser".into()));
    assert!(!names(&nodes[2], "/api/exchanges/%2F")
        .await
        .contains(&"x-gone".into()));
    assert_eq!(bindings(&nodes[2]).await, bindings(&nodes[0]).await);
    assert_eq!(bindings(&nodes[2]).await.len(), 6);
    let (_, p) = nodes[2]
        .http(Method::GET, "/api/permissions/v2/newuser", None)
        .await;
    assert_eq!(p["read"], "^r");

    // Its own queue kept its messages through the install.
    let (conn, ch) = nodes[2].channel().await;
    let q = ch
        .queue_declare(
            "on-three".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 5);
    conn.close(200, "bye".into()).await.unwrap();

    // And it goes on with the others: a change made through it holds
    // everywhere.
    ok(
        &nodes[2],
        Method::PUT,
        "/api/queues/%2F/after",
        Some(json!({"durable": true})),
    )
    .await;
    let last = meta(&nodes[2]).applied_index();
    for b in &nodes {
        until_applied(b, last).await;
        assert!(names(b, "/api/queues").await.contains(&"after".into()));
    }
}

/// Replicated streams across a snapshot: node 3 is away while a new
/// stream is declared and the log is compacted; back, it installs the
/// leader's state, which carries the streams' placements: it holds the
/// new stream as a member (and fills its log from the leader), and keeps
/// its member of the stream it had, with what that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_from_a_snapshot_keeps_and_gains_its_stream_members() {
    use rabbitmq_stream_client::types::OffsetSpecification;
    let (ports, mut nodes) = start_linked().await;
    let stream_body = json!({"durable": true, "arguments": {"x-queue-type": "stream"}});
    ok(
        &nodes[0],
        Method::PUT,
        "/api/queues/%2F/kept",
        Some(stream_body.clone()),
    )
    .await;
    let old: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    crate::stream::publish(&nodes[0].stream_env().await, "kept", old.clone()).await;
    let (_, dir3) = stop_third(&mut nodes).await;
    ok(
        &nodes[0],
        Method::PUT,
        "/api/queues/%2F/gained",
        Some(stream_body),
    )
    .await;
    let new: Vec<String> = (0..50).map(|i| format!("g{i}")).collect();
    crate::stream::publish(&nodes[0].stream_env().await, "gained", new.clone()).await;
    let last = compact_without_third(&nodes).await;

    nodes[2] = back_from_snapshot(&ports, dir3, last).await;
    // Node 3's own members, read through consumers pinned to it.
    for (name, want) in [("kept", &old), ("gained", &new)] {
        let env = rabbitmq_stream_client::Environment::builder()
            .host("127.0.0.1")
            .port(nodes[2].stream_port())
            .load_balancer_mode(true)
            .build()
            .await
            .unwrap();
        let got = crate::stream::consume(&env, name, OffsetSpecification::First, want.len()).await;
        assert_eq!(
            &got.into_iter().map(|(_, b)| b).collect::<Vec<_>>(),
            want,
            "{name}"
        );
        let (_, q) = nodes[2]
            .http(Method::GET, &format!("/api/queues/%2F/{name}"), None)
            .await;
        assert_eq!(q["members"].as_array().map(|m| m.len()), Some(3), "{name}: {q}");
    }
}

/// A quorum queue across a snapshot: node 3 is away while the metadata
/// log is compacted; back, it installs the leader's state, in which the
/// queue is named as the snapshot's taker holds it. Node 3 must stay a
/// member with what its log held: it does not drop its member (a Raft
/// member that forgets what it acknowledged can lose committed messages)
/// and does not turn it into a proxy to another node. Shown by stopping
/// another member afterwards: node 3 and the one left must still confirm
/// publishes and hold every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_from_a_snapshot_keeps_its_quorum_queue_member() {
    use crate::cluster_quorum::{channel, declare_quorum_with, publish_confirmed};
    let (ports, mut nodes) = start_linked().await;
    let (conn, ch) = channel(&nodes[0]).await;
    declare_quorum_with(&ch, "qq", &[]).await;
    publish_confirmed(&ch, "qq", 0, 100).await;
    conn.close(200, "bye".into()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, q) = nodes[2].http(Method::GET, "/api/queues/%2F/qq", None).await;
        if q["messages"] == 100 {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 never held the 100: {q}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, dir3) = stop_third(&mut nodes).await;
    let last = compact_without_third(&nodes).await;
    nodes[2] = back_from_snapshot(&ports, dir3, last).await;
    let q = nodes[2]
        .running
        .as_ref()
        .unwrap()
        .ctx
        .broker
        .vhost("/")
        .and_then(|vh| vh.find_queue(b"qq"))
        .expect("node 3 has qq");
    assert!(q.home.is_none(), "node 3 holds qq as a proxy to {:?}", q.home);

    // Node 1 goes: only nodes 2 and 3 are left of the group.
    nodes[0].stop().await;
    let (conn, ch) = channel(&nodes[2]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut next = 100;
    while next < 150 {
        assert!(Instant::now() < deadline, "nodes 2 and 3 confirmed {next} of 150");
        within(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .unwrap();
        if publish_acked(&ch, "qq", format!("m{next}").as_bytes()).await {
            next += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 150 {
        let got = within(ch.basic_get("qq".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap();
        match got {
            Some(m) => {
                seen.insert(String::from_utf8_lossy(&m.delivery.data).to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 150, "node 3 and node 2 hold {} of 150", seen.len());
    conn.close(200, "bye".into()).await.unwrap();
}
