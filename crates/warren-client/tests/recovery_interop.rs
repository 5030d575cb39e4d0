//! Recovery when the broker closes the connection: an operator's close
//! through the management API (320 CONNECTION_FORCED), against Warren and,
//! through `tests/client/rabbitmq.sh`, RabbitMQ. The connection comes
//! back with its channels, its exchanges and bindings, its broker-named
//! exclusive queue under a new name, and its consumer; with recovery
//! off it ends, and so do its consumers and calls.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::{close_through_the_api, targets, unique, within};
use warren_client::amqp091::{
    reply, Confirmation, Connection, ConsumeOptions, Error, Event, Events, ExchangeKind, ExchangeOptions,
    FieldTable, Properties, QueueOptions, RecoveryOptions, RpcClient,
};

async fn next_event(events: &mut Events, want: impl Fn(&Event) -> bool) -> Event {
    loop {
        match within(events.next()).await {
            Some(e) if want(&e) => return e,
            Some(_) => continue,
            None => panic!("the connection's events ended"),
        }
    }
}

fn text(b: &Bytes) -> &str {
    std::str::from_utf8(b).unwrap()
}

#[tokio::test]
async fn a_connection_an_operator_closes_comes_back_with_its_topology_and_consumer() {
    let (targets, _warren) = targets().await;
    for t in targets {
        let name = unique("operator-close");
        let conn = within(
            Connection::builder(&t.uri)
                .name(&name)
                .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(500)))
                .open(),
        )
        .await
        .unwrap();
        let mut events = conn.events();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.basic_qos(10)).await.unwrap();
        // An exchange bound to another, and a broker-named exclusive
        // queue bound to the second.
        let (front, back) = (unique("front"), unique("back"));
        for x in [&front, &back] {
            within(ch.exchange_declare(x, ExchangeKind::Fanout, ExchangeOptions::default().auto_delete()))
                .await
                .unwrap();
        }
        within(ch.exchange_bind(&back, &front, "", FieldTable::new()))
            .await
            .unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap()
            .name;
        within(ch.queue_bind(&q, &back, "", FieldTable::new()))
            .await
            .unwrap();
        let mut consumer = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let publish = |body: &'static str| {
            let ch = ch.clone();
            let front = front.clone();
            async move {
                let confirm = within(ch.publish(&front, "", Properties::default(), Bytes::from(body)))
                    .await
                    .unwrap();
                // Not in confirm mode: handed to the connection.
                assert_eq!(confirm.await.unwrap(), Confirmation::Sent);
            }
        };
        // A responder and an RPC client on the same connection: both
        // their consumers come back too.
        let svc = unique("svc");
        within(ch.queue_declare(&svc, QueueOptions::default().auto_delete()))
            .await
            .unwrap();
        let rch = within(conn.channel()).await.unwrap();
        let mut requests = within(rch.consume(&svc, ConsumeOptions::default()))
            .await
            .unwrap();
        let responder = tokio::spawn(async move {
            while let Some(r) = requests.next().await {
                let _sent = reply(&rch, &r, Properties::default(), r.body.clone()).await;
                let _ = r.ack().await;
            }
        });
        let rpc = within(RpcClient::new(&conn)).await.unwrap();
        let echo = |text: &'static str| {
            rpc.call(
                "",
                &svc,
                Properties::default(),
                Bytes::from(text),
                Duration::from_secs(10),
            )
        };
        assert_eq!(text(&within(echo("one")).await.unwrap().body), "one");
        publish("before").await;
        let d = within(consumer.next()).await.unwrap();
        assert_eq!(text(&d.body), "before");
        within(d.ack()).await.unwrap();

        close_through_the_api(&t, &name).await;
        let lost = next_event(&mut events, |e| matches!(e, Event::Disconnected { .. })).await;
        assert!(
            matches!(
                &lost,
                Event::Disconnected {
                    error: Error::ConnectionClosed { code: 320, .. }
                }
            ),
            "{lost:?}"
        );
        let renamed = next_event(&mut events, |e| matches!(e, Event::QueueRenamed { .. })).await;
        assert!(
            matches!(&renamed, Event::QueueRenamed { old, new } if *old == q && *new != q),
            "{renamed:?}"
        );
        next_event(&mut events, |e| matches!(e, Event::Recovered)).await;

        // Through both exchanges to the new queue, to the same consumer.
        publish("after").await;
        let d = within(consumer.next()).await.unwrap();
        assert_eq!(text(&d.body), "after");
        within(d.ack()).await.unwrap();
        assert_eq!(text(&within(echo("two")).await.unwrap().body), "two");
        responder.abort();
        assert!(!conn.is_closed());
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn with_recovery_off_a_closed_connection_ends_its_consumers_and_calls() {
    let (targets, _warren) = targets().await;
    for t in targets {
        let name = unique("no-recovery");
        let conn = within(
            Connection::builder(&t.uri)
                .name(&name)
                .recovery(RecoveryOptions::disabled())
                .open(),
        )
        .await
        .unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap()
            .name;
        let mut consumer = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        close_through_the_api(&t, &name).await;
        assert!(
            within(consumer.next()).await.is_none(),
            "the consumer's stream ends"
        );
        let e = within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::ConnectionClosed { code: 320, .. }), "{e:?}");
        assert!(conn.is_closed());
    }
}
