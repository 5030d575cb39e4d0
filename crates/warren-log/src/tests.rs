//! The log on a temporary directory: exact bytes of what it writes,
//! lookups by offset and timestamp across segments, retention, torn-tail
//! recovery, and tracking state across restarts and retention.

use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use warren_stream::chunk::{Chunk, Entry, HEADER_SIZE};

use crate::bloom::Matcher;
use crate::files;
use crate::{Config, Delta, Log, Message, Reader, Start, CHUNK_USER};

fn msg(s: &str) -> Message {
    Message {
        entry: Entry::Simple(Bytes::copy_from_slice(s.as_bytes())),
        filter: None,
    }
}

fn small() -> Config {
    Config {
        max_segment_chunks: 3,
        ..Config::default()
    }
}

/// Every message from `start`, with its offset (the client's view: records
/// of a chunk from its first offset on).
fn read_all(log: &Log, start: Start) -> Vec<(u64, String)> {
    let mut r = Reader::new(log.view(), start, None).unwrap();
    let mut out = Vec::new();
    while let Some(c) = r.next_chunk().unwrap() {
        let parsed = Chunk::parse(&c.bytes, true).unwrap();
        for (k, e) in parsed.entries.iter().enumerate() {
            if let Entry::Simple(b) = e {
                out.push((
                    c.header.first_offset + k as u64,
                    String::from_utf8(b.to_vec()).unwrap(),
                ));
            }
        }
    }
    out
}

#[test]
fn a_chunk_and_its_files_are_byte_for_byte_osiris() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), Config::default()).unwrap();
    let delta = Delta {
        sequences: vec![("p".into(), 9)],
        offsets: vec![],
    };
    let at = log
        .append(&[msg("ab"), msg("c")], &delta, 0x0102_0304_0506)
        .unwrap();
    assert_eq!(at.chunk_id, 0);
    let (sp, ip) = files::names(dir.path(), 0);
    assert!(sp.ends_with("00000000000000000000.segment"));
    let seg = std::fs::read(&sp).unwrap();
    let data = [0, 0, 0, 2, b'a', b'b', 0, 0, 0, 1, b'c'];
    let trailer = [0, 1, b'p', 0, 0, 0, 0, 0, 0, 0, 9];
    let crc = crc32fast::hash(&data).to_be_bytes();
    let mut want = b"OSIL\0\0\0\x01".to_vec();
    want.extend_from_slice(&[0x50, 0]); // magic 5, version 0; user chunk
    want.extend_from_slice(&[0, 2]); // entries
    want.extend_from_slice(&[0, 0, 0, 2]); // records
    want.extend_from_slice(&0x0102_0304_0506i64.to_be_bytes());
    want.extend_from_slice(&1u64.to_be_bytes()); // epoch
    want.extend_from_slice(&0u64.to_be_bytes()); // chunk id
    want.extend_from_slice(&crc);
    want.extend_from_slice(&(data.len() as u32).to_be_bytes());
    want.extend_from_slice(&(trailer.len() as u32).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0, 0]); // bloom size, reserved
    want.extend_from_slice(&data);
    want.extend_from_slice(&trailer);
    assert_eq!(seg, want);
    let idx = std::fs::read(&ip).unwrap();
    let mut want_idx = b"OSII\0\0\0\x01".to_vec();
    want_idx.extend_from_slice(&0u64.to_be_bytes());
    want_idx.extend_from_slice(&0x0102_0304_0506i64.to_be_bytes());
    want_idx.extend_from_slice(&1u64.to_be_bytes());
    want_idx.extend_from_slice(&8u32.to_be_bytes());
    want_idx.push(CHUNK_USER);
    assert_eq!(idx, want_idx);
    // Delivered: header and data, no trailer.
    let mut r = Reader::new(log.view(), Start::First, None).unwrap();
    let c = r.next_chunk().unwrap().unwrap();
    assert_eq!(&c.bytes[..], &want[8..8 + HEADER_SIZE + data.len()]);
    assert!(r.next_chunk().unwrap().is_none());
}

#[test]
fn offsets_and_timestamps_find_their_chunks_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    // Chunks of 2 records at t = 1000, 2000, ...: offsets 0,2,4,...
    for i in 0..10 {
        log.append(
            &[msg(&format!("m{}", 2 * i)), msg(&format!("m{}", 2 * i + 1))],
            &Delta::default(),
            1000 * (i + 1),
        )
        .unwrap();
    }
    assert!(
        files::list(dir.path()).unwrap().len() >= 4,
        "segments rolled over"
    );
    assert_eq!(log.next_offset(), 20);
    let all = read_all(&log, Start::First);
    assert_eq!(all.len(), 20);
    assert_eq!(all[0], (0, "m0".into()));
    assert_eq!(all[19], (19, "m19".into()));
    // An offset starts at the chunk holding it.
    assert_eq!(read_all(&log, Start::Offset(7))[0], (6, "m6".into()));
    assert_eq!(read_all(&log, Start::Offset(6))[0], (6, "m6".into()));
    assert_eq!(read_all(&log, Start::Offset(12)).len(), 8);
    assert!(read_all(&log, Start::Offset(20)).is_empty(), "at the end: next");
    assert!(read_all(&log, Start::Offset(999)).is_empty());
    // Last: the newest chunk; next: nothing yet.
    assert_eq!(
        read_all(&log, Start::Last),
        vec![(18, "m18".into()), (19, "m19".into())]
    );
    assert!(read_all(&log, Start::Next).is_empty());
    // Timestamps: the first chunk at or after it.
    assert_eq!(read_all(&log, Start::Timestamp(3000))[0], (4, "m4".into()));
    assert_eq!(read_all(&log, Start::Timestamp(3500))[0], (6, "m6".into()));
    assert_eq!(read_all(&log, Start::Timestamp(0))[0], (0, "m0".into()));
    assert!(read_all(&log, Start::Timestamp(99_999)).is_empty());
    // A reader at the end sees what comes next, across a roll-over.
    let mut r = Reader::new(log.view(), Start::Next, None).unwrap();
    assert!(r.next_chunk().unwrap().is_none());
    for i in 0..4 {
        log.append(&[msg(&format!("n{i}"))], &Delta::default(), 20_000)
            .unwrap();
    }
    let mut got = Vec::new();
    while let Some(c) = r.next_chunk().unwrap() {
        got.push(c.header.first_offset);
    }
    assert_eq!(got.len(), 4, "{got:?}");
}

#[test]
fn an_empty_log_starts_everything_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), Config::default()).unwrap();
    for s in [
        Start::First,
        Start::Last,
        Start::Next,
        Start::Offset(5),
        Start::Timestamp(1),
    ] {
        let mut r = Reader::new(log.view(), s, None).unwrap();
        assert!(r.next_chunk().unwrap().is_none());
    }
    let mut r = Reader::new(log.view(), Start::Last, None).unwrap();
    log.append(&[msg("first")], &Delta::default(), 1).unwrap();
    assert_eq!(r.next_chunk().unwrap().unwrap().header.first_offset, 0);
}

#[test]
fn retention_deletes_whole_old_segments_and_never_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(1000);
    let mut log = Log::open(
        dir.path(),
        Config {
            max_segment_bytes: 3000,
            max_bytes: Some(7000),
            ..Config::default()
        },
    )
    .unwrap();
    // A reader holding the oldest segment open keeps reading it.
    log.append(&[msg(&big)], &Delta::default(), 1).unwrap();
    let mut early = Reader::new(log.view(), Start::First, None).unwrap();
    for t in 2..30 {
        log.append(&[msg(&big)], &Delta::default(), t).unwrap();
    }
    // Old segments are unlinked by a background thread: let it finish.
    let settle = |dir: &Path, want: usize| {
        for _ in 0..100 {
            if files::list(dir).unwrap().len() == want {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    settle(dir.path(), log.view().snapshot().segments.len());
    let on_disk: u64 = files::list(dir.path())
        .unwrap()
        .iter()
        .map(|&f| std::fs::metadata(files::names(dir.path(), f).0).map_or(0, |m| m.len()))
        .sum();
    assert!(on_disk <= 7000 + 3100, "{on_disk}");
    assert!(log.first_offset() > 0);
    let firsts = read_all(&log, Start::First);
    assert_eq!(firsts[0].0, log.first_offset());
    assert_eq!(firsts.last().unwrap().0, 28);
    let mut n = 0;
    while early.next_chunk().unwrap().is_some() {
        n += 1;
    }
    assert!(n >= firsts.len(), "the early reader read on: {n}");

    // max-age: everything older than the newest segment's chunks goes.
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        Config {
            max_segment_chunks: 2,
            max_age_ms: Some(500),
            ..Config::default()
        },
    )
    .unwrap();
    for t in 0..6 {
        log.append(&[msg("old")], &Delta::default(), t).unwrap();
    }
    log.append(&[msg("new")], &Delta::default(), 10_000).unwrap();
    log.append(&[msg("new")], &Delta::default(), 10_000).unwrap();
    assert_eq!(
        log.apply_retention(10_000).unwrap(),
        0,
        "already applied at roll-over"
    );
    let left: Vec<String> = read_all(&log, Start::First).into_iter().map(|m| m.1).collect();
    assert_eq!(left, vec!["new", "new"]);
    let segments = log.view().snapshot().segments.len();
    settle(dir.path(), segments);
    assert_eq!(files::list(dir.path()).unwrap().len(), segments);
}

fn corrupt_last_chunk(dir: &Path, how: &str) {
    let first = *files::list(dir).unwrap().last().unwrap();
    let (sp, _) = files::names(dir, first);
    let len = std::fs::metadata(&sp).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&sp).unwrap();
    match how {
        "torn" => f.set_len(len - 3).unwrap(),
        _ => f.write_all_at(&[0xff], len - 1).unwrap(),
    }
}

#[test]
fn a_torn_or_corrupt_tail_is_cut_on_recovery() {
    for how in ["torn", "flipped"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = Log::open(dir.path(), Config::default()).unwrap();
            for i in 0..5 {
                log.append(&[msg(&format!("m{i}"))], &Delta::default(), i)
                    .unwrap();
            }
        }
        corrupt_last_chunk(dir.path(), how);
        let mut log = Log::open(dir.path(), Config::default()).unwrap();
        assert_eq!(log.next_offset(), 4, "{how}: the last chunk went");
        let msgs: Vec<String> = read_all(&log, Start::First).into_iter().map(|m| m.1).collect();
        assert_eq!(msgs, vec!["m0", "m1", "m2", "m3"]);
        log.append(&[msg("after")], &Delta::default(), 9).unwrap();
        drop(log);
        let log = Log::open(dir.path(), Config::default()).unwrap();
        assert_eq!(read_all(&log, Start::Offset(4)), vec![(4, "after".into())]);
    }
}

#[test]
fn a_chunk_without_its_index_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = Log::open(dir.path(), Config::default()).unwrap();
        log.append(&[msg("kept")], &Delta::default(), 1).unwrap();
        log.append(&[msg("unindexed")], &Delta::default(), 2).unwrap();
    }
    let (_, ip) = files::names(dir.path(), 0);
    let len = std::fs::metadata(&ip).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ip)
        .unwrap()
        .set_len(len - 29)
        .unwrap();
    let log = Log::open(dir.path(), Config::default()).unwrap();
    assert_eq!(log.next_offset(), 1);
    assert_eq!(read_all(&log, Start::First), vec![(0, "kept".into())]);
}

#[test]
fn producer_sequences_and_stored_offsets_survive_restarts_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        max_segment_chunks: 3,
        max_bytes: Some(1),
        ..Config::default()
    };
    {
        let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
        let d = Delta {
            sequences: vec![("producer-a".into(), 41)],
            offsets: vec![],
        };
        log.append(&[msg("a")], &d, 1).unwrap();
        let at = log
            .append_tracking(
                &Delta {
                    sequences: vec![],
                    offsets: vec![("consumer-x".into(), 0)],
                },
                2,
            )
            .unwrap();
        assert_eq!(at.chunk_id, 1, "a stored offset takes an offset");
        let d = Delta {
            sequences: vec![("producer-a".into(), 42), ("producer-b".into(), 7)],
            offsets: vec![],
        };
        log.append(&[msg("b")], &d, 3).unwrap();
        assert_eq!(log.sequence("producer-a"), Some(42));
    }
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(log.sequence("producer-a"), Some(42));
    assert_eq!(log.sequence("producer-b"), Some(7));
    assert_eq!(log.stored_offset("consumer-x"), Some(0));
    // Consumers skip the tracking chunk: offsets 0 and 2.
    let offs: Vec<u64> = read_all(&log, Start::First).into_iter().map(|m| m.0).collect();
    assert_eq!(offs, vec![0, 2]);
    // Many roll-overs with retention at its tightest: only the newest
    // segment stays, and the state rides in its snapshot.
    for i in 0..10 {
        log.append(&[msg("filler")], &Delta::default(), 10 + i).unwrap();
    }
    assert!(
        log.first_offset() > 2,
        "old segments went: {}",
        log.first_offset()
    );
    drop(log);
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(log.sequence("producer-a"), Some(42));
    assert_eq!(log.sequence("producer-b"), Some(7));
    assert_eq!(
        log.stored_offset("consumer-x"),
        None,
        "below the first offset now"
    );
}

#[test]
fn filtered_readers_skip_chunks_without_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), Config::default()).unwrap();
    let with = |s: &str, f: Option<&str>| Message {
        entry: Entry::Simple(Bytes::copy_from_slice(s.as_bytes())),
        filter: f.map(|f| Bytes::copy_from_slice(f.as_bytes())),
    };
    log.append(&[with("ca-1", Some("california"))], &Delta::default(), 1)
        .unwrap();
    log.append(&[with("tx-1", Some("texas"))], &Delta::default(), 2)
        .unwrap();
    log.append(&[with("none", None)], &Delta::default(), 3).unwrap();
    let read = |values: &[&str], unfiltered: bool| {
        let m = Matcher {
            values: values.iter().map(|v| v.as_bytes().to_vec()).collect(),
            match_unfiltered: unfiltered,
        };
        let mut r = Reader::new(log.view(), Start::First, Some(m)).unwrap();
        let mut out = Vec::new();
        while let Some(c) = r.next_chunk().unwrap() {
            out.push(c.header.first_offset);
        }
        out
    };
    assert_eq!(read(&["california"], false), vec![0]);
    assert_eq!(read(&["california"], true), vec![0, 2]);
    assert_eq!(read(&[], false), vec![0, 1, 2]);
    // The delivered chunk leaves the bloom filter out but its size in.
    let mut r = Reader::new(log.view(), Start::First, None).unwrap();
    let c = r.next_chunk().unwrap().unwrap();
    assert_eq!(c.header.bloom_size, 16);
    assert_eq!(c.bytes.len(), HEADER_SIZE + c.header.data_length as usize);
    assert!(Chunk::parse(&c.bytes, true).is_ok());
}

/// Random damage anywhere in the files (not only the tail) never panics
/// recovery or reading: the log opens or reports an error.
#[test]
fn random_damage_is_an_error_or_a_cut_never_a_panic() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..200 {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = Log::open(dir.path(), small()).unwrap();
            for i in 0..7 {
                let d = Delta {
                    sequences: vec![(format!("p{}", i % 2), i)],
                    offsets: vec![(format!("c{i}"), i)],
                };
                log.append(&[msg(&format!("m{i}"))], &d, i as i64).unwrap();
            }
        }
        let names = files::list(dir.path()).unwrap();
        let first = names[next() as usize % names.len()];
        let (sp, ip) = files::names(dir.path(), first);
        let p = if next() % 2 == 0 { sp } else { ip };
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        for _ in 0..1 + next() % 4 {
            f.write_all_at(&[next() as u8], next() % len).unwrap();
        }
        if next() % 3 == 0 {
            f.set_len(next() % (len + 1)).unwrap();
        }
        if let Ok(log) = Log::open(dir.path(), small()) {
            for s in [Start::First, Start::Last, Start::Offset(3), Start::Timestamp(4)] {
                if let Ok(mut r) = Reader::new(log.view(), s, None) {
                    for _ in 0..20 {
                        match r.next_chunk() {
                            Ok(Some(_)) => {}
                            _ => break,
                        }
                    }
                }
            }
        }
    }
}

/// A crash in the middle of retention leaves a segment whose index is
/// already gone: the next open drops it and goes on.
#[test]
fn a_half_deleted_segment_is_finished_off_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = Log::open(dir.path(), small()).unwrap();
        for i in 0..7 {
            log.append(&[msg(&format!("m{i}"))], &Delta::default(), i)
                .unwrap();
        }
    }
    let firsts = files::list(dir.path()).unwrap();
    assert!(firsts.len() >= 3);
    let (sp, ip) = files::names(dir.path(), firsts[0]);
    std::fs::remove_file(&ip).unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert!(!sp.exists(), "the orphaned segment went");
    let got = read_all(&log, Start::First);
    assert_eq!(got.first().unwrap().0, firsts[1]);
    assert_eq!(got.last().unwrap().1, "m6");
}

#[test]
fn the_overview_names_each_epochs_last_chunk_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(crate::overview(&log.view()).unwrap(), crate::Overview::default());
    let none = Delta::default();
    let mut ids = Vec::new();
    // Epoch 1: two chunks; epoch 2: four (the segment rolls over after
    // three); epoch 4: one.
    for (epoch, n) in [(1, 2), (2, 4), (4, 1)] {
        log.set_epoch(epoch);
        for i in 0..n {
            ids.push((
                epoch,
                log.append(&[msg(&format!("{epoch}.{i}"))], &none, 1)
                    .unwrap()
                    .chunk_id,
            ));
        }
    }
    assert!(log.view().snapshot().segments.len() > 1);
    let last_of = |e: u64| ids.iter().rev().find(|(x, _)| *x == e).unwrap().1;
    let o = crate::overview(&log.view()).unwrap();
    assert_eq!(o.epochs, vec![(1, last_of(1)), (2, last_of(2)), (4, last_of(4))]);
    assert_eq!(o.range, Some((0, log.next_offset() - 1)));
    // The same after a restart (it is read from the index files).
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(crate::overview(&log.view()).unwrap(), o);
}

#[test]
fn consumers_read_no_further_than_the_committed_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), Config::default()).unwrap();
    let none = Delta::default();
    let a = log.append(&[msg("a")], &none, 1).unwrap().chunk_id;
    let b = log.append(&[msg("b")], &none, 1).unwrap().chunk_id;
    log.append(&[msg("c")], &none, 1).unwrap();
    log.hold_readers();
    assert!(Reader::new(log.view(), Start::First, None)
        .unwrap()
        .next_chunk()
        .unwrap()
        .is_none());
    log.set_committed(Some(a));
    let mut r = Reader::new(log.view(), Start::First, None).unwrap();
    assert_eq!(r.next_chunk().unwrap().unwrap().header.first_offset, a);
    assert!(r.next_chunk().unwrap().is_none(), "b is not committed yet");
    log.set_committed(Some(b));
    assert_eq!(r.next_chunk().unwrap().unwrap().header.first_offset, b);
    assert!(r.next_chunk().unwrap().is_none());
    log.set_committed(None);
    assert_eq!(read_all(&log, Start::First).len(), 3);
    assert!(r.next_chunk().unwrap().is_some(), "c once everything is readable");
}

/// A log in `dir` of one chunk per message, each (epoch, body).
fn log_of(dir: &Path, chunks: &[(u64, &str)]) -> Log {
    let mut log = Log::open(dir, small()).unwrap();
    for (epoch, body) in chunks {
        log.set_epoch(*epoch);
        log.append(&[msg(body)], &Delta::default(), 1).unwrap();
    }
    log
}

fn bodies(log: &Log) -> Vec<String> {
    read_all(log, Start::First).into_iter().map(|(_, b)| b).collect()
}

#[test]
fn a_returning_member_keeps_what_it_shares_with_the_leader_and_cuts_its_own_tail() {
    let (l, r) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Both had epoch 1's five chunks; the member then led epoch 2 alone
    // (never committed) and the leader of epoch 3 wrote on. Segments roll
    // every three chunks, so the cut is inside one and drops those after.
    let shared = [(1, "a"), (1, "b"), (1, "c"), (1, "d"), (1, "e")];
    let mut mine = shared.to_vec();
    mine.extend([(2, "x"), (2, "y"), (2, "z")]);
    let mut theirs = shared.to_vec();
    theirs.extend([(3, "p"), (3, "q")]);
    drop(log_of(r.path(), &mine));
    let leader = log_of(l.path(), &theirs);
    let o = crate::overview(&leader.view()).unwrap();
    assert_eq!(crate::accept(r.path(), &o).unwrap(), crate::Cut::After(4));
    let back = Log::open(r.path(), small()).unwrap();
    assert_eq!(bodies(&back), ["a", "b", "c", "d", "e"]);
    assert_eq!(back.next_offset(), 5);
    assert_eq!(crate::overview(&back.view()).unwrap().epochs, vec![(1, 4)]);
}

#[test]
fn a_member_behind_in_the_same_epoch_keeps_everything_and_one_with_nothing_shared_nothing() {
    let (l, r) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    drop(log_of(r.path(), &[(1, "a"), (1, "b")]));
    let leader = log_of(l.path(), &[(1, "a"), (1, "b"), (1, "c")]);
    let o = crate::overview(&leader.view()).unwrap();
    assert_eq!(crate::accept(r.path(), &o).unwrap(), crate::Cut::Nothing);
    assert_eq!(bodies(&Log::open(r.path(), small()).unwrap()), ["a", "b"]);

    let (l, r) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    drop(log_of(r.path(), &[(2, "x")]));
    let leader = log_of(l.path(), &[(1, "a"), (3, "b")]);
    let o = crate::overview(&leader.view()).unwrap();
    assert_eq!(crate::accept(r.path(), &o).unwrap(), crate::Cut::Everything);
    let back = Log::open(r.path(), small()).unwrap();
    assert!(bodies(&back).is_empty());
    assert_eq!(back.next_offset(), 0);
}

#[test]
fn a_member_that_ends_before_the_leaders_first_offset_keeps_nothing() {
    let local = crate::Overview {
        range: Some((0, 9)),
        epochs: vec![(1, 9)],
    };
    let leader = crate::Overview {
        range: Some((100, 200)),
        epochs: vec![(1, 150), (2, 200)],
    };
    assert_eq!(
        crate::cut_point(&local, |_| None, &leader),
        crate::Cut::Everything
    );
    let overlapping = crate::Overview {
        range: Some((5, 200)),
        ..leader.clone()
    };
    assert_eq!(
        crate::cut_point(&local, |_| None, &overlapping),
        crate::Cut::Nothing
    );
    assert_eq!(
        crate::cut_point(&crate::Overview::default(), |_| None, &leader),
        crate::Cut::Nothing
    );
}

#[test]
fn a_log_made_for_a_replica_starts_at_the_leaders_first_offset() {
    let r = tempfile::tempdir().unwrap();
    drop(log_of(r.path(), &[(2, "x")]));
    // The leader's retention removed everything before offset 100.
    let o = crate::Overview {
        range: Some((100, 101)),
        epochs: vec![(1, 100), (3, 101)],
    };
    assert_eq!(crate::accept(r.path(), &o).unwrap(), crate::Cut::Everything);
    let mut log = Log::open_from(r.path(), small(), 100).unwrap();
    assert_eq!(log.next_offset(), 100);
    assert_eq!(
        log.append(&[msg("b")], &Delta::default(), 1).unwrap().chunk_id,
        100
    );
    drop(log);
    // Once it has a segment, where it starts is its own.
    let log = Log::open_from(r.path(), small(), 7).unwrap();
    assert_eq!(log.next_offset(), 101);
    assert_eq!(read_all(&log, Start::First), vec![(100, "b".to_string())]);
}

/// Every chunk a replication reader hands out from `next`, whole.
fn replicate(from: &Log, next: u64) -> Vec<Bytes> {
    let mut r = Reader::for_replication(from.view(), next).unwrap();
    let mut out = Vec::new();
    loop {
        let mut b = bytes::BytesMut::new();
        match r.next_chunk_into(&mut b).unwrap() {
            Some(_) => out.push(b.freeze()),
            None => return out,
        }
    }
}

#[test]
fn a_replica_that_accepts_the_leaders_chunks_holds_the_same_files_and_state() {
    let (ld, rd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = Log::open(ld.path(), small()).unwrap();
    leader.set_epoch(3);
    let mut replica = Log::open(rd.path(), small()).unwrap();
    for i in 0..10u64 {
        let delta = Delta {
            sequences: vec![("p".into(), i)],
            offsets: if i % 4 == 3 { vec![("c".into(), i)] } else { vec![] },
        };
        leader
            .append(&[msg(&format!("m{i}")), msg("x")], &delta, 1000 + i as i64)
            .unwrap();
        if i % 3 == 0 {
            let d = Delta {
                sequences: vec![],
                offsets: vec![("t".into(), i)],
            };
            leader.append_tracking(&d, 2000).unwrap();
        }
        // Half way, the replica catches up; then again at the end.
        if i == 4 || i == 9 {
            let next = replica.next_offset();
            for c in replicate(&leader, next) {
                replica.accept_chunk(&c, 5).unwrap();
            }
        }
    }
    assert!(replicate(&leader, replica.next_offset()).is_empty());
    assert_eq!(replica.next_offset(), leader.next_offset());
    assert_eq!(replica.sequence("p"), Some(9));
    assert_eq!(replica.stored_offset("c"), leader.stored_offset("c"));
    assert_eq!(replica.stored_offset("t"), Some(9));
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert!(
        names(ld.path()).len() > 4,
        "it rolled over: {:?}",
        names(ld.path())
    );
    assert_eq!(names(ld.path()), names(rd.path()));
    for n in names(ld.path()) {
        let a = std::fs::read(ld.path().join(&n)).unwrap();
        let b = std::fs::read(rd.path().join(&n)).unwrap();
        assert!(a == b, "{n} differs");
    }
    // What it holds survives its restart, epochs included.
    drop(replica);
    let replica = Log::open(rd.path(), small()).unwrap();
    assert_eq!(read_all(&replica, Start::First), read_all(&leader, Start::First));
    assert_eq!(replica.sequence("p"), Some(9));
    let ov = crate::overview::overview(&replica.view()).unwrap();
    assert_eq!(ov.epochs.len(), 1);
    assert_eq!(ov.epochs[0].0, 3);
}

#[test]
fn a_replica_refuses_a_chunk_out_of_order_torn_or_corrupt_and_keeps_its_log() {
    let (ld, rd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = Log::open(ld.path(), Config::default()).unwrap();
    for i in 0..3 {
        leader
            .append(&[msg(&format!("m{i}"))], &Delta::default(), 1)
            .unwrap();
    }
    let chunks = replicate(&leader, 0);
    let mut replica = Log::open(rd.path(), Config::default()).unwrap();
    // Out of order: the second chunk first.
    assert!(replica.accept_chunk(&chunks[1], 1).is_err());
    // Torn: a chunk short of its length.
    assert!(replica
        .accept_chunk(&chunks[0][..chunks[0].len() - 1], 1)
        .is_err());
    assert!(replica.accept_chunk(&chunks[0][..10], 1).is_err());
    // Corrupt: a data byte flipped.
    let mut bad = chunks[0].to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(replica.accept_chunk(&bad, 1).is_err());
    assert_eq!(replica.next_offset(), 0);
    for c in &chunks {
        replica.accept_chunk(c, 1).unwrap();
    }
    assert_eq!(read_all(&replica, Start::First), read_all(&leader, Start::First));
    // A replication reader from inside a chunk, or past the start, errs.
    Reader::for_replication(leader.view(), 1).unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let mut leader2 = Log::open(d2.path(), Config::default()).unwrap();
    leader2
        .append(&[msg("a"), msg("b")], &Delta::default(), 1)
        .unwrap();
    leader2.append(&[msg("c")], &Delta::default(), 1).unwrap();
    assert!(Reader::for_replication(leader2.view(), 1).is_err());
    assert!(Reader::for_replication(leader2.view(), 2).is_ok());
    assert!(Reader::for_replication(leader2.view(), 3).is_ok());
}

#[test]
fn an_open_replica_log_is_cut_in_place_and_then_takes_the_leaders_chunks() {
    let (l, r) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let shared = [(1, "a"), (1, "b"), (1, "c"), (1, "d")];
    let mut mine = shared.to_vec();
    mine.extend([(2, "x"), (2, "y"), (2, "z")]);
    let mut theirs = shared.to_vec();
    theirs.extend([(3, "p"), (3, "q")]);
    let mut replica = log_of(r.path(), &mine);
    let view = replica.view();
    let leader = log_of(l.path(), &theirs);
    let o = crate::overview(&leader.view()).unwrap();
    assert_eq!(replica.cut_to(&o).unwrap(), crate::Cut::After(3));
    assert_eq!(replica.next_offset(), 4);
    assert_eq!(view.snapshot().next_offset, 4, "readers' view follows the cut");
    for c in replicate(&leader, replica.next_offset()) {
        replica.accept_chunk(&c, 1).unwrap();
    }
    assert_eq!(bodies(&replica), ["a", "b", "c", "d", "p", "q"]);
    // Agreeing now, a second cut is at its last chunk: nothing goes.
    assert_eq!(replica.cut_to(&o).unwrap(), crate::Cut::Nothing);
    assert_eq!(bodies(&replica), ["a", "b", "c", "d", "p", "q"]);
    drop(replica);
    let back = Log::open(r.path(), small()).unwrap();
    assert_eq!(bodies(&back), ["a", "b", "c", "d", "p", "q"]);
    assert_eq!(
        crate::overview(&back.view()).unwrap().epochs,
        vec![(1, 3), (3, 5)]
    );
}

/// Every chunk [`Reader::next_whole`] hands out from `next`.
fn replicate_whole(from: &Log, next: u64) -> Vec<Bytes> {
    let mut r = Reader::for_replication(from.view(), next).unwrap();
    let mut out = Vec::new();
    while let Some((h, c)) = r.next_whole().unwrap() {
        assert_eq!(
            c.len(),
            HEADER_SIZE + h.bloom_size as usize + h.data_length as usize + h.trailer_length as usize
        );
        out.push(c);
    }
    out
}

#[test]
fn a_leaders_recent_chunks_are_the_chunks_in_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    log.view().keep_recent(1 << 20);
    for i in 0..8u64 {
        let filtered = Message {
            filter: Some(Bytes::from_static(b"eu")),
            ..msg("f")
        };
        let delta = Delta {
            sequences: vec![("p".into(), i)],
            offsets: vec![],
        };
        log.append(&[msg(&format!("m{i}")), filtered], &delta, 10 + i as i64)
            .unwrap();
        if i % 3 == 1 {
            let d = Delta {
                sequences: vec![],
                offsets: vec![("c".into(), i)],
            };
            log.append_tracking(&d, 20).unwrap();
        }
    }
    // Segments rolled over (3 chunks each) with tracking snapshots: the
    // chunks kept are every chunk, byte for byte as the files hold them.
    let kept = replicate_whole(&log, 0);
    let read = replicate(&log, 0);
    assert!(read.len() > 10, "{} chunks", read.len());
    assert_eq!(kept, read);
    // From the middle too.
    let id = |c: &Bytes| warren_stream::chunk::ChunkHeader::parse(c).unwrap().first_offset;
    let mid = id(&read[5]);
    assert_eq!(replicate_whole(&log, mid), read[5..].to_vec());
    // Released (a reader past them) or not kept: read from the files.
    let mut r = Reader::for_replication(log.view(), mid).unwrap();
    log.view().release_recent(r.place());
    r.next_whole().unwrap();
    assert_eq!(replicate_whole(&log, 0), read);
    log.view().keep_recent(0);
    assert_eq!(replicate_whole(&log, mid), read[5..].to_vec());
}

#[test]
fn a_replica_cut_to_its_leader_forgets_what_it_kept() {
    let (ld, rd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = Log::open(ld.path(), Config::default()).unwrap();
    leader.set_epoch(2);
    leader.append(&[msg("a")], &Delta::default(), 1).unwrap();
    // The replica was a leader of epoch 1 and wrote a chunk no one has.
    let mut replica = Log::open(rd.path(), Config::default()).unwrap();
    replica.view().keep_recent(1 << 20);
    replica.append(&[msg("stale")], &Delta::default(), 1).unwrap();
    let o = crate::overview(&leader.view()).unwrap();
    assert_ne!(replica.cut_to(&o).unwrap(), crate::Cut::Nothing);
    for c in replicate(&leader, 0) {
        replica.accept_chunk(&c, 2).unwrap();
    }
    // The place the stale chunk had now holds the leader's.
    assert_eq!(replicate_whole(&replica, 0), replicate(&leader, 0));
}
