//! warren-perf's stream mode against a Warren started in-process on a
//! loopback port, with and without zstd sub-entries: the counts of a run
//! add up (sent = confirmed = received), every delivery and confirm timed.

use clap::Parser;
use warren_perf::options::Options;

async fn run(args: &[&str]) {
    let dir = std::env::temp_dir().join(format!(
        "warren-perf-stream-{}-{}",
        std::process::id(),
        args.len()
    ));
    let b = warren_server::start(warren_server::Config::loopback(dir.clone()))
        .await
        .expect("broker starts");
    let uri = format!(
        "rabbitmq-stream://guest:guest@127.0.0.1:{}/%2f",
        b.stream_addr.unwrap().port()
    );
    let mut all = vec!["warren-perf", "-P", "stream", "-h", &uri, "--offset", "first"];
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
    assert_eq!(s.sent, 20_000, "{args:?}");
    assert_eq!(s.confirmed, 20_000, "{args:?}");
    assert_eq!(s.nacked, 0);
    assert_eq!(s.received, 20_000, "{args:?}");
    assert_eq!(s.consumer.count, 20_000, "every delivery timed");
    assert_eq!(s.confirm.count, 20_000, "every confirm timed");
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_with_plain_and_compressed_entries() {
    run(&["-x", "2", "-y", "1", "-C", "10000", "-s", "100"]).await;
    run(&[
        "-x",
        "2",
        "-y",
        "1",
        "-C",
        "10000",
        "-s",
        "100",
        "--sub-entry-size",
        "50",
        "--compression",
        "zstd",
    ])
    .await;
}
