//! The changes a node makes to the cluster's metadata by itself, not for
//! a client: removing a queue the broker decided to remove ([`Removals`]:
//! auto-delete, `x-expires`, an exclusive owner gone), telling the
//! cluster it has started ([`announce_start`]), and, while it leads the
//! metadata group, removing the transient queues of a node that went down
//! ([`watch_downs`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use warren_core::queue::Queue;

use super::command::{self, Command};
use super::meta::Meta;

/// How long a node keeps asking the cluster to take a change it made by
/// itself (a removal, its start) before it gives up and logs it.
const SELF_CHANGE_TRIES: u32 = 30;

/// Propose `c`, again after a second while the cluster cannot take it.
async fn propose_until_taken(meta: Arc<Meta>, c: Command, what: String) {
    let data = serde_json::to_vec(&c).expect("a command encodes");
    for _ in 0..SELF_CHANGE_TRIES {
        match meta.propose(data.clone(), command::COMMIT_TIMEOUT).await {
            Ok(_) => return,
            Err(e) => {
                tracing::debug!("{what}: not committed yet ({e}); trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    tracing::warn!("{what}: the cluster did not take it; given up");
}

/// Queue removals the broker decides by itself (auto-delete, x-expires,
/// an exclusive owner gone), proposed to the metadata group so that every
/// node removes the queue (see `warren_core::replication`).
#[derive(Default)]
pub struct Removals {
    meta: OnceLock<(Arc<Meta>, tokio::runtime::Handle)>,
}

impl Removals {
    /// The metadata group is running: removals can be proposed.
    pub fn start(&self, meta: Arc<Meta>) {
        let _ = self.meta.set((meta, tokio::runtime::Handle::current()));
    }
}

impl Removals {
    /// Propose that `queue` go (in the background, retried).
    pub fn remove_queue(&self, vhost: &str, queue: &Arc<Queue>) {
        let Some((meta, rt)) = self.meta.get() else {
            tracing::warn!(queue = %queue.name, %vhost, "queue removal before the metadata group runs, skipped");
            return;
        };
        let c = Command::DeleteQueue {
            vhost: vhost.to_string(),
            name: queue.name.to_string(),
        };
        let what = format!("removing queue '{}' in vhost '{vhost}'", queue.name);
        rt.spawn(propose_until_taken(meta.clone(), c, what));
    }
}

/// Tell the cluster this node has started, so its transient and
/// exclusive queues of before (gone with the restart) go everywhere.
pub fn announce_start(meta: Arc<Meta>, node: String, mut shutdown: watch::Receiver<bool>) {
    let what = format!("announcing that node '{node}' started");
    tokio::spawn(async move {
        tokio::select! {
            _ = propose_until_taken(meta.clone(), Command::NodeStarted { node }, what) => {}
            _ = shutdown.changed() => {}
        }
        // Taken or given up: this node's own changes need not wait longer.
        meta.mark_started();
    });
}

/// How often the metadata leader looks for nodes that went down.
const DOWN_CHECK: Duration = Duration::from_secs(1);

/// While this node leads the metadata group: for every other node whose
/// link has been down for `grace` and which still has transient or
/// exclusive queues in the metadata, propose that they go
/// ([`Command::NodeDown`]), once per time it is down. The grace (on top
/// of the failure detector's `down_after`) keeps a short network blip
/// from costing a node its transient queues, as RabbitMQ's net_ticktime
/// does.
pub fn watch_downs(
    meta: Arc<Meta>,
    cluster: Arc<super::Cluster>,
    broker: Arc<warren_core::Broker>,
    grace: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let me = cluster.node().to_string();
        let mut done: std::collections::HashSet<String> = Default::default();
        let mut since: std::collections::HashMap<String, std::time::Instant> = Default::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(DOWN_CHECK) => {}
                _ = shutdown.changed() => return,
            }
            let peers = cluster.peers();
            done.retain(|n| peers.iter().any(|p| &p.node == n && !p.running));
            since.retain(|n, _| peers.iter().any(|p| &p.node == n && !p.running));
            for p in peers.iter().filter(|p| !p.running) {
                since
                    .entry(p.node.clone())
                    .or_insert_with(std::time::Instant::now);
            }
            if meta.leader().as_deref() != Some(me.as_str()) {
                continue;
            }
            let down: Vec<_> = peers
                .into_iter()
                .filter(|p| !p.running && !done.contains(&p.node))
                .filter(|p| since.get(&p.node).is_some_and(|t| t.elapsed() >= grace))
                .collect();
            for p in down {
                let has_transient = broker.vhosts().iter().any(|vh| {
                    vh.queues().iter().any(|q| {
                        q.home.as_deref() == Some(p.node.as_bytes()) && command::dies_with_its_node(q)
                    })
                });
                if has_transient {
                    let what = format!(
                        "removing the transient queues of node '{}', which is down",
                        p.node
                    );
                    tracing::info!("{what}");
                    let c = Command::NodeDown { node: p.node.clone() };
                    let data = serde_json::to_vec(&c).expect("a command encodes");
                    if let Err(e) = meta.propose(data, command::COMMIT_TIMEOUT).await {
                        tracing::debug!("{what}: {e}; trying again");
                        continue;
                    }
                }
                done.insert(p.node);
            }
        }
    });
}
