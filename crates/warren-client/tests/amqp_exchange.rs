//! warren-client's AMQP 1.0 management of exchanges and bindings against
//! an in-process Warren, following RabbitMQ's AMQP 1.0 clients' exchange
//! and binding tests: each exchange type declared and deleted, bindings
//! from an exchange to a queue and to another exchange routing, unbinding
//! stopping them.

mod support;

use support::amqp::{publish, wait_for_count, warren};
use support::within;
use warren_client::amqp::{BindingSpec, Connection, Error, ExchangeSpec, Message, Outcome, QueueSpec};

#[tokio::test]
async fn each_exchange_type_is_declared_and_deleted() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    for spec in [
        ExchangeSpec::direct("x-direct"),
        ExchangeSpec::topic("x-topic"),
        ExchangeSpec::fanout("x-fanout"),
        ExchangeSpec::headers("x-headers"),
        ExchangeSpec::new("x-custom", "x-no-such-type"),
    ] {
        let declared = within(m.declare_exchange(&spec)).await;
        if spec.name == "x-custom" {
            // A type the broker lacks is refused, as RabbitMQ refuses one
            // whose plugin is not enabled.
            assert!(matches!(declared, Err(Error::Management { .. })), "{declared:?}");
            continue;
        }
        declared.unwrap();
        // The same again is fine; another type for the name is not.
        within(m.declare_exchange(&spec)).await.unwrap();
        let other = if spec.name == "x-fanout" {
            ExchangeSpec::direct(&spec.name)
        } else {
            ExchangeSpec::fanout(&spec.name)
        };
        match within(m.declare_exchange(&other)).await {
            Err(Error::Management { status: 409, .. }) => {}
            r => panic!("{}: expected 409, got {r:?}", spec.name),
        }
        within(m.delete_exchange(&spec.name)).await.unwrap();
    }
    conn.close().await;
}

#[tokio::test]
async fn bindings_route_and_unbinding_stops_them_refused_and_per_message_targets() {
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
    assert_eq!(publish(&p, Message::new("u")).await, Outcome::Accepted);
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
async fn an_exchange_bound_to_an_exchange_routes_through_it() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_exchange(&ExchangeSpec::topic("front")))
        .await
        .unwrap();
    within(m.declare_exchange(&ExchangeSpec::fanout("back")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("behind")))
        .await
        .unwrap();
    within(m.bind(&BindingSpec::to_queue("back", "behind", "")))
        .await
        .unwrap();
    let e2e = BindingSpec::to_exchange("front", "back", "audit.#");
    within(m.bind(&e2e)).await.unwrap();
    let p = within(conn.publisher().exchange("front", "audit.login").build())
        .await
        .unwrap();
    assert_eq!(publish(&p, Message::new("a")).await, Outcome::Accepted);
    assert_eq!(wait_for_count(&m, "behind", 1).await, 1);
    within(m.unbind(&e2e)).await.unwrap();
    assert_eq!(publish(&p, Message::new("b")).await, Outcome::Released);
    within(m.delete_exchange("front")).await.unwrap();
    within(m.delete_exchange("back")).await.unwrap();
    conn.close().await;
}
