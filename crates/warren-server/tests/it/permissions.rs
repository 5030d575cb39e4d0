//! Users and permissions enforced by every protocol, as RabbitMQ's
//! access-control guide describes: a user made and granted over the HTTP
//! API with configure/write/read patterns of `^own\.`, then refused (and
//! allowed) by 0-9-1 (lapin), AMQP 1.0 (fe2o3-amqp), the stream protocol
//! (rabbitmq-stream-client) and the HTTP API itself. Refusals leave the
//! connection usable (0-9-1 closes only the channel) and the broker up.

use std::collections::HashMap;

use lapin::options::{BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, QueueBindOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rabbitmq_stream_client::types::{OffsetSpecification, ResponseCode};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::*;

const USER: &str = "limited";
const PASS: &str = "s3cret";

/// Create `limited` with `^own\.` for configure, write and read in "/",
/// and a queue `shared` and stream `shared-stream` it may not touch.
async fn setup(b: &Broker) {
    let (st, _) = b
        .http(
            Method::PUT,
            "/api/users/limited",
            Some(json!({"password": PASS, "tags": "management"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let (st, _) = b
        .http(
            Method::PUT,
            "/api/permissions/%2F/limited",
            Some(json!({"configure": "^own\\.", "write": "^own\\.", "read": "^own\\."})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let (st, p) = b.http(Method::GET, "/api/permissions/%2F/limited", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(p["write"], "^own\\.");
    let (_c, ch) = b.channel().await;
    declare(&ch, "shared", Default::default()).await;
}

async fn limited_lapin(b: &Broker) -> Connection {
    let uri = format!("amqp://{USER}:{PASS}@127.0.0.1:{}/%2F", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect("limited user logs in")
}

/// The 403 a refused 0-9-1 operation closes its channel with.
fn refused(r: Result<impl std::fmt::Debug, lapin::Error>, what: &str) {
    let e = r.expect_err(what);
    let (code, text) = amqp_error(&e);
    assert_eq!(code, 403, "{what}: {text}");
    assert!(text.starts_with("ACCESS_REFUSED - "), "{what}: {text}");
    assert!(text.contains("refused for user 'limited'"), "{what}: {text}");
}

#[tokio::test]
async fn amqp_0_9_1_checks_configure_write_and_read() {
    let b = Broker::start().await;
    setup(&b).await;
    let conn = limited_lapin(&b).await;

    // configure: own.* may be declared, anything else not.
    let ch = within(conn.create_channel()).await.unwrap();
    declare(&ch, "own.q", Default::default()).await;
    refused(
        within(ch.queue_declare("other.q".into(), Default::default(), Default::default())).await,
        "declaring other.q",
    );
    let ch = within(conn.create_channel()).await.unwrap();
    refused(
        within(ch.queue_declare(
            "own.dl".into(),
            Default::default(),
            table(&[("x-dead-letter-exchange", s("amq.direct"))]),
        ))
        .await,
        "declaring own.dl dead-lettering into amq.direct",
    );
    let ch = within(conn.create_channel()).await.unwrap();
    let e = within(ch.queue_delete("shared".into(), Default::default()))
        .await
        .expect_err("deleting shared");
    assert_eq!(amqp_error(&e).0, 403);

    // write: publishing to amq.direct (not own.*) is refused; to
    // own.* exchanges it is not (the default exchange is amq.default).
    let ch = within(conn.create_channel()).await.unwrap();
    within(ch.confirm_select(Default::default())).await.unwrap();
    let r = within(async {
        ch.basic_publish(
            "amq.direct".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await?
        .await
    })
    .await;
    refused(r, "publishing to amq.direct");

    // bind: write on the queue (ok) and read on the exchange (refused).
    let ch = within(conn.create_channel()).await.unwrap();
    refused(
        within(ch.queue_bind(
            "own.q".into(),
            "amq.fanout".into(),
            "".into(),
            QueueBindOptions::default(),
            Default::default(),
        ))
        .await,
        "binding to amq.fanout",
    );

    // read: consuming or getting from shared is refused; from own.q not.
    let ch = within(conn.create_channel()).await.unwrap();
    refused(
        within(ch.basic_get("shared".into(), BasicGetOptions::default())).await,
        "basic.get from shared",
    );
    let ch = within(conn.create_channel()).await.unwrap();
    refused(
        within(ch.basic_consume(
            "shared".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            Default::default(),
        ))
        .await,
        "consuming from shared",
    );
    let ch = within(conn.create_channel()).await.unwrap();
    within(ch.basic_consume(
        "own.q".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        Default::default(),
    ))
    .await
    .expect("consuming from own.q");

    // The connection lived through every refusal, and shared is intact.
    assert!(conn.status().connected());
    let (_c, admin) = b.channel().await;
    within(admin.queue_declare(
        "shared".into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    ))
    .await
    .expect("shared still exists");
}

#[tokio::test]
async fn a_vhost_without_permissions_is_refused_at_open() {
    let b = Broker::start().await;
    setup(&b).await;
    let (st, _) = b.http(Method::PUT, "/api/vhosts/private", None).await;
    assert_eq!(st, StatusCode::CREATED);
    let uri = format!("amqp://{USER}:{PASS}@127.0.0.1:{}/private", b.port);
    let e = within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect_err("no permissions in 'private'");
    assert_eq!(amqp_error(&e).0, 530, "{e:?}");
}

#[tokio::test]
async fn amqp_1_0_links_are_checked_at_attach() {
    use fe2o3_amqp::{Receiver, Sender, Session};
    let b = Broker::start().await;
    setup(&b).await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "own.in", Default::default()).await;
    let url = format!("amqp://{USER}:{PASS}@127.0.0.1:{}", b.port);
    let mut conn = within(fe2o3_amqp::Connection::open("perm-test", url.as_str()))
        .await
        .expect("limited user opens an AMQP 1.0 connection");
    // fe2o3-amqp gets confused by several refused attaches on one
    // session, so each attempt has a session of its own.
    let mut attempt = async |sender: bool, address: &str| -> bool {
        let mut session = within(Session::begin(&mut conn)).await.unwrap();
        let ok = if sender {
            match within(Sender::attach(&mut session, "s", address)).await {
                Ok(s) => within(s.close()).await.is_ok(),
                Err(_) => false,
            }
        } else {
            match within(Receiver::attach(&mut session, "r", address)).await {
                Ok(r) => within(r.close()).await.is_ok(),
                Err(_) => false,
            }
        };
        let _ = within(session.end()).await;
        ok
    };
    // write: an exchange target it may not write to is refused, and so is
    // a queue target (it publishes through amq.default).
    assert!(
        !attempt(true, "/exchanges/amq.direct/k").await,
        "write on amq.direct"
    );
    assert!(!attempt(true, "/queues/own.in").await, "write on amq.default");
    // read: consuming from shared is refused, from own.in allowed.
    assert!(!attempt(false, "/queues/shared").await, "read on shared");
    assert!(attempt(false, "/queues/own.in").await, "read on own.in");
    let _ = within(conn.close()).await;

    // The broker goes on for everyone.
    declare(&ch, "after-1-0", Default::default()).await;
}

#[tokio::test]
async fn the_stream_protocol_answers_access_refused() {
    let b = Broker::start().await;
    setup(&b).await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("shared-stream"))
        .await
        .unwrap();

    let client = within(rabbitmq_stream_client::Client::connect(
        rabbitmq_stream_client::ClientOptions::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .user(USER)
            .password(PASS)
            .build(),
    ))
    .await
    .expect("limited user opens a stream connection");
    // configure
    let r = within(client.create_stream("other-stream", HashMap::new()))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::AccessRefused);
    let r = within(client.create_stream("own.stream", HashMap::new()))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    let r = within(client.delete_stream("shared-stream")).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::AccessRefused);
    // write
    let r = within(client.declare_publisher(1, None, "shared-stream"))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::AccessRefused);
    let r = within(client.declare_publisher(2, None, "own.stream"))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    // read
    let r = within(client.subscribe(1, "shared-stream", OffsetSpecification::First, 1, HashMap::new()))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::AccessRefused);
    let r = within(client.subscribe(2, "own.stream", OffsetSpecification::First, 1, HashMap::new()))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    within(client.close()).await.unwrap();
    // shared-stream is untouched.
    let (st, _) = b.http(Method::GET, "/api/queues/%2F/shared-stream", None).await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test]
async fn the_http_api_checks_the_same_permissions() {
    let b = Broker::start().await;
    setup(&b).await;
    let put = |name: &'static str| {
        let b = &b;
        async move {
            b.http_as(
                USER,
                PASS,
                Method::PUT,
                &format!("/api/queues/%2F/{name}"),
                Some(json!({"durable": true})),
            )
            .await
        }
    };
    let (st, body) = put("other.q").await;
    // RabbitMQ answers a permission refusal with 401 not_authorized.
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "not_authorized");
    assert_eq!(put("own.q").await.0, StatusCode::CREATED);
    // A dead letter exchange it may not write to: refused, as over 0-9-1.
    let (st, body) = b
        .http_as(
            USER,
            PASS,
            Method::PUT,
            "/api/queues/%2F/own.dl",
            Some(json!({"durable": true, "arguments": {"x-dead-letter-exchange": "amq.direct"}})),
        )
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("write access to exchange 'amq.direct'"),
        "{body}"
    );
    let (st, _) = b
        .http_as(
            USER,
            PASS,
            Method::DELETE,
            "/api/queues/%2F/shared/contents",
            None,
        )
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _) = b
        .http_as(USER, PASS, Method::DELETE, "/api/queues/%2F/shared", None)
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    // Invalid patterns are a 400, and nothing changes.
    let (st, _) = b
        .http(
            Method::PUT,
            "/api/permissions/%2F/limited",
            Some(json!({"configure": "(", "write": ".*", "read": ".*"})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (_, p) = b.http(Method::GET, "/api/permissions/%2F/limited", None).await;
    assert_eq!(p["configure"], "^own\\.");
}
