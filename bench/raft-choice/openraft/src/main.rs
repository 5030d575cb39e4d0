//! Multi-group openraft 0.9 harness: 3 in-process nodes, G raft groups, one
//! fdatasync'ed log file per node. See README.md for the workload spec.
//!
//! usage: openraft-groups G [--group-commit]
//!   default (spec): every RaftLogStorage::append() call is written to the
//!     node's file and fdatasync'ed before its LogFlushed callback fires.
//!   --group-commit (extra, NOT the spec): a per-node flusher thread drains all
//!     pending appends of all groups, writes them, issues ONE fdatasync and then
//!     fires all their callbacks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Cursor, Write};
use std::ops::RangeBounds;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openraft::error::{
    ClientWriteError, InstallSnapshotError, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, Config, Entry, EntryPayload, LogId, LogState, Raft, RaftLogReader,
    RaftNetwork, RaftNetworkFactory, RaftSnapshotBuilder, ServerState, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    pub TC:
        D = Vec<u8>,
        R = u64,
);

type NID = u64;
type SErr = StorageError<NID>;

// ---------------------------------------------------------------- counters
static RPCS: AtomicU64 = AtomicU64::new(0);
static VOTE_RPCS: AtomicU64 = AtomicU64::new(0);
static FSYNCS: AtomicU64 = AtomicU64::new(0);
static VOTE_SAVES: AtomicU64 = AtomicU64::new(0);
static APPEND_CALLS: AtomicU64 = AtomicU64::new(0);
static COMMITS: AtomicU64 = AtomicU64::new(0);
static WRITE_ERRS: AtomicU64 = AtomicU64::new(0);
static FORWARDS: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------- per-node disk
/// One log file per node, owned by one flusher thread. Requests from all
/// groups of that node go through a channel.
struct DiskReq {
    bytes: Vec<u8>,
    done: Box<dyn FnOnce(io::Result<()>) + Send>,
}

struct NodeDisk {
    tx: Mutex<Option<mpsc::Sender<DiskReq>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl NodeDisk {
    fn open(path: &str, group_commit: bool) -> Arc<Self> {
        let mut f: File = OpenOptions::new().create(true).write(true).truncate(true).open(path).unwrap();
        let (tx, rx) = mpsc::channel::<DiskReq>();
        let th = std::thread::Builder::new()
            .name(format!("flush-{path}"))
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    if !group_commit {
                        let r = f.write_all(&first.bytes).and_then(|_| f.sync_data());
                        FSYNCS.fetch_add(1, Relaxed);
                        (first.done)(r);
                        continue;
                    }
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let mut r = Ok(());
                    for req in &batch {
                        if let Err(e) = f.write_all(&req.bytes) {
                            r = Err(e);
                            break;
                        }
                    }
                    if r.is_ok() {
                        r = f.sync_data();
                    }
                    FSYNCS.fetch_add(1, Relaxed);
                    for req in batch {
                        let rr = match &r {
                            Ok(()) => Ok(()),
                            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                        };
                        (req.done)(rr);
                    }
                }
            })
            .unwrap();
        Arc::new(NodeDisk { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(th)) })
    }

    fn submit(&self, bytes: Vec<u8>, done: Box<dyn FnOnce(io::Result<()>) + Send>) {
        let g = self.tx.lock().unwrap();
        match g.as_ref() {
            Some(tx) => {
                if let Err(mpsc::SendError(req)) = tx.send(DiskReq { bytes, done }) {
                    (req.done)(Err(io::Error::other("disk closed")));
                }
            }
            None => done(Err(io::Error::other("disk closed"))),
        }
    }

    fn close(&self) {
        self.tx.lock().unwrap().take();
        if let Some(h) = self.thread.lock().unwrap().take() {
            let _ = h.join();
        }
    }
}

// ---------------------------------------------------------------- log store
fn encode_entries(group: u64, entries: &[Entry<TC>]) -> Vec<u8> {
    // record: [u8 tag=1][u64 group][u64 term][u64 leader][u64 index][u8 kind][u32 len][bytes]
    let mut out = Vec::with_capacity(entries.len() * 1100);
    for e in entries {
        out.push(1u8);
        out.extend_from_slice(&group.to_le_bytes());
        out.extend_from_slice(&e.log_id.leader_id.term.to_le_bytes());
        out.extend_from_slice(&e.log_id.leader_id.node_id.to_le_bytes());
        out.extend_from_slice(&e.log_id.index.to_le_bytes());
        let (kind, body): (u8, std::borrow::Cow<[u8]>) = match &e.payload {
            EntryPayload::Blank => (0, (&[][..]).into()),
            EntryPayload::Normal(d) => (1, d.as_slice().into()),
            EntryPayload::Membership(m) => (2, serde_json::to_vec(m).unwrap().into()),
        };
        out.push(kind);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

#[derive(Default)]
struct LogMem {
    log: BTreeMap<u64, Entry<TC>>,
    vote: Option<Vote<NID>>,
    committed: Option<LogId<NID>>,
    last_purged: Option<LogId<NID>>,
}

#[derive(Clone)]
struct LogStore {
    group: u64,
    mem: Arc<Mutex<LogMem>>,
    disk: Arc<NodeDisk>,
}

impl RaftLogReader<TC> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TC>>, SErr> {
        let m = self.mem.lock().unwrap();
        Ok(m.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TC> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TC>, SErr> {
        let m = self.mem.lock().unwrap();
        let last = m.log.values().next_back().map(|e| e.log_id).or(m.last_purged);
        Ok(LogState { last_purged_log_id: m.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NID>) -> Result<(), SErr> {
        self.mem.lock().unwrap().vote = Some(*vote);
        // record: [u8 tag=2][u64 group][json vote]
        let mut rec = vec![2u8];
        rec.extend_from_slice(&self.group.to_le_bytes());
        rec.extend_from_slice(&serde_json::to_vec(vote).unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.disk.submit(rec, Box::new(move |r| {
            let _ = tx.send(r);
        }));
        VOTE_SAVES.fetch_add(1, Relaxed);
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write_vote(&e).into()),
            Err(e) => Err(StorageIOError::write_vote(&e).into()),
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NID>>, SErr> {
        Ok(self.mem.lock().unwrap().vote)
    }

    async fn save_committed(&mut self, c: Option<LogId<NID>>) -> Result<(), SErr> {
        self.mem.lock().unwrap().committed = c;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NID>>, SErr> {
        Ok(self.mem.lock().unwrap().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TC>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TC>> + Send,
        I::IntoIter: Send,
    {
        APPEND_CALLS.fetch_add(1, Relaxed);
        let entries: Vec<Entry<TC>> = entries.into_iter().collect();
        let bytes = encode_entries(self.group, &entries);
        {
            // readable immediately (required before returning)
            let mut m = self.mem.lock().unwrap();
            for e in entries {
                m.log.insert(e.log_id.index, e);
            }
        }
        // persisted (write + fdatasync) on the node's flusher thread, then report.
        self.disk.submit(bytes, Box::new(move |r| callback.log_io_completed(r)));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NID>) -> Result<(), SErr> {
        let mut m = self.mem.lock().unwrap();
        let _ = m.log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NID>) -> Result<(), SErr> {
        let mut m = self.mem.lock().unwrap();
        let keep = m.log.split_off(&(log_id.index + 1));
        m.log = keep;
        m.last_purged = Some(log_id);
        Ok(())
    }
}

// ---------------------------------------------------------------- state machine
#[derive(Default, Clone, Serialize, Deserialize)]
struct SmData {
    applied_count: u64,
    last_applied: Option<LogId<NID>>,
    membership: StoredMembership<NID, BasicNode>,
}

#[derive(Default)]
struct SmInner {
    data: SmData,
    snap: Option<(SnapshotMeta<NID, BasicNode>, Vec<u8>)>,
    snap_seq: u64,
}

#[derive(Clone, Default)]
struct Sm {
    inner: Arc<Mutex<SmInner>>,
}

impl RaftSnapshotBuilder<TC> for Sm {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TC>, SErr> {
        let mut g = self.inner.lock().unwrap();
        g.snap_seq += 1;
        let bytes = serde_json::to_vec(&g.data).unwrap();
        let meta = SnapshotMeta {
            last_log_id: g.data.last_applied,
            last_membership: g.data.membership.clone(),
            snapshot_id: format!("{}-{}", g.data.last_applied.map(|l| l.index).unwrap_or(0), g.snap_seq),
        };
        g.snap = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TC> for Sm {
    type SnapshotBuilder = Sm;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NID>>, StoredMembership<NID, BasicNode>), SErr> {
        let g = self.inner.lock().unwrap();
        Ok((g.data.last_applied, g.data.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<u64>, SErr>
    where
        I: IntoIterator<Item = Entry<TC>> + Send,
        I::IntoIter: Send,
    {
        let mut g = self.inner.lock().unwrap();
        let mut res = Vec::new();
        for e in entries {
            g.data.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(_) => g.data.applied_count += 1,
                EntryPayload::Membership(m) => {
                    g.data.membership = StoredMembership::new(Some(e.log_id), m)
                }
            }
            res.push(e.log_id.index);
        }
        Ok(res)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NID, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let bytes = snapshot.into_inner();
        let data: SmData = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut g = self.inner.lock().unwrap();
        g.data = data;
        g.snap = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TC>>, SErr> {
        let g = self.inner.lock().unwrap();
        Ok(g.snap.as_ref().map(|(m, b)| Snapshot { meta: m.clone(), snapshot: Box::new(Cursor::new(b.clone())) }))
    }
}

// ---------------------------------------------------------------- network
struct Registry {
    rafts: Vec<OnceLock<Raft<TC>>>, // index g*3 + (node-1)
}

impl Registry {
    fn get(&self, g: usize, node: NID) -> Option<&Raft<TC>> {
        self.rafts[g * 3 + (node as usize - 1)].get()
    }
}

#[derive(Debug)]
struct NotReady;
impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "target raft not registered yet")
    }
}
impl std::error::Error for NotReady {}

struct NetFactory {
    group: usize,
    reg: Arc<Registry>,
}

struct Net {
    group: usize,
    target: NID,
    reg: Arc<Registry>,
}

impl RaftNetworkFactory<TC> for NetFactory {
    type Network = Net;
    async fn new_client(&mut self, target: NID, _node: &BasicNode) -> Net {
        Net { group: self.group, target, reg: self.reg.clone() }
    }
}

impl Net {
    fn raft<E: std::error::Error>(&self) -> Result<Raft<TC>, RPCError<NID, BasicNode, E>> {
        match self.reg.get(self.group, self.target) {
            Some(r) => Ok(r.clone()),
            None => Err(RPCError::Unreachable(Unreachable::new(&NotReady))),
        }
    }
}

impl RaftNetwork<TC> for Net {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TC>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NID>, RPCError<NID, BasicNode, RaftError<NID>>> {
        RPCS.fetch_add(1, Relaxed);
        let r = self.raft()?;
        r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TC>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NID>, RPCError<NID, BasicNode, RaftError<NID, InstallSnapshotError>>>
    {
        RPCS.fetch_add(1, Relaxed);
        let r = self.raft()?;
        r.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NID>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NID>, RPCError<NID, BasicNode, RaftError<NID>>> {
        RPCS.fetch_add(1, Relaxed);
        VOTE_RPCS.fetch_add(1, Relaxed);
        let r = self.raft()?;
        r.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

// ---------------------------------------------------------------- /proc helpers
fn cpu_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    // fields after the ")" : state is field 3; utime=14, stime=15 (1-based)
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f[11].parse().unwrap();
    let st: u64 = f[12].parse().unwrap();
    (ut + st) as f64 / 100.0
}

fn status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    for l in s.lines() {
        if let Some(v) = l.strip_prefix(key) {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        }
    }
    0
}

fn threads() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines().find_map(|l| l.strip_prefix("Threads:")).map(|v| v.trim().parse().unwrap()).unwrap_or(0)
}

// ---------------------------------------------------------------- main
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g_count: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let group_commit = args.iter().any(|a| a == "--group-commit");
    let phase_secs: u64 = std::env::var("PHASE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    std::fs::create_dir_all("/tmp/raftcmp").unwrap();
    let paths: Vec<String> = (1..=3).map(|n| format!("/tmp/raftcmp/or-node{n}.log")).collect();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let disks: Vec<Arc<NodeDisk>> = paths.iter().map(|p| NodeDisk::open(p, group_commit)).collect();

    println!(
        "openraft-groups: G={g_count} nodes=3 rafts={} mode={} phase_secs={phase_secs}",
        3 * g_count,
        if group_commit { "group-commit (one fdatasync per flusher batch)" } else { "spec (one fdatasync per append call)" }
    );

    let rt_handle = rt.handle().clone();
    let reg_outer: Arc<Registry> =
        Arc::new(Registry { rafts: (0..3 * g_count).map(|_| OnceLock::new()).collect() });
    let reg = reg_outer.clone();
    let disks2 = disks.clone();
    rt.block_on(async move {
        let config = Arc::new(Config::default().validate().unwrap());
        println!(
            "config: heartbeat={}ms election_timeout={}..{}ms snapshot_policy={:?} max_payload_entries={}",
            config.heartbeat_interval, config.election_timeout_min, config.election_timeout_max,
            config.snapshot_policy, config.max_payload_entries
        );
        let sms: Vec<Sm> = (0..3 * g_count).map(|_| Sm::default()).collect();

        // ---------------- phase 1
        let t0 = Instant::now();
        for g in 0..g_count {
            for n in 1..=3u64 {
                let ls = LogStore { group: g as u64, mem: Default::default(), disk: disks2[n as usize - 1].clone() };
                let net = NetFactory { group: g, reg: reg.clone() };
                let raft = Raft::new(n, config.clone(), net, ls, sms[g * 3 + n as usize - 1].clone()).await.unwrap();
                let _ = reg.rafts[g * 3 + n as usize - 1].set(raft);
            }
        }
        let t_created = t0.elapsed().as_secs_f64();
        let mut inits = tokio::task::JoinSet::new();
        for g in 0..g_count {
            let n = (g % 3) as u64 + 1;
            let r = reg.get(g, n).unwrap().clone();
            inits.spawn(async move {
                let members: BTreeSet<NID> = [1, 2, 3].into_iter().collect();
                r.initialize(members).await
            });
        }
        let mut init_err = 0;
        while let Some(r) = inits.join_next().await {
            if !matches!(r, Ok(Ok(()))) {
                init_err += 1;
            }
        }
        let t_inited = t0.elapsed().as_secs_f64();
        let metrics: Vec<_> = (0..3 * g_count).map(|i| reg.rafts[i].get().unwrap().metrics()).collect();
        let leader_of = |g: usize| -> Option<(NID, u64)> {
            for n in 1..=3u64 {
                let m = metrics[g * 3 + n as usize - 1].borrow();
                if m.state == ServerState::Leader {
                    return Some((n, m.current_term));
                }
            }
            None
        };
        let deadline1 = Instant::now() + Duration::from_secs(60);
        loop {
            let missing = (0..g_count).filter(|&g| leader_of(g).is_none()).count();
            if missing == 0 || Instant::now() > deadline1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let t_leaders = t0.elapsed().as_secs_f64();
        let leaders_now: Vec<Option<(NID, u64)>> = (0..g_count).map(leader_of).collect();
        let with_leader = leaders_now.iter().filter(|x| x.is_some()).count();
        let on_init_node = leaders_now.iter().enumerate().filter(|(g, x)| matches!(x, Some((n, _)) if *n == (*g as u64 % 3) + 1)).count();
        let max_term = leaders_now.iter().flatten().map(|x| x.1).max().unwrap_or(0);
        println!(
            "PHASE1 create={t_created:.3}s init_done={t_inited:.3}s all_leaders={t_leaders:.3}s groups_with_leader={with_leader}/{g_count} \
             leader_on_init_node={on_init_node} max_term={max_term} init_errors={init_err} fsyncs={} rpcs={} vote_rpcs={} vote_saves={}",
            FSYNCS.load(Relaxed), RPCS.load(Relaxed), VOTE_RPCS.load(Relaxed), VOTE_SAVES.load(Relaxed)
        );

        // ---------------- phase 2 (idle)
        let terms_sum = || -> u64 { metrics.iter().map(|m| m.borrow().current_term).sum() };
        let term0 = terms_sum();
        let (c0, r0, f0, v0) = (cpu_secs(), RPCS.load(Relaxed), FSYNCS.load(Relaxed), VOTE_SAVES.load(Relaxed));
        let (vr0, ap0) = (VOTE_RPCS.load(Relaxed), APPEND_CALLS.load(Relaxed));
        let ti = Instant::now();
        tokio::time::sleep(Duration::from_secs(phase_secs)).await;
        let el = ti.elapsed().as_secs_f64();
        let (c1, r1, f1, v1) = (cpu_secs(), RPCS.load(Relaxed), FSYNCS.load(Relaxed), VOTE_SAVES.load(Relaxed));
        let term1 = terms_sum();
        let (vr1, ap1) = (VOTE_RPCS.load(Relaxed), APPEND_CALLS.load(Relaxed));
        let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let leaders_idle = (0..g_count).filter(|&g| leader_of(g).is_some()).count();
        println!(
            "PHASE2 idle {el:.2}s: cpu={:.2}s ({:.0}% of 1 core) rpcs/s={:.0} VmRSS={}KiB VmHWM={}KiB tokio_alive_tasks={tasks} os_threads={} \
             fsyncs={} log_appends={} vote_saves={} vote_rpcs={} term_increments(sum over members)={} groups_with_leader={leaders_idle}",
            c1 - c0, (c1 - c0) / el * 100.0, (r1 - r0) as f64 / el, status_kib("VmRSS:"), status_kib("VmHWM:"), threads(),
            f1 - f0, ap1 - ap0, v1 - v0, vr1 - vr0, term1 - term0
        );

        // ---------------- phase 3 (load)
        let payload: Arc<Vec<u8>> = Arc::new(vec![0xABu8; 1024]);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counting = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let applied_before: u64 = (0..g_count)
            .map(|g| (1..=3u64).map(|n| sms[g * 3 + n as usize - 1].inner.lock().unwrap().data.applied_count).max().unwrap())
            .sum();
        let (c0, r0, f0, a0, v0) = (cpu_secs(), RPCS.load(Relaxed), FSYNCS.load(Relaxed), APPEND_CALLS.load(Relaxed), VOTE_SAVES.load(Relaxed));
        let vr0 = VOTE_RPCS.load(Relaxed);
        let term0 = terms_sum();
        let tl = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for g in 0..g_count {
            let start_leader = leader_of(g).map(|x| x.0).unwrap_or((g % 3) as u64 + 1);
            for _ in 0..8 {
                let reg = reg.clone();
                let payload = payload.clone();
                let stop = stop.clone();
                let counting = counting.clone();
                workers.spawn(async move {
                    let mut leader = start_leader;
                    while !stop.load(Relaxed) {
                        let raft = reg.get(g, leader).unwrap().clone();
                        match raft.client_write((*payload).clone()).await {
                            Ok(_) => {
                                if counting.load(Relaxed) {
                                    COMMITS.fetch_add(1, Relaxed);
                                }
                            }
                            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                                FORWARDS.fetch_add(1, Relaxed);
                                match f.leader_id {
                                    Some(l) => leader = l,
                                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                                }
                            }
                            Err(_) => {
                                WRITE_ERRS.fetch_add(1, Relaxed);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                });
            }
        }
        let mut prev = (0u64, FSYNCS.load(Relaxed), VOTE_SAVES.load(Relaxed), VOTE_RPCS.load(Relaxed));
        let mut series = Vec::new();
        for _ in 0..phase_secs {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let cur = (COMMITS.load(Relaxed), FSYNCS.load(Relaxed), VOTE_SAVES.load(Relaxed), VOTE_RPCS.load(Relaxed));
            let nl = (0..g_count).filter(|&g| leader_of(g).is_some()).count();
            series.push(format!("{}/{}/{}/{}/{}", cur.0 - prev.0, cur.1 - prev.1, cur.2 - prev.2, cur.3 - prev.3, nl));
            prev = cur;
        }
        counting.store(false, Relaxed);
        println!("PHASE3 per-second [commits/fsyncs/vote_saves/vote_rpcs/groups_with_leader]: {}", series.join(" "));
        let el = tl.elapsed().as_secs_f64();
        let (c1, r1, f1, a1, v1) = (cpu_secs(), RPCS.load(Relaxed), FSYNCS.load(Relaxed), APPEND_CALLS.load(Relaxed), VOTE_SAVES.load(Relaxed));
        let term1 = terms_sum();
        let commits = COMMITS.load(Relaxed);
        let rss = status_kib("VmRSS:");
        let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        stop.store(true, Relaxed);
        let applied_after: u64 = (0..g_count)
            .map(|g| (1..=3u64).map(|n| sms[g * 3 + n as usize - 1].inner.lock().unwrap().data.applied_count).max().unwrap())
            .sum();
        let leaders_load = (0..g_count).filter(|&g| leader_of(g).is_some()).count();
        let per_group: Vec<u64> = (0..g_count)
            .map(|g| (1..=3u64).map(|n| sms[g * 3 + n as usize - 1].inner.lock().unwrap().data.applied_count).max().unwrap())
            .collect();
        let min_g = per_group.iter().min().copied().unwrap_or(0);
        let max_g = per_group.iter().max().copied().unwrap_or(0);
        println!(
            "PHASE3 load {el:.2}s: committed(client_write ok)/s={:.0} applied(max member)/s={:.0} fdatasync/s={:.0} append_calls/s={:.0} \
             entries_per_fsync~={:.2} cpu={:.2}s ({:.0}% of 1 core) rpcs/s={:.0} VmRSS={rss}KiB tokio_alive_tasks={tasks} \
             forwards={} write_errs={} vote_saves={} vote_rpcs={} term_increments(sum over members)={} groups_with_leader={leaders_load} per_group_applied_min/max={min_g}/{max_g}",
            commits as f64 / el,
            (applied_after - applied_before) as f64 / el,
            (f1 - f0) as f64 / el,
            (a1 - a0) as f64 / el,
            (a1 - a0) as f64 / ((f1 - f0).max(1)) as f64,
            c1 - c0, (c1 - c0) / el * 100.0,
            (r1 - r0) as f64 / el,
            FORWARDS.load(Relaxed), WRITE_ERRS.load(Relaxed), v1 - v0, VOTE_RPCS.load(Relaxed) - vr0, term1 - term0
        );

        // drain workers (bounded)
        let drain = tokio::time::timeout(Duration::from_secs(10), async { while workers.join_next().await.is_some() {} }).await;
        if drain.is_err() {
            println!("note: workers did not drain within 10s; aborting them");
            workers.abort_all();
        }
        // shutdown all rafts (bounded)
        let ts = Instant::now();
        let mut sh = tokio::task::JoinSet::new();
        for i in 0..3 * g_count {
            let r = reg.rafts[i].get().unwrap().clone();
            sh.spawn(async move { let _ = r.shutdown().await; });
        }
        let done = tokio::time::timeout(Duration::from_secs(15), async { while sh.join_next().await.is_some() {} }).await;
        println!("shutdown: {} in {:.2}s", if done.is_ok() { "ok" } else { "TIMED OUT" }, ts.elapsed().as_secs_f64());
    });
    drop(reg_outer);
    rt.shutdown_timeout(Duration::from_secs(2));
    for (d, p) in disks.iter().zip(&paths) {
        d.close();
        let sz = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        println!("{p}: {} KiB written", sz / 1024);
        let _ = std::fs::remove_file(p);
    }
    let _ = rt_handle;
}
