//! The `warren` binary as a user runs it: it starts with flags, logs its
//! listener, refuses a port in use with a clear message, closes client
//! connections with 320 CONNECTION_FORCED on SIGTERM, and exits cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::{Connection, ConnectionProperties, Event};

use crate::common::*;

/// A loopback port for a `warren` process to bind, below the ephemeral
/// range so that no other test's outgoing connection takes it first.
pub fn free_port() -> u16 {
    crate::cluster::free_ports(1)[0]
}

pub fn spawn(port: u16, dir: &std::path::Path) -> Child {
    spawn_with(port, dir, &[])
}

/// `spawn` with more flags.
pub fn spawn_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_warren"))
        .args([
            "--amqp-listen",
            &format!("127.0.0.1:{port}"),
            "--stream-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--prometheus-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .args(extra)
        // Colour must be off because stdout is no terminal, not because
        // the environment asked.
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("warren starts")
}

/// Read the child's stdout until a line contains `what` (on a blocking
/// thread); returns the child and what it printed up to then.
pub async fn wait_for_line(mut child: Child, what: &'static str) -> (Child, String) {
    tokio::task::spawn_blocking(move || {
        let out = child.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(what) {
                // keep draining so the child never blocks on a full pipe
                std::thread::spawn(move || for _ in lines {});
                return (child, seen);
            }
        }
        panic!("no line with {what:?} in:\n{seen}");
    })
    .await
    .unwrap()
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sigterm_closes_connections_with_320() {
    let dir = temp_dir("bin");
    let port = free_port();
    let (mut child, log) = wait_for_line(spawn(port, &dir), "listener on").await;
    assert!(
        log.contains(&format!("AMQP 0-9-1 and 1.0 listener on 127.0.0.1:{port}")),
        "{log}"
    );
    let conn = within(Connection::connect(
        &format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
        ConnectionProperties::default(),
    ))
    .await
    .unwrap();
    let mut events = conn.events_listener();
    sigterm(&child);
    let forced = within(async {
        while let Some(ev) = events.next().await {
            if let Event::Error(e) = ev {
                return format!("{e:?}");
            }
        }
        String::new()
    })
    .await;
    assert!(forced.contains("CONNECTION_FORCED"), "{forced}");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "clean exit: {status:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn port_in_use_is_reported_clearly() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = temp_dir("bin2");
    let out = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_warren"))
                .args([
                    "--amqp-listen",
                    &format!("127.0.0.1:{port}"),
                    "--stream-listen",
                    "127.0.0.1:0",
                    "--http-listen",
                    "127.0.0.1:0",
                    "--prometheus-listen",
                    "127.0.0.1:0",
                    "--data-dir",
                ])
                .arg(&dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("already in use"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
    drop(taken);
}

#[tokio::test]
async fn environment_variables_configure_the_binary() {
    let dir = temp_dir("bin3");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .env("WARREN_AMQP_LISTEN", format!("127.0.0.1:{port}"))
        // Not the default 5552: another broker may hold it.
        .env("WARREN_STREAM_LISTEN", "127.0.0.1:0")
        .env("WARREN_HTTP_LISTEN", "127.0.0.1:0")
        .env("WARREN_PROMETHEUS_LISTEN", "127.0.0.1:0")
        .env("WARREN_DATA_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut child, seen) = wait_for_line(child, "listener on").await;
    assert!(seen.contains(&format!("127.0.0.1:{port}")), "{seen}");
    assert!(dir.join("definitions.json").exists());
    sigterm(&child);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let _ = std::fs::remove_dir_all(dir);
}

async fn stop(mut child: Child) {
    sigterm(&child);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "clean exit: {status:?}");
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_escapes() {
    let dir = temp_dir("bin-log");
    let (child, log) = wait_for_line(spawn(free_port(), &dir), "listener on").await;
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a non-terminal log:\n{log:?}"
    );
    assert!(log.contains(" INFO "), "{log}");
    stop(child).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let dir = temp_dir("bin-json");
    let child = spawn_with(free_port(), &dir, &["--log-format", "json"]);
    let (child, log) = wait_for_line(child, "listener on").await;
    let mut listener = false;
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{line}");
        listener |= v["message"].as_str().is_some_and(|m| m.contains("listener on"));
    }
    assert!(listener, "{log}");
    stop(child).await;
    let _ = std::fs::remove_dir_all(dir);
}
