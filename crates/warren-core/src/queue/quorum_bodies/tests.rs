//! Paging, read-back, checkpoints and segment deletion of quorum queue
//! bodies, against a real directory.

use super::*;

fn raw(id: u64, size: usize) -> Bytes {
    let body: Vec<u8> = (0..size).map(|i| (id as usize + i) as u8).collect();
    let m = Message::from_publish(
        ShortStr::from("ex"),
        ShortStr::from(format!("rk-{id}").as_str()),
        // No properties: the 0-9-1 property flags only.
        Bytes::from_static(&[0, 0]),
        Bytes::from(body),
    )
    .expect("a message")
    .0;
    let mut out = Vec::new();
    encode_message(&m, &mut out);
    Bytes::from(out)
}

fn body_of(id: u64, size: usize) -> Bytes {
    decode_message(raw(id, size)).expect("decodes").body
}

fn bodies(dir: &std::path::Path) -> Bodies {
    Bodies::new(Some(dir.join("q")), gauge(), gauge())
}

/// Enqueue ids 1..=n with bodies of `size` bytes.
fn fill(b: &mut Bodies, n: u64, size: usize) {
    for id in 1..=n {
        b.insert(id, raw(id, size)).unwrap();
    }
}

fn gauge() -> Arc<MemoryGauge> {
    Arc::new(MemoryGauge::default())
}

fn segments(dir: &std::path::Path) -> usize {
    existing(&dir.join("q")).len()
}

#[test]
fn past_the_window_bodies_are_paged_and_read_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bodies(dir.path());
    let n = WINDOW_MAX as u64 + 1000;
    fill(&mut b, n, 100);
    assert_eq!(b.in_memory().0, WINDOW_MAX as u64);
    assert_eq!(b.paged(), 1000);
    assert_eq!(b.len(), n as usize);
    for id in 1..=n {
        let m = b.take(id, true).expect("every body comes back");
        assert_eq!(m.body, body_of(id, 100), "body of {id}");
        assert_eq!(m.routing_key.to_str_lossy(), format!("rk-{id}"));
    }
    assert!(b.is_empty());
}

#[test]
fn a_read_back_takes_the_following_bodies_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bodies(dir.path());
    let n = WINDOW_MAX as u64 + 600;
    fill(&mut b, n, 10);
    let first_paged = WINDOW_MAX as u64 + 1;
    assert_eq!(b.get(first_paged).unwrap().body, body_of(first_paged, 10));
    assert_eq!(b.paged(), 600 - READ_AHEAD);
    assert_eq!(b.in_memory().0, WINDOW_MAX as u64 + READ_AHEAD as u64);
}

#[test]
fn a_checkpoint_names_paged_bodies_and_a_restart_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let n = WINDOW_MAX as u64 + 3000;
    let mut out = Vec::new();
    {
        let mut b = bodies(dir.path());
        fill(&mut b, n, 300);
        // Some leave before the checkpoint, from both places.
        for id in (1..=n).step_by(7) {
            b.take(id, false);
        }
        b.encode_checkpoint(&mut out).unwrap().sync().unwrap();
        // Written after the checkpoint: the log would replay it.
        b.insert(n + 1, raw(n + 1, 300)).unwrap();
    }
    let mut b = bodies(dir.path());
    b.install(&out).unwrap();
    b.sweep();
    for id in 1..=n {
        let m = b.take(id, true);
        if id % 7 == 1 {
            assert!(m.is_none(), "{id} had left");
        } else {
            assert_eq!(m.expect("kept").body, body_of(id, 300), "body of {id}");
        }
    }
    assert!(b.is_empty());
}

#[test]
fn a_segment_goes_once_empty_and_after_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bodies(dir.path());
    // 8 MiB in memory, then about 12 MiB paged: three or four segments.
    let size = 64 << 10;
    let n = 320u64;
    fill(&mut b, n, size);
    let before = segments(dir.path());
    assert!(before >= 3, "{before} segments");
    for id in 1..=300 {
        b.take(id, false);
    }
    // Emptied segments stay until a checkpoint no longer names them.
    assert_eq!(segments(dir.path()), before);
    let mut out = Vec::new();
    let doomed = b.encode_checkpoint(&mut out).unwrap().doomed;
    assert!(!doomed.is_empty());
    b.checkpointed(&doomed);
    assert!(segments(dir.path()) < before);
    for id in 301..=n {
        assert_eq!(b.take(id, true).expect("kept").body, body_of(id, size));
    }
}

#[test]
fn a_corrupt_record_loses_that_body_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bodies(dir.path());
    let n = WINDOW_MAX as u64 + 10;
    fill(&mut b, n, 50);
    let mut out = Vec::new();
    b.encode_checkpoint(&mut out).unwrap();
    // Flip a byte of the first paged record's body.
    let seg = dir
        .path()
        .join("q")
        .join(seg_name(existing(&dir.path().join("q"))[0]));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[40] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let first_paged = WINDOW_MAX as u64 + 1;
    assert!(b.get(first_paged).is_none());
    assert_eq!(b.get(first_paged + 1).unwrap().body, body_of(first_paged + 1, 50));
}

#[test]
fn a_snapshot_carries_every_body_inline() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bodies(dir.path());
    let n = WINDOW_MAX as u64 + 100;
    fill(&mut b, n, 20);
    let mut out = Vec::new();
    b.encode_inline(&mut out);
    // Another member, with no directory: all in memory.
    let mut other = Bodies::new(None, gauge(), gauge());
    other.install(&out).unwrap();
    assert_eq!(other.in_memory().0, n);
    for id in 1..=n {
        assert_eq!(other.take(id, true).unwrap().body, body_of(id, 20));
    }
    // And one with a directory pages past its window.
    let dir2 = tempfile::tempdir().unwrap();
    let mut third = bodies(dir2.path());
    third.install(&out).unwrap();
    assert_eq!(third.paged(), 100);
}

#[test]
fn with_no_directory_everything_stays_in_memory() {
    let mut b = Bodies::new(None, gauge(), gauge());
    fill(&mut b, WINDOW_MAX as u64 + 5, 10);
    assert_eq!(b.paged(), 0);
    assert_eq!(b.len(), WINDOW_MAX + 5);
}

#[test]
fn the_nodes_window_is_shared_by_its_queues() {
    let dir = tempfile::tempdir().unwrap();
    let node = gauge();
    let mut queues: Vec<Bodies> = (0..20)
        .map(|i| Bodies::new(Some(dir.path().join(format!("q{i}"))), gauge(), node.clone()))
        .collect();
    // 20 queues of 4 MiB each, every queue within its own window: past
    // the node's 64 MiB, they page.
    for id in 1..=64u64 {
        for q in queues.iter_mut() {
            q.insert(id, raw(id, 64 << 10)).unwrap();
        }
    }
    assert!(
        node.bytes() <= NODE_WINDOW_BYTES + (64 << 10) * 20,
        "{}",
        node.bytes()
    );
    assert!(queues.iter().map(|q| q.paged()).sum::<usize>() > 0);
    for q in queues.iter_mut() {
        q.flush();
        for id in 1..=64u64 {
            assert_eq!(q.take(id, true).unwrap().body, body_of(id, 64 << 10));
        }
    }
    assert_eq!(node.bytes(), 0);
}

#[test]
fn a_torn_or_corrupt_snapshot_is_refused_without_a_panic() {
    let mut b = Bodies::new(None, gauge(), gauge());
    fill(&mut b, 20, 30);
    let mut good = Vec::new();
    b.encode_inline(&mut good);
    // Every truncation: refused or (cut between bodies' count fields)
    // read as far as it goes, never a panic.
    for n in 0..good.len() {
        let mut other = Bodies::new(None, gauge(), gauge());
        let _ = other.install(&good[..n]);
    }
    // Counts far past the input: refused, with nothing allocated for them.
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(&good[8..]);
    assert!(Bodies::new(None, gauge(), gauge()).install(&huge).is_err());
    // Bytes flipped anywhere (a fixed pseudo-random walk).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut bad = good.clone();
        let at = (x % bad.len() as u64) as usize;
        bad[at] ^= (x >> 32) as u8 | 1;
        let _ = Bodies::new(None, gauge(), gauge()).install(&bad);
    }
}
