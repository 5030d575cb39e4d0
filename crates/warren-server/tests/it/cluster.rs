//! Several nodes on loopback with `[cluster]` settings: the links between
//! them come up after the authenticated handshake, `/api/nodes` on every
//! node lists all of them running or not, a node that stops is seen down
//! at once (it says goodbye) and up again when it returns, and a node
//! with the wrong secret or of another cluster stays out while the others
//! go on.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use warren_node::config::cluster::{ClusterSettings, PeerConfig};
use warren_node::config::Listen;

use crate::common::*;

/// Free loopback ports for the nodes' listeners, chosen up front because
/// every node's settings name the others'. Taken below Linux's ephemeral
/// range (32768 and up), where the listeners of other tests, bound to
/// port 0, never land between this choice and the bind; and never handed
/// out twice in this process, so a test whose node is down (its ports
/// free for a moment) never sees another test's broker take them (its
/// clients would be talking to a stranger).
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    static SEED: AtomicU64 = AtomicU64::new(0);
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut x = SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        ^ std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let mut held = Vec::new();
    while held.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            given.insert(port);
            held.push(l);
        }
    }
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn settings(cluster: &str, secret: &str, me: usize, ports: &[u16]) -> ClusterSettings {
    settings_via(cluster, secret, me, ports, ports)
}

/// Listening on `ports[me]`, dialling the others at `dial` (a proxy's
/// ports, or the same).
fn settings_via(cluster: &str, secret: &str, me: usize, ports: &[u16], dial: &[u16]) -> ClusterSettings {
    ClusterSettings {
        name: cluster.into(),
        secret: Some(secret.into()),
        listen: Listen(Some(format!("127.0.0.1:{}", ports[me]).parse().unwrap())),
        peers: (0..ports.len())
            .filter(|&i| i != me)
            .map(|i| PeerConfig {
                node: node_name(i),
                address: format!("127.0.0.1:{}", dial[i]),
            })
            .collect(),
        ping_interval: 200,
        down_after: 1000,
        ..ClusterSettings::default()
    }
}

pub(crate) fn node_name(i: usize) -> String {
    format!("warren@node-{}", i + 1)
}

pub(crate) async fn start_node(
    cluster: &str,
    secret: &str,
    me: usize,
    ports: &[u16],
    data_dir: Option<std::path::PathBuf>,
) -> Broker {
    start_node_with(cluster, secret, me, ports, data_dir, |_| {}).await
}

/// [`start_node`], with `tune` changing its cluster settings.
pub(crate) async fn start_node_with(
    cluster: &str,
    secret: &str,
    me: usize,
    ports: &[u16],
    data_dir: Option<std::path::PathBuf>,
    tune: impl FnOnce(&mut ClusterSettings),
) -> Broker {
    let mut s = settings(cluster, secret, me, ports);
    tune(&mut s);
    Broker::start_with(move |c| {
        c.node_name = node_name(me);
        c.cluster = Some(s);
        if let Some(d) = data_dir {
            c.data_dir = d;
        }
    })
    .await
}

/// Three nodes of cluster "itest" on `ports`.
pub(crate) async fn start_three(ports: &[u16]) -> Vec<Broker> {
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(start_node("itest", "s3cret", i, ports, None).await);
    }
    nodes
}

/// Three nodes on fresh ports, once they agree on a metadata leader and
/// every pair is linked (what most cluster tests start from).
pub(crate) async fn three_linked() -> (Vec<u16>, Vec<Broker>) {
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    meta_leader(&nodes).await;
    all_linked(&nodes).await;
    (ports, nodes)
}

/// Node name to `running`, from `/api/nodes` on `b`.
pub(crate) async fn running(b: &Broker) -> Vec<(String, bool)> {
    let (status, nodes) = b.http(Method::GET, "/api/nodes", None).await;
    assert_eq!(status, StatusCode::OK);
    nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["running"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Wait (at most 10 s) until `b` sees exactly `expected`.
async fn until_sees(b: &Broker, expected: &[(String, bool)]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = running(b).await;
        if now == expected {
            return;
        }
        assert!(Instant::now() < deadline, "still {now:?}, expected {expected:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until every node has a link up to every other (queue traffic
/// between two nodes needs theirs; a metadata leader needs only a
/// majority's).
pub(crate) async fn all_linked(nodes: &[Broker]) {
    let up = vec![true; nodes.len()];
    for (i, b) in nodes.iter().enumerate() {
        until_sees(b, &view(i, &up)).await;
    }
}

fn view(me: usize, up: &[bool]) -> Vec<(String, bool)> {
    let mut v = vec![(node_name(me), true)];
    v.extend((0..up.len()).filter(|&i| i != me).map(|i| (node_name(i), up[i])));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_see_each_other_and_a_node_that_leaves_and_returns() {
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    for (i, b) in nodes.iter().enumerate() {
        until_sees(b, &view(i, &[true, true, true])).await;
    }
    let (_, o) = nodes[0].http(Method::GET, "/api/overview", None).await;
    assert_eq!(o["cluster_name"], "itest");
    assert_eq!(o["node"], node_name(0));
    let clustering: Vec<&Value> = o["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["protocol"] == "clustering")
        .collect();
    assert_eq!(clustering.len(), 1);
    assert_eq!(clustering[0]["port"], ports[0]);
    let (status, n2) = nodes[0]
        .http(Method::GET, &format!("/api/nodes/{}", node_name(1)), None)
        .await;
    assert_eq!((status, n2["running"].as_bool()), (StatusCode::OK, Some(true)));

    // Node 2 stops: the others see it down at once (it said goodbye).
    let dir = std::mem::replace(
        &mut nodes[1].data_dir,
        std::path::PathBuf::from("/nonexistent/warren-test"),
    );
    nodes[1].stop().await;
    let t0 = Instant::now();
    until_sees(&nodes[0], &view(0, &[true, false, true])).await;
    until_sees(&nodes[2], &view(2, &[true, false, true])).await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "goodbye seen in {:?}",
        t0.elapsed()
    );
    // And returns on the same ports and data.
    nodes[1] = start_node("itest", "s3cret", 1, &ports, Some(dir)).await;
    for (i, b) in nodes.iter().enumerate() {
        until_sees(b, &view(i, &[true, true, true])).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secrets_other_clusters_and_garbage_stay_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ports = free_ports(3);
    let a = start_node("itest", "right", 0, &ports, None).await;
    let b = start_node("itest", "wrong", 1, &ports, None).await;
    let c = start_node("elsewhere", "right", 2, &ports, None).await;
    // Give the dialers several attempts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(running(&a).await, view(0, &[true, false, false]));
    assert_eq!(running(&b).await, view(1, &[false, true, false]));
    assert_eq!(running(&c).await, view(2, &[false, false, true]));
    // Garbage and an oversized frame on the inter-node port: the link is
    // closed and nothing else changes.
    for bytes in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![0x7f, 0xff, 0xff, 0xff, 1],
    ] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", ports[0]))
            .await
            .unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut rest = Vec::new();
        let n = within(s.read_to_end(&mut rest)).await.unwrap_or(0);
        let _ = n;
    }
    let (status, _) = a.http(Method::GET, "/api/overview", None).await;
    assert_eq!(status, StatusCode::OK, "node 1 still serves");
    assert_eq!(running(&a).await, view(0, &[true, false, false]));
}

pub(crate) fn meta(b: &Broker) -> std::sync::Arc<warren_node::cluster::meta::Meta> {
    b.running
        .as_ref()
        .unwrap()
        .ctx
        .meta
        .clone()
        .expect("a cluster node")
}

/// The index in `nodes` of the metadata leader, once every running node
/// names the same one.
pub(crate) async fn meta_leader(nodes: &[Broker]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen: Vec<Option<String>> = nodes.iter().map(|b| meta(b).leader()).collect();
        if let Some(Some(l)) = seen.first() {
            if seen.iter().all(|s| s.as_deref() == Some(l.as_str())) {
                return (0..nodes.len()).find(|&i| node_name(i) == *l).unwrap();
            }
        }
        assert!(Instant::now() < deadline, "no agreed leader: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until every node has applied what any of them had applied when
/// called. A change is answered once a majority has it and the answering
/// node applied it; another node may apply it a moment later (as with
/// RabbitMQ 4's Khepri), so a test that makes a change through one node
/// and relies on it through another waits for this first.
pub(crate) async fn in_step(nodes: &[Broker]) {
    let index = nodes.iter().map(|b| meta(b).applied_index()).max().unwrap_or(0);
    for b in nodes {
        until_applied(b, index).await;
    }
}

pub(crate) async fn until_applied(b: &Broker, index: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while meta(b).applied_index() < index {
        assert!(
            Instant::now() < deadline,
            "applied {} of {index}",
            meta(b).applied_index()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_log_commits_on_a_majority_and_a_returning_node_catches_up() {
    use warren_node::cluster::meta::MetaError;
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    let l = meta_leader(&nodes).await;
    let wait = Duration::from_secs(5);
    let mut last = 0;
    for i in 0..20 {
        meta(&nodes[l])
            .propose(format!("change {i}").into_bytes(), wait)
            .await
            .unwrap();
        last = meta(&nodes[l]).applied_index();
    }
    for b in &nodes {
        until_applied(b, last).await;
    }
    // A follower takes a change too: forwarded to the leader, and
    // answered once the follower has applied it itself.
    let f = (l + 1) % 3;
    meta(&nodes[f])
        .propose(b"via a follower".to_vec(), wait)
        .await
        .unwrap();
    let at = meta(&nodes[f]).applied_index();
    assert!(at > last);
    last = at;

    // One follower stops: two of three still commit.
    let dir1 = std::mem::replace(&mut nodes[f].data_dir, "/nonexistent/warren-test".into());
    nodes[f].stop().await;
    for i in 20..30 {
        meta(&nodes[l])
            .propose(format!("change {i}").into_bytes(), wait)
            .await
            .unwrap();
        last = meta(&nodes[l]).applied_index();
    }
    // The other stops too: the leader alone cannot commit, and says so
    // within the time given.
    let g = (l + 2) % 3;
    let dir2 = std::mem::replace(&mut nodes[g].data_dir, "/nonexistent/warren-test".into());
    nodes[g].stop().await;
    let t0 = Instant::now();
    let r = meta(&nodes[l])
        .propose(b"alone".to_vec(), Duration::from_secs(2))
        .await;
    assert_eq!(r, Err(MetaError::Timeout));
    assert!(t0.elapsed() < Duration::from_secs(3));

    // Both return and catch up, from their own logs and the leader's.
    nodes[f] = start_node("itest", "s3cret", f, &ports, Some(dir1)).await;
    nodes[g] = start_node("itest", "s3cret", g, &ports, Some(dir2)).await;
    let l = meta_leader(&nodes).await;
    meta(&nodes[l]).propose(b"after".to_vec(), wait).await.unwrap();
    last = last.max(meta(&nodes[l]).applied_index());
    for b in &nodes {
        until_applied(b, last).await;
    }
}

async fn login(b: &Broker, user: &str, pass: &str, vhost: &str) -> Result<lapin::Connection, lapin::Error> {
    let uri = format!("amqp://{user}:{pass}@127.0.0.1:{}/{vhost}", b.port);
    within(lapin::Connection::connect(
        &uri,
        lapin::ConnectionProperties::default(),
    ))
    .await
}

/// Users, vhosts and permissions made through the API of any node hold on
/// every node, once the metadata group has committed them; on a node cut
/// off from the majority, a change fails with 503 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_vhosts_and_permissions_made_on_any_node_hold_everywhere() {
    use serde_json::json;
    let ports = free_ports(3);
    let mut nodes = start_three(&ports).await;
    let l = meta_leader(&nodes).await;
    let (f1, f2) = ((l + 1) % 3, (l + 2) % 3);
    // Made on a follower and on the leader.
    let (s, _) = nodes[f1].http(Method::PUT, "/api/vhosts/shared", None).await;
    assert_eq!(s, StatusCode::CREATED);
    let carol = json!({"password": "c4rol", "tags": "management"});
    let (s, _) = nodes[l].http(Method::PUT, "/api/users/carol", Some(carol)).await;
    assert_eq!(s, StatusCode::CREATED);
    let grant = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let (s, _) = nodes[f2]
        .http(Method::PUT, "/api/permissions/shared/carol", Some(grant))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    in_step(&nodes).await;
    // Carol logs in to the new vhost on every node.
    for b in &nodes {
        let c = login(b, "carol", "c4rol", "shared").await.expect("carol logs in");
        let _ = c.close(200, "bye".into()).await;
    }
    // Deleted on a follower: gone everywhere.
    let (s, _) = nodes[f1].http(Method::DELETE, "/api/users/carol", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    in_step(&nodes).await;
    for b in &nodes {
        assert!(login(b, "carol", "c4rol", "shared").await.is_err());
    }
    // Alone, a node cannot change anything: 503, and nothing changed.
    let dir1 = std::mem::replace(&mut nodes[f1].data_dir, "/nonexistent/warren-test".into());
    let dir2 = std::mem::replace(&mut nodes[f2].data_dir, "/nonexistent/warren-test".into());
    nodes[f1].stop().await;
    nodes[f2].stop().await;
    let t0 = Instant::now();
    let (s, body) = nodes[l].http(Method::PUT, "/api/vhosts/lonely", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(t0.elapsed() < Duration::from_secs(7));
    let (s, _) = nodes[l].http(Method::GET, "/api/vhosts/lonely", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // The others return with what they had, and catch up.
    nodes[f1] = start_node("itest", "s3cret", f1, &ports, Some(dir1)).await;
    nodes[f2] = start_node("itest", "s3cret", f2, &ports, Some(dir2)).await;
    let l = meta_leader(&nodes).await;
    let (s, _) = nodes[l]
        .http(Method::PUT, "/api/users/dave", Some(json!({"password": "d"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let last = meta(&nodes[l]).applied_index();
    for b in &nodes {
        until_applied(b, last).await;
        let (s, _) = b.http(Method::GET, "/api/vhosts/shared", None).await;
        assert_eq!(s, StatusCode::OK);
        let (s, _) = b.http(Method::GET, "/api/users/dave", None).await;
        assert_eq!(s, StatusCode::OK);
        let (s, _) = b.http(Method::GET, "/api/users/carol", None).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}

/// The vhosts `b` has, sorted.
async fn vhosts(b: &Broker) -> Vec<String> {
    let (_, v) = b.http(Method::GET, "/api/vhosts", None).await;
    let mut names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// A node cut off by a blackhole (silence, not resets) on every link it
/// has: the others see it down, elect among themselves if it led, and go
/// on changing the metadata; it refuses changes with 503 and changes
/// nothing. Healed, it catches up and every node has one topology, without
/// what the minority was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_node_is_a_minority_and_catches_up_when_healed() {
    let ports = free_ports(3);
    let mut proxies = Vec::new();
    for p in &ports {
        proxies.push(crate::proxy::Proxy::start(*p).await);
    }
    let dial: Vec<u16> = proxies.iter().map(|p| p.port).collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let s = settings_via("itest", "s3cret", i, &ports, &dial);
        nodes.push(
            Broker::start_with(move |c| {
                c.node_name = node_name(i);
                c.cluster = Some(s);
            })
            .await,
        );
    }
    meta_leader(&nodes).await;
    // Every link of node 3 goes through its proxy (it has the highest
    // name, so it dials nobody): blackhole it.
    proxies[2].blackhole(true);
    until_sees(&nodes[0], &view(0, &[true, true, false])).await;
    until_sees(&nodes[1], &view(1, &[true, true, false])).await;
    let t0 = Instant::now();
    let (s, body) = nodes[2].http(Method::PUT, "/api/vhosts/minority", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(t0.elapsed() < Duration::from_secs(7), "{:?}", t0.elapsed());
    // The majority goes on (after electing a leader, if node 3 led).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, _) = nodes[0].http(Method::PUT, "/api/vhosts/majority", None).await;
        if s == StatusCode::CREATED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the majority cannot change anything: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Node 2 applies it once the leader tells it the change committed
    // (its next append or heartbeat), not necessarily before node 1's
    // answer: waited for, within bounds.
    let deadline = Instant::now() + Duration::from_secs(5);
    while vhosts(&nodes[1]).await != ["/", "majority"] {
        assert!(
            Instant::now() < deadline,
            "node 2 never applied the majority's change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(vhosts(&nodes[2]).await, vec!["/"]);
    // Healed: one topology everywhere, the refused change nowhere.
    proxies[2].blackhole(false);
    for (i, b) in nodes.iter().enumerate() {
        until_sees(b, &view(i, &[true, true, true])).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while vhosts(&nodes[2]).await != ["/", "majority"] {
        assert!(
            Instant::now() < deadline,
            "node 3 never caught up: {:?}",
            vhosts(&nodes[2]).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for b in &nodes {
        assert_eq!(vhosts(b).await, vec!["/", "majority"]);
    }
}

/// Policies, limits and topic permissions made on one node hold on the
/// others: a policy listed everywhere, a vhost connection limit of 0
/// set on one node refusing logins on another, and cleared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_limits_and_topic_permissions_hold_everywhere() {
    use serde_json::json;
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    meta_leader(&nodes).await;
    let policy = json!({"pattern": "^cap", "definition": {"max-length": 10}, "apply-to": "queues"});
    let (s, _) = nodes[0]
        .http(Method::PUT, "/api/policies/%2F/cap", Some(policy))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let tp = json!({"exchange": "amq.topic", "write": "^a", "read": "^b"});
    let (s, _) = nodes[1]
        .http(Method::PUT, "/api/topic-permissions/%2F/guest", Some(tp))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = nodes[2]
        .http(
            Method::PUT,
            "/api/vhost-limits/%2F/max-connections",
            Some(json!({"value": 0})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    for b in &nodes {
        let (_, p) = b.http(Method::GET, "/api/policies/%2F/cap", None).await;
        assert_eq!(p["definition"]["max-length"], 10, "{p}");
        let (_, t) = b
            .http(Method::GET, "/api/topic-permissions/%2F/guest", None)
            .await;
        assert_eq!(t[0]["write"], "^a", "{t}");
        assert!(
            login(b, "guest", "guest", "%2F").await.is_err(),
            "the vhost's limit of 0 holds"
        );
    }
    let (s, _) = nodes[1]
        .http(Method::DELETE, "/api/vhost-limits/%2F/max-connections", None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = nodes[2].http(Method::DELETE, "/api/policies/%2F/cap", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    for b in &nodes {
        let c = login(b, "guest", "guest", "%2F")
            .await
            .expect("the limit is gone");
        let _ = c.close(200, "bye".into()).await;
        let (s, _) = b.http(Method::GET, "/api/policies/%2F/cap", None).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}

/// Every node shows the others' memory and uptime in /api/nodes, from
/// their status reports; and an alarm is cluster-wide, as RabbitMQ's: a
/// memory alarm on one node blocks publishers on the others until it
/// clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_figures_and_alarms_travel_between_nodes() {
    let ports = free_ports(3);
    let nodes = start_three(&ports).await;
    for (i, b) in nodes.iter().enumerate() {
        until_sees(b, &view(i, &[true, true, true])).await;
    }
    let (_, n) = nodes[0]
        .http(Method::GET, &format!("/api/nodes/{}", node_name(1)), None)
        .await;
    assert!(n["mem_used"].as_u64().is_some(), "{n}");
    assert!(n["mem_limit"].as_u64().is_some_and(|m| m > 0), "{n}");
    assert!(n["uptime"].as_u64().is_some(), "{n}");
    assert_eq!(n["mem_alarm"], false);
    let (_, me) = nodes[0]
        .http(Method::GET, &format!("/api/nodes/{}", node_name(0)), None)
        .await;
    assert!(me["uptime"].as_u64().is_some(), "{me}");

    let broker = |i: usize| nodes[i].running.as_ref().unwrap().ctx.broker.clone();
    assert_eq!(broker(0).publishing_blocked(), None);
    // Node 2's watermark at zero: its alarm goes on, and its next report
    // blocks publishers on node 1 too.
    broker(1).alarms.set_memory_limit(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker(0).publishing_blocked().is_none() {
        assert!(Instant::now() < deadline, "node 2's alarm never reached node 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(broker(0).publishing_blocked(), Some("low on memory"));
    assert!(!broker(0).alarms.memory_alarm(), "node 1's own alarm stays off");
    // Node 3 hears the same report in its own time.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, n) = nodes[2]
            .http(Method::GET, &format!("/api/nodes/{}", node_name(1)), None)
            .await;
        if n["mem_alarm"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 never saw node 2's alarm: {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Cleared there, cleared here.
    broker(1).alarms.set_memory_limit(u64::MAX);
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker(0).publishing_blocked().is_some() {
        assert!(
            Instant::now() < deadline,
            "node 2's alarm never cleared on node 1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `partitions` each node lists in `/api/nodes` (its own entry and
/// the others' as they last reported them): name to partitions.
async fn partitions_seen(b: &Broker) -> Vec<(String, Vec<String>)> {
    let (_, nodes) = b.http(Method::GET, "/api/nodes", None).await;
    nodes
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["running"] == true)
        .map(|n| {
            let p = n["partitions"].as_array().unwrap();
            (
                n["name"].as_str().unwrap().to_string(),
                p.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect()
}

/// Nodes 1 and 3 lose each other while both still reach node 2: each
/// lists the other in `partitions` (node 2 shows both as they report it);
/// healed, the lists are empty again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_between_two_nodes_shows_in_api_nodes_until_healed() {
    let ports = free_ports(3);
    // Only node 1's link to node 3 goes through the proxy.
    let proxy = crate::proxy::Proxy::start(ports[2]).await;
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut dial = ports.clone();
        if i == 0 {
            dial[2] = proxy.port;
        }
        let s = settings_via("itest", "s3cret", i, &ports, &dial);
        nodes.push(
            Broker::start_with(move |c| {
                c.node_name = node_name(i);
                c.cluster = Some(s);
            })
            .await,
        );
    }
    all_linked(&nodes).await;
    for b in &nodes {
        assert!(partitions_seen(b).await.iter().all(|(_, p)| p.is_empty()));
    }
    proxy.blackhole(true);
    let (n1, n3) = (node_name(0), node_name(2));
    let want = |b: &str, seen: &[(String, Vec<String>)], who: &str| {
        seen.iter().any(|(n, p)| n == b && p == &[who.to_string()])
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s1, s2, s3) = (
            partitions_seen(&nodes[0]).await,
            partitions_seen(&nodes[1]).await,
            partitions_seen(&nodes[2]).await,
        );
        if want(&n1, &s1, &n3) && want(&n3, &s3, &n1) && want(&n1, &s2, &n3) && want(&n3, &s2, &n1) {
            assert!(
                s2.iter().any(|(n, p)| *n == node_name(1) && p.is_empty()),
                "{s2:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1: {s1:?} node 2: {s2:?} node 3: {s3:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.blackhole(false);
    let deadline = Instant::now() + Duration::from_secs(15);
    for b in &nodes {
        while !partitions_seen(b).await.iter().all(|(_, p)| p.is_empty()) {
            assert!(Instant::now() < deadline, "{:?}", partitions_seen(b).await);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
