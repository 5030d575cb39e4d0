//! `forget_cluster_node` (`DELETE /api/nodes/{name}`, what warrenctl
//! calls): a running node is refused; a stopped one leaves the metadata
//! group for good, through a follower as well as the leader, with its
//! queues; the others stop listing it, and still do after a restart; if it
//! comes back with its old data it stays out.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::cluster::{
    free_ports, meta, meta_leader, node_name, running, start_node, start_three, until_applied,
};
use crate::cluster_topology::queue_names;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_forgotten_with_its_queues_and_stays_out() {
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    meta_leader(&nodes).await;
    let durable = Some(json!({"durable": true}));
    let (s, _) = nodes[2]
        .http(Method::PUT, "/api/queues/%2F/on-3", durable.clone())
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = nodes[0]
        .http(Method::PUT, "/api/queues/%2F/on-1", durable.clone())
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let last = meta(&nodes[0]).applied_index();
    until_applied(&nodes[2], last).await;

    let forget3 = format!("/api/nodes/{}", node_name(2));
    let (s, body) = nodes[0].http(Method::DELETE, &forget3, None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "a running node is refused: {body}");
    assert!(
        body["reason"].as_str().unwrap_or_default().contains("running"),
        "{body}"
    );
    let (s, _) = nodes[0]
        .http(Method::DELETE, "/api/nodes/warren@nowhere", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let dir3 = std::mem::replace(&mut nodes[2].data_dir, "/nonexistent/warren-test".into());
    nodes[2].stop().await;
    // Through a follower of the two left (forwarded to the leader).
    let deadline = Instant::now() + Duration::from_secs(15);
    let leader = loop {
        let (a, b) = (meta(&nodes[0]).leader(), meta(&nodes[1]).leader());
        if let Some(l) = a.filter(|l| b.as_ref() == Some(l) && *l != node_name(2)) {
            break l;
        }
        assert!(Instant::now() < deadline, "no leader of two");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let follower = if leader == node_name(0) { 1 } else { 0 };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, body) = nodes[follower].http(Method::DELETE, &forget3, None).await;
        if s == StatusCode::NO_CONTENT {
            break;
        }
        // Until both have seen node 3 go down.
        assert!(Instant::now() < deadline, "{s} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for b in &nodes[..2] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listed: Vec<String> = running(b).await.into_iter().map(|(n, _)| n).collect();
            let voters = meta(b).voters();
            if listed.len() == 2 && voters == [node_name(0), node_name(1)] {
                break;
            }
            assert!(Instant::now() < deadline, "{listed:?} {voters:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(queue_names(b).await, ["on-1"]);
    }

    // The two go on, and a restart of node 1 still knows node 3 is gone.
    let (s, _) = nodes[1]
        .http(Method::PUT, "/api/queues/%2F/after", durable.clone())
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let dir1 = std::mem::replace(&mut nodes[0].data_dir, "/nonexistent/warren-test".into());
    nodes[0].stop().await;
    nodes[0] = start_node("itest", "s3cret", 0, &ports, Some(dir1)).await;
    let listed: Vec<String> = running(&nodes[0]).await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(listed, [node_name(0), node_name(1)]);
    assert_eq!(meta(&nodes[0]).voters(), [node_name(0), node_name(1)]);

    // Node 3 returns with its old data: nobody links to it.
    nodes[2] = start_node("itest", "s3cret", 2, &ports, Some(dir3)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for b in &nodes[..2] {
        let listed: Vec<String> = running(b).await.into_iter().map(|(n, _)| n).collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
    }
    let (s, _) = nodes[0].http(Method::PUT, "/api/queues/%2F/still", durable).await;
    assert_eq!(s, StatusCode::CREATED);
    until_applied(&nodes[1], meta(&nodes[0]).applied_index()).await;
    assert_eq!(queue_names(&nodes[1]).await, ["after", "on-1", "still"]);
}
