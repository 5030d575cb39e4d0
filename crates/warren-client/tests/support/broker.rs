//! The `warren` binary as a separate process, so a test can kill it with
//! SIGKILL and start it again on the same port and data directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The `warren` binary beside this test's (built by `cargo test
/// --workspace`); built here when it is not there yet.
pub fn warren_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = dir.join("warren");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "warren-server", "--bin", "warren"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the warren binary");
    }
    bin
}

/// A loopback port free right now, never handed out twice in one test
/// process. Taken below Linux's ephemeral range (32768 and up): a client
/// reconnecting to a killed broker, or a cluster node dialling its peers,
/// binds its own end there, and could land on a port chosen for a broker
/// that has not bound it yet (a node then failed to start in CI).
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<(u64, HashSet<u16>)>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let (x, seen) = given.get_or_insert_with(|| {
        let seed = std::process::id() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
        (seed | 1, HashSet::new())
    });
    loop {
        // xorshift: no crate for a handful of random numbers.
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let port = 20_000 + (*x % 12_000) as u16;
        if seen.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            seen.insert(port);
            return port;
        }
    }
}

/// Wait until `ports` on loopback take connections, failing early with the
/// log's tail when `child` has exited, or after 30 s.
pub async fn wait_listening(what: &str, child: &mut Child, ports: &[u16], log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut all = true;
        for &p in ports {
            all &= tokio::net::TcpStream::connect(("127.0.0.1", p)).await.is_ok();
        }
        if all {
            return;
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{what} did not listen on {ports:?} ({}); its log ends:\n{}",
                match exited {
                    Some(status) => format!("exited: {status}"),
                    None => "30 s passed".to_string(),
                },
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A log file for a broker process (it logs to standard output), appended
/// to across restarts.
pub fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("log file")
}

/// A broker process on 127.0.0.1:`port` keeping its data in `dir`.
pub struct BrokerProcess {
    pub port: u16,
    /// Its stream protocol listener's port.
    pub stream_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl BrokerProcess {
    pub async fn start(port: u16, dir: &Path) -> BrokerProcess {
        let mut b = BrokerProcess {
            port,
            stream_port: free_port(),
            dir: dir.to_path_buf(),
            child: None,
        };
        b.restart().await;
        b
    }

    /// Start it (again) and wait until it takes connections.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        std::fs::create_dir_all(&self.dir).expect("data dir");
        let log = self.log();
        let mut child = Command::new(warren_binary())
            .args(["--amqp-listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--stream-listen", &format!("127.0.0.1:{}", self.stream_port)])
            .args(["--http-listen", "127.0.0.1:0"])
            .args(["--prometheus-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&self.dir)
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .expect("warren starts");
        wait_listening("warren", &mut child, &[self.port, self.stream_port], &log).await;
        self.child = Some(child);
    }

    /// Where its stderr goes: beside (not in) its data directory.
    fn log(&self) -> PathBuf {
        let mut name = self.dir.file_name().unwrap_or_default().to_os_string();
        name.push(".log");
        self.dir.with_file_name(name)
    }

    /// Send `signal` (STOP, CONT) with kill(1).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// SIGKILL, and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL");
            c.wait().expect("reaped");
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.log());
    }
}
