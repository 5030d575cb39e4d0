//! warren-client's AMQP 1.0 recovery against a `warren` process killed
//! with SIGKILL and started again on the same port and data directory,
//! under a publisher (unique ids, each outcome kept) and three consumers,
//! as RabbitMQ's AMQP 1.0 clients test theirs. Each time: the client
//! connects again by itself; the exchange, the durable queue, the stream,
//! the exclusive queue (gone with the old connection) and their bindings
//! are declared again; the consumers are attached again (the stream's
//! from after its last offset); every publish's outcome resolves
//! (accepted, or a connection-lost error the application sees). At the
//! end no accepted message is missing from the queue or the stream, and
//! the stream gave none twice.
//!
//! `WARREN_CLIENT_AMQP_KILL_ROUNDS` sets the number of kills (3 by
//! default; `tests/client/amqp-recovery-soak.sh` runs 100).

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::broker::{free_port, BrokerProcess};
use warren_client::amqp::{
    BindingSpec, Connection, Error, Event, Events, ExchangeSpec, Message, Outcome, QueueSpec,
    RecoveryOptions, StreamOffset,
};

/// The most messages the publisher sends, whatever the rounds.
const MAX_MESSAGES: u64 = 2_000_000;
/// The publisher's most messages a second.
const PACE: u32 = 3_000;

fn rounds() -> u32 {
    std::env::var("WARREN_CLIENT_AMQP_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

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

fn id_of(m: &Message) -> u64 {
    std::str::from_utf8(m.data().expect("a data body"))
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_loses_nothing_accepted() {
    let rounds = rounds();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("warren-client-amqp-kill-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = BrokerProcess::start(port, &dir).await;
    let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(500)))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();

    let m = conn.management().await.unwrap();
    m.declare_exchange(&ExchangeSpec::direct("kill-x")).await.unwrap();
    for q in [
        QueueSpec::classic("kill-q"),
        QueueSpec::stream("kill-s"),
        QueueSpec::classic("kill-mine").exclusive(),
    ] {
        m.declare_queue(&q).await.unwrap();
        m.bind(&BindingSpec::to_queue("kill-x", &q.name, "k"))
            .await
            .unwrap();
    }

    // The queue's consumer accepts each message; the stream's counts
    // what it gets, in order; the exclusive queue's counts copies.
    let received = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    let mut queue_consumer = conn
        .consumer()
        .queue("kill-q")
        .initial_credit(100)
        .build()
        .await
        .unwrap();
    let rec = received.clone();
    let consuming = tokio::spawn(async move {
        while let Ok(d) = queue_consumer.receive().await {
            *rec.lock().entry(id_of(&d.message)).or_default() += 1;
            d.accept();
        }
    });
    let from_stream = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    let mut stream_consumer = conn
        .consumer()
        .queue("kill-s")
        .stream_offset(StreamOffset::First)
        .build()
        .await
        .unwrap();
    let got = from_stream.clone();
    let streaming = tokio::spawn(async move {
        while let Ok(d) = stream_consumer.receive().await {
            *got.lock().entry(id_of(&d.message)).or_default() += 1;
            d.accept();
        }
    });
    let copies_seen = Arc::new(AtomicU64::new(0));
    let mut copies = conn
        .consumer()
        .queue("kill-mine")
        .pre_settled()
        .build()
        .await
        .unwrap();
    let seen = copies_seen.clone();
    let copying = tokio::spawn(async move {
        while copies.receive().await.is_ok() {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });

    // The publisher: unique ids, each outcome settled in order beside it.
    let publisher = conn.publisher().exchange("kill-x", "k").build().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let published = Arc::new(AtomicU64::new(0));
    let publishes = published.clone();
    let (settle, mut to_settle) = tokio::sync::mpsc::channel(1024);
    let collecting = tokio::spawn(async move {
        let (mut accepted, mut reported) = (BTreeSet::new(), 0u64);
        while let Some((id, p)) = to_settle.recv().await {
            match tokio::time::timeout(Duration::from_secs(60), p).await {
                Ok(Ok(Outcome::Accepted)) => {
                    accepted.insert(id);
                }
                Ok(Ok(other)) => panic!("message {id}: {other:?}"),
                Ok(Err(Error::ConnectionLost(_))) => reported += 1,
                Ok(Err(e)) => panic!("message {id}: {e}"),
                Err(_) => panic!("message {id}: its outcome never came"),
            }
        }
        (accepted, reported)
    });
    let publishing = tokio::spawn(async move {
        let mut id = 0u64;
        while !stopping.load(Ordering::Relaxed) && id < MAX_MESSAGES {
            match publisher.publish(Message::new(id.to_string())).await {
                Ok(p) => settle.send((id, p)).await.unwrap(),
                Err(e) => panic!("a publish on a recovering connection waits, it does not fail: {e}"),
            }
            id += 1;
            publishes.store(id, Ordering::Relaxed);
            if id.is_multiple_of(10) {
                tokio::time::sleep(Duration::from_secs(10) / PACE).await;
            }
        }
    });

    for round in 1..=rounds {
        tokio::time::sleep(Duration::from_millis(700)).await;
        broker.kill9();
        next_event(&mut events, "Disconnected", Duration::from_secs(15), |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
        broker.restart().await;
        next_event(&mut events, "Recovered", Duration::from_secs(30), |e| {
            matches!(e, Event::Recovered)
        })
        .await;
        // The exclusive queue is back (its consumer too) and routed to.
        let before = copies_seen.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(20);
        while copies_seen.load(Ordering::Relaxed) <= before {
            assert!(
                Instant::now() < deadline,
                "round {round}: nothing reached the exclusive queue ({} published, {} received)",
                published.load(Ordering::Relaxed),
                received.lock().len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let info = m.queue_info("kill-q").await.unwrap();
        assert_eq!(info.consumer_count, 1, "round {round}: the queue's consumer");
    }

    stop.store(true, Ordering::Relaxed);
    publishing.await.unwrap();
    let (accepted, reported) = collecting.await.unwrap();
    assert!(!accepted.is_empty());
    let duplicates = support::all_acked_arrive(
        &received,
        &accepted,
        Duration::from_secs(60),
        Duration::from_millis(50),
    )
    .await;
    let stream_duplicates = support::all_acked_arrive(
        &from_stream,
        &accepted,
        Duration::from_secs(60),
        Duration::from_millis(50),
    )
    .await;
    println!(
        "rounds {rounds}: {} accepted, {reported} reported lost in flight, 0 lost; \
         queue delivered {duplicates} again, stream {stream_duplicates}",
        accepted.len()
    );
    assert_eq!(
        stream_duplicates, 0,
        "the stream consumer went on after its last offset"
    );
    conn.close().await;
    for t in [consuming, streaming, copying] {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("consumers end when the connection closes")
            .unwrap();
    }
}

/// A broker that stops answering (SIGSTOP) is noticed when nothing comes
/// within the idle time-out asked for, and the connection recovers once
/// it answers again; a management call made meanwhile waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_is_noticed_by_the_idle_timeout() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("warren-client-amqp-stop-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = BrokerProcess::start(port, &dir).await;
    let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .idle_timeout(Duration::from_secs(2))
        .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(500)))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();
    let m = conn.management().await.unwrap();
    m.declare_queue(&QueueSpec::classic("stop-q").exclusive())
        .await
        .unwrap();
    // Longer than the idle time-out: heartbeats keep a quiet wire alive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(10), events.next())
            .await
            .is_err(),
        "a quiet but live broker is not taken for lost"
    );
    broker.signal("STOP");
    let lost = next_event(&mut events, "Disconnected", Duration::from_secs(10), |e| {
        matches!(e, Event::Disconnected { .. })
    })
    .await;
    assert!(format!("{lost:?}").contains("idle"), "{lost:?}");
    broker.signal("CONT");
    next_event(&mut events, "Recovered", Duration::from_secs(60), |e| {
        matches!(e, Event::Recovered)
    })
    .await;
    // The exclusive queue went with the old connection and is back.
    let info = m.queue_info("stop-q").await.unwrap();
    assert_eq!(info.name, "stop-q");
    conn.close().await;
}

/// With recovery off, a lost connection ends: outcomes awaited fail as
/// lost, publishing fails, the consumer's stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_recovery_a_lost_connection_ends() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("warren-client-amqp-norec-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut broker = BrokerProcess::start(port, &dir).await;
    let conn = Connection::builder(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .recovery(RecoveryOptions::disabled())
        .open()
        .await
        .expect("connects");
    let m = conn.management().await.unwrap();
    m.declare_queue(&QueueSpec::classic("norec-q")).await.unwrap();
    let publisher = conn.publisher().queue("norec-q").build().await.unwrap();
    let mut consumer = conn.consumer().queue("norec-q").build().await.unwrap();
    broker.kill9();
    let ended = tokio::time::timeout(Duration::from_secs(10), consumer.receive())
        .await
        .expect("the consumer hears of it");
    assert!(ended.is_err());
    assert!(!conn.is_open());
    assert!(publisher.publish(Message::new("late")).await.is_err());
}

/// Closed by an operator through the management API, the connection
/// comes back with its publisher and consumer, as RabbitMQ's AMQP 1.0
/// clients' recovery tests check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_through_the_api_it_reconnects_its_publisher_and_consumer() {
    let (targets, _broker) = support::targets().await;
    let t = &targets[0];
    let conn = Connection::builder(&t.uri)
        .container_id("recover-me")
        .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(300)))
        .open()
        .await
        .expect("connects");
    let mut events = conn.events();
    let m = conn.management().await.unwrap();
    m.declare_queue(&QueueSpec::classic("api-q")).await.unwrap();
    let publisher = conn.publisher().queue("api-q").build().await.unwrap();
    let mut consumer = conn.consumer().queue("api-q").build().await.unwrap();
    support::close_through_the_api(t, "recover-me").await;
    next_event(&mut events, "Recovered", Duration::from_secs(20), |e| {
        matches!(e, Event::Recovered)
    })
    .await;
    let p = publisher.publish(Message::new("after")).await.unwrap();
    assert_eq!(p.await.unwrap(), Outcome::Accepted);
    let d = tokio::time::timeout(Duration::from_secs(10), consumer.receive())
        .await
        .expect("the consumer is back")
        .unwrap();
    assert_eq!(d.message.data(), Some(&b"after"[..]));
    d.accept();
    conn.close().await;
}
