//! warren-perf as a library: run one workload or a named scenario against
//! any RabbitMQ-compatible broker and get a [`stats::Summary`] per stage.
//! `main.rs` is the command-line shell; the integration test drives the
//! same functions against an in-process Warren.

pub mod amqp091;
pub mod amqp10;
pub mod options;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod stream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::task::JoinSet;

use options::{Options, Protocol, Uri};
use stats::{Stats, Summary};

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error(transparent)]
    Options(#[from] options::OptionError),
    #[error("AMQP 0-9-1: {0}")]
    Amqp091(#[from] warren_client::amqp091::Error),
    #[error("AMQP 1.0: {0}")]
    Amqp10(#[from] warren_client::amqp::Error),
    #[error("stream protocol: {0}")]
    Stream(#[from] warren_client::stream::Error),
}

/// After the producers are done (count mode), how long the consumers may
/// go without receiving anything before the run ends anyway.
const DRAIN_IDLE: Duration = Duration::from_secs(5);

/// Run one workload; with `live`, print a line every second.
pub async fn run_workload(opts: &Options, live: bool) -> Result<Summary, PerfError> {
    let uris = opts
        .uris
        .iter()
        .map(|u| Uri::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    let run_id: String = {
        let mut r = rand::thread_rng();
        (0..6).map(|_| char::from(b'a' + r.gen_range(0..26))).collect()
    };
    stats::clock();
    let queues = match opts.protocol {
        Protocol::Stream => stream::declare(opts, &uris[0], &run_id).await?,
        _ => amqp091::declare(opts, &uris[0], &run_id).await?,
    };
    let stats = Arc::new(Stats::new());
    let stop = Arc::new(AtomicBool::new(false));
    let (mut consumers, mut producers) = (JoinSet::new(), JoinSet::new());
    match opts.protocol {
        Protocol::Amqp10 => amqp10::spawn(
            opts,
            &uris,
            &queues,
            &stats,
            &stop,
            &mut consumers,
            &mut producers,
        ),
        Protocol::Stream => stream::spawn(
            opts,
            &uris,
            &queues,
            &stats,
            &stop,
            &mut consumers,
            &mut producers,
        )?,
        Protocol::Amqp091 => amqp091::spawn(
            opts,
            &uris,
            &queues,
            &stats,
            &stop,
            &mut consumers,
            &mut producers,
        ),
    }

    let started = Instant::now();
    let deadline = (opts.time > 0).then(|| started + Duration::from_secs(opts.time));
    let period = Duration::from_secs(1);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut samples = Vec::new();
    let mut first_error = None;
    let mut last_received = (0u64, Instant::now());
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let s = stats.sample();
                if live {
                    println!("{}", report::live_line(&s));
                }
                samples.push(s);
            }
            Some(r) = producers.join_next(), if !producers.is_empty() => {
                if let Ok(Err(e)) = r {
                    first_error.get_or_insert(e);
                    stop.store(true, Ordering::Relaxed);
                }
            }
            Some(r) = consumers.join_next(), if !consumers.is_empty() => {
                if let Ok(Err(e)) = r {
                    first_error.get_or_insert(e);
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        if producers.is_empty() && consumers.is_empty() {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop.store(true, Ordering::Relaxed);
        }
        // Count mode: once the producers are done, consumers without a
        // count of their own stop when they have everything (or stall).
        if producers.is_empty() && opts.cmessages == 0 && opts.time == 0 {
            let received = stats.received.load(Ordering::Relaxed);
            if received != last_received.0 {
                last_received = (received, Instant::now());
            }
            let sent = stats.sent.load(Ordering::Relaxed);
            if received >= sent || last_received.1.elapsed() > DRAIN_IDLE {
                stop.store(true, Ordering::Relaxed);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(stats.summary(samples))
}

/// Run a named scenario (each stage a separate run on fresh queues, as
/// the seed-003 benchmarks do for prefetch), or the single workload.
pub async fn run(opts: &Options, live: bool) -> Result<Vec<(String, Summary)>, PerfError> {
    let stages = scenario::stages(opts);
    let mut out = Vec::new();
    for (label, stage) in stages {
        if live && opts.scenario.is_some() {
            println!("== stage {label}");
        }
        let s = run_workload(&stage, live).await?;
        if live {
            print!("{}", report::summary_text(&label, &s));
        }
        out.push((label, s));
    }
    Ok(out)
}
