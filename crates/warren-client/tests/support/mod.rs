//! What the client's tests share: limits, unique names, and the brokers
//! a test runs against (an in-process Warren, and RabbitMQ when
//! `tests/client/rabbitmq.sh` names one).
// Each test file uses a part of this.
#![allow(dead_code)]

pub mod amqp;
pub mod broker;
pub mod cluster;
pub mod proxy;
pub mod scripted_amqp10;
pub mod scripted_stream;
pub mod stream_load;

use std::time::{Duration, Instant};

/// Every call gets this long before the test fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(20);

pub async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("the broker answered in time")
}

/// The brokers a test runs against: an in-process Warren, and RabbitMQ
/// when the environment names one.
pub async fn brokers() -> (Vec<String>, warren_server::Running) {
    brokers_with(|_| {}).await
}

/// [`brokers`] with the in-process Warren's configuration changed.
pub async fn brokers_with(
    change: impl FnOnce(&mut warren_server::Config),
) -> (Vec<String>, warren_server::Running) {
    let n = std::process::id() as u64 * 1000 + rand_suffix();
    let dir = std::env::temp_dir().join(format!("warren-client-test-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = warren_server::Config::loopback(dir);
    change(&mut config);
    let running = warren_server::start(config).await.expect("Warren starts");
    let mut uris = vec![format!(
        "amqp://guest:guest@127.0.0.1:{}/%2f",
        running.amqp_addr.expect("an AMQP listener").port()
    )];
    if let Ok(u) = std::env::var("WARREN_CLIENT_RABBITMQ_URI") {
        uris.push(u);
    }
    (uris, running)
}

/// The brokers a stream test runs against: an in-process Warren's
/// stream listener, and RabbitMQ's when the environment names one
/// (`WARREN_CLIENT_RABBITMQ_STREAM_URI`, set by tests/client/rabbitmq.sh).
pub async fn stream_brokers() -> (Vec<String>, warren_server::Running) {
    let (_, running) = brokers().await;
    let mut uris = vec![format!(
        "rabbitmq-stream://guest:guest@127.0.0.1:{}/%2f",
        running.stream_addr.expect("a stream listener").port()
    )];
    if let Ok(u) = std::env::var("WARREN_CLIENT_RABBITMQ_STREAM_URI") {
        uris.push(u);
    }
    (uris, running)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A name no other test (or earlier run against RabbitMQ) uses.
pub fn unique(tag: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("wc-{tag}-{t}")
}

/// A broker and its management API's base URL.
pub struct Target {
    pub uri: String,
    pub api: String,
}

/// [`brokers`] with each one's management API.
pub async fn targets() -> (Vec<Target>, warren_server::Running) {
    let (uris, running) = brokers().await;
    let mut out = vec![Target {
        uri: uris[0].clone(),
        api: format!("http://{}", running.http_addr.expect("an HTTP listener")),
    }];
    if let (Some(uri), Ok(api)) = (uris.get(1), std::env::var("WARREN_CLIENT_RABBITMQ_API")) {
        out.push(Target {
            uri: uri.clone(),
            api,
        });
    }
    (out, running)
}

/// Close the connection named `name` (0-9-1's connection name, AMQP
/// 1.0's container id) through the management API, as an operator would
/// (the listing may lag behind a new connection).
pub async fn close_through_the_api(t: &Target, name: &str) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list: serde_json::Value = http
            .get(format!("{}/api/connections", t.api))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let found = list.as_array().into_iter().flatten().find(|c| {
            c["client_properties"]["connection_name"].as_str() == Some(name)
                || c["container_id"].as_str() == Some(name)
        });
        if let Some(c) = found {
            let id = c["name"].as_str().unwrap();
            let url = format!(
                "{}/api/connections/{}",
                t.api,
                percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC)
            );
            let r = http
                .delete(url)
                .basic_auth("guest", Some("guest"))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            return;
        }
        assert!(Instant::now() < deadline, "{name} never listed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wait until every id in `acked` was received (failing after `limit`);
/// how many deliveries were of an id received before.
pub async fn all_acked_arrive(
    received: &parking_lot::Mutex<std::collections::HashMap<u64, u32>>,
    acked: &std::collections::BTreeSet<u64>,
    limit: Duration,
    poll: Duration,
) -> u32 {
    let deadline = Instant::now() + limit;
    loop {
        let missing = {
            let got = received.lock();
            acked.iter().filter(|id| !got.contains_key(id)).count()
        };
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} acked messages never arrived",
            acked.len()
        );
        tokio::time::sleep(poll).await;
    }
    received.lock().values().map(|n| n - 1).sum()
}
