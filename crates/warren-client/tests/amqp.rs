//! warren-client's AMQP 1.0 module with RabbitMQ 3.x's v1 addresses, on
//! Warren and, when `tests/client/rabbitmq.sh` names it, on the RabbitMQ
//! 3.10 anchor's AMQP 1.0 plugin. The other AMQP 1.0 suites follow
//! RabbitMQ's AMQP 1.0 clients' tests: amqp_queue.rs, amqp_exchange.rs,
//! amqp_publisher.rs, amqp_consumer.rs, amqp_consumer_stream.rs,
//! amqp_connection_recovery.rs, amqp_rpc.rs.

mod support;

use support::within;
use warren_client::amqp::{Connection, Message, Outcome};

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
