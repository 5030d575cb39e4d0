//! warren-client's AMQP 1.0 module against an in-process Warren, in the
//! scenarios of RabbitMQ's AMQP 1.0 clients' suites: declare, publish,
//! consume, requeue, discard, credit, unroutable and refused publishers,
//! bindings, stream consumers.

mod support;

use std::time::Duration;

use support::within;
use warren_client::amqp::{
    BindingSpec, Connection, Error, ExchangeSpec, Message, Outcome, QueueSpec, StreamOffset, Value,
};

async fn warren() -> (String, warren_server::Running) {
    let (uris, running) = support::brokers().await;
    (uris[0].clone(), running)
}

#[tokio::test]
async fn declare_publish_consume_accept_purge_and_delete() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    for (spec, kind) in [
        (QueueSpec::classic("c1"), "classic"),
        (QueueSpec::quorum("q1").delivery_limit(5), "quorum"),
        (QueueSpec::stream("s1"), "stream"),
    ] {
        let info = within(m.declare_queue(&spec)).await.unwrap();
        assert_eq!(info.kind, kind);
        assert_eq!(within(m.queue_info(&spec.name)).await.unwrap().kind, kind);
    }
    // The same declare again is fine; other arguments are a conflict.
    within(m.declare_queue(&QueueSpec::quorum("q1").delivery_limit(5)))
        .await
        .unwrap();
    match within(m.declare_queue(&QueueSpec::quorum("q1").delivery_limit(6))).await {
        Err(Error::Management { status: 409, .. }) => {}
        other => panic!("expected 409, got {other:?}"),
    }

    let publisher = within(conn.publisher().queue("q1").build()).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..50u64 {
        let msg = Message::new(format!("m{i}"))
            .message_id(i)
            .application_property("i", Value::Ulong(i));
        pending.push(within(publisher.publish(msg)).await.unwrap());
    }
    for p in pending {
        assert_eq!(within(p).await.unwrap(), Outcome::Accepted);
    }
    assert_eq!(within(m.queue_info("q1")).await.unwrap().message_count, 50);

    let mut consumer = within(conn.consumer().queue("q1").initial_credit(8).build())
        .await
        .unwrap();
    for i in 0..20u64 {
        let d = within(consumer.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(format!("m{i}").as_bytes()));
        assert_eq!(d.message.property("i"), Some(&Value::Ulong(i)));
        assert!(d.message.durable, "durable by default");
        d.accept();
    }
    consumer.close();
    // What the consumer held beyond the 20 went back; 30 are left.
    let left = wait_for_count(&m, "q1", 30).await;
    assert_eq!(left, 30);
    assert_eq!(within(m.purge_queue("q1")).await.unwrap(), 30);
    assert_eq!(within(m.delete_queue("q1")).await.unwrap(), 0);
    match within(m.queue_info("q1")).await {
        Err(Error::Management { status: 404, .. }) => {}
        other => panic!("expected 404, got {other:?}"),
    }
    conn.close().await;
    assert!(!conn.is_open());
}

async fn wait_for_count(m: &warren_client::amqp::Management, q: &str, want: u64) -> u64 {
    let mut last = 0;
    for _ in 0..100 {
        last = within(m.queue_info(q)).await.unwrap().message_count;
        if last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

#[tokio::test]
async fn credit_bounds_what_a_consumer_holds_and_settling_gives_more() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("credit")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("credit").build()).await.unwrap();
    for i in 0..100 {
        within(
            within(publisher.publish(Message::new(format!("{i}"))))
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    }
    let mut consumer = within(conn.consumer().queue("credit").initial_credit(10).build())
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(within(consumer.receive()).await.unwrap());
    }
    // Nothing beyond the window while all ten are held.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.receive())
            .await
            .is_err()
    );
    for d in held {
        d.accept();
    }
    for _ in 0..90 {
        within(consumer.receive()).await.unwrap().accept();
    }
    assert_eq!(wait_for_count(&m, "credit", 0).await, 0);
}

#[tokio::test]
async fn requeue_comes_back_and_discard_dead_letters() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_exchange(&ExchangeSpec::fanout("dlx")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("dead")))
        .await
        .unwrap();
    within(m.bind(&BindingSpec::to_queue("dlx", "dead", "")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::quorum("work").dead_letter_exchange("dlx")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("work").build()).await.unwrap();
    within(within(publisher.publish(Message::new("job"))).await.unwrap())
        .await
        .unwrap();

    let mut consumer = within(conn.consumer().queue("work").build()).await.unwrap();
    let first = within(consumer.receive()).await.unwrap();
    first.requeue_with(&[("x-opt-attempt", Value::string("one"))]);
    let again = within(consumer.receive()).await.unwrap();
    assert_eq!(again.message.data(), Some(&b"job"[..]));
    assert_eq!(
        again.message.annotation_value("x-opt-attempt"),
        Some(&Value::string("one"))
    );
    again.discard();

    let mut dead = within(conn.consumer().queue("dead").build()).await.unwrap();
    let d = within(dead.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"job"[..]));
    d.accept();
}

#[tokio::test]
async fn publishers_to_exchanges_missing_targets_and_per_message_addresses() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_exchange(&ExchangeSpec::topic("events")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("users")))
        .await
        .unwrap();
    let binding = BindingSpec::to_queue("events", "users", "user.*");
    within(m.bind(&binding)).await.unwrap();

    let p = within(conn.publisher().exchange("events", "user.new").build())
        .await
        .unwrap();
    assert_eq!(
        within(within(p.publish(Message::new("u"))).await.unwrap())
            .await
            .unwrap(),
        Outcome::Accepted
    );
    let nowhere = within(conn.publisher().exchange("events", "order.new").build())
        .await
        .unwrap();
    assert_eq!(
        within(within(nowhere.publish(Message::new("o"))).await.unwrap())
            .await
            .unwrap(),
        Outcome::Released,
        "unroutable"
    );
    within(m.unbind(&binding)).await.unwrap();
    assert_eq!(
        within(within(p.publish(Message::new("u2"))).await.unwrap())
            .await
            .unwrap(),
        Outcome::Released
    );

    match within(conn.publisher().queue("no-such-queue").build()).await {
        Err(Error::LinkRefused(c)) => assert_eq!(c.condition, "amqp:not-found"),
        Err(e) => panic!("expected a refused link, got {e}"),
        Ok(_) => panic!("expected a refused link"),
    }
    // The connection goes on after a refused link.
    let anywhere = within(conn.publisher().build()).await.unwrap();
    let to_queue = Message::new("direct").to(warren_client::amqp::address::queue("users"));
    assert_eq!(
        within(within(anywhere.publish(to_queue)).await.unwrap())
            .await
            .unwrap(),
        Outcome::Accepted
    );
    let mut c = within(conn.consumer().queue("users").build()).await.unwrap();
    let got: Vec<_> = [
        within(c.receive()).await.unwrap(),
        within(c.receive()).await.unwrap(),
    ]
    .into_iter()
    .map(|d| {
        let b = d.message.data().unwrap().to_vec();
        d.accept();
        b
    })
    .collect();
    assert_eq!(got, vec![b"u".to_vec(), b"direct".to_vec()]);
    within(m.delete_exchange("events")).await.unwrap();
}

#[tokio::test]
async fn stream_consumers_start_where_asked_and_filter() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::stream("log"))).await.unwrap();
    let p = within(conn.publisher().queue("log").build()).await.unwrap();
    for i in 0..10 {
        let colour = if i % 2 == 0 { "red" } else { "blue" };
        let msg = Message::new(format!("{i}")).annotation("x-stream-filter-value", Value::string(colour));
        assert_eq!(
            within(within(p.publish(msg)).await.unwrap()).await.unwrap(),
            Outcome::Accepted
        );
    }
    let mut from_first = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::First)
            .build(),
    )
    .await
    .unwrap();
    for i in 0..10 {
        let d = within(from_first.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(format!("{i}").as_bytes()));
        d.accept();
    }
    let mut from_five = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::Offset(5))
            .build(),
    )
    .await
    .unwrap();
    let d = within(from_five.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"5"[..]));
    d.accept();
    let mut reds = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::First)
            .stream_filter(&["red"], false)
            .build(),
    )
    .await
    .unwrap();
    // The broker filters by chunk; the rest is the application's to skip.
    let mut seen_red = 0;
    while seen_red < 5 {
        let d = within(reds.receive()).await.unwrap();
        if d.message.annotation_value("x-stream-filter-value") == Some(&Value::string("red")) {
            seen_red += 1;
        }
        d.accept();
    }
}

/// RabbitMQ 3.10's AMQP 1.0 plugin (and Warren) with v1 addresses: the
/// queue declared over 0-9-1 (3.10 has no management node), then
/// published to and consumed through `/amq/queue/:q`, with a requeue and
/// a credit window. Against the anchor when `tests/client/rabbitmq.sh`
/// names it.
#[tokio::test]
async fn v1_addresses_on_warren_and_rabbitmq_3_10() {
    let (uris, _broker) = support::brokers().await;
    for uri in uris {
        let q = support::unique("amqp10-v1");
        let amqp091 = within(warren_client::amqp091::Connection::open(&uri))
            .await
            .unwrap();
        let ch = within(amqp091.channel()).await.unwrap();
        within(ch.queue_declare(&q, warren_client::amqp091::QueueOptions::default().durable()))
            .await
            .unwrap();

        let conn = within(Connection::open(&uri)).await.unwrap();
        let address = format!("/amq/queue/{q}");
        let p = within(conn.publisher().address(address.as_str()).build())
            .await
            .unwrap();
        let mut pending = Vec::new();
        for i in 0..30u64 {
            let m = Message::new(format!("{i}")).message_id(i).subject("s");
            pending.push(within(p.publish(m)).await.unwrap());
        }
        for o in pending {
            assert_eq!(within(o).await.unwrap(), Outcome::Accepted, "{uri}");
        }
        let mut c = within(
            conn.consumer()
                .address(address.as_str())
                .initial_credit(5)
                .build(),
        )
        .await
        .unwrap();
        let first = within(c.receive()).await.unwrap();
        assert_eq!(first.message.data(), Some(&b"0"[..]), "{uri}");
        assert_eq!(first.message.properties.subject.as_deref(), Some("s"));
        first.requeue();
        let mut seen = Vec::new();
        while seen.len() < 30 {
            let d = within(c.receive()).await.unwrap();
            seen.push(String::from_utf8(d.message.data().unwrap().to_vec()).unwrap());
            d.accept();
        }
        seen.sort_by_key(|s| s.parse::<u32>().unwrap());
        let want: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        assert_eq!(seen, want, "{uri}: each once, the requeued one again");
        c.close();
        // Many deliveries through a small window, settled at once: the
        // credit topped up while deliveries are on their way (RabbitMQ
        // 3.10 counts a flow's credit from its own sends).
        let mut pending = Vec::new();
        for i in 0..3000u64 {
            pending.push(
                within(p.publish(Message::new(format!("{i}")).transient()))
                    .await
                    .unwrap(),
            );
        }
        for o in pending {
            assert_eq!(within(o).await.unwrap(), Outcome::Accepted, "{uri}");
        }
        let mut c = within(
            conn.consumer()
                .address(address.as_str())
                .initial_credit(10)
                .build(),
        )
        .await
        .unwrap();
        for _ in 0..3000 {
            within(c.receive()).await.unwrap().accept();
        }
        c.close();
        conn.close().await;
        within(ch.queue_delete(&q, false, false)).await.unwrap();
        amqp091.close().await.unwrap();
    }
}

/// Accepts wait to go as one disposition while the consumer takes more;
/// accepts made with nothing more taken (the application holds its
/// deliveries, then settles them) still reach the broker, within a few
/// milliseconds.
#[tokio::test]
async fn accepts_made_outside_the_receive_loop_still_reach_the_broker() {
    let (targets, _broker) = support::targets().await;
    let t = &targets[0];
    let conn = within(Connection::open(&t.uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("held")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("held").build()).await.unwrap();
    for i in 0..3 {
        let p = within(publisher.publish(Message::new(format!("h{i}"))))
            .await
            .unwrap();
        assert_eq!(within(p).await.unwrap(), Outcome::Accepted);
    }
    let mut consumer = within(conn.consumer().queue("held").build()).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(within(consumer.receive()).await.unwrap());
    }
    assert_eq!(unacked(&t.api, "held").await, 3);
    // Settled from another task, the consumer idle in no receive.
    tokio::spawn(async move {
        for d in held {
            d.accept();
        }
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while unacked(&t.api, "held").await != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the accepts never reached the broker"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    conn.close().await;
}

/// The broker's count of deliveries not yet settled on queue `q`.
async fn unacked(api: &str, q: &str) -> u64 {
    let info: serde_json::Value = reqwest::Client::new()
        .get(format!("{api}/api/queues/%2f/{q}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    info["messages_unacknowledged"].as_u64().unwrap_or(u64::MAX)
}

/// An RPC server answers each request to its reply-to with the request's
/// id as correlation id; concurrent calls each get their own reply; a
/// call nobody answers times out; a handler's error discards the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_requests_get_their_own_replies() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("rpc-upper")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("rpc-nobody")))
        .await
        .unwrap();
    let server = within(conn.rpc_server("rpc-upper", |request: Message| async move {
        let text = String::from_utf8_lossy(request.data().unwrap_or_default()).to_uppercase();
        if text == "FAIL" {
            return Err("asked to fail".to_string());
        }
        Ok(Message::new(text))
    }))
    .await
    .unwrap();
    let client = within(conn.rpc_client("rpc-upper")).await.unwrap();
    let calls = (0..20).map(|i| client.call(Message::new(format!("call {i}"))));
    let replies = within(futures_util::future::join_all(calls)).await;
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r.unwrap().data(), Some(format!("CALL {i}").as_bytes()));
    }
    let quick = within(conn.rpc_client("rpc-upper"))
        .await
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    match within(quick.call(Message::new("fail"))).await {
        Err(Error::Timeout(_)) => {}
        other => panic!("a failed handler sends no reply: {other:?}"),
    }
    let unanswered = within(conn.rpc_client("rpc-nobody"))
        .await
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    match within(unanswered.call(Message::new("anyone?"))).await {
        Err(Error::Timeout(_)) => {}
        other => panic!("expected a time-out, got {other:?}"),
    }
    assert_eq!(
        wait_for_count(&m, "rpc-nobody", 1).await,
        1,
        "the request waits in its queue"
    );
    server.close();
    conn.close().await;
}

/// Stream consumers with filter expressions (RabbitMQ 4.1's properties
/// and application-properties filters, 4.2's SQL): each gets exactly the
/// messages its filter picks; a filter the broker does not take fails
/// the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_filter_expressions_pick_their_messages() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::stream("filtex")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("filtex").build()).await.unwrap();
    let colors = ["red", "green", "blue"];
    for i in 0..30u64 {
        let msg = Message::new(format!("m{i}"))
            .subject(["a", "b", "c"][i as usize % 3])
            .application_property("color", Value::string(colors[(i / 10) as usize]))
            .application_property("i", Value::Ulong(i));
        let p = within(publisher.publish(msg)).await.unwrap();
        assert_eq!(within(p).await.unwrap(), Outcome::Accepted);
    }
    async fn picked(mut c: warren_client::amqp::Consumer, want: usize) -> Vec<u64> {
        let mut got = Vec::new();
        for _ in 0..want {
            let d = within(c.receive()).await.unwrap();
            match d.message.property("i") {
                Some(Value::Ulong(i)) => got.push(*i),
                other => panic!("no i: {other:?}"),
            }
            d.accept();
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(300), c.receive())
                .await
                .is_err(),
            "nothing more passes the filter"
        );
        got
    }
    let from_first = || conn.consumer().queue("filtex").stream_offset(StreamOffset::First);
    let by_subject = within(
        from_first()
            .property_filter("subject", Value::string("b"))
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(
        picked(by_subject, 10).await,
        (0..30).filter(|i| i % 3 == 1).collect::<Vec<_>>()
    );
    let by_color = within(
        from_first()
            .application_property_filter("color", Value::string("green"))
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(picked(by_color, 10).await, (10..20).collect::<Vec<_>>());
    let by_sql = within(from_first().sql_filter("color = 'blue' AND i > 24").build())
        .await
        .unwrap();
    assert_eq!(picked(by_sql, 5).await, (25..30).collect::<Vec<_>>());
    match within(from_first().sql_filter("color = ").build()).await {
        Err(Error::FilterRefused(label)) => assert_eq!(label, "sql-filter"),
        other => panic!("expected the filter refused, got {:?}", other.map(|_| ())),
    }
    conn.close().await;
}
