//! The store end to end on a temporary directory: append, ack, recover,
//! torn tails, segment reclamation, group commit.

use std::time::{Duration, Instant};

use crate::record::MessageRecord;
use crate::{Loaded, QueueStore, Storage};

fn rec(seq: u64, persistent: bool, body: &[u8]) -> MessageRecord<'_> {
    MessageRecord {
        seq,
        persistent,
        expires_at_ms: 0,
        exchange: b"",
        routing_key: b"q",
        properties: &[0, 0],
        body,
    }
}

fn read_all(s: &mut QueueStore) -> Vec<Loaded> {
    let mut out = Vec::new();
    while s.tail_len() > 0 {
        let before = out.len();
        s.read_tail(1000, u64::MAX, &mut out).unwrap();
        assert!(
            out.len() > before || s.tail_len() == 0,
            "tail read made no progress"
        );
    }
    out
}

fn wait_synced(t: &crate::SyncTicket) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.is_synced() {
        assert!(Instant::now() < deadline, "never synced");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn body(i: u64) -> Vec<u8> {
    format!("message {i}").into_bytes()
}

#[test]
fn appended_messages_come_back_in_order_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        let mut last = None;
        for i in 0..100 {
            let b = body(i);
            last = s.append(&rec(i, true, &b), i >= 50).unwrap();
        }
        wait_synced(last.as_ref().unwrap());
        // The window (0..50) was delivered; 0..10 acked, 10..20 delivered only.
        for i in 0..20 {
            s.delivered(i, true);
        }
        for i in 0..10 {
            s.remove(i, true);
        }
        st.shutdown();
    }
    let st = Storage::open(dir.path()).unwrap();
    let (mut s, r) = st.recover("/", b"q").unwrap().expect("the queue's store");
    assert_eq!(r.messages, 90);
    assert_eq!(r.next_seq, 100);
    let got = read_all(&mut s);
    let seqs: Vec<u64> = got.iter().map(|l| l.message.seq).collect();
    assert_eq!(seqs, (10..100).collect::<Vec<_>>());
    for l in &got {
        assert_eq!(l.redelivered, l.message.seq < 20, "seq {}", l.message.seq);
        assert_eq!(l.message.body, body(l.message.seq));
    }
    assert!(st.recover("/", b"q").unwrap().is_none(), "claimed once");
}

#[test]
fn transient_messages_do_not_survive() {
    let dir = tempfile::tempdir().unwrap();
    {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        for i in 0..10 {
            let b = body(i);
            s.append(&rec(i, i % 2 == 0, &b), true).unwrap();
        }
        st.shutdown();
    }
    let st = Storage::open(dir.path()).unwrap();
    let (mut s, r) = st.recover("/", b"q").unwrap().unwrap();
    assert_eq!(r.messages, 5);
    let seqs: Vec<u64> = read_all(&mut s).iter().map(|l| l.message.seq).collect();
    assert_eq!(seqs, vec![0, 2, 4, 6, 8]);
}

#[test]
fn a_torn_tail_is_cut_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let seg;
    {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        for i in 0..5 {
            let b = body(i);
            s.append(&rec(i, true, &b), true).unwrap();
        }
        st.shutdown();
        seg = std::fs::read_dir(s.dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "seg"))
            .unwrap();
    }
    // A sixth record, half written.
    let mut half = Vec::new();
    rec(5, true, b"half written").encode(&mut half);
    half.truncate(half.len() / 2);
    let good_len = std::fs::metadata(&seg).unwrap().len();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&half);
    std::fs::write(&seg, &bytes).unwrap();

    {
        let st = Storage::open(dir.path()).unwrap();
        let (mut s, r) = st.recover("/", b"q").unwrap().unwrap();
        assert_eq!(r.messages, 5);
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), good_len, "torn bytes cut");
        // New messages after the cut are readable after another restart.
        let b = body(5);
        s.append(&rec(r.next_seq, true, &b), true).unwrap();
        st.shutdown();
    }
    let st = Storage::open(dir.path()).unwrap();
    let (mut s, _) = st.recover("/", b"q").unwrap().unwrap();
    let seqs: Vec<u64> = read_all(&mut s).iter().map(|l| l.message.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_corrupt_byte_in_the_last_record_is_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let seg = {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        for i in 0..3 {
            let b = body(i);
            s.append(&rec(i, true, &b), true).unwrap();
        }
        st.shutdown();
        let d = s.dir().to_path_buf();
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "seg"))
            .unwrap()
    };
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let st = Storage::open(dir.path()).unwrap();
    let (mut s, r) = st.recover("/", b"q").unwrap().unwrap();
    assert_eq!(r.messages, 2);
    let seqs: Vec<u64> = read_all(&mut s).iter().map(|l| l.message.seq).collect();
    assert_eq!(seqs, vec![0, 1]);
}

#[test]
fn acked_segments_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let st = Storage::open(dir.path()).unwrap();
    let mut s = st.create("/", b"q", true).unwrap();
    let big = vec![7u8; 1 << 20];
    // About 40 MiB: three segments at least.
    for i in 0..40 {
        s.append(&rec(i, true, &big), false).unwrap();
    }
    let segs = |s: &QueueStore| {
        std::fs::read_dir(s.dir())
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
            .count()
    };
    assert!(segs(&s) >= 3, "{} segments", segs(&s));
    for i in 0..40 {
        s.remove(i, true);
    }
    // Only the segment being written remains.
    assert_eq!(segs(&s), 1);
    st.shutdown();
    let st = Storage::open(dir.path()).unwrap();
    let (_, r) = st.recover("/", b"q").unwrap().unwrap();
    assert_eq!(r.messages, 0);
}

#[test]
fn purge_drops_the_tail_for_good() {
    let dir = tempfile::tempdir().unwrap();
    {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        for i in 0..20 {
            let b = body(i);
            s.append(&rec(i, true, &b), i >= 5).unwrap();
        }
        s.purge_tail(20);
        assert_eq!(s.tail_len(), 0);
        st.shutdown();
    }
    let st = Storage::open(dir.path()).unwrap();
    let (mut s, r) = st.recover("/", b"q").unwrap().unwrap();
    assert_eq!(r.messages, 5, "the window (0..5) was not purged");
    let seqs: Vec<u64> = read_all(&mut s).iter().map(|l| l.message.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
}

#[test]
fn non_durable_and_unclaimed_stores_go_away() {
    let dir = tempfile::tempdir().unwrap();
    {
        let st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"transient", false).unwrap();
        let b = body(0);
        assert!(s.append(&rec(0, true, &b), true).unwrap().is_none(), "no ticket");
        let mut d = st.create("/", b"deleted", true).unwrap();
        d.append(&rec(0, true, &b), true).unwrap();
        d.destroy();
        assert!(!d.dir().exists());
        st.shutdown();
    }
    let st = Storage::open(dir.path()).unwrap();
    assert!(st.recover("/", b"deleted").unwrap().is_none());
    st.discard_unclaimed();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn one_fsync_round_covers_many_appends() {
    let dir = tempfile::tempdir().unwrap();
    let st = Storage::open(dir.path()).unwrap();
    let mut s = st.create("/", b"q", true).unwrap();
    let tickets: Vec<_> = (0..1000)
        .map(|i| {
            let b = body(i);
            s.append(&rec(i, true, &b), false).unwrap().unwrap()
        })
        .collect();
    wait_synced(tickets.last().unwrap());
    assert!(tickets.iter().all(|t| t.is_synced()));
    st.shutdown();
}

/// A waiter that registers after the round it hoped for has ended, while
/// the sync thread sleeps with nothing dirty, is still woken: the channel
/// checks its tickets, then registers, so the round can end in between
/// (a confirm once stalled here until the next publish, which never came).
#[test]
fn a_waiter_registered_while_the_thread_is_idle_is_woken() {
    struct Flag(std::sync::atomic::AtomicBool);
    impl crate::SyncWaiter for Flag {
        fn synced(&self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let st = Storage::open(dir.path()).unwrap();
    let mut s = st.create("/", b"q", true).unwrap();
    let b = body(0);
    let t = s.append(&rec(0, true, &b), false).unwrap().unwrap();
    wait_synced(&t);
    // Let the thread go back to sleep with no store and no waiter.
    std::thread::sleep(Duration::from_millis(50));
    let flag = std::sync::Arc::new(Flag(Default::default()));
    st.syncer().wait(flag.clone());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !flag.0.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the waiter was never woken");
        std::thread::sleep(Duration::from_millis(1));
    }
    st.shutdown();
}

#[test]
fn large_records_are_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let st = Storage::open(dir.path()).unwrap();
    let mut s = st.create("/", b"q", true).unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    s.append(&rec(0, true, b"small"), true).unwrap();
    s.append(&rec(1, true, &big), true).unwrap();
    s.append(&rec(2, true, b"after"), true).unwrap();
    let got = read_all(&mut s);
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].message.body, big);
    assert_eq!(&got[2].message.body[..], b"after");
    st.shutdown();
}

/// A seeded random walk over the store's calls, checked against a model
/// after every restart: what comes back is exactly the persistent messages
/// not yet removed, in order, with `redelivered` on those delivered.
#[test]
fn random_walk_against_a_model() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Where {
        Tail,
        Window,
        Delivered,
    }
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut st = Storage::open(dir.path()).unwrap();
        let mut s = st.create("/", b"q", true).unwrap();
        // seq -> (persistent, where, delivered before a restart)
        let mut model: BTreeMap<u64, (bool, Where, bool)> = BTreeMap::new();
        let mut next = 0u64;
        for step in 0..400 {
            match rng.gen_range(0..100) {
                0..=44 => {
                    let persistent = rng.gen_bool(0.8);
                    let tail_nonempty = model.values().any(|m| m.1 == Where::Tail);
                    let to_tail = tail_nonempty || rng.gen_bool(0.3);
                    // Messages kept only in the window are written when persistent.
                    if to_tail || persistent {
                        let b = body(next);
                        s.append(&rec(next, persistent, &b), to_tail).unwrap();
                        model.insert(
                            next,
                            (
                                persistent,
                                if to_tail { Where::Tail } else { Where::Window },
                                false,
                            ),
                        );
                    }
                    next += 1;
                }
                45..=59 => {
                    let mut out = Vec::new();
                    let k = rng.gen_range(1..5);
                    s.read_tail(k, u64::MAX, &mut out).unwrap();
                    let expect: Vec<u64> = model
                        .iter()
                        .filter(|(_, m)| m.1 == Where::Tail)
                        .map(|(&q, _)| q)
                        .take(k)
                        .collect();
                    let got: Vec<u64> = out.iter().map(|l| l.message.seq).collect();
                    assert_eq!(got, expect, "seed {seed} step {step}: tail order");
                    for l in &out {
                        assert_eq!(l.message.body, body(l.message.seq));
                        let m = model.get_mut(&l.message.seq).unwrap();
                        assert_eq!(l.redelivered, m.2, "seed {seed} step {step}: redelivered");
                        m.1 = Where::Window;
                    }
                }
                60..=74 => {
                    // Deliver the oldest window message.
                    if let Some((&q, m)) = model.iter_mut().find(|(_, m)| m.1 == Where::Window) {
                        if !m.2 {
                            s.delivered(q, m.0);
                        }
                        m.1 = Where::Delivered;
                        m.2 = true;
                    }
                }
                75..=89 => {
                    // Ack (or expire, drop: all the same to the store) a random one.
                    let gone: Vec<u64> = model
                        .iter()
                        .filter(|(_, m)| m.1 != Where::Tail)
                        .map(|(&q, _)| q)
                        .collect();
                    if !gone.is_empty() {
                        let q = gone[rng.gen_range(0..gone.len())];
                        let (p, _, _) = model.remove(&q).unwrap();
                        s.remove(q, p);
                    }
                }
                90..=94 => {
                    s.purge_tail(next);
                    model.retain(|_, m| m.1 != Where::Tail);
                }
                _ => {
                    // Restart: only persistent messages survive, all in the
                    // tail, the delivered ones marked.
                    st.shutdown();
                    drop(s);
                    st = Storage::open(dir.path()).unwrap();
                    let (s2, r) = st.recover("/", b"q").unwrap().expect("store");
                    s = s2;
                    model.retain(|_, m| m.0);
                    for m in model.values_mut() {
                        m.1 = Where::Tail;
                    }
                    assert_eq!(
                        r.messages,
                        model.len() as u64,
                        "seed {seed} step {step}: recovered count"
                    );
                    assert!(r.next_seq <= next);
                }
            }
            assert_eq!(
                s.tail_len(),
                model.values().filter(|m| m.1 == Where::Tail).count() as u64,
                "seed {seed} step {step}: tail length"
            );
        }
        st.shutdown();
    }
}
