//! Direct reply-to over AMQP 1.0 (RabbitMQ 4.2; issue 32, item 10), with
//! fe2o3-amqp and lapin: a requester's dynamic receiving link gets an
//! `amq.rabbitmq.reply-to` address; a responder's link to it, a 1.0
//! message whose `to` names it, and a 0-9-1 publish to it all reach the
//! requester; a dynamic source that is not a volatile queue is refused,
//! and once the requester goes its address is not found.

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Body, Data, Message, Properties, Source, TerminusExpiryPolicy};
use fe2o3_amqp::types::primitives::{Array, Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use lapin::options::BasicPublishOptions;

use crate::common::*;

fn dynamic_source(volatile: bool) -> Source {
    let mut s = Source::builder()
        .dynamic(true)
        .expiry_policy(TerminusExpiryPolicy::LinkDetach);
    if volatile {
        s = s.capabilities(Array(vec![Symbol::from("rabbitmq:volatile-queue")]));
    }
    s.build()
}

fn text(d: &fe2o3_amqp::link::delivery::Delivery<Body<Value>>) -> String {
    match d.body() {
        Body::Data(batch) => String::from_utf8_lossy(&batch[0].0).into_owned(),
        other => format!("{other:?}"),
    }
}

/// The next reply's text, past any late copy of the first route's
/// resent reply.
async fn next_reply(requester: &mut Receiver) -> String {
    loop {
        let d = within(requester.recv::<Body<Value>>()).await.unwrap();
        let t = text(&d);
        if !t.starts_with("by link") {
            return t;
        }
    }
}

#[tokio::test]
async fn replies_reach_a_requesters_dynamic_link_by_every_route() {
    let b = Broker::start().await;
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut rconn = within(Connection::open("requester", url.as_str())).await.unwrap();
    let mut rsession = within(Session::begin(&mut rconn)).await.unwrap();
    let mut requester = within(
        Receiver::builder()
            .name("replies")
            .source(dynamic_source(true))
            .sender_settle_mode(SenderSettleMode::Settled)
            .credit_mode(CreditMode::Auto(10))
            .attach(&mut rsession),
    )
    .await
    .unwrap();
    let address = requester
        .source()
        .as_ref()
        .and_then(|s| s.address.clone())
        .expect("the dynamic source's address");
    assert!(address.starts_with("/queues/amq.rabbitmq.reply-to."), "{address}");
    let name = address.trim_start_matches("/queues/").to_string();

    // A responder's link to the address.
    let mut conn = within(Connection::open("responder", url.as_str())).await.unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut to_it = within(Sender::attach(&mut session, "to-reply", address.as_str()))
        .await
        .unwrap();
    // A reply finding the link without credit is dropped (at most once,
    // as RabbitMQ's volatile queue): the requester's first flow may still
    // be on its way, so the first reply is sent again until one arrives.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut attempt = 0;
    let d = loop {
        attempt += 1;
        assert!(
            within(to_it.send(Data::from(format!("by link {attempt}").into_bytes())))
                .await
                .unwrap()
                .is_accepted()
        );
        let wait = std::time::Duration::from_millis(200);
        if let Ok(d) = tokio::time::timeout(wait, requester.recv::<Body<Value>>()).await {
            break d.unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no reply by link within 10 s"
        );
    };
    assert!(text(&d).starts_with("by link"), "{}", text(&d));
    // The anonymous terminus, `to` naming it.
    let mut anon = within(
        Sender::builder()
            .name("anon")
            .target(fe2o3_amqp::types::messaging::Target::builder().build())
            .attach(&mut session),
    )
    .await
    .unwrap();
    let m = Message::builder()
        .properties(Properties::builder().to(address.clone()).build())
        .data(b"by to".to_vec())
        .build();
    assert!(within(anon.send(m)).await.unwrap().is_accepted());
    assert_eq!(next_reply(&mut requester).await, "by to");
    // AMQP 0-9-1, to the default exchange with the name as routing key.
    let (_c, ch) = b.channel().await;
    within(ch.basic_publish(
        "".into(),
        name.as_str().into(),
        BasicPublishOptions::default(),
        b"by 0-9-1",
        lapin::BasicProperties::default(),
    ))
    .await
    .unwrap();
    assert_eq!(next_reply(&mut requester).await, "by 0-9-1");

    // Once the requester's link is gone, its address is not found.
    within(requester.close()).await.unwrap();
    let gone = within(Sender::attach(&mut session, "too-late", address.as_str())).await;
    assert!(
        format!("{gone:?}").contains("not-found") || format!("{gone:?}").contains("NotFound"),
        "{gone:?}"
    );
    let _ = within(rsession.end()).await;
    let _ = within(rconn.close()).await;
}

#[tokio::test]
async fn a_dynamic_source_that_is_not_a_volatile_queue_is_refused() {
    let b = Broker::start().await;
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("requester", url.as_str())).await.unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let refused = within(
        Receiver::builder()
            .name("plain-dynamic")
            .source(dynamic_source(false))
            .sender_settle_mode(SenderSettleMode::Settled)
            .attach(&mut session),
    )
    .await;
    let e = format!("{refused:?}");
    assert!(refused.is_err(), "{e}");
}
