//! Connection objects in the management API as monitoring tools read them:
//! every protocol's connection carries RabbitMQ's fields (client
//! properties and the name the application gave it, the login mechanism,
//! what was negotiated, TLS fields, octet counters and rates), and paths
//! with a trailing slash are served as without one.

use std::time::Duration;

use fe2o3_amqp::types::primitives::{Symbol, Value as AmqpValue};
use lapin::{Connection, ConnectionProperties};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::common::*;

/// The connection objects whose `user_provided_name` (or, for AMQP 1.0,
/// `container_id`) is `name`, polled until one shows (a login is recorded
/// when the connection opens its vhost).
async fn find_connection(b: &Broker, field: &str, name: &str) -> Value {
    let mut list = Value::Null;
    for _ in 0..100 {
        let (s, l) = b.http(Method::GET, "/api/connections", None).await;
        assert_eq!(s, StatusCode::OK);
        if let Some(c) = l.as_array().unwrap().iter().find(|c| c[field] == name) {
            return c.clone();
        }
        list = l;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no connection with {field} = {name} in {list:#}");
}

/// The fields every connection object has, whatever its protocol.
fn common_fields(c: &Value, protocol: &str) {
    assert_eq!(c["protocol"], protocol, "{c:#}");
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["type"], "network");
    assert_eq!(c["state"], "running");
    assert_eq!(c["ssl"], false);
    for k in [
        "ssl_protocol",
        "ssl_key_exchange",
        "ssl_cipher",
        "ssl_hash",
        "peer_cert_subject",
        "peer_cert_issuer",
        "peer_cert_validity",
    ] {
        assert!(c.get(k).is_some_and(Value::is_null), "{k} in {c:#}");
    }
    assert_eq!(c["peer_host"], "127.0.0.1");
    assert!(c["connected_at"].as_u64().unwrap() > 1_600_000_000_000);
    assert!(c["recv_oct"].as_u64().unwrap() > 0);
    assert!(c["send_oct"].as_u64().unwrap() > 0);
    assert!(c["recv_cnt"].as_u64().unwrap() > 0);
    assert!(c["send_cnt"].as_u64().unwrap() > 0);
    assert!(c["recv_oct_details"]["rate"].is_number());
    assert!(c["send_oct_details"]["rate"].is_number());
    assert!(c["client_properties"].is_object());
}

#[tokio::test]
async fn an_amqp_0_9_1_connection_shows_its_client_properties() {
    let b = Broker::start_with(|c| c.collect_statistics_interval = 100).await;
    let conn = within(Connection::connect(
        &b.uri(),
        ConnectionProperties::default().with_connection_name("orders-service".into()),
    ))
    .await
    .unwrap();
    let _ch = within(conn.create_channel()).await.unwrap();
    let c = find_connection(&b, "user_provided_name", "orders-service").await;
    common_fields(&c, "AMQP 0-9-1");
    let props = &c["client_properties"];
    assert_eq!(props["connection_name"], "orders-service");
    assert_eq!(props["product"], "lapin", "{props:#}");
    assert!(props["version"].is_string());
    assert_eq!(props["capabilities"]["publisher_confirms"], true, "{props:#}");
    assert_eq!(c["auth_mechanism"], "PLAIN");
    assert_eq!(c["frame_max"], 131072);
    assert_eq!(c["channel_max"], 2047);
    assert!(c["timeout"].is_u64());
    assert_eq!(c["channels"], 1);
    // Rates come from the sampler: some octets went each way, so after
    // an interval with traffic the rate is positive.
    let (_, one) = b
        .http(
            Method::GET,
            &format!("/api/connections/{}", urlencode(c["name"].as_str().unwrap())),
            None,
        )
        .await;
    assert_eq!(one["user_provided_name"], "orders-service");
    let mut seen_rate = false;
    for _ in 0..50 {
        within(conn.create_channel()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let c = find_connection(&b, "user_provided_name", "orders-service").await;
        if c["recv_oct_details"]["rate"].as_f64().unwrap() > 0.0 {
            seen_rate = true;
            break;
        }
    }
    assert!(seen_rate, "recv_oct_details.rate never moved");
}

#[tokio::test]
async fn an_amqp_1_0_connection_shows_its_open_properties() {
    let b = Broker::start().await;
    let mut props = fe2o3_amqp::types::definitions::Fields::new();
    props.insert(Symbol::from("connection_name"), AmqpValue::from("billing"));
    props.insert(Symbol::from("product"), AmqpValue::from("fe2o3-amqp"));
    let mut conn = within(
        fe2o3_amqp::Connection::builder()
            .container_id("billing-container")
            .properties(props)
            .open(format!("amqp://guest:guest@127.0.0.1:{}", b.port).as_str()),
    )
    .await
    .unwrap();
    let c = find_connection(&b, "container_id", "billing-container").await;
    common_fields(&c, "AMQP 1.0");
    assert_eq!(c["user_provided_name"], "billing");
    assert_eq!(c["client_properties"]["product"], "fe2o3-amqp");
    assert_eq!(c["auth_mechanism"], "PLAIN");
    assert!(c["frame_max"].as_u64().unwrap() >= 512);
    within(conn.close()).await.unwrap();
}

#[tokio::test]
async fn a_stream_connection_shows_its_peer_properties() {
    let b = Broker::start().await;
    let env = within(
        rabbitmq_stream_client::Environment::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    )
    .await
    .unwrap();
    within(env.stream_creator().create("conn-info")).await.unwrap();
    // A consumer keeps a connection open (a producer's Drop blocks the
    // test's runtime on a close of its own).
    let consumer = within(env.consumer().build("conn-info")).await.unwrap();
    // The client names its consumers' connections itself.
    let c = find_connection(&b, "user_provided_name", "rust-stream-consumer").await;
    common_fields(&c, "RabbitMQ Stream");
    assert_eq!(c["client_properties"]["product"], "RabbitMQ", "{c:#}");
    assert_eq!(c["client_properties"]["platform"], "Rust");
    assert_eq!(c["auth_mechanism"], "PLAIN");
    assert!(c["frame_max"].as_u64().unwrap() > 0);
    let _ = within(consumer.handle().close()).await;
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// RabbitMQ serves `/api/queues/` as `/api/queues`, and client libraries'
/// test tooling calls it so (to find and drop connections, for one).
#[tokio::test]
async fn paths_with_a_trailing_slash_are_served() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "slash-q", Default::default()).await;
    for path in [
        "/api/connections/",
        "/api/queues/",
        "/api/queues/%2F/",
        "/api/exchanges/",
        "/api/vhosts/",
        "/api/bindings/",
        "/api/channels/",
    ] {
        let (s, v) = b.http(Method::GET, path, None).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(v.as_array().is_some_and(|a| !a.is_empty()), "{path}: {v}");
    }
    let (s, v) = b.http(Method::GET, "/api/overview/", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["object_totals"].is_object());
    let (s, v) = b.http(Method::GET, "/api/queues/%2F/slash-q/", None).await;
    assert_eq!((s, v["name"].as_str()), (StatusCode::OK, Some("slash-q")));
    // DELETE through a trailing slash closes the connection it names.
    let (_, list) = b.http(Method::GET, "/api/connections/", None).await;
    let name = list[0]["name"].as_str().unwrap().to_string();
    let (s, _) = b
        .http(
            Method::DELETE,
            &format!("/api/connections/{}/", urlencode(&name)),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}
