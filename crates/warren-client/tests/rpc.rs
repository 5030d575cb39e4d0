//! Direct reply-to through the RPC helper, against Warren and (through
//! `tests/client/rabbitmq.sh`) RabbitMQ: concurrent requests each get
//! their own reply, and a request nobody answers times out.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::{brokers, unique, within};
use warren_client::amqp091::{reply, Connection, ConsumeOptions, Error, Properties, QueueOptions, RpcClient};

#[tokio::test]
async fn requests_get_their_own_replies_and_an_unanswered_one_times_out() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        // The responder: upper-cases each request back to its sender.
        let server = within(Connection::open(&uri)).await.unwrap();
        let sch = within(server.channel()).await.unwrap();
        let q = unique("rpc");
        within(sch.queue_declare(&q, QueueOptions::default().auto_delete()))
            .await
            .unwrap();
        let mut requests = within(sch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let responder = tokio::spawn(async move {
            while let Some(r) = requests.next().await {
                let answer = Bytes::from(String::from_utf8_lossy(&r.body).to_uppercase());
                let _sent = reply(&sch, &r, Properties::default(), answer).await.unwrap();
                r.ack().await.unwrap();
            }
        });

        let conn = within(Connection::open(&uri)).await.unwrap();
        let rpc = std::sync::Arc::new(within(RpcClient::new(&conn)).await.unwrap());
        let mut calls = Vec::new();
        for i in 0..50 {
            let (rpc, q) = (rpc.clone(), q.clone());
            calls.push(tokio::spawn(async move {
                let body = Bytes::from(format!("request {i}"));
                let reply = rpc
                    .call("", &q, Properties::default(), body, Duration::from_secs(10))
                    .await
                    .unwrap();
                (i, reply.body)
            }));
        }
        for c in calls {
            let (i, body) = within(c).await.unwrap();
            assert_eq!(body, Bytes::from(format!("REQUEST {i}")));
        }
        let e = within(rpc.call(
            "",
            &unique("nobody-listens"),
            Properties::default(),
            Bytes::from_static(b"hello?"),
            Duration::from_millis(300),
        ))
        .await
        .unwrap_err();
        assert!(matches!(e, Error::Timeout(_)), "{e:?}");
        // A message without reply_to is no request to answer.
        let ch = within(conn.channel()).await.unwrap();
        let plain = unique("plain");
        within(ch.queue_declare(&plain, QueueOptions::default().auto_delete()))
            .await
            .unwrap();
        let _sent = within(ch.publish("", &plain, Properties::default(), Bytes::from_static(b"x")))
            .await
            .unwrap();
        let got = loop {
            if let Some(m) = within(ch.get(&plain, true)).await.unwrap() {
                break m;
            }
        };
        let e = within(reply(&ch, &got.delivery, Properties::default(), Bytes::new()))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NotARequest), "{e:?}");
        responder.abort();
        within(conn.close()).await.unwrap();
        within(server.close()).await.unwrap();
    }
}
