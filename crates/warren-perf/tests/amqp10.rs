//! warren-perf's AMQP 1.0 mode (on warren-client's `amqp` module) against
//! a Warren started in-process on a loopback port: the counts of a run
//! add up (sent = accepted = received), across several producers,
//! consumers and queues, with outcomes and accepts `-A` at a time, and
//! pre-settled both ways in autoack without confirms.

use clap::Parser;
use warren_perf::options::Options;

async fn broker() -> (warren_server::Running, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "warren-perf-it10-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let config = warren_server::Config::loopback(dir.clone());
    (warren_server::start(config).await.expect("broker starts"), dir)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

async fn run(args: &[&str]) -> warren_perf::stats::Summary {
    let (b, dir) = broker().await;
    let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", b.amqp_addr.unwrap().port());
    let mut all = vec![
        "warren-perf",
        "-h",
        &uri,
        "-P",
        "amqp10",
        "--amqp10-address",
        "/queues/{queue}",
    ];
    all.extend_from_slice(args);
    let mut o = Options::try_parse_from(all).unwrap();
    o.validate().unwrap();
    let s = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        warren_perf::run_workload(&o, false),
    )
    .await
    .expect("the run ends")
    .expect("the run succeeds");
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_with_outcomes_and_accepts_in_runs() {
    let s = run(&[
        "-x", "2", "-y", "2", "--queues", "2", "-C", "5000", "-c", "100", "-q", "200", "-A", "10", "-s",
        "100",
    ])
    .await;
    assert_eq!(s.sent, 10_000);
    assert_eq!(s.confirmed, 10_000);
    assert_eq!(s.nacked, 0);
    assert_eq!(s.received, 10_000);
    assert_eq!(s.consumer.count, 10_000, "every delivery timed");
    assert_eq!(s.confirm.count, 10_000, "every outcome timed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_pre_settled_with_persistent_messages() {
    let s = run(&[
        "-x",
        "1",
        "-y",
        "1",
        "-C",
        "3000",
        "-a",
        "-f",
        "persistent",
        "-s",
        "12",
    ])
    .await;
    assert_eq!(s.sent, 3000);
    assert_eq!(s.confirmed, 0, "pre-settled: no outcomes");
    assert_eq!(s.received, 3000);
}
