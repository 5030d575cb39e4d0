//! `warren-perf`: parse the options, run, print the summary, write the
//! JSON and SVG reports asked for.

use clap::Parser;
use warren_perf::options::Options;
use warren_perf::report;

fn main() -> std::process::ExitCode {
    let mut opts = Options::parse();
    if let Err(e) = opts.validate() {
        eprintln!("warren-perf: {e}");
        return std::process::ExitCode::from(2);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let stages = match rt.block_on(warren_perf::run(&opts, !opts.quiet)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warren-perf: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    if opts.quiet {
        for (label, s) in &stages {
            print!("{}", report::summary_text(label, s));
        }
    }
    if stages.len() > 1 {
        println!("\n| stage | sent msg/s | received msg/s | latency p50 | latency p99 |");
        println!("| --- | --- | --- | --- | --- |");
        for (label, s) in &stages {
            println!(
                "| {label} | {:.0} | {:.0} | {} µs | {} µs |",
                s.rate(s.sent),
                s.rate(s.received),
                s.consumer.p50,
                s.consumer.p99
            );
        }
    }
    if let Some(path) = &opts.json {
        let v = report::json(&command, &stages);
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&v).unwrap_or_default()) {
            eprintln!("warren-perf: cannot write {}: {e}", path.display());
            return std::process::ExitCode::from(1);
        }
    }
    if let Some(path) = &opts.svg {
        if let Err(e) = std::fs::write(path, report::svg(&command, &stages)) {
            eprintln!("warren-perf: cannot write {}: {e}", path.display());
            return std::process::ExitCode::from(1);
        }
    }
    std::process::ExitCode::SUCCESS
}
