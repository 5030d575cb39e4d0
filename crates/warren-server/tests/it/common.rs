//! Shared test fixtures: a broker per test on 127.0.0.1:0 with its own data
//! directory, and client helpers with timeouts so a broken broker fails a
//! test instead of hanging it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lapin::{options::*, types::FieldTable, Channel, Connection, ConnectionProperties};
use warren_server::{Config, Running};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Broker {
    pub running: Option<Running>,
    pub port: u16,
    pub data_dir: PathBuf,
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("warren-test-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn config(data_dir: PathBuf) -> Config {
    Config::loopback(data_dir)
}

impl Broker {
    pub async fn start() -> Broker {
        Broker::start_with(|_| {}).await
    }

    pub async fn start_with(f: impl FnOnce(&mut Config)) -> Broker {
        if let Ok(filter) = std::env::var("WARREN_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        let mut c = config(temp_dir("b"));
        f(&mut c);
        let data_dir = c.data_dir.clone();
        let running = warren_server::start(c).await.expect("broker starts");
        Broker {
            port: running.amqp_addr.unwrap().port(),
            running: Some(running),
            data_dir,
        }
    }

    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    pub async fn lapin(&self) -> Connection {
        within(Connection::connect(&self.uri(), ConnectionProperties::default()))
            .await
            .expect("lapin connects")
    }

    pub async fn channel(&self) -> (Connection, Channel) {
        let c = self.lapin().await;
        let ch = within(c.create_channel()).await.expect("channel opens");
        (c, ch)
    }

    /// A channel in confirm mode.
    pub async fn confirm_channel(&self) -> (Connection, Channel) {
        let (c, ch) = self.channel().await;
        within(ch.confirm_select(lapin::options::ConfirmSelectOptions::default()))
            .await
            .expect("confirm.select");
        (c, ch)
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    /// Stop (if running) and start again on the same data directory.
    pub async fn restart(&mut self) {
        self.stop().await;
        // The old fixture must not delete the directory when it drops.
        let dir = std::mem::replace(&mut self.data_dir, PathBuf::from("/nonexistent/warren-test"));
        *self = Broker::start_with(move |c| c.data_dir = dir).await;
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Await `f` for at most 10 s; a hang is a failure.
pub async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out after 10 s")
}

/// Publish `body` to `queue` on confirm channel `ch`: whether it was
/// confirmed (acked) rather than refused.
pub async fn publish_acked(ch: &Channel, queue: &str, body: &[u8]) -> bool {
    let c = within(ch.basic_publish(
        "".into(),
        queue.into(),
        lapin::options::BasicPublishOptions::default(),
        body,
        lapin::BasicProperties::default(),
    ))
    .await
    .unwrap();
    within(c).await.unwrap().is_ack()
}

/// Consume one message of `queue` on `ch` and hold it, unacknowledged,
/// until the broker closes the channel: the close's text.
pub async fn held_until_closed(ch: &Channel, queue: &str) -> String {
    use futures_lite::StreamExt;
    let mut consumer = within(ch.basic_consume(
        queue.into(),
        "held".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let held = within(consumer.next()).await.unwrap().unwrap();
    let text = match within(consumer.next()).await {
        Some(Err(e)) => e.to_string(),
        other => panic!("{queue}: the channel stays open: {other:?}"),
    };
    drop(held);
    text
}

/// The next message of `queue` through `ch` (which must have one) and
/// its x-first-death-reason.
pub async fn take_with_reason(ch: &Channel, queue: &str) -> (Vec<u8>, Option<lapin::types::AMQPValue>) {
    let got = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("a message in {queue}"));
    let reason = got
        .delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-first-death-reason").cloned());
    (got.delivery.data, reason)
}

/// Ready messages in `q` (a passive declare is a round trip, so everything
/// published before it on the same channel has been routed).
pub async fn depth(ch: &Channel, q: &str) -> u32 {
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap()
    .message_count()
}

/// Wait until `queue`, seen through `ch`, holds `n` ready messages.
pub async fn until_depth(ch: &Channel, queue: &str, n: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let d = depth(ch, queue).await;
        if d == n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{queue} holds {d}, not {n}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Await `f` briefly, expecting nothing to happen.
pub async fn nothing_within<T: std::fmt::Debug>(ms: u64, f: impl Future<Output = T>) {
    if let Ok(v) = tokio::time::timeout(Duration::from_millis(ms), f).await {
        panic!("expected nothing, got {v:?}");
    }
}

pub async fn declare(ch: &Channel, name: &str, args: FieldTable) -> lapin::Queue {
    within(ch.queue_declare(name.into(), QueueDeclareOptions::default(), args))
        .await
        .expect("queue declared")
}

/// The reply code and text of a lapin protocol error.
pub fn amqp_error(e: &lapin::Error) -> (u16, String) {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => (p.get_id(), p.get_message().to_string()),
        other => panic!("not a protocol error: {other:?}"),
    }
}

pub fn table(pairs: &[(&str, lapin::types::AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

pub fn s(v: &str) -> lapin::types::AMQPValue {
    lapin::types::AMQPValue::LongString(v.into())
}

pub fn i(v: i64) -> lapin::types::AMQPValue {
    lapin::types::AMQPValue::LongLongInt(v)
}

/// A delivery's x-delivery-count header, as a number.
pub fn delivery_count(d: &lapin::message::Delivery) -> Option<i64> {
    d.properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count").cloned())
        .and_then(|v| match v {
            lapin::types::AMQPValue::LongLongInt(n) => Some(n),
            lapin::types::AMQPValue::LongInt(n) => Some(n as i64),
            _ => None,
        })
}
