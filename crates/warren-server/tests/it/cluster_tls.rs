//! TLS on the inter-node links (`[cluster.tls]`): three nodes whose
//! certificates chain to the cluster's CA link up and are one broker; a
//! node without TLS, or whose certificate another CA signed, never links.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use warren_node::config::cluster::LinkTlsSettings;

use crate::cluster::{
    all_linked, free_ports, meta, meta_leader, node_name, running, start_node_with, until_applied,
};
use crate::common::*;
use crate::pki::{Ca, Pki};

async fn start(me: usize, ports: &[u16], tls: Option<LinkTlsSettings>) -> Broker {
    start_node_with("itest", "s3cret", me, ports, None, |s| s.tls = tls).await
}

fn settings(pki: &Pki, me: usize, ca: Option<&Ca>) -> LinkTlsSettings {
    let pair = pki.node_pair(&format!("node-{me}-{}", ca.is_some()), &node_name(me), ca);
    LinkTlsSettings {
        certfile: pair.cert,
        keyfile: pair.key,
        cacertfile: pki.ca_file.clone(),
    }
}

/// For `secs`, node `b` never sees node 1 running.
async fn never_sees_node_1(b: &Broker, secs: u64) {
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        let seen = running(b).await;
        assert!(
            seen.iter().any(|(n, up)| *n == node_name(0) && !up),
            "node 1 linked: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_link_over_tls_and_a_node_without_the_clusters_ca_stays_out() {
    let pki = Pki::new();
    let ports = free_ports(3);
    let n2 = start(1, &ports, Some(settings(&pki, 1, None))).await;
    let n3 = start(2, &ports, Some(settings(&pki, 2, None))).await;
    for (b, other) in [(&n2, 2), (&n3, 1)] {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !running(b).await.contains(&(node_name(other), true)) {
            assert!(
                std::time::Instant::now() < until,
                "nodes 2 and 3 never linked over TLS"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Node 1 dials the others (its name sorts first): without TLS, their
    // listeners want a TLS handshake.
    let mut n1 = start(0, &ports, None).await;
    never_sees_node_1(&n2, 3).await;
    n1.stop().await;
    // With TLS, but its certificate signed by another CA: it trusts the
    // others' certificates, they refuse its.
    let other = Ca::new("Another cluster's CA");
    let mut n1 = start(0, &ports, Some(settings(&pki, 0, Some(&other)))).await;
    never_sees_node_1(&n2, 3).await;
    never_sees_node_1(&n3, 0).await;
    n1.stop().await;

    // With the cluster's CA: one broker of three.
    let n1 = start(0, &ports, Some(settings(&pki, 0, None))).await;
    let nodes = vec![n1, n2, n3];
    all_linked(&nodes).await;
    meta_leader(&nodes).await;
    let (s, body) = nodes[0]
        .http(
            Method::PUT,
            "/api/queues/%2F/over-tls",
            Some(json!({"durable": true})),
        )
        .await;
    assert!(s.is_success(), "{s} {body}");
    let last = meta(&nodes[0]).applied_index();
    until_applied(&nodes[2], last).await;
    // A message through node 3 to node 1's queue crosses a TLS link.
    let (c3, ch3) = nodes[2].channel().await;
    ch3.confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .unwrap();
    within(ch3.basic_publish(
        "".into(),
        "over-tls".into(),
        lapin::options::BasicPublishOptions::default(),
        b"sealed",
        lapin::BasicProperties::default(),
    ))
    .await
    .unwrap()
    .await
    .unwrap();
    let got = within(ch3.basic_get(
        "over-tls".into(),
        lapin::options::BasicGetOptions { no_ack: true },
    ))
    .await
    .unwrap()
    .expect("the message");
    assert_eq!(got.delivery.data, b"sealed");
    let _ = c3.close(200, "bye".into()).await;
}
