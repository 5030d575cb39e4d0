//! Durable definitions survive a restart; transient ones do not.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::ExchangeKind;

use crate::common::*;

#[tokio::test]
async fn durable_definitions_survive_restart() {
    let dir = temp_dir("restart");
    let d2 = dir.clone();
    let mut b = Broker::start_with(move |c| c.data_dir = d2).await;
    {
        let (_c, ch) = b.channel().await;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.exchange_declare(
            "dx".into(),
            ExchangeKind::Topic,
            durable,
            table(&[("alternate-exchange", s("ae"))]),
        ))
        .await
        .unwrap();
        within(ch.exchange_declare(
            "tx".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        let dq = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.queue_declare(
            "dq".into(),
            dq,
            table(&[("x-message-ttl", i(60000)), ("x-max-length", i(10))]),
        ))
        .await
        .unwrap();
        let anon = within(ch.queue_declare("".into(), dq, FieldTable::default()))
            .await
            .unwrap();
        assert!(anon.name().as_str().starts_with("amq.gen-"));
        within(ch.queue_declare("tq".into(), QueueDeclareOptions::default(), FieldTable::default()))
            .await
            .unwrap();
        within(ch.queue_bind(
            "dq".into(),
            "dx".into(),
            "a.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        within(ch.queue_bind(
            "tq".into(),
            "dx".into(),
            "b".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        b.stop().await;
        // Same data directory, new process state.
        let d3 = dir.clone();
        b = Broker::start_with(move |c| c.data_dir = d3).await;
        let (_c, ch) = b.channel().await;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        within(ch.queue_declare(anon.name().clone(), passive, FieldTable::default()))
            .await
            .expect("server-named durable queue");
    }
    let (_c, ch) = b.channel().await;
    // Redeclaring with the same arguments succeeds: they were kept.
    let dq = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch.queue_declare(
        "dq".into(),
        dq,
        table(&[("x-message-ttl", i(60000)), ("x-max-length", i(10))]),
    ))
    .await
    .unwrap();
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch.exchange_declare(
        "dx".into(),
        ExchangeKind::Topic,
        durable,
        table(&[("alternate-exchange", s("ae"))]),
    ))
    .await
    .unwrap();
    // The binding survived: a publish routes.
    within(ch.basic_publish(
        "dx".into(),
        "a.b".into(),
        BasicPublishOptions::default(),
        b"m",
        Default::default(),
    ))
    .await
    .unwrap();
    let q = within(ch.queue_declare(
        "dq".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert_eq!(q.message_count(), 1);
    // Transient ones are gone.
    for (is_queue, name) in [(true, "tq"), (false, "tx")] {
        let (_c, ch) = b.channel().await;
        let err = if is_queue {
            within(ch.queue_declare(
                name.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ))
            .await
            .map(|_| ())
            .unwrap_err()
        } else {
            within(ch.exchange_declare(
                name.into(),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ))
            .await
            .unwrap_err()
        };
        assert_eq!(amqp_error(&err).0, 404, "{name}");
    }
}
