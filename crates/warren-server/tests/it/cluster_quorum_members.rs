//! Quorum queue membership on three nodes (issue 17), through the paths
//! warrenctl's add_member, delete_member, transfer_leadership, grow,
//! shrink and rebalance call: a member added on another node gets every
//! message (the queue survives the loss of the node that had them all);
//! a member removed lets its node go, which then reaches the queue
//! through the others; grow and shrink do the same for every queue.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cluster::{in_step, node_name, three_linked};
use crate::cluster_quorum::{channel, connect, declare_quorum_with, publish_confirmed};
use crate::common::*;

/// `name`'s view on `b` once it shows `members` members and a leader.
async fn view_with(b: &Broker, name: &str, members: usize) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = b
            .http(Method::GET, &format!("/api/queues/%2F/{name}"), None)
            .await;
        let n = v["members"].as_array().map_or(0, Vec::len);
        if (n == members && v["leader"].is_string()) || tokio::time::Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn names(v: &Value, field: &str) -> BTreeSet<String> {
    v[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

fn set(nodes: &[usize]) -> BTreeSet<String> {
    nodes.iter().map(|i| node_name(*i)).collect()
}

async fn replicas(b: &Broker, method: Method, queue: &str, verb: &str, node: usize) -> (StatusCode, Value) {
    let path = format!("/api/queues/quorum/%2F/{queue}/replicas/{verb}");
    b.http(method, &path, Some(json!({ "node": node_name(node) })))
        .await
}

/// Every message of `queue` through `b`, consumed with acks until `n`
/// distinct bodies came (retrying while a leader is elected).
async fn drain(b: &Broker, queue: &str, n: usize) -> BTreeSet<String> {
    let mut got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    'retry: while got.len() < n {
        assert!(tokio::time::Instant::now() < deadline, "got {} of {n}", got.len());
        let c = connect(b).await;
        let ch = within(c.create_channel()).await.unwrap();
        let Ok(mut consumer) = within(ch.basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        while got.len() < n {
            match tokio::time::timeout(Duration::from_secs(3), consumer.next()).await {
                Ok(Some(Ok(d))) => {
                    got.insert(String::from_utf8(d.data.clone()).unwrap());
                    within(d.ack(BasicAckOptions::default())).await.unwrap();
                }
                _ => continue 'retry,
            }
        }
    }
    got
}

/// Three nodes and quorum queue "qq" declared through node 1 with one
/// member (there), and a channel on node 1.
async fn one_member_queue() -> (Vec<Broker>, lapin::Connection, lapin::Channel) {
    let (_ports, nodes) = three_linked().await;
    let (c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(
        &ch1,
        "qq",
        &[("x-quorum-initial-group-size", AMQPValue::LongInt(1))],
    )
    .await;
    in_step(&nodes).await;
    (nodes, c1, ch1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_added_on_other_nodes_hold_every_message_and_a_removed_one_lets_go() {
    let (mut nodes, _c1, _ch1) = one_member_queue().await;
    // Every node shows its leader and members, those without a member
    // as the home reports them (as RabbitMQ's API shows them anywhere).
    for b in &nodes {
        let v = view_with(b, "qq", 1).await;
        assert_eq!(names(&v, "members"), set(&[0]), "{v}");
        assert_eq!(v["leader"], node_name(0), "{v}");
        assert_eq!(names(&v, "online"), set(&[0]), "{v}");
    }
    // Published through a node without a member.
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "qq", 0, 50).await;

    // Asked of a node without a member, then of one with.
    let (status, body) = replicas(&nodes[2], Method::POST, "qq", "add", 1).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = replicas(&nodes[1], Method::POST, "qq", "add", 2).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    // A second add of the same node changes nothing (RabbitMQ's is
    // idempotent too).
    let (status, body) = replicas(&nodes[0], Method::POST, "qq", "add", 2).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for b in &nodes {
        let v = view_with(b, "qq", 3).await;
        assert_eq!(names(&v, "members"), set(&[0, 1, 2]), "{v}");
        assert_eq!(v["leader"], node_name(0), "{v}");
    }
    // Published while three members, through the newest.
    let (_c3, ch3) = channel(&nodes[2]).await;
    publish_confirmed(&ch3, "qq", 50, 60).await;

    // The leadership moves where it is asked to.
    let (status, body) = nodes[1]
        .http(
            Method::POST,
            "/api/queues/quorum/%2F/qq/leader",
            Some(json!({"node": node_name(2)})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let v = view_with(&nodes[2], "qq", 3).await;
    assert_eq!(v["leader"], node_name(2), "{v}");

    // The node that had every message from the start stops: the two new
    // members hold them all.
    nodes[0].stop().await;
    let want: BTreeSet<String> = (0..60).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&nodes[1], "qq", 60).await, want);

    // Its member is removed while it is down (a majority is up).
    let (status, body) = replicas(&nodes[1], Method::DELETE, "qq", "delete", 0).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for b in &nodes[1..] {
        let v = view_with(b, "qq", 2).await;
        assert_eq!(names(&v, "members"), set(&[1, 2]), "{v}");
        assert_eq!(names(&v, "online"), set(&[1, 2]), "{v}");
    }
    // Node 1 is no member now: removing it again changes nothing, and a
    // node outside the cluster is refused.
    let (status, body) = replicas(&nodes[2], Method::DELETE, "qq", "delete", 0).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = replicas(&nodes[2], Method::DELETE, "qq", "delete", 7).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["reason"], "Node is not a cluster member", "{body}");
    // Publishing and consuming go on with two members.
    publish_confirmed(&ch3, "qq", 60, 70).await;
    let want: BTreeSet<String> = (60..70).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&nodes[2], "qq", 10).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_from_a_running_node_lets_it_reach_the_queue_through_the_others() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(&ch1, "qq", &[]).await;
    in_step(&nodes).await;
    publish_confirmed(&ch1, "qq", 0, 20).await;
    // The leader's own member goes: it hands the leadership on first.
    let (status, body) = replicas(&nodes[2], Method::DELETE, "qq", "delete", 0).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for b in &nodes {
        let v = view_with(b, "qq", 2).await;
        assert_eq!(names(&v, "members"), set(&[1, 2]), "{v}");
    }
    let v = view_with(&nodes[1], "qq", 2).await;
    assert_ne!(v["leader"], node_name(0), "{v}");
    // Node 1 holds no member now, and still publishes and consumes.
    let (_, v) = nodes[0].http(Method::GET, "/api/queues/%2F/qq", None).await;
    assert_ne!(v["node"], node_name(0), "{v}");
    let (_c, ch) = channel(&nodes[0]).await;
    publish_confirmed(&ch, "qq", 20, 30).await;
    let want: BTreeSet<String> = (0..30).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&nodes[0], "qq", 30).await, want);
    // Grown back: every queue without a member on node 1 gets one.
    let (status, body) = nodes[1]
        .http(
            Method::POST,
            &format!("/api/queues/quorum/replicas/on/{}/grow", node_name(0)),
            Some(json!({"strategy": "all", "vhost_pattern": ".*", "queue_pattern": ".*"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["name"], "qq", "{body}");
    assert_eq!(body[0]["result"], "ok", "{body}");
    assert_eq!(body[0]["size"], 3, "{body}");
    let v = view_with(&nodes[0], "qq", 3).await;
    assert_eq!(names(&v, "members"), set(&[0, 1, 2]), "{v}");
    // Shrunk off node 3.
    let (status, body) = nodes[0]
        .http(
            Method::DELETE,
            &format!("/api/queues/quorum/replicas/on/{}/shrink", node_name(2)),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["result"], "ok", "{body}");
    let v = view_with(&nodes[0], "qq", 2).await;
    assert_eq!(names(&v, "members"), set(&[0, 1]), "{v}");
    // And the queue still serves, through the node that left it.
    let (_c3, ch3) = channel(&nodes[2]).await;
    publish_confirmed(&ch3, "qq", 30, 35).await;
    let want: BTreeSet<String> = (30..35).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&nodes[2], "qq", 5).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_spreads_leaders_and_the_last_member_stays() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    for q in ["r1", "r2", "r3"] {
        declare_quorum_with(&ch1, q, &[]).await;
    }
    in_step(&nodes).await;
    // Declared on node 1: it leads all three (client-local).
    for q in ["r1", "r2", "r3"] {
        assert_eq!(view_with(&nodes[0], q, 3).await["leader"], node_name(0));
    }
    let (status, body) = nodes[2].http(Method::POST, "/api/rebalance/queues", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut leaders = BTreeSet::new();
    for q in ["r1", "r2", "r3"] {
        leaders.insert(
            view_with(&nodes[0], q, 3).await["leader"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(leaders, set(&[0, 1, 2]), "{body}");
    for n in [0, 1, 2] {
        assert_eq!(body[node_name(n)], 1, "{body}");
    }
    // Down to one member; that one cannot go.
    for n in [1, 2] {
        let (status, body) = replicas(&nodes[0], Method::DELETE, "r1", "delete", n).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let v = view_with(&nodes[0], "r1", 1).await;
    assert_eq!(names(&v, "members"), set(&[0]), "{v}");
    let (status, body) = replicas(&nodes[1], Method::DELETE, "r1", "delete", 0).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["reason"].as_str().unwrap().starts_with("last_node"),
        "{body}"
    );
    // Not a quorum queue: refused as RabbitMQ refuses it.
    within(ch1.queue_declare(
        "classic".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    in_step(&nodes).await;
    let (status, body) = replicas(&nodes[0], Method::POST, "classic", "add", 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, _) = replicas(&nodes[0], Method::POST, "missing", "add", 1).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_after_the_log_was_compacted_starts_from_the_leaders_state() {
    let (mut nodes, _c1, ch1) = one_member_queue().await;
    // 12 MB through the log and out again: past the checkpoint's bytes,
    // so the log is compacted and a new member cannot replay it.
    within(ch1.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let big = vec![b'x'; 100_000];
    for _ in 0..120 {
        let c = within(ch1.basic_publish(
            "".into(),
            "qq".into(),
            BasicPublishOptions::default(),
            &big,
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
        assert!(within(c).await.unwrap().is_ack());
    }
    for _ in 0..120 {
        let m = within(ch1.basic_get("qq".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap();
        assert!(m.is_some());
    }
    publish_confirmed(&ch1, "qq", 0, 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in [1, 2] {
        let (status, body) = replicas(&nodes[0], Method::POST, "qq", "add", n).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let v = view_with(&nodes[1], "qq", 3).await;
    assert_eq!(names(&v, "members"), set(&[0, 1, 2]), "{v}");
    // Without the node that had them, the new members serve all ten.
    nodes[0].stop().await;
    let want: BTreeSet<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&nodes[2], "qq", 10).await, want);
}
