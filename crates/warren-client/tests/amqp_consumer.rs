//! warren-client's AMQP 1.0 consumers against an in-process Warren,
//! following RabbitMQ's AMQP 1.0 clients' consumer tests: accept empties
//! the queue, requeue (with annotations) brings a message back, discard
//! (with annotations) dead-letters it, pre-settled deliveries, a receive
//! dropped unfinished losing nothing, the
//! credit window, accepts made outside a receive loop, batches settled
//! together, single active consumer awareness on a quorum queue.

mod support;

use std::time::Duration;

use support::amqp::unacked;
use support::amqp::{publish, wait_for_count, warren, with_queue};
use support::within;
use warren_client::amqp::{Batch, BindingSpec, Connection, ExchangeSpec, Message, Outcome, QueueSpec, Value};

#[tokio::test]
async fn credit_bounds_what_a_consumer_holds_and_settling_gives_more() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "credit").await;
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

/// (On a classic queue: Warren's quorum queues keep a modified outcome's
/// annotations when requeueing but not yet when dead-lettering, which
/// RabbitMQ 4's do.)
#[tokio::test]
async fn requeue_and_discard_with_annotations() {
    // Both queue types keep a modified outcome's annotations on requeue
    // and when dead-lettering (RabbitMQ 4; quorum queues dropped them
    // when dead-lettering until the discard carried them).
    for (name, spec) in [
        ("ann-classic", QueueSpec::classic("ann-classic")),
        ("ann-quorum", QueueSpec::quorum("ann-quorum")),
    ] {
        annotations_kept(name, spec).await;
    }
}

async fn annotations_kept(name: &str, spec: QueueSpec) {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_exchange(&ExchangeSpec::fanout("ann-dlx")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("ann-dead")))
        .await
        .unwrap();
    within(m.bind(&BindingSpec::to_queue("ann-dlx", "ann-dead", "")))
        .await
        .unwrap();
    within(m.declare_queue(&spec.dead_letter_exchange("ann-dlx")))
        .await
        .unwrap();
    let p = within(conn.publisher().queue(name).build()).await.unwrap();
    assert_eq!(publish(&p, Message::new("x")).await, Outcome::Accepted);
    let mut c = within(conn.consumer().queue(name).build()).await.unwrap();
    let d = within(c.receive()).await.unwrap();
    d.requeue_with(&[("x-opinion", Value::string("later"))]);
    let d = within(c.receive()).await.unwrap();
    assert_eq!(
        d.message.annotation_value("x-opinion"),
        Some(&Value::string("later")),
        "{name}"
    );
    d.discard_with(&[("x-reason", Value::string("bad"))]);
    let mut dead = within(conn.consumer().queue("ann-dead").build()).await.unwrap();
    let d = within(dead.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"x"[..]));
    assert_eq!(
        d.message.annotation_value("x-reason"),
        Some(&Value::string("bad")),
        "{name}"
    );
    d.accept();
    conn.close().await;
}

#[tokio::test]
async fn pre_settled_deliveries_need_no_settling() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "presettled-q").await;
    let p = within(conn.publisher().queue("presettled-q").build())
        .await
        .unwrap();
    for i in 0..20 {
        assert_eq!(
            publish(&p, Message::new(format!("p{i}"))).await,
            Outcome::Accepted
        );
    }
    let mut c = within(
        conn.consumer()
            .queue("presettled-q")
            .pre_settled()
            .initial_credit(4)
            .build(),
    )
    .await
    .unwrap();
    for i in 0..20 {
        let d = within(c.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(format!("p{i}").as_bytes()));
        // Settling a pre-settled delivery is nothing, not an error.
        d.accept();
    }
    assert_eq!(wait_for_count(&m, "presettled-q", 0).await, 0);
    conn.close().await;
}

/// `receive` is cancel-safe: a receive dropped unfinished (the other arm
/// of a `select!` won, a timeout ran out) loses no delivery, even when it
/// was letting a credit top-up go to the writer.
#[tokio::test]
async fn a_dropped_receive_loses_no_delivery() {
    let (uri, _broker) = warren().await;
    let (conn, _m) = with_queue(&uri, "cancelled-q").await;
    let p = within(conn.publisher().queue("cancelled-q").build())
        .await
        .unwrap();
    const N: usize = 300;
    for i in 0..N {
        assert_eq!(publish(&p, Message::new(format!("{i}"))).await, Outcome::Accepted);
    }
    // A small window, so credit is topped up often.
    let mut c = within(
        conn.consumer()
            .queue("cancelled-q")
            .pre_settled()
            .initial_credit(4)
            .build(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < N && tokio::time::Instant::now() < deadline {
        // The receive is dropped whenever it is not ready at once.
        let d = tokio::select! {
            biased;
            d = c.receive() => Some(d),
            _ = std::future::ready(()) => None,
        };
        match d {
            Some(d) => got.push(String::from_utf8(d.unwrap().message.data().unwrap().to_vec()).unwrap()),
            None => tokio::task::yield_now().await,
        }
    }
    let want: Vec<String> = (0..N).map(|i| format!("{i}")).collect();
    assert_eq!(got.len(), N, "deliveries lost to dropped receives");
    assert_eq!(got, want);
    conn.close().await;
}

/// A consumer's `build` dropped after its attach went (a `select!` or a
/// timeout) leaves no link behind: the queue has no consumer, and the
/// next consumer gets the messages.
#[tokio::test]
async fn a_dropped_build_leaves_no_consumer() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "dropped-build").await;
    for _ in 0..5 {
        let dropped = tokio::select! {
            biased;
            c = conn.consumer().queue("dropped-build").build() => Some(c),
            _ = std::future::ready(()) => None,
        };
        assert!(dropped.is_none(), "the attach was answered at once");
    }
    let mut consumers = u32::MAX;
    for _ in 0..50 {
        consumers = within(m.queue_info("dropped-build"))
            .await
            .unwrap()
            .consumer_count;
        if consumers == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(consumers, 0, "dropped builds left consumers");
    conn.close().await;
}

/// A consumer dropped without `close` closes its link all the same: the
/// queue has no consumer left, and what it held unsettled goes back.
#[tokio::test]
async fn a_dropped_consumer_detaches() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "dropped-consumer").await;
    let p = within(conn.publisher().queue("dropped-consumer").build())
        .await
        .unwrap();
    for i in 0..3 {
        assert_eq!(publish(&p, Message::new(format!("{i}"))).await, Outcome::Accepted);
    }
    let mut c = within(conn.consumer().queue("dropped-consumer").build())
        .await
        .unwrap();
    let held = within(c.receive()).await.unwrap();
    drop(c);
    let mut info = within(m.queue_info("dropped-consumer")).await.unwrap();
    for _ in 0..50 {
        if info.consumer_count == 0 && info.message_count == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        info = within(m.queue_info("dropped-consumer")).await.unwrap();
    }
    assert_eq!((info.consumer_count, info.message_count), (0, 3));
    drop(held);
    conn.close().await;
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

/// A single-active-consumer quorum queue tells each receiver whether it
/// is the active one, as RabbitMQ 4.3's `rabbitmq:active` link state
/// does (its amqp_client_SUITE's single_active_consumer_quorum_queue_
/// notification): the first consumer is told it is active, the second
/// that it waits; when the first goes, the second is told it is active
/// before it gets its first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_active_consumer_is_told_when_it_becomes_active() {
    use std::sync::{Arc, Mutex};
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::quorum("sac-q").single_active_consumer()))
        .await
        .unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let told = |who: &'static str| {
        let log = log.clone();
        move |active: bool| log.lock().unwrap().push(format!("{who} {active}"))
    };
    let mut first = within(
        conn.consumer()
            .queue("sac-q")
            .on_active_changed(told("first"))
            .build(),
    )
    .await
    .unwrap();
    let until = |want: &'static str| {
        let log = log.clone();
        async move {
            for _ in 0..500 {
                if log.lock().unwrap().iter().any(|l| l == want) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("never told {want}: {:?}", log.lock().unwrap());
        }
    };
    until("first true").await;
    assert_eq!(first.is_active(), Some(true));
    let mut second = within(
        conn.consumer()
            .queue("sac-q")
            .on_active_changed(told("second"))
            .build(),
    )
    .await
    .unwrap();
    until("second false").await;
    assert_eq!(second.is_active(), Some(false));
    // The first holds a message unsettled as it goes: back in the queue,
    // it is the second's first delivery, after the second was told.
    let publisher = within(conn.publisher().queue("sac-q").build()).await.unwrap();
    assert_eq!(publish(&publisher, Message::new("held")).await, Outcome::Accepted);
    let held = within(first.receive()).await.unwrap();
    assert_eq!(held.message.data(), Some(&b"held"[..]));
    first.close();
    let d = within(second.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"held"[..]));
    assert_eq!(
        log.lock().unwrap().last().map(String::as_str),
        Some("second true"),
        "told before its first message"
    );
    d.accept();
    drop(held);
    assert_eq!(second.is_active(), Some(true));
    // Told once each time: no repeats.
    assert_eq!(
        *log.lock().unwrap(),
        ["first true", "second false", "second true"],
    );
    conn.close().await;
}

/// A batch settles its deliveries together: requeued, they all come
/// back; accepted, none is left, held or waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_requeues_or_accepts_its_deliveries_together() {
    let (targets, _broker) = support::targets().await;
    let t = &targets[0];
    let conn = within(Connection::open(&t.uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("batched")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("batched").build()).await.unwrap();
    for i in 0..10 {
        assert_eq!(
            publish(&publisher, Message::new(format!("b{i}"))).await,
            Outcome::Accepted
        );
    }
    let mut consumer = within(conn.consumer().queue("batched").build()).await.unwrap();
    let mut batch = Batch::with_capacity(10);
    for _ in 0..10 {
        batch.push(within(consumer.receive()).await.unwrap());
    }
    assert_eq!(unacked(&t.api, "batched").await, 10);
    batch.requeue();
    assert!(batch.is_empty());
    let mut again = Vec::new();
    for _ in 0..10 {
        let d = within(consumer.receive()).await.unwrap();
        again.push(String::from_utf8_lossy(d.message.data().unwrap()).to_string());
        batch.push(d);
    }
    again.sort();
    assert_eq!(again, (0..10).map(|i| format!("b{i}")).collect::<Vec<_>>());
    batch.accept();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while unacked(&t.api, "batched").await != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the accepts never reached the broker"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(wait_for_count(&m, "batched", 0).await, 0);
    conn.close().await;
}
