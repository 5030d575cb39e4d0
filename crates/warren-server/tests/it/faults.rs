//! What the fault runs (`quorum_faults.rs`, `stream_faults.rs`) share:
//! three `warren` processes whose every inter-node link runs through a
//! blackholing proxy, a declare retried until the metadata group has a
//! leader, and one fault cycle: a random node killed with SIGKILL and
//! started again, paused with SIGSTOP for 3 s, or cut off from the other
//! two for 5 s while a client of its own tries to get confirms (a
//! minority must get none).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::Client;

use crate::cluster_kill::{until_all_running, write_config_via, Node};
use crate::proxy::Proxy;

pub(crate) fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Three nodes on `cluster` and `http` ports (AMQP on `amqp`, if given),
/// each pair's link through a proxy (i < j: i dials j through it);
/// `tune` edits each node's configuration file. Started, and running.
pub(crate) async fn start_proxied(
    dir: &Path,
    cluster: &[u16],
    http: &[u16],
    amqp: Option<&[u16]>,
    tune: impl Fn(usize, &Path),
) -> (Vec<Node>, HashMap<(usize, usize), Proxy>) {
    let mut proxies: HashMap<(usize, usize), Proxy> = HashMap::new();
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        proxies.insert((i, j), Proxy::start(cluster[j]).await);
    }
    let dial = |i: usize, j: usize| proxies.get(&(i.min(j), i.max(j))).map_or(cluster[j], |p| p.port);
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let config = write_config_via(dir, i, cluster, http, amqp.map(|a| a[i]), dial);
            tune(i, &config);
            Node {
                name: format!("warren@p{i}"),
                config,
                http: http[i],
                log: dir.join(format!("node{i}.log")),
                child: None,
            }
        })
        .collect();
    for n in nodes.iter_mut() {
        n.spawn();
    }
    until_all_running(&Client::new(), &nodes).await;
    (nodes, proxies)
}

/// PUT `body` at `path` on node 1 until it succeeds (the metadata group
/// may have no leader yet); 20 s at most.
pub(crate) async fn declare(c: &Client, node: &Node, path: &str, body: serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c
            .put(node.url(path))
            .basic_auth("guest", Some("guest"))
            .json(&body)
            .send()
            .await
            .unwrap();
        if r.status().is_success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} is never declared: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Cycle `cycle` of `kills` kills, then `pauses` pauses, then partitions,
/// on a random node; during a partition `minority(victim)` runs (its
/// confirms counted and returned). Returns (victim, minority confirms)
/// once every node runs again.
pub(crate) async fn inflict<F, Fut>(
    cycle: usize,
    kills: usize,
    pauses: usize,
    nodes: &mut [Node],
    proxies: &HashMap<(usize, usize), Proxy>,
    minority: F,
) -> (usize, usize)
where
    F: FnOnce(usize) -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let victim = rand::thread_rng().gen_range(0..3);
    let mut confirmed = 0;
    if cycle < kills {
        nodes[victim].kill9();
        tokio::time::sleep(Duration::from_millis(rand::thread_rng().gen_range(500..2500))).await;
        nodes[victim].spawn();
    } else if cycle >= kills + pauses {
        let cut = |on: bool| {
            for ((i, j), p) in proxies {
                if *i == victim || *j == victim {
                    p.blackhole(on);
                }
            }
        };
        cut(true);
        // Past the failure detector's 1 s, so the majority has seen it
        // go; then a client of the cut-off node's own.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        confirmed = minority(victim).await;
        cut(false);
    } else {
        let pid = nodes[victim].child.as_ref().unwrap().id() as i32;
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        tokio::time::sleep(Duration::from_secs(3)).await;
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
    until_all_running(&Client::new(), nodes).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    (victim, confirmed)
}
