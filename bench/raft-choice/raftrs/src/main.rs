//! Many Raft groups on one machine with raft-rs 0.7 `RawNode`.
//!
//! 3 nodes (ids 1,2,3) in one process, each driven by one OS thread that owns
//! all of that node's `RawNode`s (one per group) and one log file. Every loop
//! iteration gathers the `Ready`s of all groups that have one, writes them to
//! the node's file in one `write`, calls `sync_data` once for the batch, then
//! updates the `MemStorage`s and advances each group.
//!
//! Usage: raftrs-groups <G> [idle_secs] [load_secs]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use raft::eraftpb::{Entry, Message};
use raft::prelude::*;
use raft::storage::MemStorage;
use raft::{SoftState, StateRole};

const NODES: u64 = 3;
const TICK: Duration = Duration::from_millis(10);
const MAX_INFLIGHT: u32 = 8;
const PAYLOAD: usize = 1024;
const CHAN_CAP: usize = 4096;

const PH_IDLE: u8 = 0;
const PH_LOAD: u8 = 1;
const PH_STOP: u8 = 2;

static MSGS: AtomicU64 = AtomicU64::new(0);
static FSYNCS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static WRITE_NS: AtomicU64 = AtomicU64::new(0);
static FSYNC_NS: AtomicU64 = AtomicU64::new(0);
static SYNCED_READIES: AtomicU64 = AtomicU64::new(0);
static COMMITTED: AtomicU64 = AtomicU64::new(0);
static LEADERS: AtomicI64 = AtomicI64::new(0);
static PHASE: AtomicU8 = AtomicU8::new(PH_IDLE);

type Batch = Vec<(u32, Message)>;

fn log_path(id: u64) -> String {
    format!("/tmp/raftcmp/rr-node{}.log", id)
}

struct Group {
    rn: RawNode<MemStorage>,
    inflight: u32,
    is_leader: bool,
    ticking: bool,
    dirty: bool,
}

struct Node {
    id: u64,
    groups: Vec<Group>,
    rx: Receiver<Batch>,
    txs: Vec<Sender<Batch>>, // index = node id (0 unused)
    out: Vec<Batch>,         // index = node id
    file: File,
    buf: Vec<u8>,
    dirty: Vec<u32>,
    ticking: Vec<u32>,
    led: Vec<u32>,
    payload: Vec<u8>,
}

impl Node {
    fn new(id: u64, g: usize, rx: Receiver<Batch>, txs: Vec<Sender<Batch>>) -> Node {
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut groups = Vec::with_capacity(g);
        for _ in 0..g {
            let cfg = Config {
                id,
                election_tick: 10,
                heartbeat_tick: 3,
                check_quorum: false,
                pre_vote: true,
                max_size_per_msg: 1 << 20,
                max_inflight_msgs: 256,
                batch_append: true,
                ..Default::default()
            };
            cfg.validate().unwrap();
            let store = MemStorage::new_with_conf_state((vec![1u64, 2, 3], vec![]));
            let rn = RawNode::new(&cfg, store, &logger).unwrap();
            groups.push(Group { rn, inflight: 0, is_leader: false, ticking: false, dirty: false });
        }
        let _ = std::fs::remove_file(log_path(id));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(log_path(id))
            .unwrap();
        Node {
            id,
            groups,
            rx,
            txs,
            out: (0..=NODES).map(|_| Vec::new()).collect(),
            file,
            buf: Vec::with_capacity(1 << 20),
            dirty: Vec::new(),
            ticking: Vec::new(),
            led: Vec::new(),
            payload: vec![0xA5; PAYLOAD],
        }
    }

    fn mark(&mut self, g: u32) {
        let grp = &mut self.groups[g as usize];
        if !grp.dirty {
            grp.dirty = true;
            self.dirty.push(g);
        }
    }

    /// Quiescence rule: tick only while electing or while the leader has
    /// uncommitted entries / proposals in flight. Followers never tick.
    fn needs_tick(grp: &Group) -> bool {
        let r = &grp.rn.raft;
        match r.state {
            StateRole::Candidate | StateRole::PreCandidate => true,
            StateRole::Leader => r.raft_log.last_index() > r.raft_log.committed || grp.inflight > 0,
            StateRole::Follower => false,
        }
    }

    fn maybe_start_ticking(&mut self, g: u32) {
        let grp = &mut self.groups[g as usize];
        if !grp.ticking && Self::needs_tick(grp) {
            grp.ticking = true;
            self.ticking.push(g);
        }
    }

    fn queue(&mut self, g: u32, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to as usize;
            self.out[to].push((g, m));
        }
    }

    fn flush(&mut self) {
        for to in 1..=NODES as usize {
            if self.out[to].is_empty() {
                continue;
            }
            let b = std::mem::take(&mut self.out[to]);
            MSGS.fetch_add(b.len() as u64, Ordering::Relaxed);
            // Bounded channel; a 10 s stall means a transport deadlock.
            if let Err(e) = self.txs[to].send_timeout(b, Duration::from_secs(10)) {
                if PHASE.load(Ordering::Relaxed) == PH_STOP {
                    return; // peer already shut down
                }
                let lens: Vec<usize> = self.txs.iter().map(|t| t.len()).collect();
                panic!("node {} send to {} stalled: {:?} chan lens {:?} phase {}", self.id, to, e, lens, PHASE.load(Ordering::Relaxed));
            }
        }
    }

    fn step_batch(&mut self, b: Batch) {
        for (g, m) in b {
            let _ = self.groups[g as usize].rn.step(m);
            self.mark(g);
        }
    }

    fn apply(&mut self, g: u32, ents: &[Entry]) {
        let grp = &mut self.groups[g as usize];
        for e in ents {
            if e.data.is_empty() {
                continue; // leader no-op
            }
            if grp.is_leader && grp.inflight > 0 {
                grp.inflight -= 1;
                COMMITTED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn on_soft_state(&mut self, g: u32, ss: &SoftState) {
        let grp = &mut self.groups[g as usize];
        let now_leader = ss.raft_state == StateRole::Leader;
        if now_leader != grp.is_leader {
            grp.is_leader = now_leader;
            if now_leader {
                LEADERS.fetch_add(1, Ordering::Relaxed);
                self.led.push(g);
            } else {
                LEADERS.fetch_sub(1, Ordering::Relaxed);
                grp.inflight = 0;
                self.led.retain(|&x| x != g);
            }
        }
    }

    fn run(&mut self) {
        let mut next_tick = Instant::now() + TICK;
        let mut readies: Vec<(u32, Ready)> = Vec::new();
        loop {
            let phase = PHASE.load(Ordering::Relaxed);
            if phase == PH_STOP {
                break;
            }
            let can_propose = phase == PH_LOAD && self.led.iter().any(|&g| self.groups[g as usize].inflight < MAX_INFLIGHT);

            // 1. Receive: block until a message or the next tick if there is nothing else to do.
            if self.dirty.is_empty() && !can_propose {
                let now = Instant::now();
                let wait = next_tick.saturating_duration_since(now);
                match self.rx.recv_timeout(wait) {
                    Ok(b) => self.step_batch(b),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            while let Ok(b) = self.rx.try_recv() {
                self.step_batch(b);
            }

            // 2. Tick only the non-quiesced groups.
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                let list = std::mem::take(&mut self.ticking);
                let mut keep = Vec::with_capacity(list.len());
                for g in list {
                    let grp = &mut self.groups[g as usize];
                    if Self::needs_tick(grp) {
                        grp.rn.tick();
                        keep.push(g);
                        self.mark(g);
                    } else {
                        grp.ticking = false;
                    }
                }
                self.ticking = keep;
            }

            // 3. Proposals: keep up to 8 in flight on every led group.
            if can_propose {
                for i in 0..self.led.len() {
                    let g = self.led[i];
                    let grp = &mut self.groups[g as usize];
                    let mut proposed = false;
                    while grp.inflight < MAX_INFLIGHT {
                        if grp.rn.propose(vec![], self.payload.clone()).is_err() {
                            break;
                        }
                        grp.inflight += 1;
                        proposed = true;
                    }
                    if proposed {
                        self.mark(g);
                    }
                }
            }

            // 4. Gather Readies of all dirty groups; send leader messages now.
            self.buf.clear();
            let mut must_sync = false;
            let dirty = std::mem::take(&mut self.dirty);
            for &g in &dirty {
                let grp = &mut self.groups[g as usize];
                grp.dirty = false;
                if !grp.rn.has_ready() {
                    continue;
                }
                let mut rd = grp.rn.ready();
                let msgs = rd.take_messages(); // leader: may go before persistence
                self.queue(g, msgs);
                if !rd.entries().is_empty() || rd.hs().is_some() {
                    encode_record(&mut self.buf, g, &rd);
                }
                must_sync |= rd.must_sync();
                readies.push((g, rd));
            }
            self.dirty = dirty;
            self.dirty.clear();
            self.flush();

            // 5. One write + one fdatasync for the whole batch.
            if !self.buf.is_empty() {
                let t = Instant::now();
                self.file.write_all(&self.buf).unwrap();
                WRITE_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                WRITES.fetch_add(1, Ordering::Relaxed);
                if must_sync {
                    let t = Instant::now();
                    self.file.sync_data().unwrap();
                    FSYNC_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    FSYNCS.fetch_add(1, Ordering::Relaxed);
                    SYNCED_READIES.fetch_add(readies.len() as u64, Ordering::Relaxed);
                }
            }

            // 6. Post-persistence: MemStorage, persisted messages, apply, advance.
            for (g, mut rd) in readies.drain(..) {
                if let Some(ss) = rd.ss() {
                    let ss = SoftState { leader_id: ss.leader_id, raft_state: ss.raft_state };
                    self.on_soft_state(g, &ss);
                }
                {
                    let store = self.groups[g as usize].rn.mut_store();
                    let mut core = store.wl();
                    if !rd.entries().is_empty() {
                        core.append(rd.entries()).unwrap();
                    }
                    if let Some(hs) = rd.hs() {
                        core.set_hardstate(hs.clone());
                    }
                }
                let pmsgs = rd.take_persisted_messages();
                self.queue(g, pmsgs);
                let committed = rd.take_committed_entries();
                self.apply(g, &committed);

                let mut light = self.groups[g as usize].rn.advance(rd);
                if let Some(c) = light.commit_index() {
                    self.groups[g as usize].rn.mut_store().wl().mut_hard_state().set_commit(c);
                }
                let lmsgs = light.take_messages();
                self.queue(g, lmsgs);
                let committed = light.take_committed_entries();
                self.apply(g, &committed);
                self.groups[g as usize].rn.advance_apply();

                if self.groups[g as usize].rn.has_ready() {
                    self.mark(g);
                }
                self.maybe_start_ticking(g);
            }
            self.flush();
        }
    }
}

/// Record: group u32 | has_hs u8 | term,vote,commit u64 | n u32 | n x (index,term u64, len u32, data)
fn encode_record(buf: &mut Vec<u8>, g: u32, rd: &Ready) {
    buf.extend_from_slice(&g.to_le_bytes());
    match rd.hs() {
        Some(hs) => {
            buf.push(1);
            buf.extend_from_slice(&hs.term.to_le_bytes());
            buf.extend_from_slice(&hs.vote.to_le_bytes());
            buf.extend_from_slice(&hs.commit.to_le_bytes());
        }
        None => buf.push(0),
    }
    buf.extend_from_slice(&(rd.entries().len() as u32).to_le_bytes());
    for e in rd.entries() {
        buf.extend_from_slice(&e.index.to_le_bytes());
        buf.extend_from_slice(&e.term.to_le_bytes());
        buf.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        buf.extend_from_slice(&e.data);
    }
}

fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime = field 14, stime = field 15
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    for l in s.lines() {
        if let Some(v) = l.strip_prefix("VmRSS:") {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g: usize = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(100);
    let idle_secs: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(10);
    let load_secs: u64 = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(10);
    std::fs::create_dir_all("/tmp/raftcmp").unwrap();

    let mut txs: Vec<Sender<Batch>> = Vec::new();
    let mut rxs: Vec<Option<Receiver<Batch>>> = vec![None];
    let (t0, _r0) = bounded::<Batch>(1); // placeholder for index 0
    txs.push(t0);
    for _ in 1..=NODES {
        let (t, r) = bounded::<Batch>(CHAN_CAP);
        txs.push(t);
        rxs.push(Some(r));
    }

    let t_create = Instant::now();
    let created = Arc::new(Barrier::new(NODES as usize + 1));
    let mut handles = Vec::new();
    for id in 1..=NODES {
        let rx = rxs[id as usize].take().unwrap();
        let txs = txs.clone();
        let created = created.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("node{}", id))
                .spawn(move || {
                    let mut node = Node::new(id, g, rx, txs);
                    created.wait(); // all nodes have all groups
                    created.wait(); // main has started the clock
                    for gi in 0..g {
                        if (gi as u64 % NODES) + 1 == node.id {
                            node.groups[gi].rn.campaign().unwrap();
                            node.mark(gi as u32);
                            node.maybe_start_ticking(gi as u32);
                        }
                    }
                    node.run();
                })
                .unwrap(),
        );
    }
    drop(txs);
    created.wait();
    let create_s = t_create.elapsed().as_secs_f64();
    let rss_created = vm_rss_kib();
    let t_elect = Instant::now();
    created.wait();

    // Phase 1: election.
    let deadline = t_elect + Duration::from_secs(60);
    while LEADERS.load(Ordering::Relaxed) < g as i64 {
        if Instant::now() > deadline {
            eprintln!("election did not finish: {} leaders", LEADERS.load(Ordering::Relaxed));
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let elect_s = t_elect.elapsed().as_secs_f64();
    let elect_msgs = MSGS.load(Ordering::Relaxed);
    let elect_fsyncs = FSYNCS.load(Ordering::Relaxed);

    
    // Settle 1 s so the leaders' no-op entries commit and groups quiesce.
    std::thread::sleep(Duration::from_secs(1));

    // Phase 2: idle.
    let c0 = cpu_ticks();
    let m0 = MSGS.load(Ordering::Relaxed);
    let f0 = FSYNCS.load(Ordering::Relaxed);
    let ti = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle_dt = ti.elapsed().as_secs_f64();
    let idle_cpu = (cpu_ticks() - c0) as f64 / 100.0;
    let idle_msgs = (MSGS.load(Ordering::Relaxed) - m0) as f64 / idle_dt;
    let idle_fsyncs = (FSYNCS.load(Ordering::Relaxed) - f0) as f64 / idle_dt;
    let idle_rss = vm_rss_kib();

    
    // Phase 3: load.
    let c0 = cpu_ticks();
    let m0 = MSGS.load(Ordering::Relaxed);
    let f0 = FSYNCS.load(Ordering::Relaxed);
    let w0 = WRITES.load(Ordering::Relaxed);
    let k0 = COMMITTED.load(Ordering::Relaxed);
    let n0 = FSYNC_NS.load(Ordering::Relaxed);
    let wn0 = WRITE_NS.load(Ordering::Relaxed);
    let r0 = SYNCED_READIES.load(Ordering::Relaxed);
    let tl = Instant::now();
    PHASE.store(PH_LOAD, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(load_secs));
    let k1 = COMMITTED.load(Ordering::Relaxed);
    let f1 = FSYNCS.load(Ordering::Relaxed);
    let w1 = WRITES.load(Ordering::Relaxed);
    let m1 = MSGS.load(Ordering::Relaxed);
    let c1 = cpu_ticks();
    let n1 = FSYNC_NS.load(Ordering::Relaxed);
    let wn1 = WRITE_NS.load(Ordering::Relaxed);
    let r1 = SYNCED_READIES.load(Ordering::Relaxed);
    let load_dt = tl.elapsed().as_secs_f64();
    let load_rss = vm_rss_kib();
    let leaders_end = LEADERS.load(Ordering::Relaxed);
    PHASE.store(PH_STOP, Ordering::Relaxed);
    
    for h in handles {
        h.join().unwrap();
    }
    let log_bytes: u64 = (1..=NODES)
        .map(|id| std::fs::metadata(log_path(id)).map(|m| m.len()).unwrap_or(0))
        .sum();
    for id in 1..=NODES {
        let _ = std::fs::remove_file(log_path(id));
    }

    println!("G={} raft-rs 0.7.0 (protobuf-codec), 3 nodes, 1 thread per node", g);
    println!("create: {:.3} s, RSS after create {} KiB", create_s, rss_created);
    println!(
        "phase1 elect: all {} groups have a leader after {:.3} s ({} msgs, {} fsyncs)",
        g, elect_s, elect_msgs, elect_fsyncs
    );
    println!(
        "phase2 idle {:.1} s: cpu {:.2} s, msgs/s {:.1}, fsyncs/s {:.1}, VmRSS {} KiB",
        idle_dt, idle_cpu, idle_msgs, idle_fsyncs, idle_rss
    );
    println!(
        "phase3 load {:.1} s: committed/s {:.0}, fsyncs/s {:.0}, writes/s {:.0}, msgs/s {:.0}, cpu {:.2} s, VmRSS {} KiB, log bytes {}",
        load_dt,
        (k1 - k0) as f64 / load_dt,
        (f1 - f0) as f64 / load_dt,
        (w1 - w0) as f64 / load_dt,
        (m1 - m0) as f64 / load_dt,
        (c1 - c0) as f64 / 100.0,
        load_rss,
        log_bytes
    );
    let nf = (f1 - f0).max(1) as f64;
    println!(
        "phase3 detail: leaders at end {}, write() busy {:.2} s/s per node, fdatasync busy {:.2} s/s per node, mean fdatasync {:.3} ms, mean group Readies per fsynced batch {:.1}, mean entries per fsync {:.1}",
        leaders_end,
        (wn1 - wn0) as f64 / 1e9 / load_dt / 3.0,
        (n1 - n0) as f64 / 1e9 / load_dt / 3.0,
        (n1 - n0) as f64 / nf / 1e6,
        (r1 - r0) as f64 / nf,
        (k1 - k0) as f64 * 3.0 / nf
    );
}
