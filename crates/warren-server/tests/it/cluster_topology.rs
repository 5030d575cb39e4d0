//! Exchanges, queues and bindings on a cluster: declared through any node
//! with a real client (lapin) or the HTTP API, they hold on every node
//! once the metadata group has them; a queue lives on the node that
//! declared it and every node lists it there; an exclusive queue is its
//! connection's on every node and goes with it; a node that restarts has
//! the topology again and its transient queues are gone everywhere, as
//! they are as soon as a node is down, so an exclusive queue's name can
//! be declared again elsewhere; `x-queue-leader-locator: balanced` (or a
//! policy's `queue-leader-locator`) spreads new queues over the nodes; a
//! node alone refuses declares within seconds.

use std::time::{Duration, Instant};

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cluster::{free_ports, meta, meta_leader, node_name, start_node, start_three, until_applied};
use crate::common::*;

async fn connect(b: &Broker) -> Connection {
    let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect("connects")
}

/// `/api/queues/%2F/{name}` on `b`: its status and body.
async fn queue_on(b: &Broker, name: &str) -> (StatusCode, Value) {
    b.http(Method::GET, &format!("/api/queues/%2F/{name}"), None)
        .await
}

/// The bindings `b` lists in vhost `/`: (source, destination, key).
async fn bindings(b: &Broker) -> Vec<(String, String, String)> {
    let (_, bs) = b.http(Method::GET, "/api/bindings/%2F", None).await;
    bs.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let f = |k: &str| x[k].as_str().unwrap_or_default().to_string();
            (f("source"), f("destination"), f("routing_key"))
        })
        .collect()
}

/// Wait (at most 10 s) until `check` holds on every node.
macro_rules! until_everywhere {
    ($nodes:expr, $what:expr, |$b:ident| $check:block) => {{
        let deadline = Instant::now() + Duration::from_secs(10);
        for (i, $b) in $nodes.iter().enumerate() {
            while !$check {
                assert!(Instant::now() < deadline, "node {} never saw: {}", i + 1, $what);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }};
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_queues_and_bindings_made_through_any_node_hold_everywhere() {
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    meta_leader(&nodes).await;

    // Node 1: an exchange, a durable queue bound to it, an exclusive queue.
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    let xopts = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch1.exchange_declare("x1".into(), ExchangeKind::Topic, xopts, FieldTable::default()))
        .await
        .unwrap();
    within(ch1.queue_declare("q1".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    within(ch1.queue_bind(
        "q1".into(),
        "x1".into(),
        "a.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let excl = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    within(ch1.queue_declare("ex1".into(), excl, FieldTable::default()))
        .await
        .unwrap();

    // Declare-ok came once a majority had it; this node has applied it,
    // and the others see it as soon as they apply it too: every node lists
    // q1 as living on node 1, with its binding.
    until_everywhere!(&nodes, "q1 on node 1", |b| {
        let (s, q) = queue_on(b, "q1").await;
        s == StatusCode::OK && q["node"] == node_name(0) && q["durable"] == true
    });
    until_everywhere!(&nodes, "x1 bound to q1", |b| {
        bindings(b)
            .await
            .contains(&("x1".into(), "q1".into(), "a.#".into()))
    });
    until_everywhere!(&nodes, "ex1, exclusive", |b| {
        let (s, q) = queue_on(b, "ex1").await;
        s == StatusCode::OK && q["exclusive"] == true
    });

    // Node 3: the queue is there to a passive declare; a redeclare that
    // differs is refused as on one node; the exclusive queue is another
    // connection's.
    let c3 = connect(&nodes[2]).await;
    let ch3 = c3.create_channel().await.unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(ch3.queue_declare("q1".into(), passive, FieldTable::default()))
        .await
        .expect("q1 is on node 3 too");
    let e = within(ch3.queue_declare("q1".into(), QueueDeclareOptions::default(), FieldTable::default()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("PRECONDITION_FAILED"), "{e}");
    let ch3 = c3.create_channel().await.unwrap();
    let e = within(ch3.queue_declare("ex1".into(), excl, FieldTable::default()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("RESOURCE_LOCKED"), "{e}");

    // Node 3 declares its own queue and binds it to node 1's exchange.
    let ch3 = c3.create_channel().await.unwrap();
    within(ch3.queue_declare("q3".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    within(ch3.queue_bind(
        "q3".into(),
        "x1".into(),
        "b.*".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    until_everywhere!(&nodes, "q3 on node 3", |b| {
        let (s, q) = queue_on(b, "q3").await;
        s == StatusCode::OK && q["node"] == node_name(2)
    });

    // Node 1's connection closes: its exclusive queue goes everywhere.
    let _ = c1.close(200, "bye".into()).await;
    until_everywhere!(&nodes, "ex1 gone", |b| {
        queue_on(b, "ex1").await.0 == StatusCode::NOT_FOUND
    });

    // Node 2 deletes node 1's queue and the exchange, over AMQP: gone
    // everywhere, and the binding with them.
    let c2 = connect(&nodes[1]).await;
    let ch2 = c2.create_channel().await.unwrap();
    within(ch2.queue_delete("q1".into(), QueueDeleteOptions::default()))
        .await
        .unwrap();
    within(ch2.exchange_delete("x1".into(), ExchangeDeleteOptions::default()))
        .await
        .unwrap();
    until_everywhere!(&nodes, "q1 and x1 gone", |b| {
        let (sq, _) = queue_on(b, "q1").await;
        let (sx, _) = b.http(Method::GET, "/api/exchanges/%2F/x1", None).await;
        sq == StatusCode::NOT_FOUND
            && sx == StatusCode::NOT_FOUND
            && !bindings(b).await.iter().any(|x| x.0 == "x1")
    });

    // The HTTP API declares through the cluster too, and so does a
    // definitions import: its queues live on the node that took it.
    let (s, _) = nodes[1]
        .http(
            Method::PUT,
            "/api/queues/%2F/via-http",
            Some(json!({"durable": true})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let defs = json!({
        "exchanges": [{"name": "imported-x", "vhost": "/", "type": "direct", "durable": true,
                       "auto_delete": false, "internal": false, "arguments": {}}],
        "queues": [{"name": "imported-q", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}}],
        "bindings": [{"source": "imported-x", "vhost": "/", "destination": "imported-q",
                      "destination_type": "queue", "routing_key": "k", "arguments": {}}]
    });
    let (s, body) = nodes[2].http(Method::POST, "/api/definitions", Some(defs)).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{body}");
    until_everywhere!(&nodes, "via-http on node 2, imported-q on node 3", |b| {
        let (s1, q1) = queue_on(b, "via-http").await;
        let (s2, q2) = queue_on(b, "imported-q").await;
        let bs = bindings(b).await;
        s1 == StatusCode::OK
            && q1["node"] == node_name(1)
            && s2 == StatusCode::OK
            && q2["node"] == node_name(2)
            && bs.contains(&("imported-x".into(), "imported-q".into(), "k".into()))
    });
    let _ = c2.close(200, "bye".into()).await;
    let _ = c3.close(200, "bye".into()).await;
}

/// Names of the queues `b` lists in vhost `/`, sorted.
pub(crate) async fn queue_names(b: &Broker) -> Vec<String> {
    let (_, qs) = b.http(Method::GET, "/api/queues/%2F", None).await;
    let mut v: Vec<String> = qs
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_has_the_topology_and_a_lone_node_refuses_declares() {
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    meta_leader(&nodes).await;

    // Node 1 declares a durable queue; node 2 a transient one.
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("kept".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    let c2 = connect(&nodes[1]).await;
    let ch2 = c2.create_channel().await.unwrap();
    within(ch2.queue_declare(
        "transient".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    drop(ch2);
    let _ = c2.close(200, "bye".into()).await;
    until_everywhere!(&nodes, "both queues", |b| {
        queue_names(b).await == ["kept", "transient"]
    });

    // Node 3 stops; a queue is declared while it is away. It returns with
    // what it had (the queues of other nodes included) and catches up.
    let f = 2;
    let dir = std::mem::replace(&mut nodes[f].data_dir, "/nonexistent/warren-test".into());
    nodes[f].stop().await;
    within(ch1.queue_declare("while-away".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    nodes[f] = start_node("itest", "s3cret", f, &ports, Some(dir)).await;
    until_everywhere!(&nodes, "three queues", |b| {
        queue_names(b).await == ["kept", "transient", "while-away"]
    });

    // Node 2 restarts: its transient queue did not survive, so it goes on
    // every node; the durable queues stay, on node 1.
    let dir = std::mem::replace(&mut nodes[1].data_dir, "/nonexistent/warren-test".into());
    nodes[1].stop().await;
    nodes[1] = start_node("itest", "s3cret", 1, &ports, Some(dir)).await;
    until_everywhere!(&nodes, "the transient queue gone", |b| {
        queue_names(b).await == ["kept", "while-away"]
    });
    for b in &nodes {
        let (_, q) = queue_on(b, "kept").await;
        assert_eq!(q["node"], node_name(0));
    }
    let _ = c1.close(200, "bye".into()).await;

    // Alone, a node refuses a declare within seconds (its connection is
    // closed with an internal error, as RabbitMQ 4 answers without a
    // metadata majority) and declares nothing.
    let l = meta_leader(&nodes).await;
    let (a, b) = ((l + 1) % 3, (l + 2) % 3);
    let last = meta(&nodes[l]).applied_index();
    until_applied(&nodes[l], last).await;
    nodes[a].stop().await;
    nodes[b].stop().await;
    let c = connect(&nodes[l]).await;
    let ch = c.create_channel().await.unwrap();
    let t0 = Instant::now();
    let e = tokio::time::timeout(
        Duration::from_secs(15),
        ch.queue_declare("lonely".into(), durable(), FieldTable::default()),
    )
    .await
    .expect("answered, not hung")
    .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert!(e.to_string().contains("INTERNAL_ERROR"), "{e}");
    assert_eq!(queue_on(&nodes[l], "lonely").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_nodes_transient_and_exclusive_queues_go_and_can_be_declared_elsewhere() {
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    meta_leader(&nodes).await;
    let c3 = connect(&nodes[2]).await;
    let ch3 = c3.create_channel().await.unwrap();
    within(ch3.queue_declare("d3".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    within(ch3.queue_declare("t3".into(), QueueDeclareOptions::default(), FieldTable::default()))
        .await
        .unwrap();
    let excl = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    within(ch3.queue_declare("x3".into(), excl, FieldTable::default()))
        .await
        .unwrap();
    until_everywhere!(&nodes, "node 3's queues", |b| {
        queue_names(b).await == ["d3", "t3", "x3"]
    });

    // Node 3 goes down (its client with it): the others drop its transient
    // and exclusive queues and keep the durable one.
    let dir = std::mem::replace(&mut nodes[2].data_dir, "/nonexistent/warren-test".into());
    nodes[2].stop().await;
    drop(ch3);
    drop(c3);
    let others = &nodes[..2];
    let deadline = Instant::now() + Duration::from_secs(15);
    for (i, b) in others.iter().enumerate() {
        while queue_names(b).await != ["d3"] {
            assert!(
                Instant::now() < deadline,
                "node {}: {:?}",
                i + 1,
                queue_names(b).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Its client reconnects to node 1 and declares its exclusive queue
    // again.
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("x3".into(), excl, FieldTable::default()))
        .await
        .expect("the name is free again");

    // Node 3 returns to the same view: the new x3 lives on node 1.
    nodes[2] = start_node("itest", "s3cret", 2, &ports, Some(dir)).await;
    until_everywhere!(&nodes, "d3 and the new x3", |b| {
        queue_names(b).await == ["d3", "x3"]
    });
    for b in &nodes {
        assert_eq!(queue_on(b, "x3").await.1["node"], node_name(0));
        assert_eq!(queue_on(b, "d3").await.1["node"], node_name(2));
    }
    let _ = c1.close(200, "bye".into()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_queues_spread_over_the_nodes_and_client_local_ones_stay() {
    use lapin::types::AMQPValue;
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    meta_leader(&nodes).await;
    let c = connect(&nodes[0]).await;
    let ch = c.create_channel().await.unwrap();
    let balanced = table(&[("x-queue-leader-locator", s("balanced"))]);
    for i in 0..6 {
        within(ch.queue_declare(format!("b{i}").as_str().into(), durable(), balanced.clone()))
            .await
            .unwrap();
    }
    // 3.x's name for it, and a policy's key, do the same.
    let min_masters = table(&[("x-queue-master-locator", s("min-masters"))]);
    within(ch.queue_declare("m0".into(), durable(), min_masters))
        .await
        .unwrap();
    let policy =
        json!({"pattern": "^p\\.", "definition": {"queue-leader-locator": "balanced"}, "apply-to": "queues"});
    let (st, body) = nodes[1]
        .http(Method::PUT, "/api/policies/%2F/spread", Some(policy))
        .await;
    assert!(st.is_success(), "{st} {body}");
    // Set through node 2, the policy reaches node 1 (where the queues
    // are declared) when the metadata group's commit does: a declare
    // before that is placed client-local.
    until_everywhere!(&nodes, "the policy", |b| {
        b.http(Method::GET, "/api/policies/%2F/spread", None)
            .await
            .0
            .is_success()
    });
    for i in 0..2 {
        within(ch.queue_declare(format!("p.{i}").as_str().into(), durable(), FieldTable::default()))
            .await
            .unwrap();
    }
    // Client-local (the default) and exclusive queues stay on node 1.
    within(ch.queue_declare("local".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    let excl = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    within(ch.queue_declare("mine".into(), excl, balanced.clone()))
        .await
        .unwrap();
    let (_, qs) = nodes[2].http(Method::GET, "/api/queues/%2F", None).await;
    let mut per_node = std::collections::BTreeMap::<String, Vec<String>>::new();
    for q in qs.as_array().unwrap() {
        per_node
            .entry(q["node"].as_str().unwrap().to_string())
            .or_default()
            .push(q["name"].as_str().unwrap().to_string());
    }
    let node1 = &per_node[&node_name(0)];
    assert!(
        node1.contains(&"local".into()) && node1.contains(&"mine".into()),
        "{per_node:?}"
    );
    // 9 balanced queues: 3 on each node.
    for i in 0..3 {
        let balanced_here = per_node[&node_name(i)]
            .iter()
            .filter(|n| n.starts_with('b') || n.starts_with("m0") || n.starts_with("p."))
            .count();
        assert_eq!(balanced_here, 3, "node {}: {per_node:?}", i + 1);
    }
    // A queue placed elsewhere works through the node that declared it.
    let far = per_node[&node_name(1)][0].clone();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    within(ch.basic_publish(
        "".into(),
        far.as_str().into(),
        BasicPublishOptions::default(),
        b"to node 2",
        lapin::BasicProperties::default(),
    ))
    .await
    .unwrap()
    .await
    .unwrap();
    let got = within(ch.basic_get(far.as_str().into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("the message");
    assert_eq!(got.delivery.data, b"to node 2");
    // A locator RabbitMQ does not know is refused.
    let bad = table(&[("x-queue-leader-locator", AMQPValue::LongString("nearest".into()))]);
    let e = within(ch.queue_declare("bad".into(), durable(), bad))
        .await
        .unwrap_err();
    assert_eq!(amqp_error(&e).0, 406, "{e}");
    let _ = c.close(200, "bye".into()).await;
}

/// A client that declares exclusive queues and hangs up before the
/// cluster has agreed on them leaves none behind: the connection's end
/// and the change's apply may come in either order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queues_of_a_connection_that_hung_up_mid_declare_go() {
    use warren_amqp091::methods::QueueDeclare;
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    let leader = meta_leader(&nodes).await;
    crate::cluster::all_linked(&nodes).await;
    // Through a follower: its proposal goes to the leader and back.
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let port = nodes[follower].port;
    tokio::task::spawn_blocking(move || {
        for round in 0..20u64 {
            let mut r = crate::raw::Raw::handshake(port, 0);
            r.open_channel(1);
            r.send_method(
                1,
                QueueDeclare {
                    queue: format!("hung-up-{round}").as_str().into(),
                    exclusive: true,
                    ..Default::default()
                },
            );
            // Gone, its answer unread, some time (0 to 4 ms) into the
            // cluster's agreeing on it.
            std::thread::sleep(Duration::from_micros(200 * round));
        }
    })
    .await
    .unwrap();
    // Every declare that will commit has by then, everywhere.
    tokio::time::sleep(Duration::from_secs(1)).await;
    crate::cluster::in_step(&nodes).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut left = Vec::new();
        for b in &nodes {
            left.extend(queue_names(b).await);
        }
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
