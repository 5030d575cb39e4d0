//! Policies through the HTTP API, acting on queues and exchanges used by a
//! real client (lapin): limits merged with arguments as RabbitMQ merges
//! them, priorities, a policy's alternate exchange, TTL and expiry, what
//! the API refuses, and policies kept across a restart.

use std::time::Duration;

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

async fn publish(ch: &Channel, exchange: &str, key: &str, body: &[u8]) {
    within(ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    ))
    .await
    .unwrap()
    .await
    .unwrap();
}

async fn bodies(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
    {
        out.push(m.delivery.data.clone());
    }
    out
}

async fn put_policy(b: &Broker, name: &str, body: Value) -> (StatusCode, Value) {
    b.http(Method::PUT, &format!("/api/policies/%2F/{name}"), Some(body))
        .await
}

#[tokio::test]
async fn policies_limit_queues_route_unroutables_and_survive_a_restart() {
    let dir = temp_dir("policies");
    let d = dir.clone();
    let mut b = Broker::start_with(move |c| c.data_dir = d).await;
    let (_c, ch) = b.channel().await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for (q, args) in [
        ("pol.q", FieldTable::default()),
        ("pol.small", table(&[("x-max-length", i(1))])),
        ("pol.big", table(&[("x-max-length", i(10))])),
        ("dead.pol", FieldTable::default()),
    ] {
        within(ch.queue_declare(q.into(), durable, args)).await.unwrap();
    }
    for n in 1..=5u8 {
        for q in ["pol.q", "pol.small", "pol.big"] {
            publish(&ch, "", q, &[n]).await;
        }
    }
    assert_eq!(depth(&ch, "pol.q").await, 5);

    // A policy trims at once, dead-lettering what it drops.
    let (status, _) = put_policy(
        &b,
        "limits",
        json!({"pattern": "^pol\\.", "apply-to": "queues", "priority": 1,
               "definition": {"max-length": 2, "dead-letter-exchange": "",
                              "dead-letter-routing-key": "dead.pol"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(depth(&ch, "pol.q").await, 2);
    // The lower of argument and policy: 1 stays 1, 10 becomes 2.
    assert_eq!(depth(&ch, "pol.small").await, 1);
    assert_eq!(depth(&ch, "pol.big").await, 2);
    assert_eq!(depth(&ch, "dead.pol").await, 3 + 3);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/pol.q", None).await;
    assert_eq!(q["policy"], "limits");
    assert_eq!(q["effective_policy_definition"]["max-length"], 2);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/dead.pol", None).await;
    assert_eq!(q["policy"], Value::Null);

    // A higher priority wins; deleting it gives the other back.
    let (status, _) = put_policy(
        &b,
        "strict",
        json!({"pattern": "^pol\\.q$", "priority": 5, "definition": {"max-length": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(depth(&ch, "pol.q").await, 1);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/pol.q", None).await;
    assert_eq!(q["policy"], "strict");
    let (status, _) = b.http(Method::DELETE, "/api/policies/%2F/strict", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = b.http(Method::DELETE, "/api/policies/%2F/strict", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/pol.q", None).await;
    assert_eq!(q["policy"], "limits");
    for n in 6..=8u8 {
        publish(&ch, "", "pol.q", &[n]).await;
    }
    assert_eq!(bodies(&ch, "pol.q").await, vec![vec![7], vec![8]]);

    // A policy's alternate exchange takes what the exchange cannot route.
    within(ch.exchange_declare(
        "pol-x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.exchange_declare(
        "pol-ae".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.queue_declare(
        "ae.q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.queue_bind(
        "ae.q".into(),
        "pol-ae".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish(&ch, "pol-x", "nowhere", b"lost").await;
    assert_eq!(depth(&ch, "ae.q").await, 0);
    let (status, _) = put_policy(
        &b,
        "ae",
        json!({"pattern": "^pol-x$", "apply-to": "exchanges", "definition": {"alternate-exchange": "pol-ae"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    publish(&ch, "pol-x", "nowhere", b"kept").await;
    assert_eq!(bodies(&ch, "ae.q").await, vec![b"kept".to_vec()]);
    let (_, x) = b.http(Method::GET, "/api/exchanges/%2F/pol-x", None).await;
    assert_eq!(x["policy"], "ae");

    // message-ttl applies to what is published next; expires deletes an
    // unused queue (its timer starts with the policy).
    within(ch.queue_declare(
        "ttl.q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.queue_declare(
        "exp.q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    put_policy(
        &b,
        "ttl",
        json!({"pattern": "^ttl\\.", "definition": {"message-ttl": 100}}),
    )
    .await;
    put_policy(
        &b,
        "exp",
        json!({"pattern": "^exp\\.", "definition": {"expires": 200}}),
    )
    .await;
    publish(&ch, "", "ttl.q", b"short-lived").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(depth(&ch, "ttl.q").await, 0);
    let (status, _) = b.http(Method::GET, "/api/queues/%2F/exp.q", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // What the API refuses, with RabbitMQ's words.
    let (status, e) = put_policy(&b, "bad", json!({"pattern": ".*", "definition": {"foo": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["reason"]
            .as_str()
            .unwrap()
            .contains("are not recognised policy settings"),
        "{e}"
    );
    let (status, _) = put_policy(
        &b,
        "bad",
        json!({"pattern": ".*", "definition": {"max-length": -1}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = put_policy(&b, "bad", json!({"definition": {"max-length": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    b.http(
        Method::PUT,
        "/api/users/watcher",
        Some(json!({"password": "w", "tags": "management"})),
    )
    .await;
    b.http(
        Method::PUT,
        "/api/permissions/%2F/watcher",
        Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
    )
    .await;
    let (status, _) = b
        .http_as("watcher", "w", Method::GET, "/api/policies", None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Listed as RabbitMQ lists them, and exported.
    let (_, list) = b.http(Method::GET, "/api/policies/%2F", None).await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ae", "exp", "limits", "ttl"]);
    let (_, p) = b.http(Method::GET, "/api/policies/%2F/limits", None).await;
    assert_eq!(p["apply-to"], "queues");
    assert_eq!(p["pattern"], "^pol\\.");
    assert_eq!(p["priority"], 1);
    let (_, defs) = b.http(Method::GET, "/api/definitions", None).await;
    assert_eq!(defs["policies"].as_array().unwrap().len(), 4);

    // Kept across a restart, and applied to the restored queues.
    drop(ch);
    drop(_c);
    b.stop().await;
    b.data_dir = dir.join("not-there");
    let d = dir.clone();
    b = Broker::start_with(move |c| c.data_dir = d).await;
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/pol.big", None).await;
    assert_eq!(q["policy"], "limits");
    let (_, list) = b.http(Method::GET, "/api/policies", None).await;
    assert_eq!(list.as_array().unwrap().len(), 4);
}

/// A per-vhost export as RabbitMQ 3.10 writes it (no vhost in its objects)
/// imports into the vhost the path names, its policy applied.
#[tokio::test]
async fn a_rabbitmq_vhost_export_imports_with_its_policy() {
    let b = Broker::start().await;
    let (status, _) = b.http(Method::PUT, "/api/vhosts/shop", None).await;
    assert_eq!(status, StatusCode::CREATED);
    let export = json!({
        "rabbit_version": "3.10.8",
        "parameters": [],
        "policies": [{"vhost": "shop", "name": "lim", "pattern": "^orders", "apply-to": "queues",
                      "definition": {"dead-letter-exchange": "dlx", "ha-mode": "all", "max-length": 100},
                      "priority": 3}],
        "queues": [{"name": "orders.eu", "durable": true, "auto_delete": false, "arguments": {}}],
        "exchanges": [{"name": "dlx", "type": "fanout", "durable": true, "auto_delete": false,
                       "internal": false, "arguments": {}}],
        "bindings": [{"source": "dlx", "destination": "orders.eu", "destination_type": "queue",
                      "routing_key": "", "arguments": {}}]
    });
    let (status, _) = b.http(Method::POST, "/api/definitions/shop", Some(export)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, q) = b.http(Method::GET, "/api/queues/shop/orders.eu", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(q["policy"], "lim");
    assert_eq!(q["effective_policy_definition"]["max-length"], 100);
    let (_, bindings) = b.http(Method::GET, "/api/bindings/shop", None).await;
    assert!(
        bindings.as_array().unwrap().iter().any(|b| b["source"] == "dlx"),
        "{bindings}"
    );
    let (_, export) = b.http(Method::GET, "/api/definitions/shop", None).await;
    assert_eq!(export["policies"][0]["name"], "lim");
    let (status, _) = b
        .http(Method::POST, "/api/definitions/nowhere", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A retention policy applied to a stream that exists deletes its old
/// segments there and then.
#[tokio::test]
async fn a_retention_policy_trims_an_existing_stream() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "str.s".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[
            ("x-queue-type", s("stream")),
            ("x-stream-max-segment-size-bytes", i(1000)),
        ]),
    ))
    .await
    .unwrap();
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    for n in 0..40u8 {
        publish(&ch, "", "str.s", &[n; 200]).await;
    }
    let messages = |v: &Value| v["messages"].as_u64().unwrap();
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/str.s", None).await;
    assert_eq!(messages(&q), 40);
    let (status, _) = put_policy(
        &b,
        "str",
        json!({"pattern": "^str\\.", "apply-to": "streams", "definition": {"max-length-bytes": 2000}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/str.s", None).await;
    assert_eq!(q["policy"], "str");
    let left = messages(&q);
    assert!(left > 0 && left < 20, "{left} of 40 messages left");
}
