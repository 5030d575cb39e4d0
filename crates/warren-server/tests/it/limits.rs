//! Vhost and user limits, as RabbitMQ 3.10 answered the same steps: set,
//! listed and cleared over the HTTP API (204; 400 with RabbitMQ's texts
//! for an unknown limit or a value that is not a number), kept in
//! definitions and across a restart, and enforced with RabbitMQ's errors:
//! max-connections per vhost and per user on 0-9-1 (lapin), AMQP 1.0
//! (fe2o3-amqp) and streams (rabbitmq-stream-client), max-queues per vhost,
//! max-channels per user on 0-9-1 channels and 1.0 sessions.

use fe2o3_amqp::{Connection as AmqpConnection, Session};
use lapin::{Connection, ConnectionProperties};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

async fn set(b: &Broker, path: &str, value: Value) -> (StatusCode, Value) {
    b.http(Method::PUT, path, Some(json!({ "value": value }))).await
}

async fn lapin_as(b: &Broker, user: &str) -> Result<Connection, lapin::Error> {
    let uri = format!("amqp://{user}:{user}@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default())).await
}

/// A user with full permissions on "/" whose password is its name.
async fn add_user(b: &Broker, name: &str) {
    let (s, _) = b
        .http(
            Method::PUT,
            &format!("/api/users/{name}"),
            Some(json!({"password": name, "tags": ""})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = b
        .http(
            Method::PUT,
            &format!("/api/permissions/%2F/{name}"),
            Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
}

/// Wait until the broker has let go of every connection (a refused one
/// is closed, then its task ends and its counts go).
async fn no_connections(b: &Broker) {
    within(async {
        while b.http(Method::GET, "/api/connections", None).await.1 != json!([]) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn the_api_sets_lists_and_clears_them_as_rabbitmq_does() {
    let b = Broker::start().await;
    add_user(&b, "lim").await;
    assert_eq!(b.http(Method::GET, "/api/vhost-limits", None).await.1, json!([]));
    assert_eq!(
        set(&b, "/api/vhost-limits/%2F/max-queues", json!(2)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        set(&b, "/api/vhost-limits/%2F/max-connections", json!(10))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let want = json!([{"vhost": "/", "value": {"max-queues": 2, "max-connections": 10}}]);
    assert_eq!(b.http(Method::GET, "/api/vhost-limits", None).await.1, want);
    assert_eq!(b.http(Method::GET, "/api/vhost-limits/%2F", None).await.1, want);
    assert_eq!(
        set(&b, "/api/user-limits/lim/max-channels", json!(1)).await.0,
        StatusCode::NO_CONTENT
    );
    let want = json!([{"user": "lim", "value": {"max-channels": 1}}]);
    assert_eq!(b.http(Method::GET, "/api/user-limits", None).await.1, want);
    assert_eq!(b.http(Method::GET, "/api/user-limits/lim", None).await.1, want);
    assert_eq!(
        b.http(Method::GET, "/api/users/lim", None).await.1["limits"],
        json!({"max-channels": 1})
    );

    // RabbitMQ's validation errors, word for word.
    let (s, body) = set(&b, "/api/user-limits/lim/bogus", json!(1)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["reason"],
        "Unrecognised terms [{<<\"bogus\">>,1}] in user-limits"
    );
    let (s, body) = set(&b, "/api/vhost-limits/%2F/max-queues", json!("x")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["reason"],
        "Validation failed\n\nmax-queues should be a number, actually was <<\"x\">>\n"
    );
    assert_eq!(
        set(&b, "/api/vhost-limits/nope/max-queues", json!(1)).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        set(&b, "/api/user-limits/nobody/max-channels", json!(1)).await.0,
        StatusCode::NOT_FOUND
    );

    assert_eq!(
        b.http(Method::DELETE, "/api/vhost-limits/%2F/max-queues", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        b.http(Method::GET, "/api/vhost-limits/%2F", None).await.1,
        json!([{"vhost": "/", "value": {"max-connections": 10}}])
    );
    b.http(Method::DELETE, "/api/user-limits/lim/max-channels", None)
        .await;
    assert_eq!(b.http(Method::GET, "/api/user-limits", None).await.1, json!([]));
}

#[tokio::test]
async fn vhost_connection_limit_refuses_every_protocol() {
    let b = Broker::start().await;
    set(&b, "/api/vhost-limits/%2F/max-connections", json!(1)).await;
    let first = b.lapin().await;

    let e = lapin_as(&b, "guest").await.expect_err("over the limit");
    assert_eq!(
        amqp_error(&e),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached"
                .into()
        )
    );
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let r = within(AmqpConnection::open("over", url.as_str())).await;
    assert!(r.is_err(), "AMQP 1.0 open over the limit must be refused");
    let r = within(
        rabbitmq_stream_client::Environment::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    )
    .await;
    assert!(r.is_err(), "stream open over the limit must be refused");

    // The place is free again once the first connection goes: the same
    // opens that were refused now succeed.
    within(first.close(200, "bye".into())).await.unwrap();
    no_connections(&b).await;
    let mut one = within(AmqpConnection::open("one", url.as_str()))
        .await
        .expect("AMQP 1.0 open within the limit");
    within(one.close()).await.unwrap();
    let env = b.stream_env().await;
    drop(env);
    no_connections(&b).await;
    let again = b.lapin().await;
    within(again.close(200, "bye".into())).await.unwrap();
    // -1 is no limit.
    set(&b, "/api/vhost-limits/%2F/max-connections", json!(-1)).await;
    let (c1, c2) = (b.lapin().await, b.lapin().await);
    drop((c1, c2));
}

#[tokio::test]
async fn user_connection_limit_counts_one_users_connections_only() {
    let b = Broker::start().await;
    add_user(&b, "lim").await;
    set(&b, "/api/user-limits/lim/max-connections", json!(1)).await;
    let first = lapin_as(&b, "lim").await.expect("first connection");
    let e = lapin_as(&b, "lim").await.expect_err("over the user's limit");
    assert_eq!(
        amqp_error(&e),
        (
            530,
            "NOT_ALLOWED - Connection refused for user 'lim': user connection limit (1) is reached".into()
        )
    );
    // Other users are not counted against it.
    let guest = b.lapin().await;
    within(guest.close(200, "bye".into())).await.unwrap();
    within(first.close(200, "bye".into())).await.unwrap();
    no_connections(&b).await;
    let again = lapin_as(&b, "lim").await.expect("the place is free again");
    within(again.close(200, "bye".into())).await.unwrap();
}

#[tokio::test]
async fn user_channel_limit_closes_the_connection_and_counts_sessions() {
    let b = Broker::start().await;
    add_user(&b, "lim").await;
    set(&b, "/api/user-limits/lim/max-channels", json!(1)).await;
    let c = lapin_as(&b, "lim").await.unwrap();
    let ch = within(c.create_channel()).await.expect("first channel");
    let e = within(c.create_channel()).await.expect_err("over the limit");
    assert_eq!(
        amqp_error(&e),
        (
            530,
            "NOT_ALLOWED - number of channels opened for user 'lim' has reached the maximum allowed user limit of (1)"
                .into()
        )
    );
    drop(ch);
    no_connections(&b).await;
    // The closed connection's channel no longer counts: an AMQP 1.0
    // session takes the one place, and a second session is refused.
    let url = format!("amqp://lim:lim@127.0.0.1:{}", b.port);
    let mut conn = within(AmqpConnection::open("lim-1", url.as_str())).await.unwrap();
    let mut s1 = within(Session::begin(&mut conn)).await.expect("one session");
    let s2 = within(Session::begin(&mut conn)).await;
    assert!(s2.is_err(), "a second session is over max-channels");
    let _ = s1.end().await;
    let _ = conn.close().await;
}

#[tokio::test]
async fn vhost_queue_limit_refuses_new_queues_only() {
    let b = Broker::start().await;
    set(&b, "/api/vhost-limits/%2F/max-queues", json!(2)).await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "l1", Default::default()).await;
    declare(&ch, "l2", Default::default()).await;
    // A redeclare is not a new queue.
    declare(&ch, "l1", Default::default()).await;
    let e = within(ch.queue_declare("l3".into(), Default::default(), Default::default()))
        .await
        .expect_err("over the limit");
    assert_eq!(
        amqp_error(&e),
        (
            406,
            "PRECONDITION_FAILED - cannot declare queue 'l3': queue limit in vhost '/' (2) is reached".into()
        )
    );
    // Over HTTP too; after a delete there is room again.
    let (s, _) = b
        .http(Method::PUT, "/api/queues/%2F/l4", Some(json!({"durable": true})))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        b.http(Method::DELETE, "/api/queues/%2F/l2", None).await.0,
        StatusCode::NO_CONTENT
    );
    let (s, _) = b
        .http(Method::PUT, "/api/queues/%2F/l4", Some(json!({"durable": true})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
}

#[tokio::test]
async fn limits_survive_a_restart_and_travel_in_definitions() {
    let mut b = Broker::start().await;
    add_user(&b, "lim").await;
    set(&b, "/api/vhost-limits/%2F/max-queues", json!(5)).await;
    set(&b, "/api/user-limits/lim/max-connections", json!(3)).await;
    b.restart().await;
    assert_eq!(
        b.http(Method::GET, "/api/vhost-limits/%2F", None).await.1,
        json!([{"vhost": "/", "value": {"max-queues": 5}}])
    );
    assert_eq!(
        b.http(Method::GET, "/api/user-limits/lim", None).await.1,
        json!([{"user": "lim", "value": {"max-connections": 3}}])
    );
    let (_, defs) = b.http(Method::GET, "/api/definitions", None).await;
    assert_eq!(
        defs["parameters"],
        json!([{"vhost": "/", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 5}}])
    );
    let lim = defs["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "lim")
        .unwrap();
    assert_eq!(lim["limits"], json!({"max-connections": 3}));

    // A RabbitMQ export's limits are taken on import.
    let file = json!({
        "vhosts": [{"name": "other"}],
        "users": [{"name": "imp", "password_hash": "", "tags": [], "limits": {"max-channels": 7}}],
        "parameters": [{"vhost": "other", "component": "vhost-limits", "name": "limits",
                         "value": {"max-connections": 4}}],
    });
    assert_eq!(
        b.http(Method::POST, "/api/definitions", Some(file)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        b.http(Method::GET, "/api/vhost-limits/other", None).await.1,
        json!([{"vhost": "other", "value": {"max-connections": 4}}])
    );
    assert_eq!(
        b.http(Method::GET, "/api/user-limits/imp", None).await.1,
        json!([{"user": "imp", "value": {"max-channels": 7}}])
    );
}
