//! Three `warren` processes on loopback, kill -9 and SIGSTOP: a node
//! killed, or paused, while durable queues are declared and users created
//! through another loses nothing that was answered, and when it is back it
//! catches up (the metadata log compacted every 50 changes, so it may be
//! from a snapshot). The checker: every queue and user whose PUT was
//! answered 201 exists on every node at the end, and every node lists the
//! same queues and users.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};

use crate::cluster::free_ports;

pub(crate) struct Node {
    pub name: String,
    pub config: PathBuf,
    pub http: u16,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl Node {
    pub fn spawn(&mut self) {
        // Appended to: a restart keeps what the killed process wrote.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("--config")
            .arg(&self.config)
            // The broker logs to standard output.
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("warren starts");
        self.child = Some(child);
    }

    /// SIGKILL, and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Node `i`'s configuration: its HTTP port, and its AMQP port when
/// `amqp` gives one (none otherwise).
pub(crate) fn write_config(
    dir: &Path,
    i: usize,
    cluster: &[u16],
    http: &[u16],
    amqp: Option<u16>,
) -> PathBuf {
    write_config_via(dir, i, cluster, http, amqp, |_, j| cluster[j])
}

/// [`write_config`], node `i` reaching peer `j` at port `dial(i, j)` (a
/// proxy in front of `j`'s inter-node port, say).
pub(crate) fn write_config_via(
    dir: &Path,
    i: usize,
    cluster: &[u16],
    http: &[u16],
    amqp: Option<u16>,
    dial: impl Fn(usize, usize) -> u16,
) -> PathBuf {
    let peers: Vec<String> = (0..3)
        .filter(|&j| j != i)
        .map(|j| {
            format!(
                "{{ node = \"warren@p{j}\", address = \"127.0.0.1:{}\" }}",
                dial(i, j)
            )
        })
        .collect();
    let text = format!(
        r#"node_name = "warren@p{i}"
data_dir = "{data}"
amqp_listen = "{amqp}"
amqps_listen = "none"
stream_listen = "none"
stream_tls_listen = "none"
https_listen = "none"
prometheus_listen = "none"
http_listen = "127.0.0.1:{http}"

[cluster]
name = "killtest"
secret = "s3cret"
listen = "127.0.0.1:{port}"
ping_interval = 200
down_after = 1000
snapshot_interval = 50
peers = [{peers}]
"#,
        data = dir.join(format!("data{i}")).display(),
        amqp = amqp.map_or("none".to_string(), |p| format!("127.0.0.1:{p}")),
        http = http[i],
        port = cluster[i],
        peers = peers.join(", "),
    );
    let path = dir.join(format!("node{i}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) async fn get(c: &Client, url: &str) -> Option<(StatusCode, serde_json::Value)> {
    let r = c.get(url).basic_auth("guest", Some("guest")).send().await.ok()?;
    let s = r.status();
    Some((s, r.json().await.unwrap_or_default()))
}

/// Wait until every node answers and sees all three running.
pub(crate) async fn until_all_running(c: &Client, nodes: &[Node]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    'outer: loop {
        assert!(Instant::now() < deadline, "the nodes never all saw each other");
        tokio::time::sleep(Duration::from_millis(100)).await;
        for n in nodes {
            let Some((StatusCode::OK, v)) = get(c, &n.url("/api/nodes")).await else {
                continue 'outer;
            };
            let running = v
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["running"] == true)
                .count();
            if running != 3 {
                continue 'outer;
            }
        }
        return;
    }
}

/// The API path of change `i` of a stream: a durable queue declare for an
/// even one, a user for an odd one.
fn path_of(name: &str, i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("/api/queues/%2F/{name}")
    } else {
        format!("/api/users/{name}")
    }
}

/// Declare queues and create users PREFIX0, PREFIX1, ... one by one
/// through `n` (at most 400, for at most 12 s); the paths answered 201.
fn write_stream(c: &Client, n: &Node, prefix: &'static str) -> tokio::task::JoinHandle<Vec<String>> {
    let c = c.clone();
    let url = n.url("");
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let t0 = Instant::now();
        for i in 0..400 {
            if t0.elapsed() > Duration::from_secs(12) {
                break;
            }
            let path = path_of(&format!("{prefix}{i}"), i);
            let body = if i.is_multiple_of(2) {
                serde_json::json!({"durable": true})
            } else {
                serde_json::json!({"password": "p", "tags": ""})
            };
            let r = c
                .put(format!("{url}{path}"))
                .basic_auth("guest", Some("guest"))
                .json(&body)
                .timeout(Duration::from_secs(8))
                .send()
                .await;
            if r.is_ok_and(|r| r.status() == StatusCode::CREATED) {
                acked.push(path);
            }
        }
        acked
    })
}

/// The checker: every answered change, on every node (allowing a node
/// that has just returned a little time to catch up).
async fn on_every_node(c: &Client, nodes: &[Node], acked: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for n in nodes {
        for path in acked {
            loop {
                match get(c, &n.url(path)).await {
                    Some((StatusCode::OK, _)) => break,
                    other => assert!(
                        Instant::now() < deadline,
                        "{path}, answered 201, is missing on {}: {other:?}",
                        n.name
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_and_sigstop_during_streams_of_changes_lose_nothing_answered() {
    let dir = crate::common::temp_dir("killtest");
    std::fs::create_dir_all(&dir).unwrap();
    let ports = free_ports(6);
    let (cluster, http) = ports.split_at(3);
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            name: format!("warren@p{i}"),
            config: write_config(&dir, i, cluster, http, None),
            http: http[i],
            log: dir.join(format!("node{i}.log")),
            child: None,
        })
        .collect();
    for n in nodes.iter_mut() {
        n.spawn();
    }
    let c = Client::new();
    until_all_running(&c, &nodes).await;
    // Once a leader is elected, changes go through.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c
            .put(nodes[0].url("/api/users/warmup"))
            .basic_auth("guest", Some("guest"))
            .json(&serde_json::json!({"password": "p", "tags": ""}))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::CREATED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no change goes through: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Queues declared and users created one by one through node 0 while node 2 is killed and
    // started again.
    let writer = write_stream(&c, &nodes[0], "k");
    tokio::time::sleep(Duration::from_millis(500)).await;
    nodes[2].kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    nodes[2].spawn();
    let acked = writer.await.unwrap();
    assert!(acked.len() > 20, "only {} changes answered", acked.len());
    until_all_running(&c, &nodes).await;
    on_every_node(&c, &nodes, &acked).await;

    // Node 1 paused (SIGSTOP) for 3 s, then resumed, during another stream.
    let writer = write_stream(&c, &nodes[0], "s");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = nodes[1].child.as_ref().unwrap().id() as i32;
    // SAFETY: signals to a child this test started and still owns.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::time::sleep(Duration::from_secs(3)).await;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let acked = writer.await.unwrap();
    assert!(acked.len() > 20, "only {} changes answered", acked.len());
    until_all_running(&c, &nodes).await;
    on_every_node(&c, &nodes, &acked).await;
    // One list of users, and of queues, everywhere.
    for listing in ["/api/users", "/api/queues"] {
        let mut lists = Vec::new();
        for n in &nodes {
            let (_, v) = get(&c, &n.url(listing)).await.unwrap();
            let mut names: Vec<String> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            lists.push(names);
        }
        assert!(lists[0].len() > 20, "{listing}: {:?}", lists[0]);
        assert_eq!(lists[0], lists[1], "{listing}");
        assert_eq!(lists[0], lists[2], "{listing}");
    }
    for n in nodes.iter_mut() {
        n.kill9();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
