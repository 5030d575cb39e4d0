//! AMQP 1.0 on the AMQP port, with the real fe2o3-amqp client: the header
//! picks the protocol, SASL PLAIN logs in (a wrong password is refused),
//! connections and sessions open and close cleanly, publishing links
//! deliver to queues that 0-9-1 consumers read, receiving links consume
//! what 0-9-1 publishers sent (with credit and settlement, and requeue on
//! detach). 0-9-1 clients on the same port are unaffected.

use fe2o3_amqp::{Connection, Sender, Session};

use crate::amqp10_raw::{transfers, RawReceiver};
use crate::common::*;

fn url(b: &Broker, user: &str, pass: &str) -> String {
    format!("amqp://{user}:{pass}@127.0.0.1:{}", b.port)
}

#[tokio::test]
async fn sasl_plain_open_begin_end_close() {
    let b = Broker::start().await;
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .expect("AMQP 1.0 connection opens");
    let mut session = within(Session::begin(&mut conn)).await.expect("session begins");
    within(session.end()).await.expect("session ends");
    within(conn.close()).await.expect("connection closes");
    // 0-9-1 still works on the same port.
    let (_c, ch) = b.channel().await;
    declare(&ch, "still-091", Default::default()).await;
}

#[tokio::test]
async fn a_wrong_password_is_refused() {
    let b = Broker::start().await;
    let r = within(Connection::open("warren-test", url(&b, "guest", "nope").as_str())).await;
    assert!(r.is_err(), "login with a wrong password must fail");
}

#[tokio::test]
async fn publishing_over_1_0_reaches_0_9_1_consumers() {
    use fe2o3_amqp::types::messaging::Data;
    use lapin::options::BasicGetOptions;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "from-10", Default::default()).await;
    within(ch.queue_bind(
        "from-10".into(),
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    // Every address form that reaches the queue.
    for (n, addr) in [
        "/queues/from-10",
        "/amq/queue/from-10",
        "/exchanges/amq.direct/k",
        "/queue/from-10",
    ]
    .into_iter()
    .enumerate()
    {
        let mut sender = within(Sender::attach(&mut session, format!("s{n}"), addr))
            .await
            .unwrap();
        for i in 0..10 {
            let body = Data::from(format!("{addr} {i}").into_bytes());
            let outcome = within(sender.send(body)).await.unwrap();
            assert!(outcome.is_accepted(), "{addr}: {outcome:?}");
        }
        within(sender.close()).await.unwrap();
        for i in 0..10 {
            let m = within(ch.basic_get("from-10".into(), BasicGetOptions { no_ack: true }))
                .await
                .unwrap()
                .expect("the message arrived");
            assert_eq!(m.delivery.data, format!("{addr} {i}").as_bytes());
        }
    }
    // Nothing routed: released, as RabbitMQ 4 does.
    let mut sender = within(Sender::attach(
        &mut session,
        "nowhere",
        "/exchanges/amq.direct/nobody",
    ))
    .await
    .unwrap();
    let outcome = within(sender.send("lost")).await;
    assert!(format!("{outcome:?}").contains("Released"), "{outcome:?}");
    let _ = within(sender.close()).await;
    // A queue that does not exist: the attach is refused with not-found.
    let r = within(Sender::attach(&mut session, "nq", "/queues/no-such-queue")).await;
    let e = match r {
        Ok(_) => panic!("attach to a missing queue must be refused"),
        Err(e) => format!("{e:?}"),
    };
    assert!(e.contains("NotFound") || e.contains("not-found"), "{e}");
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

#[tokio::test]
async fn receiving_over_1_0_with_credit_and_settlement() {
    use fe2o3_amqp::Receiver;
    use lapin::options::BasicPublishOptions;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "to-10", Default::default()).await;
    // Published over 0-9-1, received over 1.0.
    for i in 0..50 {
        within(ch.basic_publish(
            "".into(),
            "to-10".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/to-10"))
        .await
        .unwrap();
    for i in 0..25 {
        let d: fe2o3_amqp::link::delivery::Delivery<
            fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>,
        > = within(receiver.recv()).await.unwrap();
        let body = format!("{:?}", d.body());
        assert!(
            body.contains(&format!("m{i}")) || body.contains(&format!("{:?}", format!("m{i}").as_bytes())),
            "{body}"
        );
        within(receiver.accept(&d)).await.unwrap();
    }
    // Detach with the rest unconsumed: nothing is lost.
    within(receiver.close()).await.unwrap();
    let q = declare(&ch, "to-10", Default::default()).await;
    assert_eq!(q.message_count(), 25);
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

#[tokio::test]
async fn unsettled_deliveries_are_requeued_when_the_link_detaches() {
    use fe2o3_amqp::Receiver;
    use lapin::options::BasicPublishOptions;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "requeue-10", Default::default()).await;
    for i in 0..5 {
        within(ch.basic_publish(
            "".into(),
            "requeue-10".into(),
            BasicPublishOptions::default(),
            format!("r{i}").as_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/requeue-10"))
        .await
        .unwrap();
    for _ in 0..3 {
        let _d: fe2o3_amqp::link::delivery::Delivery<
            fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>,
        > = within(receiver.recv()).await.unwrap();
    }
    within(receiver.close()).await.unwrap();
    let q = declare(&ch, "requeue-10", Default::default()).await;
    assert_eq!(q.message_count(), 5, "received but unsettled messages came back");
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// Raw bytes: after a proper login and open, a frame over max-frame-size
/// closes the connection with amqp:connection:framing-error.
#[tokio::test]
async fn an_oversized_frame_is_a_framing_error() {
    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use warren_amqp10::frame::{write_frame, FrameType};
    use warren_amqp10::performative::{Open, Performative};
    use warren_amqp10::sasl::Sasl;
    use warren_amqp10::{Frame, AMQP_HEADER, SASL_HEADER};

    let b = Broker::start().await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", b.port))
        .await
        .unwrap();
    let mut out = BytesMut::new();
    out.extend_from_slice(SASL_HEADER);
    let init = Sasl::plain("guest", "guest").to_value().to_bytes();
    write_frame(&mut out, FrameType::Sasl, 0, &[&init]);
    out.extend_from_slice(AMQP_HEADER);
    let mut open = BytesMut::new();
    Performative::Open(Open {
        container_id: "raw".into(),
        ..Default::default()
    })
    .encode(&mut open);
    write_frame(&mut out, FrameType::Amqp, 0, &[&open]);
    // A frame header announcing 16 MiB.
    out.extend_from_slice(&[0x01, 0, 0, 0, 2, 0, 0, 0]);
    s.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    within(async {
        loop {
            let n = s.read_buf(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            // Skip the two 8-byte protocol headers as they come.
            while buf.len() >= 8 && (&buf[..4] == b"AMQP") {
                let _ = buf.split_to(8);
            }
            while let Ok(Some(f)) = Frame::parse(&mut buf, 1 << 20) {
                frames.push(f);
            }
        }
    })
    .await;
    let last = frames.last().expect("frames from the broker");
    let (p, _) = Performative::decode(&last.body).unwrap();
    let Performative::Close(c) = p else {
        panic!("expected close, got {p:?}")
    };
    assert_eq!(c.error.unwrap().condition, "amqp:connection:framing-error");
}

/// The promise RabbitMQ 3.x broke (seed 000): a receiver granting 2 at a
/// time over a queue of 100,000 persistent messages gets every one, in
/// order, never stalls, and never gets a transfer beyond its credit. Raw
/// frames, so every transfer is counted.
#[tokio::test]
async fn a_receiver_at_credit_two_never_gets_more_and_never_stalls() {
    use lapin::options::BasicPublishOptions;

    const N: u32 = 100_000;
    // 100,000 round trips take a while in a debug build.
    async fn long<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(std::time::Duration::from_secs(180), f)
            .await
            .expect("timed out after 180 s")
    }
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "credit-2", Default::default()).await;
    for i in 0..N {
        ch.basic_publish(
            "".into(),
            "credit-2".into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            lapin::BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap();
    }
    long(async {
        while declare(&ch, "credit-2", Default::default()).await.message_count() < N {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;

    let mut r = RawReceiver::attach(b.port, "/queues/credit-2").await;
    let mut received = 0u32;
    long(async {
        while received < N {
            // Grant 2 from where we are; the next transfers must be exactly
            // two, and nothing else may come until the next grant.
            r.flow(received, 2, false).await;
            let got = r.read(None, |f| transfers(f).len() >= 2).await;
            let got = transfers(&got);
            assert_eq!(
                got.len(),
                2,
                "more transfers than the credit of 2 after {received}"
            );
            for (id, body) in got {
                assert_eq!(
                    u32::from_be_bytes(body[..4].try_into().unwrap()),
                    received,
                    "order"
                );
                received += 1;
                r.accept(id);
            }
            if received.is_multiple_of(1000) {
                // Now and then, wait a little: with no credit left, nothing
                // may arrive.
                let extra = r
                    .read(Some(std::time::Duration::from_millis(30)), |_| false)
                    .await;
                assert!(
                    transfers(&extra).is_empty(),
                    "a transfer without credit after {received}"
                );
            }
        }
    })
    .await;
    assert_eq!(received, N);
}

type AnyBody = fe2o3_amqp::link::delivery::Delivery<
    fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>,
>;

#[tokio::test]
async fn outcomes_reject_dead_letters_release_requeues_accept_removes() {
    use fe2o3_amqp::Receiver;
    use lapin::options::BasicPublishOptions;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "dlq", Default::default()).await;
    declare(
        &ch,
        "outcomes",
        table(&[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    for i in 0..3 {
        within(ch.basic_publish(
            "".into(),
            "outcomes".into(),
            BasicPublishOptions::default(),
            format!("o{i}").as_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/outcomes"))
        .await
        .unwrap();
    let d0: AnyBody = within(receiver.recv()).await.unwrap();
    let d1: AnyBody = within(receiver.recv()).await.unwrap();
    let d2: AnyBody = within(receiver.recv()).await.unwrap();
    within(receiver.reject(&d0, None)).await.unwrap();
    within(receiver.accept(&d2)).await.unwrap();
    within(receiver.release(&d1)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
    let dlq = declare(&ch, "dlq", Default::default()).await;
    assert_eq!(dlq.message_count(), 1, "the rejected one was dead-lettered");
    let q = within(ch.basic_get(
        "outcomes".into(),
        lapin::options::BasicGetOptions { no_ack: true },
    ))
    .await
    .unwrap()
    .expect("the released one is back");
    assert_eq!(q.delivery.data, b"o1");
    assert!(q.delivery.redelivered);
    let dead = within(ch.basic_get("dlq".into(), lapin::options::BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.delivery.data, b"o0");
}

#[tokio::test]
async fn a_10_mb_message_crosses_in_many_frames_both_ways() {
    use fe2o3_amqp::types::messaging::Data;
    use fe2o3_amqp::types::primitives::Binary;
    use fe2o3_amqp::{Receiver, Sender};
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "big", Default::default()).await;
    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let payload: Vec<u8> = (0..10 << 20).map(|i| (i % 253) as u8).collect();
    let mut sender = within(Sender::attach(&mut session, "big-s", "/queues/big"))
        .await
        .unwrap();
    let outcome = within(sender.send(Data(Binary::from(payload.clone()))))
        .await
        .unwrap();
    assert!(outcome.is_accepted());
    within(sender.close()).await.unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "big-r", "/queues/big"))
        .await
        .unwrap();
    let d: fe2o3_amqp::link::delivery::Delivery<fe2o3_amqp::types::messaging::Body<Binary>> =
        within(receiver.recv()).await.unwrap();
    let got = match d.body() {
        fe2o3_amqp::types::messaging::Body::Data(batch) => {
            batch.iter().flat_map(|d| d.0.to_vec()).collect::<Vec<u8>>()
        }
        other => panic!("expected data sections, got {other:?}"),
    };
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "the body arrived intact");
    within(receiver.accept(&d)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// Drain (§2.7.4): with credit left over and fewer messages than credit,
/// the broker sends what there is, then a flow with the delivery-count
/// advanced by the unused credit and credit 0.
#[tokio::test]
async fn drain_sends_what_there_is_then_uses_up_the_credit() {
    use lapin::options::BasicPublishOptions;
    use warren_amqp10::performative::Performative;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "drain", Default::default()).await;
    for i in 0..3u32 {
        within(ch.basic_publish(
            "".into(),
            "drain".into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let mut r = within(RawReceiver::attach(b.port, "/queues/drain")).await;
    r.flow(0, 10, true).await;
    let frames = within(r.read(None, |f| {
        f.iter()
            .any(|(p, _)| matches!(p, Performative::Flow(fl) if fl.handle == Some(0) && fl.drain))
    }))
    .await;
    assert_eq!(transfers(&frames).len(), 3, "the three messages first");
    let flow = frames
        .iter()
        .find_map(|(p, _)| match p {
            Performative::Flow(f) if f.handle == Some(0) => Some(f.clone()),
            _ => None,
        })
        .unwrap();
    // Transfers before the flow, delivery-count 0 + 10, credit 0.
    let flow_at = frames
        .iter()
        .position(|(p, _)| matches!(p, Performative::Flow(f) if f.handle == Some(0)))
        .unwrap();
    let last_transfer = frames
        .iter()
        .rposition(|(p, _)| matches!(p, Performative::Transfer(_)))
        .unwrap();
    assert!(
        last_transfer < flow_at,
        "the drain answer comes after the transfers"
    );
    assert_eq!((flow.delivery_count, flow.link_credit), (Some(10), Some(0)));
    // Nothing more without new credit.
    within(ch.basic_publish(
        "".into(),
        "drain".into(),
        BasicPublishOptions::default(),
        b"late",
        lapin::BasicProperties::default(),
    ))
    .await
    .unwrap();
    let extra = r
        .read(Some(std::time::Duration::from_millis(200)), |_| false)
        .await;
    assert!(transfers(&extra).is_empty());
}

/// Per-link flow control: a link feeding a queue whose consumer has
/// fallen behind stops getting credit; a link to another queue on the
/// same session keeps going; the slow link resumes once its queue drains.
#[tokio::test]
async fn a_slow_queue_slows_only_the_links_that_feed_it() {
    use fe2o3_amqp::Sender;
    use lapin::options::{BasicConsumeOptions, BasicQosOptions};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "slow", Default::default()).await;
    declare(&ch, "fast", Default::default()).await;
    // A consumer that takes one message and never acks it: the queue has a
    // consumer and a growing backlog.
    within(ch.basic_qos(1, BasicQosOptions::default())).await.unwrap();
    let _stuck = within(ch.basic_consume(
        "slow".into(),
        "stuck".into(),
        BasicConsumeOptions::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    // (It will take the first message published and hold it.)

    let mut conn = within(Connection::open(
        "warren-test",
        url(&b, "guest", "guest").as_str(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut to_slow = within(Sender::attach(&mut session, "to-slow", "/queues/slow"))
        .await
        .unwrap();
    let mut to_fast = within(Sender::attach(&mut session, "to-fast", "/queues/fast"))
        .await
        .unwrap();
    let sent = Arc::new(AtomicU32::new(0));
    let counter = sent.clone();
    let slow = tokio::spawn(async move {
        for i in 0..6000u32 {
            to_slow.send(format!("s{i}")).await.unwrap();
            counter.fetch_add(1, Ordering::Relaxed);
        }
        to_slow
    });
    // Wait until the slow link stops making progress.
    let mut last = 0;
    within(async {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let now = sent.load(Ordering::Relaxed);
            if now == last && now > 0 {
                break;
            }
            last = now;
        }
    })
    .await;
    let held = sent.load(Ordering::Relaxed);
    assert!(held < 6000, "the slow link was not slowed ({held} sent)");
    // The other link on the same session is not held back.
    for i in 0..200 {
        assert!(within(to_fast.send(format!("f{i}"))).await.unwrap().is_accepted());
    }
    assert_eq!(
        sent.load(Ordering::Relaxed),
        held,
        "the slow link stayed held meanwhile"
    );
    // The consumer goes away: the queue lets its publishers go.
    within(ch.basic_cancel("stuck".into(), Default::default()))
        .await
        .unwrap();
    let to_slow = tokio::time::timeout(std::time::Duration::from_secs(30), slow)
        .await
        .expect("the slow link resumed and finished")
        .unwrap();
    drop(to_slow);
    let q = declare(&ch, "fast", Default::default()).await;
    assert_eq!(q.message_count(), 200);
}
