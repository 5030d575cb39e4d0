//! AMQP 1.0 errors at the scope the spec gives them (§2.8.15-2.8.17), and
//! resource alarms, in raw frames so every performative is seen: a
//! session error ends that session only, a handle beyond handle-max is a
//! framing error, an alarm closes the incoming window while consuming
//! goes on, and a sender that ignores it is disconnected.

use std::time::Duration;

use bytes::Bytes;
use lapin::options::BasicPublishOptions;
use warren_amqp10::messaging;
use warren_amqp10::performative::{Attach, Begin, Performative, Role};

use crate::amqp10_raw::{transfers, RawReceiver};
use crate::common::*;

fn error_of(frames: &[(Performative, Bytes)]) -> Option<(&'static str, String)> {
    frames.iter().find_map(|(p, _)| match p {
        Performative::End(e) => e.error.as_ref().map(|e| ("end", e.condition.clone())),
        Performative::Close(c) => c.error.as_ref().map(|e| ("close", e.condition.clone())),
        Performative::Detach(d) => d.error.as_ref().map(|e| ("detach", e.condition.clone())),
        _ => None,
    })
}

async fn publish(ch: &lapin::Channel, queue: &str, n: usize) {
    for i in 0..n {
        within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
}

fn sender_attach(handle: u32, address: &str) -> Performative {
    Performative::Attach(Attach {
        name: format!("sender-{handle}"),
        handle,
        role: Role::Sender,
        snd_settle_mode: Some(0),
        rcv_settle_mode: Some(0),
        source: Some(messaging::source("raw")),
        target: Some(messaging::target(address)),
        initial_delivery_count: Some(0),
        ..Default::default()
    })
}

#[tokio::test]
async fn a_session_error_ends_that_session_and_the_others_go_on() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "sess", Default::default()).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/sess")).await;
    // A second session, and a transfer on a handle nobody attached.
    r.send_on(
        1,
        Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 1000,
            outgoing_window: 1000,
            ..Default::default()
        }),
    );
    r.transfer(1, 7, 0, b"stray");
    r.flush().await;
    let frames = within(r.read(None, |f| error_of(f).is_some())).await;
    assert_eq!(
        error_of(&frames),
        Some(("end", "amqp:session:unattached-handle".to_string()))
    );
    // Session 0 and its link are untouched.
    publish(&ch, "sess", 1).await;
    r.flow(0, 10, false).await;
    let frames = within(r.read(None, |f| !transfers(f).is_empty())).await;
    assert_eq!(&transfers(&frames)[0].1[..], b"m0");
}

#[tokio::test]
async fn reusing_an_attached_handle_ends_the_session() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "reuse", Default::default()).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/reuse")).await;
    r.send_on(0, sender_attach(0, "/queues/reuse"));
    r.flush().await;
    let frames = within(r.read(None, |f| error_of(f).is_some())).await;
    assert_eq!(
        error_of(&frames),
        Some(("end", "amqp:session:handle-in-use".to_string()))
    );
}

/// A peer may close the connection without answering the end of a session
/// we ended with an error; the close still has its answer (it was once
/// taken for one of the ending session's frames and dropped, and the
/// peer waited for ever).
#[tokio::test]
async fn a_close_is_answered_while_a_session_we_ended_awaits_its_end() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "unanswered", Default::default()).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/unanswered")).await;
    r.send_on(0, sender_attach(0, "/queues/unanswered"));
    r.flush().await;
    let frames = within(r.read(None, |f| error_of(f).is_some())).await;
    assert_eq!(
        error_of(&frames),
        Some(("end", "amqp:session:handle-in-use".to_string()))
    );
    r.send_on(0, Performative::Close(Default::default()));
    r.flush().await;
    let frames = within(r.read(None, |f| {
        f.iter().any(|(p, _)| matches!(p, Performative::Close(_)))
    }))
    .await;
    assert!(frames
        .iter()
        .any(|(p, _)| matches!(p, Performative::Close(c) if c.error.is_none())));
}

#[tokio::test]
async fn a_handle_beyond_handle_max_is_a_framing_error() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "hmax", Default::default()).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/hmax")).await;
    r.send_on(0, sender_attach(1_000_000, "/queues/hmax"));
    r.flush().await;
    let frames = within(r.read(None, |f| error_of(f).is_some())).await;
    assert_eq!(
        error_of(&frames),
        Some(("close", "amqp:connection:framing-error".to_string()))
    );
    // The broker is fine: another connection works.
    declare(&ch, "hmax-after", Default::default()).await;
}

/// Seed 000, points 22-23: an alarm closes each session's incoming window
/// (a flow with incoming-window 0), consumers on the same connection go
/// on, and a sender that keeps sending past what it was granted is
/// disconnected.
#[tokio::test]
async fn an_alarm_closes_the_window_consumers_go_on_and_a_sender_that_ignores_it_is_cut_off() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "alarm-out", Default::default()).await;
    declare(&ch, "alarm-in", Default::default()).await;
    publish(&ch, "alarm-out", 5).await;

    let mut r = within(RawReceiver::attach(b.port, "/queues/alarm-out")).await;
    r.send_on(0, sender_attach(1, "/queues/alarm-in"));
    r.flush().await;
    let credit_of = |f: &[(Performative, Bytes)]| {
        f.iter().find_map(|(p, _)| match p {
            Performative::Flow(f) if f.handle == Some(1) => f.link_credit,
            _ => None,
        })
    };
    let frames = within(r.read(None, |f| credit_of(f).is_some())).await;
    let credit = credit_of(&frames).unwrap();
    assert!(credit > 0);

    // The memory alarm goes off (5 messages are more than 1 byte).
    let alarms = &b.running.as_ref().unwrap().ctx.broker.alarms;
    alarms.set_memory_limit(1);
    let closed = |f: &[(Performative, Bytes)]| {
        f.iter()
            .any(|(p, _)| matches!(p, Performative::Flow(f) if f.incoming_window == 0))
    };
    within(r.read(None, closed)).await;

    // Consuming goes on under the alarm.
    r.flow(0, 10, false).await;
    let frames = within(r.read(None, |f| transfers(f).len() >= 5)).await;
    assert_eq!(transfers(&frames).len(), 5);

    // A sender that ignores the closed window: what it had been granted
    // is still taken (it may have been in flight), one more is too many.
    for id in 0..=credit {
        r.transfer(0, 1, id, b"ignoring the alarm");
    }
    r.flush().await;
    let frames = within(r.read(Some(Duration::from_secs(5)), |f| error_of(f).is_some())).await;
    assert_eq!(
        error_of(&frames),
        Some(("close", "amqp:link:transfer-limit-exceeded".to_string()))
    );
    alarms.set_memory_limit(1 << 40);
    let q = declare(&ch, "alarm-in", Default::default()).await;
    assert_eq!(q.message_count(), credit, "the granted ones were taken");
}

/// A well-behaved sender (fe2o3-amqp) stops at the closed window and goes
/// on by itself when the alarm clears.
#[tokio::test]
async fn a_sender_waits_out_an_alarm_and_resumes() {
    use fe2o3_amqp::types::messaging::Data;
    use fe2o3_amqp::{Connection, Sender, Session};
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "wait-in", Default::default()).await;
    declare(&ch, "ballast", Default::default()).await;
    publish(&ch, "ballast", 1).await;
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("warren-test", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/wait-in"))
        .await
        .unwrap();
    let first = within(sender.send(Data::from(b"before".to_vec()))).await.unwrap();
    assert!(first.is_accepted());

    let alarms = &b.running.as_ref().unwrap().ctx.broker.alarms;
    alarms.set_memory_limit(1);
    // The connection notices within its 500 ms tick.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let blocked = tokio::spawn(async move {
        let o = sender.send(Data::from(b"during".to_vec())).await;
        (sender, o)
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let q = declare(&ch, "wait-in", Default::default()).await;
    assert_eq!(q.message_count(), 1, "nothing gets in while the window is closed");
    assert!(!blocked.is_finished());
    alarms.set_memory_limit(1 << 40);
    let (sender, o) = within(blocked).await.unwrap();
    assert!(o.unwrap().is_accepted());
    let q = declare(&ch, "wait-in", Default::default()).await;
    assert_eq!(q.message_count(), 2);
    let _ = within(sender.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// RFC 1982 serial numbers across the wrap (§2.8.9-2.8.10): a sending
/// link whose delivery-count and delivery-ids pass 2^32 - 1 is credited
/// and settled as if nothing happened, the settlements merged into one
/// disposition whose range wraps.
#[tokio::test]
async fn delivery_ids_and_counts_wrap_as_serial_numbers() {
    use warren_amqp10::performative::{Disposition, Flow};
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "wrap-out", Default::default()).await;
    declare(&ch, "wrap-in", Default::default()).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/wrap-out")).await;
    let start = u32::MAX - 1;
    r.send_on(
        0,
        Performative::Attach(Attach {
            initial_delivery_count: Some(start),
            ..match sender_attach(1, "/queues/wrap-in") {
                Performative::Attach(a) => a,
                _ => unreachable!(),
            }
        }),
    );
    r.flush().await;
    let granted = |f: &[(Performative, Bytes)]| {
        f.iter().find_map(|(p, _)| match p {
            Performative::Flow(Flow {
                handle: Some(1),
                delivery_count,
                link_credit,
                ..
            }) => Some((*delivery_count, *link_credit)),
            _ => None,
        })
    };
    let frames = within(r.read(None, |f| granted(f).is_some())).await;
    assert_eq!(
        granted(&frames).unwrap().0,
        Some(start),
        "credit counts from the sender's delivery-count"
    );
    // Five transfers: delivery-ids MAX-1, MAX, 0, 1, 2.
    for k in 0..5u32 {
        r.transfer(0, 1, start.wrapping_add(k), format!("w{k}").as_bytes());
    }
    r.flush().await;
    let settled = |f: &[(Performative, Bytes)]| {
        f.iter()
            .filter_map(|(p, _)| match p {
                Performative::Disposition(Disposition {
                    first,
                    last,
                    settled: true,
                    ..
                }) => Some((*first, last.unwrap_or(*first))),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let frames = within(r.read(None, |f| settled(f).iter().any(|&(_, l)| l == 2))).await;
    assert_eq!(
        settled(&frames),
        vec![(start, 2)],
        "one disposition over the wrap"
    );
    let q = declare(&ch, "wrap-in", Default::default()).await;
    assert_eq!(q.message_count(), 5);
}

/// Our flows tell the truth about our side of the session: after n
/// transfers, next-outgoing-id is n (§2.5.6), on every flow.
#[tokio::test]
async fn flows_carry_our_next_outgoing_id() {
    use warren_amqp10::performative::Flow;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "ids-out", Default::default()).await;
    declare(&ch, "ids-in", Default::default()).await;
    publish(&ch, "ids-out", 3).await;
    let mut r = within(RawReceiver::attach(b.port, "/queues/ids-out")).await;
    r.flow(0, 3, false).await;
    within(r.read(None, |f| transfers(f).len() >= 3)).await;
    // A sending link now: its credit comes in a session flow.
    r.send_on(0, sender_attach(1, "/queues/ids-in"));
    r.flush().await;
    let frames = within(r.read(None, |f| {
        f.iter()
            .any(|(p, _)| matches!(p, Performative::Flow(Flow { handle: Some(1), .. })))
    }))
    .await;
    let next_out = frames.iter().find_map(|(p, _)| match p {
        Performative::Flow(f) if f.handle == Some(1) => Some(f.next_outgoing_id),
        _ => None,
    });
    assert_eq!(next_out, Some(3));
}
