//! The classic queue driven directly, with a recording sink: ordering,
//! requeue position, prefetch, and a seeded random walk over publish /
//! consume / ack / requeue / cancel that checks the invariants after every
//! step (no consumer over its prefetch, no message lost or duplicated).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use warren_amqp091::{FieldTable, FieldValue, ShortStr};

use super::*;
use crate::message::Message;

#[derive(Debug, Default)]
struct Sink {
    got: Mutex<Vec<Delivery>>,
    cancelled: Mutex<Vec<ShortStr>>,
    room: Mutex<Option<usize>>,
}

impl DeliverySink for Sink {
    fn has_room(&self) -> bool {
        self.room.lock().is_none_or(|r| self.got.lock().len() < r)
    }
    fn deliver(&self, d: Delivery) {
        self.got.lock().push(d);
    }
    fn cancelled(&self, _channel: u16, tag: ShortStr) {
        self.cancelled.lock().push(tag);
    }
    fn wait_for_room(&self, _q: Weak<Queue>) {}
}

fn queue(args: &[(&str, FieldValue)]) -> Arc<Queue> {
    let mut t = FieldTable::new();
    for (k, v) in args {
        t.insert(k, v.clone());
    }
    Queue::new(
        "q".into(),
        "/",
        false,
        false,
        None,
        t,
        (None, 0),
        &QueueEnv::default(),
    )
    .unwrap()
}

fn msg(n: u32) -> MessageRef {
    let (m, _) = Message::from_publish(
        "".into(),
        "q".into(),
        Bytes::from_static(b"\x00\x00"),
        Bytes::copy_from_slice(&n.to_be_bytes()),
    )
    .unwrap();
    Arc::new(m)
}

fn num(e: &Entry) -> u32 {
    u32::from_be_bytes(e.message.body[..4].try_into().unwrap())
}

fn consumer(id: u64, sink: &Arc<Sink>, prefetch: u32) -> ConsumerSpec {
    ConsumerSpec {
        id,
        connection_id: 1,
        channel: 1,
        tag: format!("c{id}").into(),
        no_ack: false,
        exclusive: false,
        prefetch,
        priority: 0,
        sink: sink.clone(),
        channel_limit: None,
        link_credit: None,
        arguments: Default::default(),
        record_filter: None,
    }
}

#[test]
fn round_robin_and_requeue_to_original_position() {
    let q = queue(&[]);
    let (a, b) = (Arc::new(Sink::default()), Arc::new(Sink::default()));
    q.consume(consumer(1, &a, 1)).unwrap();
    q.consume(consumer(2, &b, 1)).unwrap();
    for n in 0..4 {
        q.publish(msg(n));
    }
    let da: Vec<Delivery> = a.got.lock().drain(..).collect();
    let db: Vec<Delivery> = b.got.lock().drain(..).collect();
    assert_eq!((da.len(), db.len()), (1, 1), "prefetch 1 each");
    assert_eq!(
        num(&da[0].entry) + num(&db[0].entry),
        1,
        "messages 0 and 1 shared"
    );
    assert_eq!(
        q.stats(),
        QueueStats {
            ready: 2,
            unacked: 2,
            consumers: 2,
            ready_bytes: 8,
            ram_bytes: 8,
            ram_messages: 2,
            ..QueueStats::default()
        }
    );
    // Cancel both, requeue what they held: 0 and 1 come back before 2, 3.
    q.cancel(1);
    q.cancel(2);
    q.settle(Some(1), vec![da[0].entry.clone()], Settle::Requeue);
    q.settle(Some(2), vec![db[0].entry.clone()], Settle::Requeue);
    let mut order = vec![];
    while let (super::Answer::Now(Some((e, _))), _) = q.get(true) {
        order.push((num(&e), e.redelivered));
    }
    assert_eq!(order, vec![(0, true), (1, true), (2, false), (3, false)]);
}

#[test]
fn full_sink_holds_delivery_back() {
    let q = queue(&[]);
    let s = Arc::new(Sink::default());
    *s.room.lock() = Some(2);
    let mut spec = consumer(1, &s, 0);
    spec.no_ack = true;
    q.consume(spec).unwrap();
    for n in 0..5 {
        q.publish(msg(n));
    }
    assert_eq!(s.got.lock().len(), 2);
    assert_eq!(q.stats().ready, 3);
    s.got.lock().clear();
    q.pump();
    assert_eq!(s.got.lock().len(), 2);
}

#[test]
fn flow_is_asked_only_with_consumers_and_a_backlog() {
    let q = queue(&[]);
    let (_, e) = q.publish(msg(0));
    assert!(!e.flow, "no consumers: queues may fill freely");
    let s = Arc::new(Sink::default());
    q.consume(consumer(1, &s, 1)).unwrap();
    let mut flowed = false;
    for n in 0..3000 {
        flowed |= q.publish(msg(n)).1.flow;
    }
    assert!(flowed);
}

#[test]
fn deleting_returns_consumers_to_cancel() {
    let q = queue(&[]);
    let s = Arc::new(Sink::default());
    q.consume(consumer(7, &s, 0)).unwrap();
    let (gone, _) = q.delete_contents();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].id, 7);
}

/// A seeded random walk; after each step no consumer holds more than its
/// prefetch, and every published message is exactly once ready, unacked
/// (held by our model), or acked.
#[test]
fn random_walk_keeps_prefetch_and_conservation() {
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let q = queue(&[("x-max-priority", FieldValue::U8(3))]);
        let sinks: Vec<Arc<Sink>> = (0..3).map(|_| Arc::new(Sink::default())).collect();
        let prefetch = [1u32, 3, 5];
        // Each consume gets a fresh id (as the server gives): deliveries a
        // cancelled consumer still holds do not count against its successor.
        let mut current: [Option<u64>; 3] = [None; 3];
        let mut next_id = 0u64;
        let mut held: HashMap<u64, Vec<Entry>> = HashMap::new();
        let (mut published, mut acked) = (0u32, 0u32);
        for _ in 0..2000 {
            match rng.gen_range(0..10) {
                0..=3 => {
                    q.publish(msg(published));
                    published += 1;
                }
                4 => {
                    let c = rng.gen_range(0..3);
                    if current[c].is_none() {
                        next_id += 1;
                        let mut spec = consumer(next_id, &sinks[c], prefetch[c]);
                        spec.tag = format!("c{c}").into();
                        q.consume(spec).unwrap();
                        current[c] = Some(next_id);
                    }
                }
                5 => {
                    let c = rng.gen_range(0..3);
                    if let Some(id) = current[c].take() {
                        q.cancel(id);
                    }
                }
                _ => {
                    let ids: Vec<u64> = held
                        .iter()
                        .filter(|(_, h)| !h.is_empty())
                        .map(|(id, _)| *id)
                        .collect();
                    if !ids.is_empty() {
                        let id = ids[rng.gen_range(0..ids.len())];
                        let h = held.get_mut(&id).unwrap();
                        let e = h.remove(rng.gen_range(0..h.len()));
                        if rng.gen_bool(0.7) {
                            q.settle(Some(id), vec![e], Settle::Ack);
                            acked += 1;
                        } else {
                            q.settle(Some(id), vec![e], Settle::Requeue);
                        }
                    }
                }
            }
            for (c, s) in sinks.iter().enumerate() {
                for d in s.got.lock().drain(..) {
                    assert_eq!(
                        Some(d.consumer_id),
                        current[c],
                        "only the current consumer gets messages"
                    );
                    held.entry(d.consumer_id).or_default().push(d.entry);
                }
                if let Some(id) = current[c] {
                    let n = held.get(&id).map_or(0, |h| h.len()) as u32;
                    assert!(
                        n <= prefetch[c],
                        "seed {seed}: consumer {c} holds {n} > {}",
                        prefetch[c]
                    );
                }
            }
            let st = q.stats();
            let held_n: u64 = held.values().map(|h| h.len() as u64).sum();
            assert_eq!(st.unacked, held_n, "seed {seed}");
            assert_eq!(
                st.ready + held_n + acked as u64,
                published as u64,
                "seed {seed}: conservation"
            );
        }
    }
}

#[test]
fn link_credit_is_never_exceeded_and_drain_uses_it_up() {
    let q = queue(&[]);
    let sink = Arc::new(Sink::default());
    let credit = Arc::new(LinkCredit::new(0));
    let mut spec = consumer(1, &sink, 0);
    spec.no_ack = true;
    spec.link_credit = Some(credit.clone());
    q.consume(spec).unwrap();
    for n in 0..10 {
        q.publish(msg(n));
    }
    assert_eq!(sink.got.lock().len(), 0, "no credit, no delivery");
    credit.flow(Some(0), 3);
    q.pump();
    assert_eq!(sink.got.lock().len(), 3);
    assert_eq!(credit.get(), (3, 0));
    // The receiver saw one (its delivery-count 1) and grants 4: the two in
    // flight count, so only 2 more come.
    credit.flow(Some(1), 4);
    q.pump();
    assert_eq!(sink.got.lock().len(), 5);
    assert_eq!(credit.get(), (5, 0));
    // Drain with credit left over and nothing to send.
    q.purge();
    credit.flow(Some(5), 7);
    q.pump();
    assert_eq!(credit.drain(), 12);
    assert_eq!(credit.get(), (12, 0));
    // Serial arithmetic across the wrap.
    let c = LinkCredit::new(u32::MAX - 1);
    assert_eq!(c.flow(Some(u32::MAX - 1), 5), 5);
}
