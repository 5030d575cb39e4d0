//! The `warren` binary as a separate process, so a test can kill it with
//! SIGKILL and start it again on the same port and data directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// A port free on loopback right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
        let child = Command::new(warren_binary())
            .args(["--amqp-listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--stream-listen", &format!("127.0.0.1:{}", self.stream_port)])
            .args(["--http-listen", "127.0.0.1:0"])
            .args(["--prometheus-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("warren starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
            || tokio::net::TcpStream::connect(("127.0.0.1", self.stream_port))
                .await
                .is_err()
        {
            assert!(Instant::now() < deadline, "warren did not listen within 30 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
    }
}
