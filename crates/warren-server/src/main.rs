//! `warren`: the broker binary. Parses flags and configuration, starts the
//! broker, and shuts it down cleanly on SIGTERM or Ctrl-C (open connections
//! get connection.close 320 CONNECTION_FORCED).

use clap::Parser;
use tracing_subscriber::EnvFilter;
use warren_server::{Cli, Config, StartError};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = cli.log.clone().unwrap_or_else(|| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_target(false)
        .init();
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
    let running = match warren_server::start(config).await {
        Ok(r) => r,
        Err(StartError::Listen { addr, source }) if source.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::error!(
                "cannot listen on {addr}: the port is already in use (is another broker running?)"
            );
            return std::process::ExitCode::from(1);
        }
        Err(e) => {
            tracing::error!("{e}");
            return std::process::ExitCode::from(1);
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    tracing::info!("stopped");
    std::process::ExitCode::SUCCESS
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
