//! Replicated streams on three nodes (issue 18), with the real
//! rabbitmq-stream-client: a stream declared on a cluster has a member on
//! every node (x-initial-cluster-size's default, as RabbitMQ's), the
//! Metadata names its leader and replicas, a publisher is sent to the
//! leader (or, staying on a replica's node, has its chunks written by
//! the leader), and every member's log holds what was confirmed, read by
//! a consumer on that node.

use std::time::{Duration, Instant};

use rabbitmq_stream_client::types::{Message, OffsetSpecification, ResponseCode};
use rabbitmq_stream_client::{Client, ClientOptions, Environment};

use crate::cluster::*;
use crate::common::*;

async fn client_of(b: &Broker) -> Client {
    within(Client::connect(
        ClientOptions::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    ))
    .await
    .unwrap()
}

/// An environment whose consumers stay on `b` (the client's load-balancer
/// mode compares only the advertised host, the same for every node here).
async fn env_on(b: &Broker) -> Environment {
    within(
        Environment::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .load_balancer_mode(true)
            .build(),
    )
    .await
    .unwrap()
}

/// Wait until node `b`'s Metadata for `stream` lists a leader and
/// `replicas` replicas; returns (leader port, replica ports sorted).
async fn members_seen(b: &Broker, stream: &str, replicas: usize) -> (u32, Vec<u32>) {
    let client = client_of(b).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let md = within(client.metadata(vec![stream.to_string()])).await.unwrap();
        if let Some(m) = md.get(stream) {
            if m.replicas.len() == replicas {
                let mut r: Vec<u32> = m.replicas.iter().map(|b| b.port).collect();
                r.sort();
                return (m.leader.port, r);
            }
        }
        assert!(
            Instant::now() < deadline,
            "metadata of {stream} on {}: {md:?}",
            b.stream_port()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_has_a_member_on_every_node_and_each_serves_what_was_confirmed() {
    let (_, nodes) = three_linked().await;
    let env1 = nodes[0].stream_env().await;
    within(env1.stream_creator().create("rs")).await.unwrap();
    in_step(&nodes).await;

    // Every node's Metadata: node 1 leads, nodes 2 and 3 are replicas.
    let ports: Vec<u32> = nodes.iter().map(|n| n.stream_port() as u32).collect();
    for n in &nodes {
        let (leader, replicas) = members_seen(n, "rs", 2).await;
        assert_eq!(leader, ports[0]);
        assert_eq!(replicas, vec![ports[1].min(ports[2]), ports[1].max(ports[2])]);
    }

    // Through node 3, the client's producer goes to the leader; every
    // message is confirmed (a majority has it).
    let env3 = nodes[2].stream_env().await;
    let mut bodies: Vec<String> = (0..2000).map(|i| format!("r-{i}")).collect();
    crate::stream::publish(&env3, "rs", bodies.clone()).await;
    // A publisher that stays on a replica's node (the client's
    // load-balancer mode) is accepted, as RabbitMQ's is: its chunks go to
    // the leader and are confirmed once committed.
    let on_replica: Vec<String> = (0..300).map(|i| format!("via-2-{i}")).collect();
    crate::stream::publish(&env_on(&nodes[1]).await, "rs", on_replica.clone()).await;
    bodies.extend(on_replica);

    // Each member holds all of it, in order, at the same offsets.
    for (i, n) in nodes.iter().enumerate() {
        let env = env_on(n).await;
        let got = crate::stream::consume(&env, "rs", OffsetSpecification::First, bodies.len()).await;
        let offsets: Vec<u64> = got.iter().map(|(o, _)| *o).collect();
        let texts: Vec<String> = got.into_iter().map(|(_, b)| b).collect();
        assert_eq!(texts, bodies, "node {}", i + 1);
        assert_eq!(
            offsets,
            (0..bodies.len() as u64).collect::<Vec<_>>(),
            "node {}",
            i + 1
        );
    }
}

/// `x-initial-cluster-size` 2: two members, the declaring node leading
/// (client-local); the third node has none and sends clients to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_cluster_size_two_places_two_members_and_the_third_node_sends_clients_there() {
    let (_, nodes) = three_linked().await;
    let c2 = client_of(&nodes[1]).await;
    let options = [("initial-cluster-size".to_string(), "2".to_string())].into();
    let r = within(c2.create_stream("rs2", options)).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    in_step(&nodes).await;
    let (leader, replicas) = members_seen(&nodes[0], "rs2", 1).await;
    assert_eq!(leader, nodes[1].stream_port() as u32);
    assert_eq!(replicas.len(), 1);
    assert_ne!(replicas[0], leader);
    let bodies: Vec<String> = (0..300).map(|i| format!("t-{i}")).collect();
    let env_any = nodes[2].stream_env().await;
    crate::stream::publish(&env_any, "rs2", bodies.clone()).await;
    let got = crate::stream::consume(&env_any, "rs2", OffsetSpecification::First, bodies.len()).await;
    assert_eq!(got.into_iter().map(|(_, b)| b).collect::<Vec<_>>(), bodies);
}

/// Publish `ids` with explicit publishing ids through a producer named
/// `name` (deduplicated); every one must be confirmed.
async fn publish_named(env: &Environment, stream: &str, name: &str, ids: std::ops::Range<u64>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut producer = loop {
        match within(env.producer().name(name).build(stream)).await {
            Ok(p) => break p,
            Err(e) => {
                assert!(Instant::now() < deadline, "no producer for {stream}: {e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let msgs: Vec<Message> = ids
        .clone()
        .map(|i| Message::builder().body(format!("f-{i}")).publishing_id(i).build())
        .collect();
    let confirmed = within(producer.batch_send_with_confirm(msgs)).await.unwrap();
    assert_eq!(confirmed.len(), ids.count());
    assert!(confirmed.iter().all(|c| c.confirmed()), "every message confirmed");
    within(producer.close()).await.unwrap();
}

/// The leader's node stops: the coordinator stops the others in that
/// epoch and the longest log leads the next; a consumer's offset stored
/// before survives it; a producer that comes back
/// with its name publishes what it had sent again plus more, and the
/// duplicates are not stored (its sequence survived in the replicas'
/// logs); each member then holds every confirmed message once, in order,
/// the returning old leader included, once it has caught up as a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_loss_elects_a_new_leader_and_nothing_confirmed_is_lost_or_doubled() {
    let (ports, mut nodes) = three_linked().await;
    let env1 = nodes[0].stream_env().await;
    within(env1.stream_creator().create("fo")).await.unwrap();
    in_step(&nodes).await;
    let old = nodes[0].stream_port() as u32;
    assert_eq!(members_seen(&nodes[1], "fo", 2).await.0, old);
    let env2 = nodes[1].stream_env().await;
    publish_named(&env2, "fo", "p1", 0..500).await;
    // A consumer's offset stored through a replica's node (the leader
    // writes it), seen on the other replica once replicated.
    let c2 = client_of(&nodes[1]).await;
    within(c2.store_offset("reader-1", "fo", 123)).await.unwrap();
    let c3 = client_of(&nodes[2]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while within(c3.query_offset("reader-1".into(), "fo")).await.ok() != Some(123) {
        assert!(
            Instant::now() < deadline,
            "the stored offset never reached node 3"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(env1);

    let dir = std::mem::replace(&mut nodes[0].data_dir, "/nonexistent/warren-test".into());
    nodes[0].stop().await;
    // A new leader, on node 2 or 3, with the other as its replica.
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let client = client_of(&nodes[1]).await;
        let md = within(client.metadata(vec!["fo".to_string()])).await.unwrap();
        if let Some(m) = md.get("fo") {
            if m.leader.port != old {
                break m.leader.port;
            }
        }
        assert!(Instant::now() < deadline, "no new leader: {md:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(leader == nodes[1].stream_port() as u32 || leader == nodes[2].stream_port() as u32);

    // The producer comes back under its name: 0..500 again (duplicates,
    // confirmed but not stored) and 500..1000.
    publish_named(&env2, "fo", "p1", 0..1000).await;
    let c2 = client_of(&nodes[1]).await;
    let seq = within(c2.query_publisher_sequence("p1", "fo")).await.unwrap();
    assert_eq!(seq, 999);
    // The stored offset survived the failover.
    let c3 = client_of(&nodes[2]).await;
    assert_eq!(
        within(c3.query_offset("reader-1".into(), "fo")).await.unwrap(),
        123
    );

    let expect: Vec<String> = (0..1000).map(|i| format!("f-{i}")).collect();
    for n in &nodes[1..] {
        let env = env_on(n).await;
        let got = crate::stream::consume(&env, "fo", OffsetSpecification::First, 1000).await;
        let texts: Vec<String> = got.into_iter().map(|(_, b)| b).collect();
        assert_eq!(texts, expect);
    }

    // The old leader returns as a replica and catches up. Its consumer
    // waits until it knows the new epoch's leader: one subscribed while it
    // still took itself for the old leader is ended by the new epoch (a
    // MetadataUpdate, which rabbitmq-stream-client's consumers ignore,
    // so it would wait for ever).
    nodes[0] = start_node("itest", "s3cret", 0, &ports, Some(dir)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let client = client_of(&nodes[0]).await;
        let md = within(client.metadata(vec!["fo".to_string()])).await.unwrap();
        if md.get("fo").is_some_and(|m| m.leader.port == leader) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 never learned the new leader: {md:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let env = env_on(&nodes[0]).await;
    let got = crate::stream::consume(&env, "fo", OffsetSpecification::First, 1000).await;
    let texts: Vec<String> = got.into_iter().map(|(_, b)| b).collect();
    assert_eq!(texts, expect);
}

/// A super stream created through one node: its three partitions' leaders
/// are on three nodes (balanced, as rabbitmq-streams add_super_stream
/// places them), each partition replicated to every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_super_streams_partitions_lead_on_different_nodes() {
    let (_, nodes) = three_linked().await;
    let c = client_of(&nodes[0]).await;
    let parts: Vec<String> = (0..3).map(|i| format!("ss-{i}")).collect();
    let keys: Vec<String> = (0..3).map(|i| i.to_string()).collect();
    let r = within(c.create_super_stream("ss", parts.clone(), keys, Default::default()))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    in_step(&nodes).await;
    let mut leaders = Vec::new();
    for p in &parts {
        let (leader, replicas) = members_seen(&nodes[1], p, 2).await;
        assert!(!replicas.contains(&leader));
        leaders.push(leader);
    }
    leaders.sort();
    leaders.dedup();
    assert_eq!(leaders.len(), 3, "one partition leads on each node");
}

/// add_replica and delete_replica through the API of another node, and
/// stream_status's rows: a stream of two members gets a third, which
/// catches up and serves its own consumer, then loses it again; the API
/// shows leader, members and online on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_added_and_deleted_and_every_member_has_a_status_row() {
    use reqwest::{Method, StatusCode};
    let (_, nodes) = three_linked().await;
    let c1 = client_of(&nodes[0]).await;
    let options = [("initial-cluster-size".to_string(), "2".to_string())].into();
    let r = within(c1.create_stream("mem", options)).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    in_step(&nodes).await;
    let bodies: Vec<String> = (0..200).map(|i| format!("m-{i}")).collect();
    crate::stream::publish(&nodes[0].stream_env().await, "mem", bodies.clone()).await;

    let (_, q) = nodes[2].http(Method::GET, "/api/queues/%2F/mem", None).await;
    assert_eq!(q["type"], "stream");
    assert_eq!(q["leader"], node_name(0));
    let members: Vec<String> = q["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert_eq!(members.len(), 2, "{q}");
    assert_eq!(q["online"].as_array().unwrap().len(), 2);
    let outside = (0..3).find(|i| !members.contains(&node_name(*i))).unwrap();

    // stream_status through the node outside: one row per member.
    let (status, rows) = nodes[outside]
        .http(Method::GET, "/api/queues/stream/%2F/mem/status", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{rows}");
    let rows = rows.as_array().unwrap().clone();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let writer = rows.iter().find(|r| r["role"] == "writer").unwrap();
    assert_eq!(writer["node"], node_name(0));
    assert_eq!(writer["epoch"], 1);
    assert_eq!(writer["offset"], 199);
    assert_eq!(writer["first_offset"], 0);
    assert!(writer["committed_offset"].as_u64().is_some(), "{writer}");
    assert!(
        rows.iter().any(|r| r["role"] == "replica" && r["offset"] == 199),
        "{rows:?}"
    );

    // add_replica on the node outside, asked through node 2.
    let body = serde_json::json!({ "node": node_name(outside) });
    let (status, _) = nodes[1]
        .http(
            Method::POST,
            "/api/queues/stream/%2F/mem/replicas/add",
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    in_step(&nodes).await;
    members_seen(&nodes[1], "mem", 2).await;
    let got = crate::stream::consume(
        &env_on(&nodes[outside]).await,
        "mem",
        OffsetSpecification::First,
        200,
    )
    .await;
    assert_eq!(got.into_iter().map(|(_, b)| b).collect::<Vec<_>>(), bodies);
    // It takes new chunks too, and the leader counts its majority over three.
    let more: Vec<String> = (200..300).map(|i| format!("m-{i}")).collect();
    crate::stream::publish(&nodes[0].stream_env().await, "mem", more.clone()).await;
    let got = crate::stream::consume(
        &env_on(&nodes[outside]).await,
        "mem",
        OffsetSpecification::First,
        300,
    )
    .await;
    assert_eq!(got.len(), 300);

    // delete_replica takes it away again; the last member cannot go.
    let (status, _) = nodes[1]
        .http(
            Method::DELETE,
            "/api/queues/stream/%2F/mem/replicas/delete",
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    in_step(&nodes).await;
    members_seen(&nodes[1], "mem", 1).await;
    let (_, q) = nodes[outside]
        .http(Method::GET, "/api/queues/%2F/mem", None)
        .await;
    assert_eq!(q["members"].as_array().unwrap().len(), 2, "{q}");
}

/// AMQP 0-9-1 on a replicated stream from every node: a publisher with
/// confirms on the node without a member (its publishes go to the
/// leader's node), and consumers with an offset on each node, the one
/// without a member reading through the queue protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_0_9_1_publishes_and_consumes_a_replicated_stream_through_every_node() {
    use futures_lite::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
    use lapin::types::AMQPValue;
    let (_, nodes) = three_linked().await;
    let c1 = client_of(&nodes[0]).await;
    let options = [("initial-cluster-size".to_string(), "2".to_string())].into();
    let r = within(c1.create_stream("via-091", options)).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    in_step(&nodes).await;
    let (_, replicas) = members_seen(&nodes[0], "via-091", 1).await;
    let outside = (0..3)
        .find(|i| *i != 0 && nodes[*i].stream_port() as u32 != replicas[0])
        .unwrap();

    let (_c, ch) = nodes[outside].confirm_channel().await;
    for i in 0..50 {
        let confirm = within(ch.basic_publish(
            "".into(),
            "via-091".into(),
            BasicPublishOptions::default(),
            format!("a{i}").as_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
        assert!(within(confirm).await.unwrap().is_ack(), "publish {i} confirmed");
    }
    for n in &nodes {
        let (_c, ch) = n.channel().await;
        within(ch.basic_qos(10, BasicQosOptions::default()))
            .await
            .unwrap();
        let mut consumer = within(ch.basic_consume(
            "via-091".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            table(&[("x-stream-offset", AMQPValue::LongLongInt(20))]),
        ))
        .await
        .unwrap();
        for i in 20..50 {
            let d = within(consumer.next()).await.unwrap().unwrap();
            assert_eq!(d.data, format!("a{i}").as_bytes());
            within(d.ack(BasicAckOptions::default())).await.unwrap();
        }
    }
}
