//! The AMQP 0-9-1 client against a Warren broker started in-process on
//! 127.0.0.1:0. With `WARREN_CLIENT_RABBITMQ_URI` set (see
//! `tests/client/rabbitmq.sh`), each test runs against that broker too.

mod support;

use bytes::Bytes;
use support::{brokers, unique, within};
use warren_client::amqp091::{
    Confirmation, Connection, ConsumeOptions, Error, ExchangeKind, ExchangeOptions, FieldTable, Message,
    Properties, PublishOptions, QueueOptions,
};

#[tokio::test]
async fn publish_with_confirms_consume_and_ack() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        let x = unique("x");
        within(ch.exchange_declare(&x, ExchangeKind::Direct, ExchangeOptions::default().auto_delete()))
            .await
            .unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        assert!(!q.name.is_empty(), "the broker names the queue");
        within(ch.queue_bind(&q.name, &x, "k", FieldTable::new()))
            .await
            .unwrap();
        let mut confirms = Vec::new();
        for i in 0..500u32 {
            let body = Bytes::from(i.to_be_bytes().to_vec());
            confirms.push(
                within(ch.publish(&x, "k", Properties::default(), body))
                    .await
                    .unwrap(),
            );
        }
        for c in confirms {
            assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        }
        within(ch.basic_qos(50)).await.unwrap();
        let mut consumer = within(ch.consume(&q.name, ConsumeOptions::default()))
            .await
            .unwrap();
        for i in 0..500u32 {
            let d = within(consumer.next()).await.expect("a delivery");
            assert_eq!(&d.body[..], &i.to_be_bytes(), "in order, against {uri}");
            assert_eq!(d.consumer_tag, consumer.tag());
            within(d.ack()).await.unwrap();
        }
        within(consumer.cancel()).await.unwrap();
        assert!(
            within(ch.get(&q.name, true)).await.unwrap().is_none(),
            "all acked"
        );
        within(conn.close()).await.unwrap();
        assert!(conn.is_closed());
    }
}

#[tokio::test]
async fn an_unroutable_mandatory_publish_comes_back_with_its_body() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        let mandatory = PublishOptions { mandatory: true };
        let c = within(ch.publish_with(
            "amq.direct",
            &unique("nobody"),
            mandatory,
            Properties::default(),
            "lost?".into(),
        ))
        .await
        .unwrap();
        match within(c).await.unwrap() {
            Confirmation::Returned(r) => {
                assert_eq!(r.reply_code, 312, "NO_ROUTE");
                assert_eq!(&r.body[..], b"lost?");
            }
            other => panic!("expected the message back from {uri}, got {other:?}"),
        }
        // Without mandatory the same publish is simply acked.
        let c = within(ch.publish("amq.direct", &unique("nobody"), Properties::default(), "x".into()))
            .await
            .unwrap();
        assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn a_channel_error_closes_the_channel_not_the_connection() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let passive = QueueOptions {
            passive: true,
            ..Default::default()
        };
        match within(ch.queue_declare(&unique("missing"), passive)).await {
            Err(Error::ChannelClosed { code: 404, .. }) => {}
            other => panic!("expected 404 from {uri}, got {other:?}"),
        }
        assert!(matches!(
            within(ch.queue_purge("x")).await,
            Err(Error::ChannelClosed { code: 404, .. })
        ));
        let again = within(conn.channel()).await.unwrap();
        let q = within(again.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        assert_eq!(q.message_count, 0);
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn get_nack_requeue_and_transactions() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        within(ch.tx_select()).await.unwrap();
        // Not in confirm mode: nothing is confirmed, the future says so.
        let sent = within(ch.publish("", &q.name, Properties::default(), "rolled back".into()))
            .await
            .unwrap();
        assert_eq!(within(sent).await.unwrap(), Confirmation::Sent);
        within(ch.tx_rollback()).await.unwrap();
        assert!(
            within(ch.get(&q.name, true)).await.unwrap().is_none(),
            "rolled back"
        );
        for body in ["one", "two"] {
            let sent = within(ch.publish("", &q.name, Properties::default(), body.into()))
                .await
                .unwrap();
            assert_eq!(within(sent).await.unwrap(), Confirmation::Sent);
        }
        within(ch.tx_commit()).await.unwrap();
        let first = within(ch.get(&q.name, false)).await.unwrap().expect("a message");
        assert_eq!((&first.delivery.body[..], first.message_count), (&b"one"[..], 1));
        assert!(!first.delivery.redelivered);
        within(first.delivery.nack(true)).await.unwrap();
        within(ch.tx_commit()).await.unwrap();
        let again = within(ch.get(&q.name, false)).await.unwrap().expect("requeued");
        assert_eq!(&again.delivery.body[..], b"one");
        assert!(again.delivery.redelivered);
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn a_wrong_password_is_refused() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let bad = uri.replacen("guest:guest", "guest:wrong", 1);
        match within(Connection::open(&bad)).await {
            Err(Error::ConnectionClosed { code: 403, .. }) => {}
            other => panic!("expected 403 ACCESS_REFUSED from {uri}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_in_flight_limit_holds_publishers_back_and_every_confirm_comes() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        // Four tasks publish through one channel, far past the limit;
        // each waits for its confirms at the end.
        let mut tasks = Vec::new();
        for t in 0..4 {
            let (ch, q) = (ch.clone(), q.name.clone());
            tasks.push(tokio::spawn(async move {
                let mut pending = Vec::new();
                for i in 0..1000u32 {
                    let body = Bytes::from(format!("{t}-{i}"));
                    pending.push(ch.publish("", &q, Properties::default(), body).await.unwrap());
                }
                let mut acked = 0;
                for c in pending {
                    if c.await.unwrap() == Confirmation::Ack {
                        acked += 1;
                    }
                }
                acked
            }));
        }
        let mut acked = 0;
        for t in tasks {
            acked += within(t).await.unwrap();
        }
        assert_eq!(acked, 4000);
        let declared = within(ch.queue_declare(
            &q.name,
            QueueOptions {
                passive: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
        assert_eq!(declared.message_count, 4000, "against {uri}");
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn handlers_run_as_concurrently_as_asked_and_in_order_at_one() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.basic_qos(32)).await.unwrap();
        let q = unique("dispatch");
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        for i in 0..64 {
            let _sent = within(ch.publish("", &q, Properties::default(), Bytes::from(format!("{i}"))))
                .await
                .unwrap();
        }
        // Eight at once, never more, while each handler waits a little.
        let consumer = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let (active, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (a, m, d) = (active.clone(), most.clone(), done.clone());
        let running = tokio::spawn(consumer.run_concurrently(8, move |delivery| {
            let (a, m, d) = (a.clone(), m.clone(), d.clone());
            async move {
                let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                a.fetch_sub(1, Ordering::SeqCst);
                delivery.ack().await.unwrap();
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
        within(async {
            while done.load(Ordering::SeqCst) < 64 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(most.load(Ordering::SeqCst), 8, "handlers at once");
        running.abort();
        within(ch.close()).await.unwrap();

        // At one, in the order published.
        let ch = within(conn.channel()).await.unwrap();
        for i in 0..20 {
            let _sent = within(ch.publish("", &q, Properties::default(), Bytes::from(format!("{i}"))))
                .await
                .unwrap();
        }
        let consumer = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let running = tokio::spawn(consumer.run(move |delivery| {
            let s = s.clone();
            async move {
                s.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&delivery.body).into_owned());
                delivery.ack().await.unwrap();
            }
        }));
        within(async {
            while seen.lock().unwrap().len() < 20 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        assert_eq!(*seen.lock().unwrap(), want);
        running.abort();
        within(ch.queue_delete(&q, false, false)).await.unwrap();
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn handlers_done_at_once_each_run_once_and_the_run_ends_with_its_consumer() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.basic_qos(16)).await.unwrap();
        let q = unique("fast-handlers");
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        let batch = (0..300u32).map(|i| Message::new("", &q, i.to_be_bytes().to_vec()));
        within(ch.publish_batch(batch)).await.unwrap();
        // Handlers with nothing to wait for are done when first polled;
        // a few wait, so both kinds run side by side.
        let consumer = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let running = tokio::spawn(consumer.run_concurrently(8, move |delivery| {
            let s = s.clone();
            async move {
                let i = u32::from_be_bytes(delivery.body[..4].try_into().unwrap());
                if i % 50 == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                delivery.ack().await.unwrap();
                s.lock().unwrap().push(i);
            }
        }));
        within(async {
            while seen.lock().unwrap().len() < 300 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        // Deleting the queue cancels its consumer: the run returns.
        within(ch.queue_delete(&q, false, false)).await.unwrap();
        within(running).await.unwrap();
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        let distinct: HashSet<u32> = seen.iter().copied().collect();
        assert_eq!((seen.len(), distinct.len()), (300, 300), "each handled once");
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_is_published_in_order_in_turns_of_the_in_flight_limit() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        // Far below the batch: it goes in many turns.
        ch.set_max_in_flight(64);
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        let nobody = unique("nobody");
        let mut batch: Vec<Message> = (0..1000u32)
            .map(|i| Message::new("", &q.name, Bytes::from(i.to_be_bytes().to_vec())))
            .collect();
        // One unroutable mandatory message in the middle comes back.
        batch.insert(500, Message::new("amq.direct", &nobody, "lost?").mandatory());
        let confirms = within(ch.publish_batch(batch)).await.unwrap();
        assert_eq!(confirms.len(), 1001);
        let mut settled = Vec::new();
        for c in confirms {
            settled.push(within(c).await.unwrap());
        }
        assert!(
            matches!(&settled[500], Confirmation::Returned(r)
                if r.routing_key == nobody && &r.body[..] == b"lost?" && r.properties.headers.is_none()),
            "the mandatory one came back: {:?}, against {uri}",
            settled[500]
        );
        settled.remove(500);
        assert!(settled.iter().all(|c| *c == Confirmation::Ack), "against {uri}");
        within(ch.basic_qos(100)).await.unwrap();
        let mut consumer = within(ch.consume(&q.name, ConsumeOptions::default()))
            .await
            .unwrap();
        for i in 0..1000u32 {
            let d = within(consumer.next()).await.expect("a delivery");
            assert_eq!(&d.body[..], &i.to_be_bytes(), "in order, against {uri}");
            within(d.ack()).await.unwrap();
        }
        // Out of confirm mode a batch is sent, nothing more known.
        let plain = within(conn.channel()).await.unwrap();
        let sent = within(plain.publish_batch((0..10).map(|_| Message::new("", &q.name, "x"))))
            .await
            .unwrap();
        assert_eq!(sent.len(), 10);
        for c in sent {
            assert_eq!(within(c).await.unwrap(), Confirmation::Sent);
        }
        for _ in 0..10 {
            let d = within(consumer.next()).await.expect("a delivery");
            assert_eq!(&d.body[..], b"x");
            within(d.ack()).await.unwrap();
        }
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn typed_bodies_go_as_json_and_other_content_types_are_refused() {
    use warren_client::codec::{CodecError, Json};
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Order {
        id: u32,
        item: String,
    }
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        let order = Order {
            id: 7,
            item: "tea".into(),
        };
        let m = Message::encode::<Json, _>("", &q.name, &order).unwrap();
        assert_eq!(
            within(within(ch.publish_message(m)).await.unwrap())
                .await
                .unwrap(),
            Confirmation::Ack
        );
        let text = Properties {
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        let c = within(ch.publish("", &q.name, text, r#"{"id":8,"item":"milk"}"#.into()))
            .await
            .unwrap();
        assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        let mut consumer = within(ch.consume(&q.name, ConsumeOptions::default()))
            .await
            .unwrap();
        let d = within(consumer.next()).await.unwrap();
        assert_eq!(
            d.properties().content_type.as_ref().unwrap().to_str_lossy(),
            "application/json"
        );
        assert_eq!(d.decode::<Json, Order>().unwrap(), order, "against {uri}");
        let d = within(consumer.next()).await.unwrap();
        match d.decode::<Json, Order>() {
            Err(Error::Codec(CodecError { reason, .. })) => {
                assert!(reason.contains("text/plain"), "{reason}")
            }
            other => panic!("a text/plain body decoded as JSON: {other:?}"),
        }
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn a_trace_context_travels_from_publisher_through_a_handler_to_the_next_consumer() {
    use warren_client::trace::TraceContext;
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let first = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap()
            .name;
        let second = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap()
            .name;
        let root = TraceContext::new_root();
        // Inside the scope the publish carries a child of the root.
        let c = within(
            root.clone()
                .scope(ch.publish("", &first, Properties::default(), "traced".into())),
        )
        .await
        .unwrap();
        within(c).await.unwrap();
        // Outside it nothing is added.
        let _sent = within(ch.publish("", &first, Properties::default(), "plain".into()))
            .await
            .unwrap();
        // A handler republishes what it gets: inside the delivery's scope.
        let consumer = within(ch.consume(&first, ConsumeOptions::default().no_ack()))
            .await
            .unwrap();
        let relay = ch.clone();
        let to = second.clone();
        tokio::spawn(consumer.run(move |d| {
            let (relay, to) = (relay.clone(), to.clone());
            async move {
                let _ = relay
                    .publish("", &to, Properties::default(), d.body.clone())
                    .await;
            }
        }));
        let mut last = within(ch.consume(&second, ConsumeOptions::default().no_ack()))
            .await
            .unwrap();
        let relayed = within(last.next()).await.unwrap();
        assert_eq!(&relayed.body[..], b"traced");
        let seen = relayed
            .trace_context()
            .expect("the relayed message carries the trace");
        assert_eq!(seen.trace_id(), root.trace_id(), "one trace, against {uri}");
        assert_ne!(
            seen.parent_id(),
            root.parent_id(),
            "each publish is a span of its own"
        );
        let plain = within(last.next()).await.unwrap();
        assert_eq!(&plain.body[..], b"plain");
        assert_eq!(
            plain.trace_context(),
            None,
            "no context, no header, against {uri}"
        );
        within(conn.close()).await.unwrap();

        // Turned off, nothing is added even inside a scope.
        let quiet = within(Connection::builder(&uri).trace_propagation(false).open())
            .await
            .unwrap();
        let ch = within(quiet.channel()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap()
            .name;
        let _sent = within(
            root.clone()
                .scope(ch.publish("", &q, Properties::default(), "x".into())),
        )
        .await
        .unwrap();
        let got = within(ch.get(&q, true)).await.unwrap().expect("the message");
        assert_eq!(got.delivery.trace_context(), None);
        within(quiet.close()).await.unwrap();
    }
}

/// With `busy_poll` the reader polls its socket before sleeping; on this
/// test's one-thread runtime the broker (in-process) runs only while the
/// reader yields, so a reader that held the thread for its budget (5 s
/// here) would stall every step past the test's limit. Publishing one
/// at a time, a synchronous method after each, and consuming all of it
/// in order still work.
#[tokio::test]
async fn a_busy_polling_reader_leaves_the_thread_to_others_and_misses_nothing() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(
            Connection::builder(&uri)
                .busy_poll(std::time::Duration::from_secs(5))
                .open(),
        )
        .await
        .unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        for i in 0..300u32 {
            let body = Bytes::from(i.to_be_bytes().to_vec());
            let c = within(ch.publish("", &q.name, Properties::default(), body))
                .await
                .unwrap();
            assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
            within(ch.basic_qos(10)).await.unwrap();
        }
        let mut consumer = within(ch.consume(&q.name, ConsumeOptions::default()))
            .await
            .unwrap();
        for i in 0..300u32 {
            let d = within(consumer.next()).await.expect("a delivery");
            assert_eq!(&d.body[..], &i.to_be_bytes(), "in order, against {uri}");
            within(d.ack()).await.unwrap();
        }
        within(conn.close()).await.unwrap();
    }
}

/// `publish_bodies` sends each body with the one set of properties
/// (encoded once), in order, each confirmed; inside a trace scope each
/// message still carries a span of its own.
#[tokio::test]
async fn bodies_published_together_share_their_properties_and_keep_their_order() {
    use warren_client::trace::TraceContext;
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.confirm_select()).await.unwrap();
        ch.set_max_in_flight(64);
        let q = within(ch.queue_declare("", QueueOptions::default().exclusive()))
            .await
            .unwrap();
        let mut headers = FieldTable::new();
        headers.insert(
            "tenant",
            warren_client::amqp091::FieldValue::LongStr("eu-7".into()),
        );
        let props = Properties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            headers: Some(headers),
            ..Default::default()
        };
        // More than the in-flight limit: sent in turns.
        let bodies = (0..300u32).map(|i| Bytes::from(format!("body {i}")));
        let confirms = within(ch.publish_bodies("", &q.name, &props, bodies))
            .await
            .unwrap();
        assert_eq!(confirms.len(), 300);
        for c in confirms {
            assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        }
        let root = TraceContext::new_root();
        let traced = (0..3u32).map(|i| Bytes::from(format!("traced {i}")));
        let confirms = within(root.clone().scope(ch.publish_bodies("", &q.name, &props, traced)))
            .await
            .unwrap();
        for c in confirms {
            assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        }
        let mut consumer = within(ch.consume(&q.name, ConsumeOptions::default().no_ack()))
            .await
            .unwrap();
        for i in 0..300u32 {
            let d = within(consumer.next()).await.expect("a delivery");
            assert_eq!(
                &d.body[..],
                format!("body {i}").as_bytes(),
                "in order, against {uri}"
            );
            let p = d.properties();
            assert_eq!(p.content_type.as_ref().unwrap().to_str_lossy(), "text/plain");
            assert_eq!(p.delivery_mode, Some(2));
            let h = p.headers.as_ref().expect("the headers came");
            assert!(
                matches!(h.get("tenant"), Some(warren_client::amqp091::FieldValue::LongStr(v)) if &v[..] == b"eu-7"),
                "{h:?}"
            );
            assert!(d.trace_context().is_none(), "no trace outside a scope");
        }
        let mut spans = std::collections::HashSet::new();
        for i in 0..3u32 {
            let d = within(consumer.next()).await.expect("a traced delivery");
            assert_eq!(&d.body[..], format!("traced {i}").as_bytes());
            assert_eq!(
                d.properties().content_type.as_ref().unwrap().to_str_lossy(),
                "text/plain"
            );
            let t = d.trace_context().expect("a trace context");
            assert_eq!(t.trace_id(), root.trace_id());
            spans.insert(t.parent_id());
        }
        assert_eq!(spans.len(), 3, "a span per message");
        within(conn.close()).await.unwrap();
    }
}
