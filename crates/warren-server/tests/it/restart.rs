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

/// The broker's durable set as its definitions would list it: queue
/// names, exchange names and `source->destination:key` bindings in `/`.
fn durable_set(b: &Broker) -> (Vec<String>, Vec<String>, Vec<String>) {
    let vh = b.running.as_ref().unwrap().ctx.broker.vhost("/").unwrap();
    let (xs, qs, bs) = vh.durable_definitions();
    let mut xs: Vec<String> = xs.iter().map(|x| x.name.to_string()).collect();
    xs.retain(|x| !x.starts_with("amq."));
    let mut qs: Vec<String> = qs.iter().map(|q| q.name.to_string()).collect();
    let mut bs: Vec<String> = bs
        .iter()
        .map(|(src, b)| format!("{src}->{:?}:{}", b.destination, b.routing_key))
        .collect();
    xs.sort();
    qs.sort();
    bs.sort();
    (xs, qs, bs)
}

/// Removals and their cascades, users and vhosts come back as they were
/// left, over two restarts: the first replays the change log over the
/// snapshot, the second a log written after the first one's compaction.
#[tokio::test]
async fn deletions_cascades_users_and_vhosts_survive_restarts() {
    let dir = temp_dir("restart-log");
    let d = dir.clone();
    let mut b = Broker::start_with(move |c| c.data_dir = d).await;
    let durable_x = |auto_delete| ExchangeDeclareOptions {
        durable: true,
        auto_delete,
        ..Default::default()
    };
    let durable_q = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    {
        let (_c, ch) = b.channel().await;
        within(ch.exchange_declare(
            "keep-x".into(),
            ExchangeKind::Topic,
            durable_x(false),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        within(ch.exchange_declare(
            "auto-x".into(),
            ExchangeKind::Fanout,
            durable_x(true),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        for q in ["q1", "q2", "q3"] {
            within(ch.queue_declare(q.into(), durable_q, FieldTable::default()))
                .await
                .unwrap();
        }
        for (q, x, key) in [
            ("q1", "keep-x", "k1"),
            ("q2", "keep-x", "k2"),
            ("q3", "auto-x", ""),
        ] {
            within(ch.queue_bind(
                q.into(),
                x.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            ))
            .await
            .unwrap();
        }
        within(ch.queue_unbind("q2".into(), "keep-x".into(), "k2".into(), FieldTable::default()))
            .await
            .unwrap();
        // Takes its binding, and with it the auto-delete exchange.
        within(ch.queue_delete("q3".into(), QueueDeleteOptions::default()))
            .await
            .unwrap();
    }
    {
        let broker = &b.running.as_ref().unwrap().ctx.broker;
        broker.add_vhost("gone");
        broker.add_vhost("kept");
        broker.put_user(warren_core::User {
            name: "u2".into(),
            password_hash: warren_core::User::hash_password("p"),
            tags: vec![],
            permissions: Default::default(),
            topic_permissions: Default::default(),
            limits: Default::default(),
            token: None,
        });
        assert!(broker.update_user("u2", |u| {
            u.permissions
                .insert("kept".into(), warren_core::Permission::full());
        }));
        broker.delete_vhost("gone");
    }
    let expected = (
        vec!["keep-x".to_string()],
        vec!["q1".to_string(), "q2".to_string()],
        vec!["keep-x->Queue(\"q1\"):k1".to_string()],
    );
    assert_eq!(durable_set(&b), expected);

    b.restart().await;
    assert_eq!(durable_set(&b), expected);
    {
        let broker = &b.running.as_ref().unwrap().ctx.broker;
        assert!(broker.vhost("gone").is_none());
        assert!(broker.vhost("kept").is_some());
        let u2 = broker.user("u2").expect("user u2 kept");
        assert!(u2.check_password("p"));
        assert!(u2.permissions.contains_key("kept"));
    }
    {
        let (_c, ch) = b.channel().await;
        within(ch.queue_delete("q2".into(), QueueDeleteOptions::default()))
            .await
            .unwrap();
        within(ch.exchange_delete("keep-x".into(), ExchangeDeleteOptions::default()))
            .await
            .unwrap();
    }
    b.running.as_ref().unwrap().ctx.broker.delete_user("u2");

    b.restart().await;
    assert_eq!(durable_set(&b), (vec![], vec!["q1".to_string()], vec![]));
    assert!(b.running.as_ref().unwrap().ctx.broker.user("u2").is_none());
}
