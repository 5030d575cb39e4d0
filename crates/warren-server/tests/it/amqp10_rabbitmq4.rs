//! What RabbitMQ 4's AMQP 1.0 clients look for in the broker's answers
//! (issue 32): the version every protocol and the API announce (one,
//! the same), rcv-settle-mode second echoed on a pre-settled receiving
//! link and refused otherwise, and a connection closed through the API
//! ending with RabbitMQ's "Connection forced" close.

use std::time::Duration;

use reqwest::Method;
use warren_amqp10::messaging;
use warren_amqp10::performative::{Attach, Performative, Role};

use crate::amqp10_raw::RawReceiver;
use crate::common::*;

/// A receiving link's attach with the given settle modes.
fn receiving(snd: u8, rcv: u8) -> Attach {
    Attach {
        name: "r".into(),
        handle: 0,
        role: Role::Receiver,
        snd_settle_mode: Some(snd),
        rcv_settle_mode: Some(rcv),
        source: Some(messaging::source("/queues/q")),
        target: Some(messaging::target("raw")),
        ..Default::default()
    }
}

async fn frames_until(r: &mut RawReceiver, f: impl Fn(&Performative) -> bool) -> Vec<Performative> {
    let got = r
        .read(Some(Duration::from_secs(5)), |got| got.iter().any(|(p, _)| f(p)))
        .await;
    got.into_iter().map(|(p, _)| p).collect()
}

#[tokio::test]
async fn every_protocol_and_the_api_announce_one_rabbitmq_version() {
    let b = Broker::start().await;
    // AMQP 1.0: the open's properties.
    let mut r = RawReceiver::attach(b.port, "/queues/none").await;
    let got = frames_until(&mut r, |p| matches!(p, Performative::Open(_))).await;
    let Some(Performative::Open(open)) = got.into_iter().find(|p| matches!(p, Performative::Open(_))) else {
        panic!("no open");
    };
    let props = format!("{:?}", open.properties);
    // AMQP 0-9-1: connection.start's server properties.
    let args = amqprs::connection::OpenConnectionArguments::new("127.0.0.1", b.port, "guest", "guest");
    let conn = within(amqprs::connection::Connection::open(&args)).await.unwrap();
    let version_091 = conn.server_properties().version().to_string();
    // Streams: the peer properties.
    let client = within(rabbitmq_stream_client::Client::connect(
        rabbitmq_stream_client::ClientOptions::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    ))
    .await
    .unwrap();
    let stream_props = client.server_properties().await;
    // The API.
    let (_, o) = b.http(Method::GET, "/api/overview", None).await;
    let api = o["rabbitmq_version"].as_str().unwrap().to_string();
    assert_eq!(o["management_version"], api.as_str());
    assert!(api.starts_with("4."), "{api}");
    assert_eq!(version_091, api);
    assert_eq!(stream_props.get("version"), Some(&api));
    assert!(props.contains(&format!("\"{api}\"")), "{props}");
}

#[tokio::test]
async fn rcv_settle_mode_second_is_echoed_when_settled_and_refused_otherwise() {
    let b = Broker::start().await;
    let ch = b.channel().await.1;
    declare(&ch, "q", lapin::types::FieldTable::default()).await;
    // Pre-settled deliveries: second is echoed.
    let mut r = RawReceiver::attach_with(b.port, receiving(1, 1)).await;
    let got = frames_until(&mut r, |p| matches!(p, Performative::Attach(_))).await;
    let attach = got.iter().find_map(|p| match p {
        Performative::Attach(a) => Some(a.clone()),
        _ => None,
    });
    let attach = attach.expect("an attach");
    assert_eq!(
        (attach.snd_settle_mode, attach.rcv_settle_mode),
        (Some(1), Some(1))
    );
    assert!(attach.source.is_some());
    // Unsettled with second: refused, as RabbitMQ 4 refuses it.
    let mut r = RawReceiver::attach_with(b.port, receiving(0, 1)).await;
    let got = frames_until(&mut r, |p| matches!(p, Performative::Detach(_))).await;
    let detach = got.iter().find_map(|p| match p {
        Performative::Detach(d) => Some(d.clone()),
        _ => None,
    });
    let e = detach.and_then(|d| d.error).expect("a detach with an error");
    assert_eq!(e.condition, "amqp:not-implemented");
    assert_eq!(
        e.description.as_deref(),
        Some("rcv-settle-mode second not supported")
    );
}

#[tokio::test]
async fn a_connection_closed_through_the_api_hears_connection_forced() {
    let b = Broker::start().await;
    let mut r = RawReceiver::attach(b.port, "/queues/none").await;
    frames_until(&mut r, |p| matches!(p, Performative::Begin(_))).await;
    let mut name = None;
    for _ in 0..100 {
        let (_, list) = b.http(Method::GET, "/api/connections", None).await;
        name = list
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["protocol"] == "AMQP 1.0")
            .and_then(|c| c["name"].as_str().map(str::to_string));
        if name.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let name = name.expect("the connection listed");
    let path = format!("/api/connections/{}", crate::http_connections::urlencode(&name));
    b.http(Method::DELETE, &path, None).await;
    let got = frames_until(&mut r, |p| matches!(p, Performative::Close(_))).await;
    let close = got.iter().find_map(|p| match p {
        Performative::Close(c) => Some(c.clone()),
        _ => None,
    });
    let e = close.and_then(|c| c.error).expect("a close with an error");
    assert_eq!(e.condition, "amqp:internal-error");
    assert_eq!(
        e.description.as_deref(),
        Some("Connection forced: \"Closed via management plugin\"")
    );
}

/// A link whose target queue is deleted is closed with
/// amqp:resource-deleted when it next publishes (RabbitMQ 4 closes it),
/// instead of its messages being released for ever; one whose exchange
/// is deleted, with amqp:not-found.
#[tokio::test]
async fn publishing_to_a_deleted_queue_or_exchange_closes_the_link() {
    use fe2o3_amqp::link::SendError;
    use fe2o3_amqp::types::messaging::Data;
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "doomed", lapin::types::FieldTable::default()).await;
    within(ch.exchange_declare(
        "doomed-x".into(),
        lapin::ExchangeKind::Fanout,
        Default::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(fe2o3_amqp::Connection::open("del", url.as_str()))
        .await
        .unwrap();
    let mut session = within(fe2o3_amqp::Session::begin(&mut conn)).await.unwrap();
    let mut to_queue = within(fe2o3_amqp::Sender::attach(&mut session, "q", "/queues/doomed"))
        .await
        .unwrap();
    let mut to_exchange = within(fe2o3_amqp::Sender::attach(
        &mut session,
        "x",
        "/exchanges/doomed-x",
    ))
    .await
    .unwrap();
    let outcome = within(to_queue.send(Data::from(b"one".to_vec()))).await.unwrap();
    assert!(outcome.is_accepted());
    within(ch.queue_delete("doomed".into(), Default::default()))
        .await
        .unwrap();
    within(ch.exchange_delete("doomed-x".into(), Default::default()))
        .await
        .unwrap();
    let condition = |r: Result<fe2o3_amqp::types::messaging::Outcome, SendError>| match r {
        Err(SendError::LinkStateError(e)) => format!("{e:?}"),
        Err(e) => format!("{e:?}"),
        Ok(o) => panic!("the link stays open: {o:?}"),
    };
    let e = condition(within(to_queue.send(Data::from(b"two".to_vec()))).await);
    assert!(
        e.contains("resource-deleted") || e.contains("ResourceDeleted"),
        "{e}"
    );
    let e = condition(within(to_exchange.send(Data::from(b"two".to_vec()))).await);
    assert!(e.contains("not-found") || e.contains("NotFound"), "{e}");
}

/// SASL ANONYMOUS is offered by default, as RabbitMQ 4 offers it (its
/// AMQP 1.0 clients log in so when given no credentials): from loopback
/// it logs in as the default user, who may then work in vhost `/`.
#[tokio::test]
async fn sasl_anonymous_logs_in_as_the_default_user_by_default() {
    use fe2o3_amqp::sasl_profile::SaslProfile;
    let b = Broker::start().await;
    let mut conn = within(
        fe2o3_amqp::Connection::builder()
            .container_id("anonymous")
            .sasl_profile(SaslProfile::Anonymous)
            .open(format!("amqp://127.0.0.1:{}", b.port).as_str()),
    )
    .await
    .expect("an ANONYMOUS login");
    let mut session = within(fe2o3_amqp::Session::begin(&mut conn)).await.unwrap();
    let mut node = crate::amqp10_management::Node::on_session(&mut session).await;
    let decl =
        crate::amqp10_management::map(&[("durable", fe2o3_amqp::types::primitives::Value::Bool(true))]);
    assert_eq!(node.request("PUT", "/queues/anon-q", decl).await.0, "201");
    let (_, list) = b.http(Method::GET, "/api/connections", None).await;
    let c = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["protocol"] == "AMQP 1.0")
        .cloned()
        .unwrap();
    assert_eq!(
        (c["user"].as_str(), c["auth_mechanism"].as_str()),
        (Some("guest"), Some("ANONYMOUS"))
    );
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
