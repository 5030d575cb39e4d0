//! `warren`: the broker binary. Parses flags and configuration, starts the
//! broker, reloads its TLS certificates on SIGHUP, and shuts it down
//! cleanly on SIGTERM or Ctrl-C (open connections get connection.close 320
//! CONNECTION_FORCED).

use clap::Parser;

/// mimalloc keeps freed pages for reuse where glibc's malloc handed them
/// back and faulted them in again: on three nodes publishing 1 KB stream
/// messages that was 4-19 % of the leader's CPU (page faults and zeroed
/// pages; bench/RESULTS.md, 2026-12-07).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use tracing_subscriber::EnvFilter;
use warren_server::{Cli, Config, LogFormat, StartError};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing::info!(
        "starting Warren {} (data in {})",
        env!("CARGO_PKG_VERSION"),
        config.data_dir.display()
    );
    // Before starting: a SIGTERM that comes while the broker starts (from
    // a supervisor, or a test that saw the listener's log line) then stops
    // it cleanly instead of killing it with the default action.
    let stop = shutdown_signal();
    tokio::pin!(stop);
    let mut running = match start(config.clone()).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    reload_on_sighup(running.ctx.clone());
    loop {
        tokio::select! {
            _ = &mut stop => break,
            // It joined a cluster: stopped and started again in place, as
            // rabbitmqctl's stop_app, join_cluster, start_app.
            _ = running.restart_requested() => {
                tracing::info!("restarting as a member of the cluster it joined");
                running.shutdown().await;
                running = match start(config.clone()).await {
                    Ok(r) => r,
                    Err(code) => return code,
                };
                reload_on_sighup(running.ctx.clone());
            }
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    tracing::info!("stopped");
    std::process::ExitCode::SUCCESS
}

/// Start the broker, or say why it cannot and give the exit code.
async fn start(config: Config) -> Result<warren_server::Running, std::process::ExitCode> {
    match warren_server::start(config).await {
        Ok(r) => Ok(r),
        Err(StartError::Listen { addr, source }) if source.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::error!(
                "cannot listen on {addr}: the port is already in use (is another broker running?)"
            );
            Err(std::process::ExitCode::from(1))
        }
        Err(e) => {
            tracing::error!("{e}");
            Err(std::process::ExitCode::from(1))
        }
    }
}

/// Log lines to standard output. Colour escapes only reach a terminal: a
/// service manager's journal or a file gets plain text (NO_COLOR, as
/// no-color.org asks, turns colour off on a terminal too).
fn init_logging(cli: &Cli) {
    use std::io::IsTerminal;
    let filter = cli.log.clone().unwrap_or_else(|| "info".into());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match cli.log_format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => {
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(colour).init()
        }
    }
}

/// SIGTERM or SIGINT, registered now (tokio installs a signal's handler
/// when its stream is made, not when it is first awaited).
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        match (term, int) {
            (Some(mut t), Some(mut i)) => {
                tokio::select! {
                    _ = t.recv() => {}
                    _ = i.recv() => {}
                }
            }
            (Some(mut t), None) => {
                t.recv().await;
            }
            (None, Some(mut i)) => {
                i.recv().await;
            }
            (None, None) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// SIGHUP reads the TLS certificate, key and CA files again (new
/// connections get them; open ones keep theirs).
#[cfg(unix)]
fn reload_on_sighup(ctx: std::sync::Arc<warren_node::ServerCtx>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading TLS certificates");
            let _ = ctx.reload_tls();
        }
    });
}

#[cfg(not(unix))]
fn reload_on_sighup(_ctx: std::sync::Arc<warren_node::ServerCtx>) {}

#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
