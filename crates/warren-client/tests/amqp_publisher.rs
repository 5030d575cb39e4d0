//! warren-client's AMQP 1.0 publishers against an in-process Warren,
//! following RabbitMQ's AMQP 1.0 clients' publisher tests: to a queue,
//! to a missing queue or exchange (refused), to a deleted queue, with a
//! null target and each message's `to` (accepted, released, refused
//! without one), durable by default, the in-flight limit holding
//! publishes back, pre-settled publishing.

mod support;

use std::time::Duration;

use support::amqp::{publish, wait_for_count, warren, with_queue};
use support::within;
use warren_client::amqp::{address, Error, ExchangeSpec, Message, Outcome};

#[tokio::test]
async fn to_queues_missing_ones_refused_deleted_ones_failing() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "pub-q").await;
    let p = within(conn.publisher().queue("pub-q").build()).await.unwrap();
    assert_eq!(publish(&p, Message::new("one")).await, Outcome::Accepted);
    for refused in [
        within(conn.publisher().queue("no-such-queue").build())
            .await
            .map(drop),
        within(conn.publisher().exchange("no-such-exchange", "k").build())
            .await
            .map(drop),
    ] {
        match refused {
            Err(Error::LinkRefused(c)) => assert_eq!(c.condition, "amqp:not-found"),
            other => panic!("expected a refused link, got {other:?}"),
        }
    }
    // Its queue deleted, the publisher's link is closed by the broker.
    within(m.delete_queue("pub-q")).await.unwrap();
    let mut failed = false;
    for _ in 0..50 {
        match within(p.publish(Message::new("late"))).await {
            Err(Error::LinkRefused(c)) => {
                assert_eq!(c.condition, "amqp:resource-deleted");
                failed = true;
                break;
            }
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(failed, "publishing to a deleted queue fails");
    conn.close().await;
}

#[tokio::test]
async fn a_null_target_sends_each_message_where_its_to_says() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "to-q").await;
    within(m.declare_exchange(&ExchangeSpec::direct("to-x")))
        .await
        .unwrap();
    let anywhere = within(conn.publisher().build()).await.unwrap();
    let to = |a: String| Message::new("m").to(a);
    assert_eq!(
        publish(&anywhere, to(address::queue("to-q"))).await,
        Outcome::Accepted
    );
    // To an exchange with no binding for the key: released.
    assert_eq!(
        publish(&anywhere, to(address::exchange("to-x", "k"))).await,
        Outcome::Released
    );
    // To a queue that does not exist: released (RabbitMQ 4).
    assert_eq!(
        publish(&anywhere, to(address::queue("to-none"))).await,
        Outcome::Released
    );
    // Without a `to`, or with one that is no address: refused before
    // it is sent.
    for m in [Message::new("nowhere"), Message::new("x").to("invalid")] {
        match within(anywhere.publish(m)).await {
            Err(Error::Address(_)) => {}
            other => panic!("expected a bad address, got {:?}", other.map(|_| ())),
        }
    }
    assert_eq!(wait_for_count(&m, "to-q", 1).await, 1);
    conn.close().await;
}

#[tokio::test]
async fn messages_are_durable_by_default_and_in_flight_is_bounded() {
    let (uri, _broker) = warren().await;
    let (conn, _m) = with_queue(&uri, "dur-q").await;
    let p = within(conn.publisher().queue("dur-q").max_in_flight(3).build())
        .await
        .unwrap();
    let mut pending = Vec::new();
    for i in 0..3 {
        pending.push(within(p.publish(Message::new(format!("d{i}")))).await.unwrap());
    }
    // Three await their outcomes; the fourth waits for a place, which
    // comes back with the first outcome.
    let fourth = p.publish(Message::new("d3"));
    tokio::pin!(fourth);
    for o in pending {
        assert_eq!(within(o).await.unwrap(), Outcome::Accepted);
    }
    assert_eq!(
        within(within(fourth).await.unwrap()).await.unwrap(),
        Outcome::Accepted
    );
    let mut c = within(conn.consumer().queue("dur-q").build()).await.unwrap();
    let d = within(c.receive()).await.unwrap();
    assert!(d.message.durable, "durable unless made transient");
    d.accept();
    let t = publish(&p, Message::new("t").transient()).await;
    assert_eq!(t, Outcome::Accepted);
    conn.close().await;
}

#[tokio::test]
async fn pre_settled_publishing_delivers_without_outcomes() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "settled-q").await;
    let p = within(conn.publisher().queue("settled-q").build_pre_settled())
        .await
        .unwrap();
    for i in 0..100 {
        within(p.send(Message::new(format!("s{i}")).transient()))
            .await
            .unwrap();
    }
    assert_eq!(wait_for_count(&m, "settled-q", 100).await, 100);
    p.close();
    conn.close().await;
}

/// A publisher dropped with outcomes to come still has them told (its
/// link is detached once they are), then leaves no link behind: a
/// consumer of the queue gets every message.
#[tokio::test]
async fn a_dropped_publisher_still_tells_its_outcomes() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "dropped-publisher").await;
    let publisher = within(conn.publisher().queue("dropped-publisher").build())
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    for i in 0..200 {
        outcomes.push(
            within(publisher.publish(Message::new(format!("{i}"))))
                .await
                .unwrap(),
        );
    }
    drop(publisher);
    for o in outcomes {
        assert_eq!(within(o).await.unwrap(), Outcome::Accepted);
    }
    assert_eq!(wait_for_count(&m, "dropped-publisher", 200).await, 200);
    conn.close().await;
}
