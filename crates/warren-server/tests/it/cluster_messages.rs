//! Messages across nodes: a classic queue lives on one node, and clients
//! of the other nodes publish to it (with confirms), consume from it (with
//! prefetch and acks), get from it and purge it, through the queue
//! protocol on the inter-node links, with real clients (lapin). A queue
//! whose node is down answers 404 as RabbitMQ's does, nacks publishes,
//! cancels its consumers elsewhere, and works again when its node returns.
//! AMQP 1.0 senders and receivers cross nodes too (link credit held), and
//! stream clients are sent to the node their stream lives on.

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use reqwest::{Method, StatusCode};

use crate::cluster::{in_step, node_name, start_node, three_linked};
use crate::common::*;

async fn connect(b: &Broker) -> Connection {
    let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect("connects")
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// Wait (at most 10 s) until node `b` lists queue `q` with `ready` messages.
async fn until_ready(b: &Broker, q: &str, ready: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = b.http(Method::GET, &format!("/api/queues/%2F/{q}"), None).await;
        if s == StatusCode::OK && v["messages_ready"] == ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue {q} never had {ready} ready: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publish `n` persistent messages "{prefix}-{i}" to queue `q` with
/// confirms; whether every one was acked.
async fn publish_confirmed(ch: &Channel, q: &str, prefix: &str, n: usize) -> bool {
    let mut confirms = Vec::new();
    for i in 0..n {
        let body = format!("{prefix}-{i}");
        let c = within(ch.basic_publish(
            "".into(),
            q.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            persistent(),
        ))
        .await
        .unwrap();
        confirms.push(c);
    }
    let mut all = true;
    for c in confirms {
        all &= within(c).await.unwrap().is_ack();
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_consume_get_and_purge_through_nodes_that_are_not_the_queues() {
    let (_, nodes) = three_linked().await;

    // The queue lives on node 1.
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("cq".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    in_step(&nodes).await;

    // Node 2 publishes with confirms: every one acked once node 1 has it
    // on disk, and node 1 counts them.
    let c2 = connect(&nodes[1]).await;
    let ch2 = c2.create_channel().await.unwrap();
    within(ch2.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    // The queue must be known to node 2 before it routes to it.
    within(ch2.queue_declare(
        "cq".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert!(publish_confirmed(&ch2, "cq", "m", 500).await, "all acked");
    until_ready(&nodes[0], "cq", 500).await;
    // The other nodes show the home's figures (reported every second):
    // in the API and in a passive declare-ok.
    until_ready(&nodes[2], "cq", 500).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = within(ch2.queue_declare("cq".into(), passive, FieldTable::default()))
            .await
            .unwrap();
        if q.message_count() == 500 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "declare-ok on node 2 says {}",
            q.message_count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Node 3 consumes with prefetch 10: it gets 10 and no more until it
    // acks.
    let c3 = connect(&nodes[2]).await;
    let ch3 = c3.create_channel().await.unwrap();
    within(ch3.basic_qos(10, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch3.basic_consume(
        "cq".into(),
        "c3".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        held.push(d);
    }
    let more = tokio::time::timeout(Duration::from_millis(500), consumer.next()).await;
    assert!(more.is_err(), "an 11th delivery past prefetch 10");
    // Acks let the rest flow, in order.
    for d in held.drain(..) {
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    let mut seen = 10;
    while seen < 400 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), format!("m-{seen}"));
        assert!(!d.redelivered);
        d.ack(BasicAckOptions::default()).await.unwrap();
        seen += 1;
    }
    // Take 3 more without acking, then close the channel: they go back
    // to the queue on node 1, redelivered.
    for _ in 0..3 {
        within(consumer.next()).await.unwrap().unwrap();
    }
    within(ch3.close(200, "bye".into())).await.unwrap();
    until_ready(&nodes[0], "cq", 100).await;

    // basic.get through node 2: the first of those, marked redelivered;
    // nacked without requeue it is gone.
    let got = within(ch2.basic_get("cq".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(String::from_utf8_lossy(&got.delivery.data), "m-400");
    assert!(got.delivery.redelivered);
    assert_eq!(got.message_count, 99);
    got.delivery
        .nack(BasicNackOptions {
            requeue: false,
            ..Default::default()
        })
        .await
        .unwrap();
    until_ready(&nodes[0], "cq", 99).await;
    let got = within(ch2.basic_get("cq".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(String::from_utf8_lossy(&got.delivery.data), "m-401");
    until_ready(&nodes[0], "cq", 98).await;

    // queue.purge through node 3.
    let ch3 = c3.create_channel().await.unwrap();
    let n = within(ch3.queue_purge("cq".into(), QueuePurgeOptions::default()))
        .await
        .unwrap();
    assert_eq!(n, 98);
    until_ready(&nodes[0], "cq", 0).await;
    let empty = within(ch2.basic_get("cq".into(), BasicGetOptions::default()))
        .await
        .unwrap();
    assert!(empty.is_none());

    // A consumer elsewhere gets what is published after it started, and a
    // second consumer asking to be exclusive is refused by the home.
    let mut consumer = within(ch3.basic_consume(
        "cq".into(),
        "c3b".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert!(publish_confirmed(&ch2, "cq", "late", 5).await);
    for i in 0..5 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), format!("late-{i}"));
    }
    let ch2b = c2.create_channel().await.unwrap();
    let refused = within(ch2b.basic_consume(
        "cq".into(),
        "x".into(),
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await;
    let text = format!("{refused:?}");
    assert!(text.contains("403") || text.contains("ACCESS_REFUSED"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_node_is_down_answers_404_and_works_again_when_it_returns() {
    let (ports, mut nodes) = three_linked().await;

    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("dq".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    in_step(&nodes).await;
    let c2 = connect(&nodes[1]).await;
    let ch2 = c2.create_channel().await.unwrap();
    within(ch2.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(ch2.queue_declare("dq".into(), passive, FieldTable::default()))
        .await
        .unwrap();
    assert!(publish_confirmed(&ch2, "dq", "kept", 20).await);

    // A consumer on node 3, with the queue's node about to go.
    let c3 = connect(&nodes[2]).await;
    let ch3 = c3.create_channel().await.unwrap();
    let mut consumer = within(ch3.basic_consume(
        "dq".into(),
        "watcher".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for i in 0..20 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), format!("kept-{i}"));
        // Not acked: they go back to the queue when this consumer's
        // link to node 1 goes.
    }

    drop(ch1);
    drop(c1);
    let dir = std::mem::replace(&mut nodes[0].data_dir, "/nonexistent/warren-test".into());
    nodes[0].stop().await;

    // The consumer is cancelled by the broker: its stream ends.
    let end = within(async {
        loop {
            match consumer.next().await {
                None => return true,
                Some(Err(_)) => return true,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(end);

    // Publishes to it are nacked.
    assert!(
        !publish_confirmed(&ch2, "dq", "lost", 3).await,
        "nacked while its node is down"
    );
    // A passive declare, a get, a consume: 404 with RabbitMQ's words.
    let expected = format!(
        "home node '{}' of durable queue 'dq' in vhost '/' is down or inaccessible",
        node_name(0)
    );
    for attempt in 0..3 {
        let ch = c2.create_channel().await.unwrap();
        let r = match attempt {
            0 => within(ch.queue_declare("dq".into(), passive, FieldTable::default()))
                .await
                .map(|_| ()),
            1 => within(ch.basic_get("dq".into(), BasicGetOptions::default()))
                .await
                .map(|_| ()),
            _ => within(ch.basic_consume(
                "dq".into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            ))
            .await
            .map(|_| ()),
        };
        let text = format!("{r:?}");
        assert!(
            text.contains("NOT_FOUND") && text.contains(&expected),
            "attempt {attempt}: {text}"
        );
    }

    // Node 1 returns with its data: the queue works again from every node,
    // with the messages it had confirmed, redelivered.
    nodes[0] = start_node("itest", "s3cret", 0, &ports, Some(dir)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let ch = loop {
        let ch = c2.create_channel().await.unwrap();
        if within(ch.queue_declare("dq".into(), passive, FieldTable::default()))
            .await
            .is_ok()
        {
            break ch;
        }
        assert!(Instant::now() < deadline, "dq never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut got = Vec::new();
    while let Some(m) = within(ch.basic_get("dq".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
    {
        got.push(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    let expected: Vec<String> = (0..20).map(|i| format!("kept-{i}")).collect();
    assert_eq!(got, expected);
}

/// AMQP 1.0 across nodes: a sender on node 2 to a queue on node 1 has its
/// transfers accepted (the home confirmed them); a receiver on node 3
/// gets them in order, never past the link credit it granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_1_0_senders_and_receivers_on_other_nodes_with_credit() {
    use crate::amqp10_raw::{transfers, RawReceiver};
    use fe2o3_amqp::{Connection as Connection10, Sender, Session};
    use warren_amqp10::performative::Performative;

    const N: u32 = 40;
    let (_, nodes) = three_linked().await;
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("q10".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    // Nodes 2 and 3 know it before the 1.0 links attach.
    for b in &nodes[1..] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.http(Method::GET, "/api/queues/%2F/q10", None).await.0 != StatusCode::OK {
            assert!(Instant::now() < deadline, "q10 never seen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let url = format!("amqp://guest:guest@127.0.0.1:{}", nodes[1].port);
    let mut conn = within(Connection10::open("cross-10", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/q10"))
        .await
        .unwrap();
    for i in 0..N {
        let outcome = within(sender.send(fe2o3_amqp::types::messaging::Data(
            i.to_be_bytes().to_vec().into(),
        )))
        .await
        .unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    until_ready(&nodes[0], "q10", N as u64).await;

    let mut r = RawReceiver::attach(nodes[2].port, "/queues/q10").await;
    let mut received = 0u32;
    while received < N {
        r.flow(received, 2, false).await;
        let got = r.read(None, |f| transfers(f).len() >= 2).await;
        let got = transfers(&got);
        assert_eq!(got.len(), 2, "past the credit of 2 after {received}");
        for (id, body) in got {
            assert_eq!(u32::from_be_bytes(body[..4].try_into().unwrap()), received);
            received += 1;
            r.accept(id);
        }
        let extra = r.read(Some(Duration::from_millis(30)), |_| false).await;
        assert!(
            transfers(&extra).is_empty(),
            "a transfer without credit after {received}"
        );
    }
    until_ready(&nodes[0], "q10", 0).await;

    // A drain (§2.6.7) with credit 10 while node 1's queue holds 3: the
    // three come first, then the flow that uses up the rest of the credit
    // (answered once the home has sent what it had, not before).
    for i in 0..3u32 {
        let outcome = within(sender.send(fe2o3_amqp::types::messaging::Data(
            (N + i).to_be_bytes().to_vec().into(),
        )))
        .await
        .unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    until_ready(&nodes[0], "q10", 3).await;
    r.flow(N, 10, true).await;
    let frames = within(r.read(None, |f| {
        f.iter()
            .any(|(p, _)| matches!(p, Performative::Flow(fl) if fl.handle == Some(0) && fl.drain))
    }))
    .await;
    let flow_at = frames
        .iter()
        .position(|(p, _)| matches!(p, Performative::Flow(fl) if fl.handle == Some(0) && fl.drain))
        .unwrap();
    let before = transfers(&frames[..flow_at]);
    assert_eq!(before.len(), 3, "the three messages before the drain's answer");
    let Performative::Flow(flow) = &frames[flow_at].0 else {
        unreachable!()
    };
    assert_eq!((flow.delivery_count, flow.link_credit), (Some(N + 10), Some(0)));
    for (id, _) in before {
        r.accept(id);
    }
    // Nothing more without new credit, though the home has more now.
    let outcome = within(sender.send(fe2o3_amqp::types::messaging::Data(b"late".to_vec().into())))
        .await
        .unwrap();
    assert!(outcome.is_accepted(), "{outcome:?}");
    let extra = r.read(Some(Duration::from_millis(300)), |_| false).await;
    assert!(transfers(&extra).is_empty(), "a transfer after the drain");
}

/// The stream protocol across nodes: a stream created through node 1
/// leads there (replicated to nodes 2 and 3, see `cluster_streams.rs`);
/// the real client's producer on node 3 is sent to node 1 and its
/// consumer on node 2 reads; a publisher declared on node 2 directly is
/// accepted, as RabbitMQ accepts one on a replica's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_clients_of_any_node_are_sent_to_the_streams_node() {
    use rabbitmq_stream_client::types::OffsetSpecification;

    let (_, nodes) = three_linked().await;
    let env1 = nodes[0].stream_env().await;
    within(env1.stream_creator().create("s-cross")).await.unwrap();
    let env3 = nodes[2].stream_env().await;
    let env2 = nodes[1].stream_env().await;

    // Node 3 knows the stream and, once the nodes' status reports have
    // said where their stream ports are, sends the producer to node 1.
    let deadline = Instant::now() + Duration::from_secs(15);
    let producer = loop {
        match within(env3.producer().build("s-cross")).await {
            Ok(p) => break p,
            Err(e) => {
                assert!(Instant::now() < deadline, "no producer through node 3: {e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    within(producer.close()).await.unwrap();
    let bodies: Vec<String> = (0..100).map(|i| format!("s-{i}")).collect();
    crate::stream::publish(&env3, "s-cross", bodies.clone()).await;
    let got = crate::stream::consume(&env2, "s-cross", OffsetSpecification::First, 100).await;
    let got: Vec<String> = got.into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, bodies);
    // Written once, on node 1.
    let (_, q) = nodes[0].http(Method::GET, "/api/queues/%2F/s-cross", None).await;
    assert_eq!(q["node"], node_name(0));

    // A client that ignores the metadata and declares its publisher on
    // node 2 is accepted (the leader writes its chunks).
    let client = within(rabbitmq_stream_client::Client::connect(
        rabbitmq_stream_client::ClientOptions::builder()
            .host("127.0.0.1")
            .port(nodes[1].stream_port())
            .build(),
    ))
    .await
    .unwrap();
    let r = within(client.declare_publisher(1, None, "s-cross"))
        .await
        .unwrap();
    assert_eq!(r.code(), &rabbitmq_stream_client::types::ResponseCode::Ok);
}

/// Many publishers on one node, persistent messages to a queue on
/// another: the home confirms from two places (after each batch it reads,
/// and after each fsync), and every publish must be acked all the same.
/// (Two confirm ranges once crossed on the link, and the publisher node
/// took the later range's arrival as a refusal of the earlier publishes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_to_another_nodes_queue_are_all_acked() {
    let (_, nodes) = three_linked().await;
    let c1 = connect(&nodes[0]).await;
    let ch1 = c1.create_channel().await.unwrap();
    within(ch1.queue_declare("many".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    until_ready(&nodes[1], "many", 0).await;

    let c2 = connect(&nodes[1]).await;
    let mut publishers = Vec::new();
    for p in 0..4 {
        let ch = c2.create_channel().await.unwrap();
        within(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .unwrap();
        publishers.push(tokio::spawn(async move {
            let mut nacked = 0;
            for round in 0..5 {
                if !publish_confirmed(&ch, "many", &format!("p{p}-r{round}"), 400).await {
                    nacked += 1;
                }
            }
            nacked
        }));
    }
    let mut rounds_with_nacks = 0;
    for p in publishers {
        rounds_with_nacks += p.await.unwrap();
    }
    assert_eq!(rounds_with_nacks, 0, "rounds with a nacked publish");
    until_ready(&nodes[0], "many", 8000).await;
}
