//! warren-perf against a Warren started in-process on a loopback port: the
//! counts of a run add up (sent = confirmed = received), across several
//! producers, consumers and queues, with confirms and multi-acks, and in
//! autoack without confirms.

use clap::Parser;
use warren_perf::options::Options;

async fn broker() -> (warren_server::Running, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("warren-perf-it-{}-{}", std::process::id(), rand_suffix()));
    let config = warren_server::Config::loopback(dir.clone());
    (warren_server::start(config).await.expect("broker starts"), dir)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn options(port: u16, args: &[&str]) -> Options {
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let mut all = vec!["warren-perf", "-h", &uri];
    all.extend_from_slice(args);
    let mut o = Options::try_parse_from(all).unwrap();
    o.validate().unwrap();
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_with_confirms_and_multi_acks() {
    let (b, dir) = broker().await;
    let o = options(
        b.amqp_addr.unwrap().port(),
        &[
            "-x", "2", "-y", "2", "--queues", "2", "-C", "5000", "-c", "100", "-q", "200", "-A", "10", "-s",
            "100",
        ],
    );
    let s = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        warren_perf::run_workload(&o, false),
    )
    .await
    .expect("the run ends")
    .expect("the run succeeds");
    assert_eq!(s.sent, 10_000);
    assert_eq!(s.confirmed, 10_000);
    assert_eq!(s.nacked, 0);
    assert_eq!(s.received, 10_000);
    assert_eq!(s.consumer.count, 10_000, "every delivery timed");
    assert_eq!(s.confirm.count, 10_000, "every confirm timed");
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_in_autoack_with_persistent_messages() {
    let (b, dir) = broker().await;
    let o = options(
        b.amqp_addr.unwrap().port(),
        &[
            "-x",
            "1",
            "-y",
            "1",
            "-C",
            "3000",
            "-a",
            "-f",
            "persistent",
            "-u",
            "perf-durable",
            "-s",
            "1000",
        ],
    );
    let s = warren_perf::run_workload(&o, false).await.unwrap();
    assert_eq!((s.sent, s.confirmed, s.received), (3000, 0, 3000));
    // A named queue outlives the run (no auto-delete), durable because the
    // messages are persistent: declaring it again with the same settings works.
    let again = warren_perf::run_workload(
        &options(
            b.amqp_addr.unwrap().port(),
            &[
                "-x",
                "1",
                "-y",
                "0",
                "-C",
                "1",
                "-f",
                "persistent",
                "-u",
                "perf-durable",
            ],
        ),
        false,
    )
    .await
    .unwrap();
    assert_eq!(again.sent, 1);
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_broker_is_an_error_not_a_hang() {
    let (b, dir) = broker().await;
    let port = b.amqp_addr.unwrap().port();
    let bad = format!("amqp://guest:wrong@127.0.0.1:{port}/%2f");
    let mut o = Options::try_parse_from(["warren-perf", "-h", &bad, "-C", "1"]).unwrap();
    o.validate().unwrap();
    assert!(warren_perf::run_workload(&o, false).await.is_err());
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_one_still_flows() {
    // Deliveries that arrive with consume-ok must be handled even though
    // nothing more comes until they are acked (a stall this test caught).
    let (b, dir) = broker().await;
    let o = options(
        b.amqp_addr.unwrap().port(),
        &["-C", "500", "-c", "10", "-q", "1", "-s", "50"],
    );
    let s = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        warren_perf::run_workload(&o, false),
    )
    .await
    .expect("the run ends")
    .unwrap();
    assert_eq!((s.sent, s.confirmed, s.received), (500, 500, 500));
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
