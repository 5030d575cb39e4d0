//! Durable classic queues: confirmed persistent messages survive SIGKILL
//! and restarts exactly once; unacked ones come back redelivered;
//! transient ones do not come back; a deep backlog is paged to disk (the
//! memory gauge stays bounded) and drains in order; TTL, max-length and
//! dead-lettering act on stored messages.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use parking_lot::Mutex;

use crate::binary::{free_port, spawn, wait_for_line};
use crate::common::*;

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// A broker on `dir` (kept across restarts).
async fn start_in(dir: &std::path::Path) -> Broker {
    let d = dir.to_path_buf();
    Broker::start_with(move |c| c.data_dir = d).await
}

async fn declare_durable(ch: &Channel, name: &str, args: FieldTable) -> lapin::Queue {
    within(ch.queue_declare(name.into(), durable(), args))
        .await
        .unwrap()
}

async fn confirms(ch: &Channel) {
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
}

async fn publish(ch: &Channel, queue: &str, body: &[u8], props: BasicProperties) {
    within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        props,
    ))
    .await
    .unwrap();
}

/// Publish and wait for the broker's ack.
async fn publish_confirmed(ch: &Channel, queue: &str, body: &[u8], props: BasicProperties) {
    let confirm = within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        props,
    ))
    .await
    .unwrap();
    assert!(within(confirm).await.unwrap().is_ack());
}

/// basic.get everything in `queue` (acking), as (body, redelivered).
async fn drain(ch: &Channel, queue: &str) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
    {
        out.push((m.delivery.data.clone(), m.delivery.redelivered));
    }
    out
}

#[tokio::test]
async fn confirmed_messages_survive_sigkill_exactly_once() {
    let dir = temp_dir("kill9");
    let port = free_port();
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let (child, _) = wait_for_line(spawn(port, &dir), "listener on").await;
    let conn = within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .unwrap();
    let ch = within(conn.create_channel()).await.unwrap();
    declare_durable(&ch, "kept", FieldTable::default()).await;
    confirms(&ch).await;

    // Publish with up to 200 unconfirmed, recording every confirmed number;
    // the broker is killed while this runs.
    let confirmed = Arc::new(Mutex::new(HashSet::new()));
    let rec = confirmed.clone();
    let publisher = tokio::spawn(async move {
        let mut inflight = std::collections::VecDeque::new();
        for n in 0u32..1_000_000 {
            let body = format!("msg-{n:08}-").repeat(8);
            let Ok(c) = ch
                .basic_publish(
                    "".into(),
                    "kept".into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    persistent(),
                )
                .await
            else {
                return;
            };
            inflight.push_back((n, c));
            while inflight.len() > 200 {
                let (n, c) = inflight.pop_front().unwrap();
                match c.await {
                    Ok(conf) if conf.is_ack() => {
                        rec.lock().insert(n);
                    }
                    _ => return,
                }
            }
        }
    });
    // Kill once a good number are confirmed (past the in-memory window,
    // so most of them are paged out): mid-stream, no clean anything.
    within(async {
        while confirmed.lock().len() < 10_000 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mut child = child;
    child.kill().unwrap(); // SIGKILL
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let _ = within(publisher).await;
    let confirmed = confirmed.lock().clone();
    assert!(confirmed.len() >= 10_000);

    let (mut child, log) = wait_for_line(spawn(port, &dir), "listener on").await;
    assert!(log.contains("recovered"), "recovery is logged:\n{log}");
    let conn = within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .unwrap();
    let ch = within(conn.create_channel()).await.unwrap();
    let got = drain(&ch, "kept").await;
    let mut seen = HashSet::new();
    let mut last = None;
    for (body, _) in &got {
        let text = std::str::from_utf8(body).expect("intact body");
        let n: u32 = text[4..12].parse().expect("intact body");
        assert_eq!(text, format!("msg-{n:08}-").repeat(8), "intact body");
        assert!(seen.insert(n), "message {n} came back twice");
        assert!(last.is_none_or(|l| l < n), "order kept");
        last = Some(n);
    }
    let missing: Vec<_> = confirmed.iter().filter(|n| !seen.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "{} confirmed messages lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    child.kill().unwrap();
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn restart_keeps_persistent_unacked_redelivered_and_drops_transient() {
    let dir = temp_dir("durable");
    let mut b = start_in(&dir).await;
    {
        let (_c, ch) = b.channel().await;
        declare_durable(&ch, "dq", FieldTable::default()).await;
        confirms(&ch).await;
        for (body, p) in [
            ("p1", persistent()),
            ("t1", BasicProperties::default()),
            ("p2", persistent()),
            ("p3", persistent()),
            ("t2", BasicProperties::default().with_delivery_mode(1)),
            ("p4", persistent()),
        ] {
            publish_confirmed(&ch, "dq", body.as_bytes(), p).await;
        }
        // p1 acked, t1 and p2 delivered and left unacked.
        for expect in ["p1", "t1", "p2"] {
            let m = within(ch.basic_get("dq".into(), BasicGetOptions::default()))
                .await
                .unwrap()
                .expect("a message");
            assert_eq!(m.delivery.data, expect.as_bytes());
            if expect == "p1" {
                within(m.delivery.acker.ack(BasicAckOptions::default()))
                    .await
                    .unwrap();
            }
        }
        b.stop().await;
    }
    let b2 = start_in(&dir).await;
    let (_c, ch) = b2.channel().await;
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
    assert_eq!(q.message_count(), 3);
    let got = drain(&ch, "dq").await;
    let got: Vec<(String, bool)> = got
        .into_iter()
        .map(|(b, r)| (String::from_utf8(b).unwrap(), r))
        .collect();
    assert_eq!(
        got,
        vec![("p2".into(), true), ("p3".into(), false), ("p4".into(), false)]
    );
    drop(b);
}

#[tokio::test]
async fn a_deep_backlog_is_paged_out_and_drains_in_order() {
    const N: u32 = 20_000;
    let dir = temp_dir("deep");
    let mut b = start_in(&dir).await;
    let body = vec![b'x'; 1000];
    {
        let (_c, ch) = b.channel().await;
        declare_durable(&ch, "deep", FieldTable::default()).await;
        within(ch.queue_declare(
            "deep-t".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        confirms(&ch).await;
        let mut pending = Vec::new();
        for n in 0..N {
            let mut m = n.to_be_bytes().to_vec();
            m.extend_from_slice(&body);
            for (q, p) in [("deep", persistent()), ("deep-t", BasicProperties::default())] {
                pending.push(
                    within(ch.basic_publish("".into(), q.into(), BasicPublishOptions::default(), &m, p))
                        .await
                        .unwrap(),
                );
            }
            if pending.len() >= 500 {
                for c in pending.drain(..) {
                    assert!(within(c).await.unwrap().is_ack());
                }
            }
        }
        for c in pending.drain(..) {
            assert!(within(c).await.unwrap().is_ack());
        }
        // 2 x 20,000 x 1 KB queued, but only the windows are in memory.
        let held = b.running.as_ref().unwrap().ctx.broker.memory.bytes();
        assert!(held < 24 << 20, "{held} bytes of messages held in memory");

        // The non-durable queue drains in order from its pages.
        let mut consumer = within(ch.basic_consume(
            "deep-t".into(),
            "c".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .unwrap();
        for n in 0..N {
            let d = within(consumer.next()).await.unwrap().unwrap();
            assert_eq!(u32::from_be_bytes(d.data[..4].try_into().unwrap()), n);
        }
        b.stop().await;
    }
    // The durable one comes back whole after a restart, in order.
    let b2 = start_in(&dir).await;
    let (_c, ch) = b2.channel().await;
    within(ch.basic_qos(500, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch.basic_consume(
        "deep".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for n in 0..N {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(u32::from_be_bytes(d.data[..4].try_into().unwrap()), n);
        assert!(!d.redelivered);
        if n % 100 == 99 {
            within(d.acker.ack(BasicAckOptions { multiple: true }))
                .await
                .unwrap();
        }
    }
    let q = declare_durable(&ch, "deep", FieldTable::default()).await;
    assert_eq!(q.message_count(), 0);
    assert!(b2.running.as_ref().unwrap().ctx.broker.memory.bytes() < 1 << 20);
    drop(b);
}

#[tokio::test]
async fn ttl_max_length_and_dead_letters_act_on_stored_messages() {
    let dir = temp_dir("stored-rules");
    let mut b = start_in(&dir).await;
    {
        let (_c, ch) = b.channel().await;
        declare_durable(&ch, "dead", FieldTable::default()).await;
        within(ch.queue_declare(
            "short".into(),
            durable(),
            table(&[
                ("x-message-ttl", i(400)),
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s("dead")),
            ]),
        ))
        .await
        .unwrap();
        // Past the in-memory window, so most of these are paged out.
        declare_durable(&ch, "capped", table(&[("x-max-length", i(5000))])).await;
        confirms(&ch).await;
        publish_confirmed(&ch, "short", b"expires", persistent()).await;
        for n in 0u32..12_000 {
            publish(&ch, "capped", &n.to_be_bytes(), persistent()).await;
        }
        publish_confirmed(&ch, "capped", &12_000u32.to_be_bytes(), persistent()).await;
        b.stop().await;
    }
    let b2 = start_in(&dir).await;
    let (_c, ch) = b2.channel().await;
    // The TTL ran out across the restart: the message is dead-lettered.
    let dead = within(async {
        loop {
            if let Some(m) = ch
                .basic_get("dead".into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
            {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(dead.delivery.data, b"expires");
    let capped = drain(&ch, "capped").await;
    assert_eq!(capped.len(), 5000);
    let first = u32::from_be_bytes(capped[0].0[..4].try_into().unwrap());
    let last = u32::from_be_bytes(capped[4999].0[..4].try_into().unwrap());
    // 12,001 published, the newest 5,000 kept.
    assert_eq!((first, last), (7001, 12_000), "drop-head kept the newest");
    drop(b);
}

#[tokio::test]
async fn queue_delete_removes_its_files() {
    let dir = temp_dir("delete-files");
    let b = start_in(&dir).await;
    let (_c, ch) = b.channel().await;
    declare_durable(&ch, "gone", FieldTable::default()).await;
    confirms(&ch).await;
    publish_confirmed(&ch, "gone", b"x", persistent()).await;
    let stores = || std::fs::read_dir(dir.join("queues")).unwrap().count();
    assert_eq!(stores(), 1);
    within(ch.queue_delete("gone".into(), QueueDeleteOptions::default()))
        .await
        .unwrap();
    assert_eq!(stores(), 0);
}
