//! `join_cluster` (`POST /api/cluster/join`, what warrenctl calls): a node
//! on its own, with its own queue, joins a running three-node cluster by
//! asking a follower; it restarts as the fourth member without its own
//! queue and with the cluster's queues, messages (read through it) and
//! users; the others list and link to it, also after restarts of it and of
//! a node that learnt of it from the log; a node of another cluster, or
//! one clustered already, is refused.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::cluster::{
    all_linked, free_ports, in_step, meta, meta_leader, node_name, start_node, start_node_with, start_three,
};
use crate::cluster_topology::queue_names;
use crate::common::*;

/// Node 4 (`ports[3]`), listing no peers; in `dir` if given.
async fn lone_fourth(ports: &[u16], cluster: &str, dir: Option<PathBuf>) -> Broker {
    start_node_with(cluster, "s3cret", 3, ports, dir, |s| s.peers.clear()).await
}

/// Stop `b` and start it again on its data (node `i` of `ports`).
async fn restart(b: &mut Broker, start: impl AsyncFnOnce(PathBuf) -> Broker) {
    b.stop().await;
    let dir = std::mem::replace(&mut b.data_dir, PathBuf::from("/nonexistent/warren-test"));
    *b = start(dir).await;
}

async fn until<F: AsyncFn() -> bool>(what: &str, f: F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_joins_a_running_cluster_and_stays_a_member() {
    let ports = free_ports(4);
    let mut nodes = start_three(&ports[..3]).await;
    let leader = meta_leader(&nodes).await;
    all_linked(&nodes).await;

    // The cluster's state: a durable queue on node 1 with messages, a user.
    let (c1, ch1) = nodes[0].channel().await;
    ch1.queue_declare(
        "before".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    for i in 0..3 {
        ch1.basic_publish(
            "".into(),
            "before".into(),
            BasicPublishOptions::default(),
            format!("b{i}").as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap();
    }
    let (s, _) = nodes[1]
        .http(
            Method::PUT,
            "/api/users/joiner",
            Some(json!({"password": "j0iner", "tags": ""})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);

    // Node 4 alone, with a queue of its own.
    let mut fourth = lone_fourth(&ports, "itest", None).await;
    let (s, _) = fourth
        .http(
            Method::PUT,
            "/api/queues/%2F/mine",
            Some(json!({"durable": true})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);

    // A node of another cluster (another name) is refused.
    let stranger = start_node_with("other", "s3cret", 3, &free_ports(4), None, |s| s.peers.clear()).await;
    let (s, v) = stranger
        .http(
            Method::POST,
            "/api/cluster/join",
            Some(json!({"node": node_name(0), "address": format!("127.0.0.1:{}", ports[0])})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    drop(stranger);

    // Node 4 asks a follower, which sends it to the leader.
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let (s, v) = fourth
        .http(
            Method::POST,
            "/api/cluster/join",
            Some(json!({
                "node": node_name(follower),
                "address": format!("127.0.0.1:{}", ports[follower]),
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["id"], 4);
    within(fourth.running.as_ref().unwrap().restart_requested()).await;
    restart(&mut fourth, async |dir| {
        lone_fourth(&ports, "itest", Some(dir)).await
    })
    .await;

    // A member now: the metadata group has four voters, every node links
    // to every other, node 4 has the cluster's state and not its own.
    until("four voters on node 1", async || {
        meta(&nodes[0]).voters().len() == 4
    })
    .await;
    nodes.push(fourth);
    all_linked(&nodes).await;
    until("node 4 has the cluster's queues", async || {
        queue_names(&nodes[3]).await == ["before"]
    })
    .await;
    let (s, _) = nodes[3].http(Method::GET, "/api/users/joiner", None).await;
    assert_eq!(s, StatusCode::OK);

    // Its clients use node 1's queue, and what they declare lives on it.
    let (c4, ch4) = nodes[3].channel().await;
    let mut consumer = ch4
        .basic_consume(
            "before".into(),
            "c4".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..3 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("b{i}").as_bytes());
    }
    ch4.queue_declare(
        "from-4".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    in_step(&nodes).await;
    let (_, q) = nodes[0].http(Method::GET, "/api/queues/%2F/from-4", None).await;
    assert_eq!(q["node"], node_name(3));
    let _ = c4.close(200, "bye".into()).await;
    let _ = c1.close(200, "bye".into()).await;

    // Asking again once a member: refused (it is clustered).
    let (s, _) = nodes[3]
        .http(
            Method::POST,
            "/api/cluster/join",
            Some(json!({"node": node_name(0), "address": format!("127.0.0.1:{}", ports[0])})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Node 4 restarts: still a member. Node 1 restarts: it links to node 4
    // from what its log told it (its configuration lists nodes 2 and 3).
    restart(&mut nodes[3], async |dir| {
        lone_fourth(&ports, "itest", Some(dir)).await
    })
    .await;
    restart(&mut nodes[0], async |dir| {
        start_node("itest", "s3cret", 0, &ports[..3], Some(dir)).await
    })
    .await;
    all_linked(&nodes).await;
    assert_eq!(meta(&nodes[0]).voters().len(), 4);
    assert_eq!(queue_names(&nodes[3]).await, ["before", "from-4"]);
}

/// With the metadata log compacted every 20 changes, a joining node's
/// empty log is filled from a snapshot (the leader no longer has the
/// entries from the start), which carries the node table too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_after_compaction_gets_a_snapshot() {
    let ports = free_ports(4);
    let small = |s: &mut warren_node::config::cluster::ClusterSettings| s.snapshot_interval = 20;
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(start_node_with("itest", "s3cret", i, &ports[..3], None, small).await);
    }
    let leader = meta_leader(&nodes).await;
    for i in 0..60 {
        let (s, _) = nodes[i % 3]
            .http(
                Method::PUT,
                &format!("/api/users/u{i}"),
                Some(json!({"password": "pw", "tags": ""})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let fourth = start_node_with("itest", "s3cret", 3, &ports, None, |s| {
        s.peers.clear();
        s.snapshot_interval = 20;
    })
    .await;
    let (s, v) = fourth
        .http(
            Method::POST,
            "/api/cluster/join",
            Some(json!({"node": node_name(leader), "address": format!("127.0.0.1:{}", ports[leader])})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut fourth = fourth;
    within(fourth.running.as_ref().unwrap().restart_requested()).await;
    restart(&mut fourth, async |dir| {
        start_node_with("itest", "s3cret", 3, &ports, Some(dir), |s| {
            s.peers.clear();
            s.snapshot_interval = 20;
        })
        .await
    })
    .await;
    nodes.push(fourth);
    all_linked(&nodes).await;
    until("node 4 has every user", async || {
        let (_, us) = nodes[3].http(Method::GET, "/api/users", None).await;
        us.as_array().map_or(0, |a| a.len()) == 61
    })
    .await;
    assert_eq!(meta(&nodes[3]).voters().len(), 4);
}
