//! The AMQP 0-9-1 client's calls are cancel-safe: a call dropped after
//! its request went (the other arm of a `select!` won, a timeout ran out)
//! leaves the channel as it was. The next call gets its own reply, not
//! the dropped one's; a dropped `basic.get` puts its message back; a
//! dropped `basic.consume` leaves no consumer behind. Against Warren, and
//! RabbitMQ when `WARREN_CLIENT_RABBITMQ_URI` names one.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use support::proxy::Proxy;
use support::{brokers, unique, within};
use warren_client::amqp091::{
    Channel, Connection, ConsumeOptions, Event, Properties, QueueOptions, RecoveryOptions,
};

/// Poll `f` once and drop it: a call dropped right after its request
/// was written.
async fn poll_once_and_drop<F: Future>(f: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = f => Some(out),
        _ = std::future::ready(()) => None,
    }
}

async fn fill(ch: &Channel, queue: &str, n: u32) {
    for i in 0..n {
        let _unconfirmed = within(ch.publish("", queue, Properties::default(), Bytes::from(i.to_string())))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_dropped_get_puts_its_message_back_and_the_next_call_gets_its_own_reply() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let q = unique("dropped-get");
        within(ch.queue_declare(&q, QueueOptions::default().auto_delete()))
            .await
            .unwrap();
        const N: u32 = 40;
        fill(&ch, &q, N).await;
        let mut got = BTreeSet::new();
        let take = |m: Option<warren_client::amqp091::GetMessage>, got: &mut BTreeSet<String>| {
            m.map(|m| {
                got.insert(String::from_utf8(m.delivery.body.to_vec()).unwrap());
                m.delivery
            })
        };
        for _ in 0..N {
            // A get dropped after its request went, then one awaited.
            assert!(poll_once_and_drop(ch.get(&q, false)).await.is_none());
            if let Some(d) = take(within(ch.get(&q, false)).await.unwrap(), &mut got) {
                within(d.ack()).await.unwrap();
            }
        }
        // What the dropped gets took is back in the queue.
        while let Some(d) = take(within(ch.get(&q, false)).await.unwrap(), &mut got) {
            within(d.ack()).await.unwrap();
        }
        let want: BTreeSet<String> = (0..N).map(|i| i.to_string()).collect();
        assert_eq!(
            got, want,
            "every message got once the dropped gets gave theirs back"
        );
        // The channel is whole: a declare gets its own reply.
        let d = within(ch.queue_declare(&q, QueueOptions::default().auto_delete()))
            .await
            .unwrap();
        assert_eq!((d.name.as_str(), d.message_count), (q.as_str(), 0));
        within(conn.close()).await.unwrap();
    }
}

#[tokio::test]
async fn a_dropped_consume_leaves_no_consumer_behind() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        let q = unique("dropped-consume");
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        assert!(poll_once_and_drop(ch.consume(&q, ConsumeOptions::default()))
            .await
            .is_none());
        // The next call's reply is its own: a declare, then a consumer
        // that gets every message (none held by the dropped one).
        let d = within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        assert_eq!(d.name, q);
        let mut c = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        const N: u32 = 50;
        fill(&ch, &q, N).await;
        for i in 0..N {
            let d = within(c.next()).await.expect("a delivery");
            assert_eq!(
                d.body,
                Bytes::from(i.to_string()),
                "in order, none taken by another"
            );
            within(d.ack()).await.unwrap();
        }
        // Only the live consumer is left on the queue.
        let mut consumers = 0;
        for _ in 0..50 {
            consumers = within(ch.queue_declare(&q, QueueOptions::default()))
                .await
                .unwrap()
                .consumer_count;
            if consumers == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(consumers, 1);
        within(ch.queue_delete(&q, false, false)).await.unwrap();
        within(conn.close()).await.unwrap();
    }
}

/// A consumer dropped without `cancel` is cancelled all the same: the
/// queue has no consumer left, and the deliveries it had not handed out
/// (and those on their way) are back in the queue, for the next consumer
/// in order. The one the application held stays its own.
#[tokio::test]
async fn a_dropped_consumer_is_cancelled_and_what_it_buffered_goes_back() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let conn = within(Connection::open(&uri)).await.unwrap();
        let ch = within(conn.channel()).await.unwrap();
        within(ch.basic_qos(20)).await.unwrap();
        let q = unique("dropped-consumer");
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        const N: u32 = 10;
        fill(&ch, &q, N).await;
        let mut c = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        let held = within(c.next()).await.expect("a delivery");
        assert_eq!(held.body, Bytes::from("0"));
        drop(c);
        let mut d = within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        for _ in 0..50 {
            if (d.consumer_count, d.message_count) == (0, N - 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            d = within(ch.queue_declare(&q, QueueOptions::default()))
                .await
                .unwrap();
        }
        assert_eq!((d.consumer_count, d.message_count), (0, N - 1), "{uri}");
        // The channel is whole, and the rest come to the next consumer.
        let mut next = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        for i in 1..N {
            let d = within(next.next()).await.expect("a delivery");
            assert_eq!(d.body, Bytes::from(i.to_string()), "{uri}");
            within(d.ack()).await.unwrap();
        }
        within(held.ack()).await.unwrap();
        within(ch.queue_delete(&q, false, false)).await.unwrap();
        within(conn.close()).await.unwrap();
    }
}

/// basic.consume's class and method ids, as its frame carries them.
const BASIC_CONSUME: [u8; 4] = [0, 60, 0, 20];

/// A consumer dropped while recovery restores it (its basic.consume sent
/// on the new connection, the ok not back yet) is cancelled once the
/// connection is back: the broker keeps no consumer the application no
/// longer has, holding the queue's messages.
#[tokio::test]
async fn a_consumer_dropped_while_recovery_restores_it_is_cancelled() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let (host, port) = uri
            .split('@')
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|hp| hp.rsplit_once(':'))
            .expect("host:port in the URI");
        let addr = tokio::net::lookup_host((host, port.parse::<u16>().unwrap()))
            .await
            .unwrap()
            .next()
            .unwrap();
        let proxy = Proxy::start(addr).await;
        let via = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.port);
        let recovery = RecoveryOptions::default().max_delay(Duration::from_millis(200));
        let conn = within(Connection::builder(&via).recovery(recovery).open())
            .await
            .unwrap();
        let mut events = conn.events();
        let ch = within(conn.channel()).await.unwrap();
        let q = unique("dropped-in-recovery");
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        let c = within(ch.consume(&q, ConsumeOptions::default())).await.unwrap();
        // The connection is lost; recovery's basic.consume waits in the
        // proxy, and the consumer is dropped meanwhile.
        proxy.pause_at(&BASIC_CONSUME);
        proxy.cut();
        within(proxy.until_paused()).await;
        drop(c);
        proxy.pause(false);
        loop {
            match within(events.next()).await {
                Some(Event::Recovered) => break,
                Some(_) => continue,
                None => panic!("{uri}: the connection ended instead of recovering"),
            }
        }
        // Seen on a connection of its own: no consumer, messages ready.
        let other = within(Connection::open(&uri)).await.unwrap();
        let check = within(other.channel()).await.unwrap();
        const N: u32 = 3;
        fill(&check, &q, N).await;
        let mut d = within(check.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        for _ in 0..50 {
            if (d.consumer_count, d.message_count) == (0, N) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            d = within(check.queue_declare(&q, QueueOptions::default()))
                .await
                .unwrap();
        }
        assert_eq!((d.consumer_count, d.message_count), (0, N), "{uri}");
        // The recovered channel is whole.
        within(ch.queue_declare(&q, QueueOptions::default()))
            .await
            .unwrap();
        within(check.queue_delete(&q, false, false)).await.unwrap();
        within(other.close()).await.unwrap();
        within(conn.close()).await.unwrap();
    }
}
