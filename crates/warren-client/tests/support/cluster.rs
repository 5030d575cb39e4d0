//! Three `warren` processes forming a cluster on loopback, each with its
//! own AMQP and HTTP port, so a test can kill one with SIGKILL under a
//! client and start it again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use super::broker::{free_port, log_file, wait_listening, warren_binary};

pub struct ClusterNode {
    pub amqp: u16,
    pub http: u16,
    pub stream: u16,
    config: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub nodes: Vec<ClusterNode>,
    dir: PathBuf,
}

fn config(dir: &Path, i: usize, cluster: &[u16], amqp: u16, http: u16, stream: u16) -> PathBuf {
    let peers: Vec<String> = (0..3)
        .filter(|&j| j != i)
        .map(|j| {
            format!(
                "{{ node = \"warren@c{j}\", address = \"127.0.0.1:{}\" }}",
                cluster[j]
            )
        })
        .collect();
    let text = format!(
        r#"node_name = "warren@c{i}"
data_dir = "{data}"
amqp_listen = "127.0.0.1:{amqp}"
amqps_listen = "none"
stream_listen = "127.0.0.1:{stream}"
stream_tls_listen = "none"
https_listen = "none"
prometheus_listen = "none"
http_listen = "127.0.0.1:{http}"

[cluster]
name = "client-test"
secret = "s3cret"
listen = "127.0.0.1:{port}"
ping_interval = 200
down_after = 1000
peers = [{peers}]
"#,
        data = dir.join(format!("data{i}")).display(),
        port = cluster[i],
        peers = peers.join(", "),
    );
    let path = dir.join(format!("node{i}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

impl Cluster {
    /// Start three nodes and wait until each takes AMQP connections.
    pub async fn start(dir: &Path) -> Cluster {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let cluster: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let nodes = (0..3)
            .map(|i| {
                let (amqp, http, stream) = (free_port(), free_port(), free_port());
                ClusterNode {
                    amqp,
                    http,
                    stream,
                    config: config(dir, i, &cluster, amqp, http, stream),
                    child: None,
                }
            })
            .collect();
        let mut c = Cluster {
            nodes,
            dir: dir.to_path_buf(),
        };
        for i in 0..3 {
            c.restart(i).await;
        }
        c
    }

    /// Start node `i` (again) and wait until it listens.
    pub async fn restart(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        assert!(n.child.is_none(), "node {i} runs");
        let log = self.dir.join(format!("node{i}.log"));
        let mut child = Command::new(warren_binary())
            .arg("--config")
            .arg(&n.config)
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .expect("warren starts");
        wait_listening(&format!("node {i}"), &mut child, &[n.amqp], &log).await;
        n.child = Some(child);
    }

    /// SIGKILL node `i`, and reap it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            c.kill().expect("SIGKILL");
            c.wait().expect("reaped");
        }
    }

    /// The stream protocol URIs of every node, node 0's first.
    pub fn stream_uris(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("rabbitmq-stream://guest:guest@127.0.0.1:{}/%2f", n.stream))
            .collect()
    }

    /// The AMQP URIs of every node, node 0's first.
    pub fn uris(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("amqp://guest:guest@127.0.0.1:{}/%2f?heartbeat=2", n.amqp))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill9(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
