//! Recovery against a `warren` process killed with SIGKILL and started
//! again on the same port and data directory, under a confirming
//! publisher and two consumers. Each time: the client reconnects by
//! itself, the exchange, both queues (the broker-named exclusive one
//! under a new name, reported), the bindings and the consumers are back,
//! every publish's confirm resolves (acked, or an error the application
//! sees), and at the end no acked message is missing.
//!
//! `WARREN_CLIENT_KILL_ROUNDS` sets the number of kills (3 by default;
//! `tests/client/recovery-soak.sh` runs 100).

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use support::broker::{free_port, BrokerProcess};
use warren_client::amqp091::{
    Confirm, Confirmation, Connection, ConnectionBuilder, ConsumeOptions, Event, Events, ExchangeKind,
    ExchangeOptions, FieldTable, Properties, QueueOptions, RecoveryOptions,
};

/// The most messages the publisher sends, whatever the rounds.
const MAX_MESSAGES: u64 = 2_000_000;
/// The publisher's most messages a second.
const PACE: u32 = 3_000;

async fn next_event(
    events: &mut Events,
    what: &str,
    limit: Duration,
    want: impl Fn(&Event) -> bool,
) -> Event {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.next()).await {
            Ok(Some(e)) if want(&e) => return e,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the connection ended while waiting for {what}"),
            Err(_) => panic!("no {what} within {limit:?}"),
        }
    }
}

fn builder(port: u16, republish: bool) -> ConnectionBuilder {
    let mut recovery = RecoveryOptions::default().max_delay(Duration::from_millis(500));
    if republish {
        recovery = recovery.republish_unconfirmed();
    }
    Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f?heartbeat=5")).recovery(recovery)
}

fn rounds() -> u32 {
    std::env::var("WARREN_CLIENT_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_loses_nothing_confirmed() {
    kills(rounds(), false).await;
}

/// With republishing asked for, no publish is reported unconfirmed: each
/// one lost in flight is published again and acked on the next wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_republishing_every_publish_is_acked_across_kills() {
    let reported = kills(rounds(), true).await;
    assert_eq!(reported, 0, "publishes reported unconfirmed despite republishing");
}

/// `rounds` kills under the publisher and consumers; how many publishes
/// were reported unconfirmed.
async fn kills(rounds: u32, republish: bool) -> u64 {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!(
        "warren-client-kill-{}-{port}-{republish}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = BrokerProcess::start(port, &dir).await;
    let conn = builder(port, republish).open().await.expect("connects");
    let mut events = conn.events();

    // The topology: a durable exchange, a durable queue bound to it, and
    // a broker-named exclusive queue bound to it too.
    let ch = conn.channel().await.unwrap();
    ch.exchange_declare(
        "kill-x",
        ExchangeKind::Direct,
        ExchangeOptions::default().durable(),
    )
    .await
    .unwrap();
    ch.queue_declare("kill-q", QueueOptions::default().durable())
        .await
        .unwrap();
    ch.queue_bind("kill-q", "kill-x", "k", FieldTable::new())
        .await
        .unwrap();
    let mine = ch
        .queue_declare("", QueueOptions::default().exclusive())
        .await
        .unwrap()
        .name;
    ch.queue_bind(&mine, "kill-x", "k", FieldTable::new())
        .await
        .unwrap();

    // The durable queue's consumer acks each message; the exclusive
    // queue's counts what it gets.
    let cch = conn.channel().await.unwrap();
    cch.basic_qos(100).await.unwrap();
    let mut durable_consumer = cch.consume("kill-q", ConsumeOptions::default()).await.unwrap();
    let mut copies = cch
        .consume(
            &mine,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let received = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    let rec = received.clone();
    let consuming = tokio::spawn(async move {
        while let Some(d) = durable_consumer.next().await {
            let id: u64 = std::str::from_utf8(&d.body).unwrap().parse().unwrap();
            *rec.lock().entry(id).or_default() += 1;
            // An ack of a delivery from before a loss fails: it comes again.
            let _ = d.ack().await;
        }
    });
    let copies_seen = Arc::new(AtomicU64::new(0));
    let seen = copies_seen.clone();
    let copying = tokio::spawn(async move {
        while copies.next().await.is_some() {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });

    // The publisher: unique ids, persistent, confirmed; each outcome kept.
    let pch = conn.channel().await.unwrap();
    pch.confirm_select().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let published = Arc::new(AtomicU64::new(0));
    let publishes = published.clone();
    // Confirms are settled in order by a collector beside the publisher.
    let (settle, mut to_settle) = tokio::sync::mpsc::channel::<(u64, Confirm)>(1024);
    let collecting = tokio::spawn(async move {
        let (mut acked, mut reported) = (BTreeSet::new(), 0u64);
        while let Some((id, c)) = to_settle.recv().await {
            match tokio::time::timeout(Duration::from_secs(60), c).await {
                Ok(Ok(Confirmation::Ack)) => {
                    acked.insert(id);
                }
                Ok(Ok(other)) => panic!("message {id}: {other:?}"),
                Ok(Err(_)) => reported += 1,
                Err(_) => panic!("message {id}: its confirm never resolved"),
            }
        }
        (acked, reported)
    });
    let publishing = tokio::spawn(async move {
        let (mut id, mut since_pause) = (0u64, 0u64);
        let props = Properties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        while !stopping.load(Ordering::Relaxed) && id < MAX_MESSAGES {
            // Every twentieth id starts a batch of five (the batch path
            // keeps its own frames for republishing).
            let n = if id.is_multiple_of(20) { 5 } else { 1 };
            let confirms = match n {
                1 => pch
                    .publish("kill-x", "k", props.clone(), Bytes::from(id.to_string()))
                    .await
                    .map(|c| vec![c]),
                _ => {
                    let bodies = (id..id + n).map(|i| Bytes::from(i.to_string()));
                    pch.publish_bodies("kill-x", "k", &props, bodies).await
                }
            };
            match confirms {
                Ok(cs) => {
                    for (i, c) in (id..).zip(cs) {
                        settle.send((i, c)).await.unwrap();
                    }
                }
                Err(e) => panic!("a publish on a recovering connection waits, it does not fail: {e}"),
            }
            id += n;
            publishes.store(id, Ordering::Relaxed);
            // At most about PACE messages a second, so the rounds, not a
            // flood, decide how many there are.
            since_pause += n;
            if since_pause >= 10 {
                since_pause = 0;
                tokio::time::sleep(Duration::from_secs(10) / PACE).await;
            }
        }
    });

    for round in 1..=rounds {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let before = copies_seen.load(Ordering::Relaxed);
        broker.kill9();
        next_event(&mut events, "Disconnected", Duration::from_secs(15), |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
        broker.restart().await;
        let renamed = next_event(&mut events, "QueueRenamed", Duration::from_secs(30), |e| {
            matches!(e, Event::QueueRenamed { .. })
        })
        .await;
        next_event(&mut events, "Recovered", Duration::from_secs(30), |e| {
            matches!(e, Event::Recovered)
        })
        .await;
        let Event::QueueRenamed { new, .. } = renamed else {
            unreachable!()
        };
        // Both queues are back with their consumer, and both bindings route.
        let check = conn.channel().await.unwrap();
        let q = check
            .queue_declare(
                "kill-q",
                QueueOptions {
                    passive: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(q.consumer_count, 1, "round {round}: the durable queue's consumer");
        let e = check
            .queue_declare(
                &new,
                QueueOptions {
                    passive: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            e.consumer_count, 1,
            "round {round}: the exclusive queue's consumer"
        );
        check.close().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while copies_seen.load(Ordering::Relaxed) <= before {
            assert!(
                Instant::now() < deadline,
                "round {round}: nothing reached {new} through its binding ({} published, {} received)",
                published.load(Ordering::Relaxed),
                received.lock().len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    stop.store(true, Ordering::Relaxed);
    publishing.await.unwrap();
    let (acked, reported) = collecting.await.unwrap();
    // Every acked message reaches the durable queue's consumer.
    let duplicates = support::all_acked_arrive(
        &received,
        &acked,
        Duration::from_secs(60),
        Duration::from_millis(50),
    )
    .await;
    println!(
        "rounds {rounds}{}: {} acked, {reported} reported unconfirmed, 0 lost, {duplicates} delivered again",
        if republish { " (republishing)" } else { "" },
        acked.len()
    );
    assert!(!acked.is_empty());
    conn.close().await.unwrap();
    consuming.abort();
    copying.abort();
    reported
}

/// A broker that stops answering (SIGSTOP) is noticed by its missing
/// heartbeats, and the connection recovers once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_is_noticed_by_its_heartbeats() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("warren-client-stop-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = BrokerProcess::start(port, &dir).await;
    let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f?heartbeat=1"))
        .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(500)))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();
    let ch = conn.channel().await.unwrap();
    ch.queue_declare("stop-q", QueueOptions::default()).await.unwrap();
    broker.signal("STOP");
    let lost = next_event(&mut events, "Disconnected", Duration::from_secs(10), |e| {
        matches!(e, Event::Disconnected { .. })
    })
    .await;
    broker.signal("CONT");
    assert!(format!("{lost:?}").contains("heartbeat"), "{lost:?}");
    next_event(&mut events, "Recovered", Duration::from_secs(30), |e| {
        matches!(e, Event::Recovered)
    })
    .await;
    let q = ch
        .queue_declare(
            "stop-q",
            QueueOptions {
                passive: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(q.name, "stop-q");
    conn.close().await.unwrap();
}

/// A reader that polls its socket before sleeping (`busy_poll`) still
/// notices a killed broker (the socket's end read while polling) and
/// recovers; confirms at one in flight come before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_busy_poll_a_killed_broker_is_noticed_and_publishing_goes_on() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("warren-client-poll-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = BrokerProcess::start(port, &dir).await;
    let conn = builder(port, false)
        .busy_poll(Duration::from_micros(200))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();
    let ch = conn.channel().await.unwrap();
    ch.confirm_select().await.unwrap();
    ch.queue_declare("poll-q", QueueOptions::default().durable())
        .await
        .unwrap();
    let one_at_a_time = |from: u32| {
        let ch = ch.clone();
        async move {
            for i in from..from + 200 {
                let props = Properties {
                    delivery_mode: Some(2),
                    ..Default::default()
                };
                let c = ch
                    .publish("", "poll-q", props, Bytes::from(i.to_string()))
                    .await
                    .unwrap();
                assert_eq!(c.await.unwrap(), Confirmation::Ack, "message {i}");
            }
        }
    };
    one_at_a_time(0).await;
    broker.kill9();
    next_event(&mut events, "Disconnected", Duration::from_secs(10), |e| {
        matches!(e, Event::Disconnected { .. })
    })
    .await;
    broker.restart().await;
    next_event(&mut events, "Recovered", Duration::from_secs(30), |e| {
        matches!(e, Event::Recovered)
    })
    .await;
    one_at_a_time(200).await;
    let q = ch
        .queue_declare(
            "poll-q",
            QueueOptions {
                passive: true,
                durable: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(q.message_count, 400, "both rounds' persistent messages are there");
    conn.close().await.unwrap();
}
