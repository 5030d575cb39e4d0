//! The definitions store on a temporary directory: records survive a
//! reopen, removals take their bindings, a torn last line is dropped, and
//! the log is compacted into a new snapshot.

use std::sync::Arc;

use warren_amqp091::{FieldTable, ShortStr};
use warren_core::changes::{Change, DefinitionsLog};
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};

use super::{Definitions, Model, Store};

fn queue(name: &str) -> QueueDecl {
    QueueDecl {
        name: name.into(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    }
}

fn exchange(name: &str) -> ExchangeDecl {
    ExchangeDecl {
        name: name.into(),
        kind: "topic".into(),
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }
}

fn to_queue(q: &str, key: &str) -> Binding {
    let mut arguments = FieldTable::new();
    arguments.insert("x-note", key.into());
    Binding {
        destination: Destination::Queue(q.into()),
        routing_key: key.into(),
        arguments,
    }
}

/// Record `changes` and commit the last.
fn record_all(s: &Store, changes: Vec<Change<'_>>) {
    let mut last = 0;
    for c in changes {
        last = s.record(c);
    }
    s.commit(last);
}

/// Open `dir` the way `start` does: what was kept is recorded again (as
/// restoring it into the broker would), then compacted.
fn open(dir: &std::path::Path) -> (Arc<Store>, Definitions) {
    let (s, d) = Store::open(dir).unwrap();
    let d = d.unwrap_or_default();
    s.state.lock().model = Model::of(&d);
    let s = Arc::new(s);
    s.compact().unwrap();
    (s, d)
}

fn names<T>(v: &[T], f: impl Fn(&T) -> String) -> Vec<String> {
    v.iter().map(f).collect()
}

#[test]
fn records_come_back_after_a_reopen_and_removals_take_their_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = open(dir.path());
    let (x, a) = (ShortStr::from("x"), ShortStr::from("a"));
    let (qa, qb, xd) = (queue("a"), queue("b"), exchange("x"));
    let (ba, bb) = (to_queue("a", "k.a"), to_queue("b", "k.b"));
    record_all(
        &s,
        vec![
            Change::VHostAdded("/"),
            Change::ExchangeDeclared {
                vhost: "/",
                decl: &xd,
            },
            Change::QueueDeclared {
                vhost: "/",
                decl: &qa,
                home: None,
            },
            Change::QueueDeclared {
                vhost: "/",
                decl: &qb,
                home: None,
            },
            Change::Bound {
                vhost: "/",
                source: &x,
                binding: &ba,
            },
            Change::Bound {
                vhost: "/",
                source: &x,
                binding: &bb,
            },
        ],
    );
    drop(s);
    let (s, d) = open(dir.path());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["a", "b"]);
    assert_eq!(names(&d.bindings, |b| b.routing_key.clone()), ["k.a", "k.b"]);
    assert_eq!(names(&d.exchanges, |x| x.name.clone()), ["x"]);

    record_all(
        &s,
        vec![
            Change::QueueDeleted { vhost: "/", name: &a },
            Change::Unbound {
                vhost: "/",
                source: &x,
                binding: &bb,
            },
        ],
    );
    drop(s);
    let (s, d) = open(dir.path());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["b"]);
    assert!(d.bindings.is_empty(), "{:?}", d.bindings);

    record_all(
        &s,
        vec![
            Change::Bound {
                vhost: "/",
                source: &x,
                binding: &bb,
            },
            Change::ExchangeDeleted { vhost: "/", name: &x },
        ],
    );
    drop(s);
    let (_s, d) = open(dir.path());
    assert!(d.exchanges.is_empty() && d.bindings.is_empty());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["b"]);
}

#[test]
fn a_torn_last_line_is_dropped_and_what_came_before_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = open(dir.path());
    let (q1, q2) = (queue("one"), queue("two"));
    record_all(
        &s,
        vec![
            Change::VHostAdded("/"),
            Change::QueueDeclared {
                vhost: "/",
                decl: &q1,
                home: None,
            },
            Change::QueueDeclared {
                vhost: "/",
                decl: &q2,
                home: None,
            },
        ],
    );
    drop(s);
    // Cut the last record in half, as a crash mid-append would.
    let log = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 20]).unwrap();
    let (s, d) = open(dir.path());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["one"]);
    // The reopen compacted: new records follow a clean log.
    record_all(
        &s,
        vec![Change::QueueDeclared {
            vhost: "/",
            decl: &q2,
            home: None,
        }],
    );
    drop(s);
    let (_s, d) = open(dir.path());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["one", "two"]);
}

#[test]
fn a_long_log_is_compacted_into_a_new_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = open(dir.path());
    record_all(&s, vec![Change::VHostAdded("/")]);
    let log_bytes = || -> u64 {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|e| e == "log"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    let mut most = 0;
    for i in 0..6000 {
        let (q, name) = (queue(&format!("q{i}")), ShortStr::from(format!("q{i}").as_str()));
        let keep = i % 1000 == 0;
        let mut changes = vec![Change::QueueDeclared {
            vhost: "/",
            decl: &q,
            home: None,
        }];
        if !keep {
            changes.push(Change::QueueDeleted {
                vhost: "/",
                name: &name,
            });
        }
        record_all(&s, changes);
        most = most.max(log_bytes());
    }
    // 12,000 records were made, but the log never held more than the
    // threshold's worth (about 4,096 records of ~100 bytes).
    assert!(most < 1 << 20, "the log grew to {most} bytes");
    assert!(log_bytes() < most, "no compaction happened");
    drop(s);
    let (_s, d) = open(dir.path());
    assert_eq!(
        names(&d.queues, |q| q.name.clone()),
        ["q0", "q1000", "q2000", "q3000", "q4000", "q5000"]
    );
}

#[test]
fn a_batch_commits_once_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = open(dir.path());
    let q = queue("q");
    {
        let _batch = s.batch();
        record_all(
            &s,
            vec![
                Change::VHostAdded("/"),
                Change::QueueDeclared {
                    vhost: "/",
                    decl: &q,
                    home: None,
                },
            ],
        );
        assert_eq!(s.io.lock().synced, 0, "committed inside a batch");
    }
    assert_eq!(s.io.lock().synced, 2);
    drop(s);
    let (_s, d) = open(dir.path());
    assert_eq!(names(&d.queues, |q| q.name.clone()), ["q"]);
}

/// A cluster node's applied index is kept with the changes applying made,
/// other nodes' queues with their home, and both survive a compaction.
#[test]
fn the_metadata_applied_index_and_queue_homes_are_kept_with_the_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (s, d) = open(dir.path());
    assert_eq!(d.warren_meta_applied, None);
    let q = QueueDecl {
        durable: false,
        exclusive: true,
        ..queue("elsewhere")
    };
    let home = ShortStr::from("warren@b");
    record_all(
        &s,
        vec![
            Change::VHostAdded("/"),
            Change::QueueDeclared {
                vhost: "/",
                decl: &q,
                home: Some(&home),
            },
        ],
    );
    let t = s.record_meta_applied(41);
    s.commit(t);
    drop(s);
    let (s, d) = open(dir.path());
    assert_eq!(d.warren_meta_applied, Some(41));
    assert_eq!(d.queues[0].node.as_deref(), Some("warren@b"));
    assert!(d.queues[0].exclusive && !d.queues[0].durable);
    // Compacted into the snapshot on that open: still there after another.
    drop(s);
    let (_, d) = open(dir.path());
    assert_eq!(d.warren_meta_applied, Some(41));
}
