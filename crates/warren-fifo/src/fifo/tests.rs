use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn enq(id: MsgId, size: u32) -> Command {
    enq_p(id, size, 0)
}

fn enq_p(id: MsgId, size: u32, priority: u8) -> Command {
    Command::Enqueue {
        id,
        size,
        now: 0,
        expires_at: None,
        priority,
        key: None,
    }
}

fn enq_k(id: MsgId, now: u64, key: &str) -> Command {
    Command::Enqueue {
        id,
        size: 1,
        now,
        expires_at: None,
        priority: 0,
        key: Some(key.as_bytes().to_vec()),
    }
}

fn delivered(effects: &[Effect]) -> Vec<(ConsumerId, MsgId, bool)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver {
                consumer,
                header,
                redelivered,
                ..
            } => Some((*consumer, header.id, *redelivered)),
            _ => None,
        })
        .collect()
}

#[test]
fn messages_go_in_order_within_credit_and_consumers_take_turns() {
    let mut f = Fifo::new(Config::default());
    for id in 1..=5 {
        assert!(f.apply(enq(id, 10)).is_empty());
    }
    assert_eq!((f.ready(), f.ready_bytes()), (5, 50));
    let got = f.apply(Command::Credit {
        consumer: 7,
        credit: 2,
    });
    assert_eq!(delivered(&got), [(7, 1, false), (7, 2, false)]);
    let got = f.apply(Command::Credit {
        consumer: 8,
        credit: 5,
    });
    assert_eq!(delivered(&got), [(8, 3, false), (8, 4, false), (8, 5, false)]);
    // Both with credit: in turn.
    f.apply(Command::Credit {
        consumer: 7,
        credit: 5,
    });
    let mut got = Vec::new();
    for id in 6..=9 {
        got.extend(delivered(&f.apply(enq(id, 1))));
    }
    let who: Vec<ConsumerId> = got.iter().map(|d| d.0).collect();
    assert_eq!(who, [7, 8, 7, 8]);
    assert_eq!(f.checked_out(), 9);
    f.apply(Command::Settle {
        consumer: 7,
        ids: vec![1, 2],
    });
    assert_eq!(f.checked_out(), 7);
}

#[test]
fn returns_come_first_in_id_order_and_count_failed_deliveries() {
    let mut f = Fifo::new(Config::default());
    for id in 1..=4 {
        f.apply(enq(id, 1));
    }
    f.apply(Command::Credit {
        consumer: 1,
        credit: 3,
    });
    f.apply(Command::Return {
        consumer: 1,
        ids: vec![3, 1],
        failed: false,
        now: 0,
        until: 0,
    });
    let got = f.apply(Command::Credit {
        consumer: 2,
        credit: 3,
    });
    assert_eq!(delivered(&got), [(2, 1, true), (2, 3, true), (2, 4, false)]);
    let counts: Vec<(u32, u32)> = f
        .consumer(2)
        .unwrap()
        .checked_out
        .values()
        .map(|h| (h.delivery_count, h.acquired_count))
        .collect();
    assert_eq!(counts, [(0, 2), (0, 2), (0, 1)]);
    // A consumer that goes away: what it held goes back, taken once more
    // but not failed (RabbitMQ 4.3).
    f.apply(Command::Cancel { consumer: 2 });
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [1, 3, 4]);
    let got = f.apply(Command::Credit {
        consumer: 1,
        credit: 1,
    });
    let Effect::Deliver { header, .. } = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(
        (header.id, header.delivery_count, header.acquired_count),
        (1, 0, 3)
    );
    f.apply(Command::Return {
        consumer: 1,
        ids: vec![1],
        failed: true,
        now: 0,
        until: 0,
    });
    let got = f.apply(Command::Credit {
        consumer: 1,
        credit: 1,
    });
    let Effect::Deliver { header, .. } = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!((header.delivery_count, header.acquired_count), (1, 4));
}

#[test]
fn past_the_delivery_limit_a_message_is_dead_lettered() {
    let mut f = Fifo::new(Config {
        delivery_limit: Some(2),
        ..Config::default()
    });
    f.apply(enq(1, 1));
    for round in 0..3 {
        f.apply(Command::Credit {
            consumer: 1,
            credit: 1,
        });
        let out = f.apply(Command::Return {
            consumer: 1,
            ids: vec![1],
            failed: true,
            now: 0,
            until: 0,
        });
        if round < 2 {
            assert!(out.is_empty(), "{out:?}");
        } else {
            assert!(
                matches!(&out[..], [Effect::DeadLetter { header, reason: DeadLetterReason::DeliveryLimit }] if header.delivery_count == 3),
                "{out:?}"
            );
        }
    }
    assert_eq!(f.ready(), 0);
    // Requeues that do not say the delivery failed never reach it.
    f.apply(enq(2, 1));
    for _ in 0..10 {
        f.apply(Command::Credit {
            consumer: 1,
            credit: 1,
        });
        let out = f.apply(Command::Return {
            consumer: 1,
            ids: vec![2],
            failed: false,
            now: 0,
            until: 0,
        });
        assert!(delivered(&out).len() <= 1);
    }
    assert_eq!(f.ready() + f.checked_out(), 1);
}

#[test]
fn discards_dead_letter_and_purge_drops_only_what_waits() {
    let mut f = Fifo::new(Config::default());
    for id in 1..=3 {
        f.apply(enq(id, 4));
    }
    f.apply(Command::Credit {
        consumer: 1,
        credit: 1,
    });
    let out = f.apply(Command::Discard {
        consumer: 1,
        ids: vec![1, 99],
    });
    assert!(
        matches!(&out[..], [Effect::DeadLetter { header, reason: DeadLetterReason::Rejected }] if header.id == 1)
    );
    f.apply(Command::Credit {
        consumer: 1,
        credit: 1,
    });
    assert_eq!(
        f.apply(Command::Purge),
        [Effect::Purged(1), Effect::Dropped(vec![3])]
    );
    assert_eq!((f.ready(), f.ready_bytes(), f.checked_out()), (0, 0, 1));
}

#[test]
fn a_prefetch_consumer_gets_credit_back_as_it_settles_and_no_ack_settles_at_once() {
    let mut f = Fifo::new(Config::default());
    for id in 1..=6 {
        f.apply(enq(id, 1));
    }
    let got = f.apply(Command::Consume {
        consumer: 1,
        prefetch: 2,
        auto_settle: false,
        priority: 0,
    });
    assert_eq!(delivered(&got), [(1, 1, false), (1, 2, false)]);
    // Credit commands do not raise a prefetch.
    assert!(delivered(&f.apply(Command::Credit {
        consumer: 1,
        credit: 9
    }))
    .is_empty());
    let got = f.apply(Command::Settle {
        consumer: 1,
        ids: vec![1],
    });
    assert_eq!(got[0], Effect::Dropped(vec![1]));
    assert_eq!(delivered(&got), [(1, 3, false)]);
    let got = f.apply(Command::Return {
        consumer: 1,
        ids: vec![2],
        failed: false,
        now: 0,
        until: 0,
    });
    assert_eq!(delivered(&got), [(1, 2, true)]);
    assert_eq!(f.consumer(1).unwrap().checked_out.len(), 2);
    // A no-ack consumer: what it gets has left the queue.
    let got = f.apply(Command::Consume {
        consumer: 2,
        prefetch: 0,
        auto_settle: true,
        priority: 0,
    });
    assert!(got.is_empty());
    let got = f.apply(Command::Credit {
        consumer: 2,
        credit: 5,
    });
    assert_eq!(delivered(&got), [(2, 4, false), (2, 5, false), (2, 6, false)]);
    assert!(got
        .iter()
        .all(|e| matches!(e, Effect::Deliver { settled: true, .. })));
    assert_eq!((f.ready(), f.checked_out()), (0, 2));
    assert_eq!(f.consumer(2).unwrap().credit, 2);
}

#[test]
fn past_max_length_the_head_is_dropped_or_the_publish_refused() {
    let mut f = Fifo::new(Config {
        max_length: Some(2),
        ..Config::default()
    });
    for id in 1..=2 {
        assert!(f.apply(enq(id, 1)).is_empty());
    }
    let out = f.apply(enq(3, 1));
    assert!(
        matches!(&out[..], [Effect::DeadLetter { header, reason: DeadLetterReason::MaxLen }] if header.id == 1),
        "{out:?}"
    );
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [2, 3]);
    let mut f = Fifo::new(Config {
        max_length: Some(2),
        reject_publish: true,
        ..Config::default()
    });
    for id in 1..=2 {
        assert!(f.apply(enq(id, 1)).is_empty());
    }
    assert_eq!(f.apply(enq(3, 1)), [Effect::Rejected(3)]);
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [1, 2]);
    // What a consumer holds is not counted.
    f.apply(Command::Credit {
        consumer: 1,
        credit: 1,
    });
    assert!(f.apply(enq(4, 1)).is_empty());
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [2, 4]);
}

#[test]
fn a_single_active_consumer_is_served_alone_until_it_goes() {
    let mut f = Fifo::new(Config {
        single_active: true,
        ..Config::default()
    });
    for c in [1, 2] {
        f.apply(Command::Consume {
            consumer: c,
            prefetch: 5,
            auto_settle: false,
            priority: 0,
        });
    }
    let mut got = Vec::new();
    for id in 1..=3 {
        got.extend(delivered(&f.apply(enq(id, 1))));
    }
    assert_eq!(got, [(1, 1, false), (1, 2, false), (1, 3, false)]);
    // It goes: what it held goes to the next, which is active now.
    let got = f.apply(Command::Cancel { consumer: 1 });
    assert_eq!(delivered(&got), [(2, 1, true), (2, 2, true), (2, 3, true)]);
}

#[test]
fn higher_priority_consumers_are_served_first_while_they_have_credit() {
    let mut f = Fifo::new(Config::default());
    for (c, priority) in [(1, 0), (2, 5), (3, 5)] {
        f.apply(Command::Consume {
            consumer: c,
            prefetch: 2,
            auto_settle: false,
            priority,
        });
    }
    let mut got = Vec::new();
    for id in 1..=6 {
        got.extend(delivered(&f.apply(enq(id, 1))));
    }
    let who: Vec<ConsumerId> = got.iter().map(|d| d.0).collect();
    // 2 and 3 take turns until both are full; then 1.
    assert_eq!(who, [2, 3, 2, 3, 1, 1]);
}

/// Any sequence of commands keeps the state's promises: every message is
/// in one place only, nothing is lost or made up, consumers never get past
/// their credit, counts never go down, and ready_bytes adds up.
#[test]
fn random_command_sequences_keep_the_invariants() {
    for seed in 0..500u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let limit = if rng.gen_bool(0.5) {
            Some(rng.gen_range(0..4))
        } else {
            None
        };
        let mut max_length = rng.gen_bool(0.3).then(|| rng.gen_range(0..6));
        let reject_publish = rng.gen_bool(0.5);
        let single_active = rng.gen_bool(0.3);
        let max_priority = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..5) };
        let dedup_window = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..6) };
        let mut at_least_once = reject_publish && rng.gen_bool(0.5);
        let mut f = Fifo::new(Config {
            delivery_limit: limit,
            max_length,
            max_bytes: None,
            reject_publish,
            single_active,
            max_priority,
            dedup_window,
            dedup_ttl: rng.gen_bool(0.5).then(|| rng.gen_range(1..100)),
            dlx_at_least_once: at_least_once,
            delayed_retry: rng.gen_bool(0.3).then(|| DelayedRetry {
                kind: [RetryKind::All, RetryKind::Failed, RetryKind::Returned][rng.gen_range(0..3)],
                min_ms: rng.gen_range(1..30),
                max_ms: rng.gen_range(1..60),
            }),
        });
        let mut next_id = 1;
        let mut now = 0u64;
        // What the test knows: live messages, and what each consumer was
        // granted and given.
        let mut live: BTreeSet<MsgId> = BTreeSet::new();
        let mut granted: BTreeMap<ConsumerId, u64> = BTreeMap::new();
        let mut given: BTreeMap<ConsumerId, u64> = BTreeMap::new();
        let mut last_counts: BTreeMap<MsgId, (u32, u32)> = BTreeMap::new();
        for step in 0..300 {
            let consumer = rng.gen_range(1..4u64);
            let held: Vec<MsgId> = f
                .consumer(consumer)
                .map(|c| c.checked_out.keys().copied().collect())
                .unwrap_or_default();
            let some = |rng: &mut StdRng| -> Vec<MsgId> {
                let mut ids: Vec<MsgId> = held.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
                if rng.gen_bool(0.1) {
                    ids.push(next_id + 1000); // unknown ids are ignored
                }
                ids
            };
            let c = match rng.gen_range(0..100) {
                0..=34 => {
                    next_id += 1;
                    now += rng.gen_range(0..20);
                    let key = rng.gen_bool(0.5).then(|| vec![rng.gen_range(0..4u8)]);
                    // A key still in the window is a duplicate: not stored.
                    if !key
                        .as_ref()
                        .is_some_and(|k| dedup_window > 0 && window_has(&f, k, now))
                    {
                        live.insert(next_id);
                    }
                    Command::Enqueue {
                        id: next_id,
                        size: rng.gen_range(0..100),
                        now,
                        expires_at: rng.gen_bool(0.3).then(|| now + rng.gen_range(0..200)),
                        priority: rng.gen_range(0..8),
                        key,
                    }
                }
                35..=44 => {
                    let credit = rng.gen_range(0..5);
                    if f.consumer(consumer).is_some() || credit > 0 {
                        *granted.entry(consumer).or_default() += credit as u64;
                    }
                    Command::Credit { consumer, credit }
                }
                45..=49 => {
                    // A change of mode starts the count of credit afresh.
                    granted.remove(&consumer);
                    given.remove(&consumer);
                    Command::Consume {
                        consumer,
                        prefetch: rng.gen_range(0..4),
                        auto_settle: rng.gen_bool(0.2),
                        priority: rng.gen_range(-1..2),
                    }
                }
                50..=64 => Command::Settle {
                    consumer,
                    ids: some(&mut rng),
                },
                65..=79 => Command::Return {
                    consumer,
                    ids: some(&mut rng),
                    failed: rng.gen_bool(0.5),
                    now,
                    until: 0,
                },
                80..=89 => Command::Discard {
                    consumer,
                    ids: some(&mut rng),
                },
                90..=94 => Command::Cancel { consumer },
                95..=96 => {
                    now += rng.gen_range(0..100);
                    Command::Tick { now }
                }
                97 if rng.gen_bool(0.5) => Command::DequeueNext {
                    consumer: 9,
                    settled: rng.gen_bool(0.5),
                },
                97 => {
                    // A get of a waiting message (or of one that is not).
                    let waiting: Vec<MsgId> = f.waiting_ids().collect();
                    let id = if waiting.is_empty() || rng.gen_bool(0.2) {
                        next_id + 500
                    } else {
                        waiting[rng.gen_range(0..waiting.len())]
                    };
                    Command::Dequeue {
                        consumer: 9,
                        id,
                        settled: rng.gen_bool(0.5),
                    }
                }
                98 => {
                    // The leader settles some dead letters its targets have.
                    let mut ids: Vec<MsgId> = f
                        .discards()
                        .iter()
                        .map(|(h, _)| h.id)
                        .filter(|_| rng.gen_bool(0.5))
                        .collect();
                    ids.push(next_id + 700);
                    Command::SettleDlx { ids }
                }
                99 if rng.gen_bool(0.5) => {
                    // A policy: another max-length, at-least-once on or off.
                    let mut config = f.config().clone();
                    max_length = rng.gen_bool(0.5).then(|| rng.gen_range(0..6));
                    at_least_once = reject_publish && rng.gen_bool(0.5);
                    config.max_length = max_length;
                    config.dlx_at_least_once = at_least_once;
                    Command::SetConfig(config)
                }
                _ => Command::Purge,
            };
            let settled: Vec<MsgId> = match &c {
                Command::Settle { ids, .. } => ids.iter().copied().filter(|i| held.contains(i)).collect(),
                Command::SettleDlx { ids } => ids
                    .iter()
                    .copied()
                    .filter(|i| f.discards().iter().any(|(h, _)| h.id == *i))
                    .collect(),
                _ => Vec::new(),
            };
            let purged: Vec<MsgId> = match &c {
                Command::Purge => f
                    .waiting_ids()
                    .chain(f.delayed().values().map(|h| h.id))
                    .chain(f.discards().iter().map(|(h, _)| h.id))
                    .collect(),
                // Settings without at-least-once delete the discards.
                Command::SetConfig(cfg) if !cfg.dlx_at_least_once => {
                    f.discards().iter().map(|(h, _)| h.id).collect()
                }
                Command::Dequeue {
                    id, settled: true, ..
                } if f.waiting_ids().any(|w| w == *id) => vec![*id],
                Command::DequeueNext { settled: true, .. } => {
                    f.served().next().map(|h| h.id).into_iter().collect()
                }
                _ => Vec::new(),
            };
            let cancelled = matches!(c, Command::Cancel { .. });
            let out = f.apply(c);
            // Strict priorities: one command's deliveries go from the
            // highest level down, and what still waits is no higher
            // than the last delivered.
            let levels: Vec<u8> = out
                .iter()
                .filter_map(|e| match e {
                    Effect::Deliver { header, .. } => Some(header.priority),
                    _ => None,
                })
                .collect();
            assert!(
                levels.windows(2).all(|w| w[0] >= w[1]),
                "seed {seed} step {step}: delivered out of priority order: {levels:?}"
            );
            if let Some(last) = levels.last() {
                assert!(
                    f.served().all(|h| h.priority <= *last),
                    "seed {seed} step {step}: a higher priority left waiting"
                );
            }
            assert!(f.served().all(|h| h.priority <= max_priority));
            if cancelled {
                // Its unused credit went with it.
                granted.remove(&consumer);
                given.remove(&consumer);
            }
            let mut dropped: Vec<MsgId> = Vec::new();
            for e in &out {
                match e {
                    Effect::Deliver {
                        consumer,
                        header,
                        settled,
                        ..
                    } => {
                        if single_active {
                            assert_eq!(
                                f.service().front(),
                                Some(consumer),
                                "seed {seed} step {step}: not the active consumer"
                            );
                        }
                        *given.entry(*consumer).or_default() += 1;
                        let c = f.consumer(*consumer).expect("delivered to a consumer");
                        assert_eq!(*settled, c.auto_settle, "seed {seed} step {step}");
                        if *settled {
                            assert!(live.remove(&header.id), "seed {seed} step {step}");
                        }
                        let before = last_counts.get(&header.id).copied().unwrap_or((0, 0));
                        assert!(header.acquired_count > before.1, "seed {seed} step {step}");
                        assert!(header.delivery_count >= before.0, "seed {seed} step {step}");
                        last_counts.insert(header.id, (header.delivery_count, header.acquired_count));
                    }
                    Effect::Discarded { header, reason } => {
                        // Kept, as a discard, until settled.
                        assert!(at_least_once, "seed {seed} step {step}");
                        assert!(live.contains(&header.id), "seed {seed} step {step}");
                        if *reason == DeadLetterReason::DeliveryLimit {
                            assert!(header.delivery_count > limit.unwrap(), "seed {seed} step {step}");
                        }
                    }
                    Effect::DeadLetter { header, reason } => {
                        assert!(!at_least_once, "seed {seed} step {step}");
                        assert!(
                            live.remove(&header.id),
                            "seed {seed} step {step}: dead-lettered twice"
                        );
                        if *reason == DeadLetterReason::DeliveryLimit {
                            assert!(header.delivery_count > limit.unwrap(), "seed {seed} step {step}");
                        }
                        if *reason == DeadLetterReason::Expired {
                            assert!(
                                header.expires_at.is_some_and(|t| t <= now),
                                "seed {seed} step {step}"
                            );
                        }
                    }
                    Effect::Purged(_) => {}
                    Effect::Dequeued { header, .. } => {
                        // The head it was (ids of one level served in order).
                        assert!(live.contains(&header.id), "seed {seed} step {step}");
                        assert!(header.acquired_count >= 1, "seed {seed} step {step}");
                    }
                    Effect::Dropped(ids) => dropped.extend(ids),
                    Effect::Rejected(id) => {
                        assert!(reject_publish, "seed {seed} step {step}");
                        assert!(live.remove(id), "seed {seed} step {step}: rejected twice");
                    }
                    Effect::Duplicate(id) => {
                        assert!(
                            !live.contains(id),
                            "seed {seed} step {step}: an unexpected duplicate"
                        );
                    }
                }
            }
            let mut expected: Vec<MsgId> = settled.into_iter().chain(purged).collect();
            expected.sort_unstable();
            dropped.sort_unstable();
            assert_eq!(dropped, expected, "seed {seed} step {step}: dropped");
            for id in dropped {
                live.remove(&id);
            }
            if step % 25 == 0 {
                let mut b = Vec::new();
                crate::codec::encode_state(&f, &mut b);
                let (back, rest) = crate::codec::decode_state(&b).expect("a state decodes");
                assert!(rest.is_empty());
                assert_eq!(back, f, "seed {seed} step {step}: state round trip");
            }
            // Every live message is in exactly one place (discards and
            // delayed returns too).
            let mut seen: Vec<MsgId> = f.waiting_ids().collect();
            seen.extend(f.discards().iter().map(|(h, _)| h.id));
            seen.extend(f.delayed().values().map(|h| h.id));
            // A delayed return waits no longer than its retry's maximum.
            if let Some(d) = f.config().delayed_retry {
                assert!(
                    f.delayed()
                        .keys()
                        .all(|(at, _)| *at <= f.now() + d.max_ms.max(d.min_ms)),
                    "seed {seed} step {step}: delayed too long"
                );
            }
            assert_eq!(
                f.discard_bytes(),
                f.discards().iter().map(|(h, _)| h.size as u64).sum::<u64>(),
                "seed {seed} step {step}"
            );

            let mut bytes = 0u64;
            for c in [1, 2, 3, 9] {
                if let Some(c) = f.consumer(c) {
                    seen.extend(c.checked_out.keys().copied());
                }
            }
            let unique: BTreeSet<MsgId> = seen.iter().copied().collect();
            assert_eq!(
                unique.len(),
                seen.len(),
                "seed {seed} step {step}: a message in two places"
            );
            assert_eq!(unique, live, "seed {seed} step {step}: lost or made up");
            for id in f.waiting_ids() {
                bytes += f.served().find(|h| h.id == id).unwrap().size as u64;
            }
            assert_eq!(bytes, f.ready_bytes(), "seed {seed} step {step}");
            // Never past the credit granted; and nothing waits while a
            // consumer has credit.
            for (c, n) in &given {
                let Some(state) = f.consumer(*c) else { continue };
                if state.prefetch == 0 {
                    assert!(
                        n <= granted.get(c).unwrap_or(&0),
                        "seed {seed} step {step}: past credit"
                    );
                } else {
                    assert!(
                        state.credit == 0
                            || state.credit as usize + state.checked_out.len() <= state.prefetch as usize,
                        "seed {seed} step {step}: past prefetch"
                    );
                }
            }
            assert!(
                f.next_expiry().is_none_or(|t| t > now),
                "seed {seed} step {step}: an expired head"
            );
            // Drop-head keeps within the limit; reject-publish refuses
            // publishes, but what consumers return still goes back.
            if let (Some(m), false) = (max_length, reject_publish) {
                assert!(f.ready() as u64 <= m, "seed {seed} step {step}: past max-length");
            }
            let any_credit = if single_active {
                f.service()
                    .front()
                    .and_then(|c| f.consumer(*c))
                    .is_some_and(|c| c.credit > 0)
            } else {
                (1..4).any(|c| f.consumer(c).is_some_and(|c| c.credit > 0))
            };
            assert!(
                !(any_credit && f.ready() > 0),
                "seed {seed} step {step}: idle with credit"
            );
        }
    }
}

/// What a DequeueNext took: (id, settled, acquired count, delivery count).
fn dequeued(effects: &[Effect]) -> Option<(MsgId, bool, u32, u32)> {
    effects.iter().find_map(|e| match e {
        Effect::Dequeued { header, settled, .. } => {
            Some((header.id, *settled, header.acquired_count, header.delivery_count))
        }
        _ => None,
    })
}

/// basic.get by consumer 9, held: what it took.
fn get_held(f: &mut Fifo) -> Option<(MsgId, bool, u32, u32)> {
    dequeued(&f.apply(Command::DequeueNext {
        consumer: 9,
        settled: false,
    }))
}

/// Consumer 9 gives message 1 back at `now`, not to be served before
/// `until`.
fn give_back(f: &mut Fifo, failed: bool, now: u64, until: u64) -> Vec<Effect> {
    f.apply(Command::Return {
        consumer: 9,
        ids: vec![1],
        failed,
        now,
        until,
    })
}

#[test]
fn a_dequeue_takes_the_next_message_to_serve_and_a_failed_return_counts() {
    let mut f = Fifo::new(Config::default());
    // Empty: nothing taken, no effect.
    assert!(f
        .apply(Command::DequeueNext {
            consumer: 9,
            settled: false
        })
        .is_empty());
    for id in 1..=3 {
        f.apply(enq(id, 10));
    }
    let got = f.apply(Command::DequeueNext {
        consumer: 9,
        settled: false,
    });
    assert_eq!(dequeued(&got), Some((1, false, 1, 0)));
    assert_eq!((f.ready(), f.checked_out()), (2, 1));
    // A failed return (basic.reject): back first, counted.
    f.apply(Command::Return {
        consumer: 9,
        ids: vec![1],
        failed: true,
        now: 0,
        until: 0,
    });
    let got = f.apply(Command::DequeueNext {
        consumer: 9,
        settled: true,
    });
    assert_eq!(dequeued(&got), Some((1, true, 2, 1)));
    assert!(got.contains(&Effect::Dropped(vec![1])));
    assert_eq!((f.ready(), f.checked_out()), (2, 0));
}

#[test]
fn delayed_retries_hold_returns_back_by_kind_and_delivery_count() {
    let retry = |kind| Config {
        delayed_retry: Some(DelayedRetry {
            kind,
            min_ms: 100,
            max_ms: 250,
        }),
        delivery_limit: Some(3),
        ..Config::default()
    };
    let mut f = Fifo::new(retry(RetryKind::Failed));
    f.apply(enq(1, 10));
    assert!(get_held(&mut f).is_some());
    // A failed return at 1,000 waits 100 ms (count 1)...
    give_back(&mut f, true, 1_000, 0);
    assert_eq!((f.ready(), f.delayed().len()), (0, 1));
    assert_eq!(f.next_expiry(), Some(1_100));
    assert!(get_held(&mut f).is_none(), "not served while delayed");
    f.apply(Command::Tick { now: 1_099 });
    assert_eq!(f.ready(), 0);
    f.apply(Command::Tick { now: 1_100 });
    assert_eq!((f.ready(), f.delayed().len()), (1, 0));
    // ...the next 200 ms (count 2), then 250 (the maximum).
    assert!(get_held(&mut f).is_some());
    give_back(&mut f, true, 2_000, 0);
    assert_eq!(f.next_expiry(), Some(2_200));
    f.apply(Command::Tick { now: 2_200 });
    assert!(get_held(&mut f).is_some());
    give_back(&mut f, true, 3_000, 0);
    assert_eq!(f.next_expiry(), Some(3_250));
    f.apply(Command::Tick { now: 3_250 });
    // A plain return is not held under `failed`; past the limit, a
    // failed one is dead-lettered, not delayed.
    assert!(get_held(&mut f).is_some());
    give_back(&mut f, false, 4_000, 0);
    assert_eq!((f.ready(), f.delayed().len()), (1, 0));
    assert!(get_held(&mut f).is_some());
    let out = give_back(&mut f, true, 5_000, 0);
    assert!(out.iter().any(|e| matches!(e, Effect::DeadLetter { .. })));
    assert_eq!(f.delayed().len(), 0);
    // `returned` holds plain returns; a purge takes delayed ones too.
    let mut f = Fifo::new(retry(RetryKind::Returned));
    f.apply(enq(1, 10));
    get_held(&mut f);
    give_back(&mut f, false, 1_000, 0);
    assert_eq!(f.delayed().len(), 1);
    let out = f.apply(Command::Purge);
    assert!(out.contains(&Effect::Purged(1)));
    assert!(out.contains(&Effect::Dropped(vec![1])));
    assert_eq!(f.delayed().len(), 0);
}

#[test]
fn a_return_asked_to_wait_waits_without_a_delayed_retry() {
    let mut f = Fifo::new(Config::default());
    f.apply(enq(1, 10));
    assert!(get_held(&mut f).is_some());
    // x-opt-delivery-time 500 ms on: held until then.
    give_back(&mut f, false, 1_000, 1_500);
    assert_eq!((f.ready(), f.delayed().len()), (0, 1));
    assert_eq!(f.next_expiry(), Some(1_500));
    f.apply(Command::Tick { now: 1_500 });
    assert_eq!(f.ready(), 1);
    // A time already past: back at once.
    assert!(get_held(&mut f).is_some());
    give_back(&mut f, false, 2_000, 1_900);
    assert_eq!((f.ready(), f.delayed().len()), (1, 0));
}

#[test]
fn messages_past_their_time_go_from_the_head_as_dead_letters() {
    let mut f = Fifo::new(Config::default());
    let at = |id, expires_at| Command::Enqueue {
        id,
        size: 1,
        now: 100,
        expires_at,
        priority: 0,
        key: None,
    };
    f.apply(at(1, Some(150)));
    f.apply(at(2, None));
    f.apply(at(3, Some(120)));
    assert_eq!(f.next_expiry(), Some(150));
    assert!(f.apply(Command::Tick { now: 149 }).is_empty());
    // The head goes at 150; then the head never expires, so 3 waits
    // behind it though its time has passed (only heads expire).
    let out = f.apply(Command::Tick { now: 150 });
    assert!(
        matches!(&out[..], [Effect::DeadLetter { header, reason: DeadLetterReason::Expired }] if header.id == 1)
    );
    assert_eq!(f.next_expiry(), None);
    // Once 2 is taken, 3 is the head, long expired: it goes at once,
    // and the credit left takes 4 when it comes.
    let got = f.apply(Command::Credit {
        consumer: 1,
        credit: 2,
    });
    assert_eq!(delivered(&got), [(1, 2, false)]);
    assert!(
        matches!(&got[1..], [Effect::DeadLetter { header, reason: DeadLetterReason::Expired }] if header.id == 3),
        "{got:?}"
    );
    // Time never goes back: 4 goes out at once (credit was left), comes
    // back after a tick from a clock behind, and still waits.
    assert_eq!(delivered(&f.apply(at(4, Some(160)))), [(1, 4, false)]);
    f.apply(Command::Tick { now: 10 });
    f.apply(Command::Return {
        consumer: 1,
        ids: vec![4],
        failed: false,
        now: 0,
        until: 0,
    });
    assert_eq!(f.ready(), 1, "160 is still ahead of the last time seen (150)");
    assert_eq!(f.next_expiry(), Some(160));
}

#[test]
fn priorities_are_strict_and_returns_keep_their_level() {
    let mut f = Fifo::new(Config {
        max_priority: 5,
        ..Config::default()
    });
    // Priority 9 counts as 5, the highest.
    for (id, p) in [(1, 0), (2, 3), (3, 9), (4, 3), (5, 0)] {
        f.apply(enq_p(id, 1, p));
    }
    let order: Vec<MsgId> = f.waiting_ids().collect();
    assert_eq!(order, [3, 2, 4, 1, 5]);
    let got = f.apply(Command::Consume {
        consumer: 7,
        prefetch: 3,
        auto_settle: false,
        priority: 0,
    });
    assert_eq!(delivered(&got), [(7, 3, false), (7, 2, false), (7, 4, false)]);
    // A returned 3-level message goes back ahead of its level, behind the
    // highest; a new 5 is served before both.
    f.apply(enq_p(6, 1, 5));
    let got = f.apply(Command::Return {
        consumer: 7,
        ids: vec![4, 2, 3],
        failed: false,
        now: 0,
        until: 0,
    });
    assert_eq!(delivered(&got), [(7, 3, true), (7, 6, false), (7, 2, true)]);
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [4, 1, 5]);
    // drop-head takes the next to be served.
    let mut f = Fifo::new(Config {
        max_priority: 2,
        max_length: Some(2),
        ..Config::default()
    });
    f.apply(enq_p(1, 1, 0));
    f.apply(enq_p(2, 1, 2));
    let out = f.apply(enq_p(3, 1, 1));
    assert!(
        matches!(&out[..], [Effect::DeadLetter { header, reason: DeadLetterReason::MaxLen }] if header.id == 2)
    );
    // Without max_priority, priorities are ignored: first in, first out.
    let mut f = Fifo::new(Config::default());
    f.apply(enq_p(1, 1, 0));
    f.apply(enq_p(2, 1, 7));
    assert_eq!(f.waiting_ids().collect::<Vec<_>>(), [1, 2]);
}

/// Is `key` in `f`'s deduplication window at `now` (past its TTL it is
/// not)?
fn window_has(f: &Fifo, key: &[u8], now: u64) -> bool {
    let ttl = f.config().dedup_ttl;
    f.keys()
        .order()
        .iter()
        .any(|(k, at)| k == key && ttl.is_none_or(|t| now.max(f.now()).saturating_sub(*at) < t))
}

#[test]
fn a_key_seen_within_the_window_is_a_duplicate() {
    let mut f = Fifo::new(Config {
        dedup_window: 2,
        dedup_ttl: Some(100),
        ..Config::default()
    });
    assert!(f.apply(enq_k(1, 0, "a")).is_empty());
    assert_eq!(f.apply(enq_k(2, 10, "a")), [Effect::Duplicate(2)]);
    // No key, or another key: stored.
    assert!(f.apply(enq(3, 1)).is_empty());
    assert!(f.apply(enq_k(4, 20, "b")).is_empty());
    assert_eq!(f.ready(), 3);
    // The window holds two keys: "c" pushes "a" out.
    assert!(f.apply(enq_k(5, 30, "c")).is_empty());
    assert!(f.apply(enq_k(6, 40, "a")).is_empty());
    assert_eq!(f.apply(enq_k(7, 41, "c")), [Effect::Duplicate(7)]);
    // Past the TTL a key is forgotten (c at 30, b gone with the window).
    assert!(f.apply(enq_k(8, 130, "c")).is_empty());
    // A refused enqueue is not remembered: its retry may be stored.
    let mut f = Fifo::new(Config {
        dedup_window: 10,
        max_length: Some(1),
        reject_publish: true,
        ..Config::default()
    });
    f.apply(enq_k(1, 0, "x"));
    assert_eq!(f.apply(enq_k(2, 0, "y")), [Effect::Rejected(2)]);
    f.apply(Command::Purge);
    assert!(f.apply(enq_k(3, 0, "y")).is_empty());
    // Without a window, keys are ignored.
    let mut f = Fifo::new(Config::default());
    f.apply(enq_k(1, 0, "a"));
    assert!(f.apply(enq_k(2, 0, "a")).is_empty());
    assert_eq!(f.ready(), 2);
}
