//! The management HTTP API with a real HTTP client (reqwest): RabbitMQ's
//! paths, JSON fields, status codes and error bodies; auth and vhost
//! visibility; objects declared over HTTP used over AMQP and the other way
//! round; definitions export -> import into a fresh broker.

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::BasicProperties;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

impl Broker {
    pub fn http_url(&self, path: &str) -> String {
        let port = self.running.as_ref().unwrap().http_addr.unwrap().port();
        format!("http://127.0.0.1:{port}{path}")
    }

    /// A request as `user`/`pass`: status and JSON body (Null if none).
    pub async fn http_as(
        &self,
        user: &str,
        pass: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut r = Client::new()
            .request(method, self.http_url(path))
            .basic_auth(user, Some(pass));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = within(r.send()).await.expect("the API answers");
        let status = resp.status();
        let text = within(resp.text()).await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn http(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.http_as("guest", "guest", method, path, body).await
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn credentials_are_required_and_errors_are_rabbitmqs() {
    let b = Broker::start().await;
    let resp = within(Client::new().get(b.http_url("/api/overview")).send())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("www-authenticate"));
    let (s, body) = b
        .http_as("guest", "wrong", Method::GET, "/api/overview", None)
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "not_authorized");
    let (s, body) = b.http(Method::GET, "/api/queues/%2F/nope", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"error": "Object Not Found", "reason": "Not Found"}));
    let (s, _) = b.http(Method::GET, "/api/no-such-thing", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, body) = b
        .http(
            Method::PUT,
            "/api/exchanges/%2F/x",
            Some(json!({"type": "no-such-type"})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "bad_request");
}

#[tokio::test]
async fn queues_declared_over_http_take_amqp_messages_and_show_them() {
    let b = Broker::start().await;
    let (s, _) = b
        .http(
            Method::PUT,
            "/api/queues/%2F/orders",
            Some(json!({"durable": true, "arguments": {"x-max-length": 100}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = b
        .http(
            Method::PUT,
            "/api/queues/%2F/orders",
            Some(json!({"durable": true, "arguments": {"x-max-length": 100}})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "declaring again is fine");
    let (s, _) = b
        .http(
            Method::POST,
            "/api/bindings/%2F/e/amq.direct/q/orders",
            Some(json!({"routing_key": "new"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);

    let (_c, ch) = b.channel().await;
    for _ in 0..3 {
        within(ch.basic_publish(
            "amq.direct".into(),
            "new".into(),
            BasicPublishOptions::default(),
            b"order",
            BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let q = loop {
        let (_, q) = b.http(Method::GET, "/api/queues/%2F/orders", None).await;
        if q["messages"] == 3 {
            break q;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(q["messages_ready"], 3);
    assert_eq!(q["messages_unacknowledged"], 0);
    assert_eq!(q["consumers"], 0);
    assert_eq!(q["type"], "classic");
    assert_eq!(q["state"], "running");
    assert_eq!(q["durable"], true);
    assert_eq!(q["arguments"]["x-max-length"], 100);

    let (_, bindings) = b.http(Method::GET, "/api/bindings/%2F", None).await;
    assert!(bindings
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["source"] == "amq.direct"
            && x["destination"] == "orders"
            && x["routing_key"] == "new"
            && x["destination_type"] == "queue"));
    assert!(
        bindings
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["source"] == "" && x["destination"] == "orders" && x["routing_key"] == "orders"),
        "the default exchange's implicit binding is listed: {bindings}"
    );

    let (s, _) = b
        .http(Method::DELETE, "/api/queues/%2F/orders/contents", None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/orders", None).await;
    assert_eq!(q["messages"], 0, "purged");
    let (s, _) = b.http(Method::DELETE, "/api/queues/%2F/orders", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = b.http(Method::GET, "/api/queues/%2F/orders", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn listings_sort_and_paginate_like_rabbitmq() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    for n in ["c", "a", "b"] {
        within(ch.queue_declare(n.into(), QueueDeclareOptions::default(), Default::default()))
            .await
            .unwrap();
    }
    let (_, all) = b.http(Method::GET, "/api/queues?sort=name", None).await;
    assert_eq!(names(&all), ["a", "b", "c"]);
    let (_, rev) = b
        .http(Method::GET, "/api/queues/%2F?sort=name&sort_reverse=true", None)
        .await;
    assert_eq!(names(&rev), ["c", "b", "a"]);
    let (_, page) = b
        .http(Method::GET, "/api/queues?sort=name&page=2&page_size=2", None)
        .await;
    assert_eq!(page["total_count"], 3);
    assert_eq!(page["page_count"], 2);
    assert_eq!(names(&page["items"]), ["c"]);
    let (s, _) = b.http(Method::GET, "/api/queues?page=0", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Pages in name order build only their own objects; they must agree
    // with the full listing.
    let (_, page) = b
        .http(
            Method::GET,
            "/api/queues?page=1&page_size=2&sort_reverse=true",
            None,
        )
        .await;
    assert_eq!(names(&page["items"]), ["c", "b"]);
    let (_, page) = b.http(Method::GET, "/api/queues/%2F?page=1&name=b", None).await;
    assert_eq!(
        (names(&page["items"]), page["filtered_count"].as_u64()),
        (vec!["b".to_string()], Some(1))
    );
    let (_, page) = b
        .http(Method::GET, "/api/queues?sort=name&page=1&page_size=500", None)
        .await;
    assert_eq!(page["items"], all);
    let (_, page) = b
        .http(Method::GET, "/api/queues?sort=messages&page=1&page_size=2", None)
        .await;
    assert_eq!(page["item_count"], 2);

    let (_, xs) = b.http(Method::GET, "/api/exchanges/%2F", None).await;
    let xs = names(&xs);
    for predeclared in ["", "amq.direct", "amq.fanout", "amq.topic", "amq.headers"] {
        assert!(xs.iter().any(|x| x == predeclared), "{predeclared} in {xs:?}");
    }
    let (_, o) = b.http(Method::GET, "/api/overview", None).await;
    assert_eq!(o["object_totals"]["queues"], 3);
    assert!(o["rabbitmq_version"].is_string());
    let (_, nodes) = b.http(Method::GET, "/api/nodes", None).await;
    assert_eq!(nodes[0]["running"], true);
    let (s, h) = b.http(Method::GET, "/api/health/checks/alarms", None).await;
    assert_eq!((s, h["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, a) = b.http(Method::GET, "/api/aliveness-test/%2F", None).await;
    assert_eq!((s, a["status"].as_str()), (StatusCode::OK, Some("ok")));
}

/// A user without a management tag is refused; a management user sees
/// only its own vhosts (another vhost's objects are 404) and cannot
/// change users.
#[tokio::test]
async fn users_see_only_their_vhosts() {
    let b = Broker::start().await;
    assert_eq!(
        b.http(Method::PUT, "/api/vhosts/secret", None).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        b.http(Method::PUT, "/api/queues/secret/hidden", Some(json!({})))
            .await
            .0,
        StatusCode::CREATED
    );
    for (name, tags) in [("app", ""), ("ops", "management")] {
        let (s, _) = b
            .http(
                Method::PUT,
                &format!("/api/users/{name}"),
                Some(json!({"password": "pw", "tags": tags})),
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
    let (s, body) = b.http_as("app", "pw", Method::GET, "/api/queues", None).await;
    assert_eq!(
        (s, body["reason"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("Not management user"))
    );
    let (s, qs) = b.http_as("ops", "pw", Method::GET, "/api/queues", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!names(&qs).contains(&"hidden".to_string()));
    let (s, _) = b
        .http_as("ops", "pw", Method::GET, "/api/queues/secret/hidden", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, vs) = b.http_as("ops", "pw", Method::GET, "/api/vhosts", None).await;
    assert_eq!(names(&vs), ["/"]);
    let (s, _) = b.http_as("ops", "pw", Method::GET, "/api/users", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // The new user logs in over AMQP with the password set over HTTP.
    let uri = format!("amqp://ops:pw@127.0.0.1:{}/%2f", b.port);
    let c = within(lapin::Connection::connect(&uri, Default::default())).await;
    assert!(c.is_ok(), "a user made over HTTP logs in over AMQP");
    // Deleting the vhost takes its queues.
    assert_eq!(
        b.http(Method::DELETE, "/api/vhosts/secret", None).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, qs) = b.http(Method::GET, "/api/queues", None).await;
    assert!(!names(&qs).contains(&"hidden".to_string()));
}

/// Definitions exported from one broker import into a fresh one: vhosts,
/// users (the same password logs in), exchanges, queues and bindings.
#[tokio::test]
async fn definitions_export_and_import_into_a_fresh_broker() {
    let a = Broker::start().await;
    a.http(Method::PUT, "/api/vhosts/shop", None).await;
    a.http(
        Method::PUT,
        "/api/users/clerk",
        Some(json!({"password": "s3cret", "tags": ["management"]})),
    )
    .await;
    let (s, _) = a
        .http(
            Method::PUT,
            "/api/permissions/shop/clerk",
            Some(json!({"configure": "^audit$", "write": ".*", "read": ".*"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    a.http(
        Method::PUT,
        "/api/exchanges/shop/events",
        Some(json!({"type": "topic", "durable": true})),
    )
    .await;
    a.http(
        Method::PUT,
        "/api/queues/shop/audit",
        Some(json!({"durable": true})),
    )
    .await;
    a.http(
        Method::POST,
        "/api/bindings/shop/e/events/q/audit",
        Some(json!({"routing_key": "#"})),
    )
    .await;
    let (s, defs) = a.http(Method::GET, "/api/definitions", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(defs["rabbit_version"].is_string());

    let b = Broker::start().await;
    let (s, _) = b.http(Method::POST, "/api/definitions", Some(defs.clone())).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, x) = b.http(Method::GET, "/api/exchanges/shop/events", None).await;
    assert_eq!((s, x["type"].as_str()), (StatusCode::OK, Some("topic")));
    let (s, _) = b.http(Method::GET, "/api/queues/shop/audit", None).await;
    assert_eq!(s, StatusCode::OK);
    let (_, bs) = b.http(Method::GET, "/api/bindings/shop", None).await;
    assert!(bs
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["source"] == "events" && x["routing_key"] == "#"));
    let (s, _) = b
        .http_as("clerk", "s3cret", Method::GET, "/api/queues/shop/audit", None)
        .await;
    assert_eq!(s, StatusCode::OK, "the imported user logs in with its password");
    let (_, p) = b.http(Method::GET, "/api/permissions/shop/clerk", None).await;
    assert_eq!(p["configure"], "^audit$", "permissions move with the definitions");
    // A grant to a user who is not in the file but exists here applies
    // too (as RabbitMQ imports it).
    let (s, _) = b
        .http(
            Method::POST,
            "/api/definitions",
            Some(json!({
                "vhosts": [{"name": "extra"}],
                "permissions": [{"user": "guest", "vhost": "extra", "configure": ".*", "write": ".*", "read": "^r"}],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, p) = b.http(Method::GET, "/api/permissions/extra/guest", None).await;
    assert_eq!((s, &p["read"]), (StatusCode::OK, &json!("^r")));
    let (s, _) = b
        .http(Method::POST, "/api/definitions", Some(json!("not definitions")))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Large definitions go in (axum's own limit is 2 MB; RabbitMQ's 20 MB).
    let big = json!({"vhosts": [{"name": "big"}], "padding": "x".repeat(3 << 20)});
    let (s, _) = b.http(Method::POST, "/api/definitions", Some(big)).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let too_big = json!({"padding": "x".repeat(21_000_000)});
    let (s, _) = b.http(Method::POST, "/api/definitions", Some(too_big)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
}

fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Connections of every protocol are listed with their user, vhost and
/// protocol; DELETE closes one (the client sees it closed) and it leaves
/// the list.
// Multi-threaded: if an assertion fails, the stream producer's Drop
// blocks on a close that needs the broker's tasks to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_listed_and_closed() {
    let b = Broker::start().await;
    let amqp = b.lapin().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("listed")).await.unwrap();
    // A producer keeps a stream connection open.
    let producer = within(env.producer().build("listed")).await.unwrap();
    let listed = |l: &Value, protocol: &str| {
        l.as_array()
            .unwrap()
            .iter()
            .find(|c| c["protocol"] == protocol)
            .cloned()
    };
    let (c091, cstream) = within(async {
        loop {
            let (_, l) = b.http(Method::GET, "/api/connections", None).await;
            if let (Some(a), Some(s)) = (listed(&l, "AMQP 0-9-1"), listed(&l, "RabbitMQ Stream")) {
                break (a, s);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        (c091["user"].as_str(), c091["vhost"].as_str()),
        (Some("guest"), Some("/"))
    );
    assert_eq!(cstream["user"], "guest");
    assert_eq!(c091["peer_host"], "127.0.0.1");
    let (_, o) = b.http(Method::GET, "/api/overview", None).await;
    assert!(o["object_totals"]["connections"].as_u64().unwrap() >= 2);
    let name = c091["name"].as_str().unwrap();
    let path = format!("/api/connections/{}", path_segment(name));
    let (s, one) = b.http(Method::GET, &path, None).await;
    assert_eq!((s, one["name"].as_str()), (StatusCode::OK, Some(name)));
    let resp = within(
        Client::new()
            .delete(b.http_url(&path))
            .basic_auth("guest", Some("guest"))
            .header("X-Reason", "maintenance")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    within(async {
        while amqp.status().connected() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // The entry goes when the server's side of the connection has ended,
    // a moment after the client saw the close.
    within(async {
        while b.http(Method::GET, &path, None).await.0 != StatusCode::NOT_FOUND {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let (_, l) = b.http(Method::GET, "/api/vhosts/%2F/connections", None).await;
    assert!(listed(&l, "RabbitMQ Stream").is_some(), "the others stay open");
    // Closed here: the stream client's Drop blocks on a close of its own.
    let _ = within(producer.close()).await;
}

/// Prometheus metrics on their own port with rabbitmq_prometheus's
/// names: node totals on /metrics, one series per queue on
/// /metrics/per-object.
#[tokio::test]
async fn prometheus_metrics_use_rabbitmqs_names() {
    let b = Broker::start().await;
    b.http(
        Method::PUT,
        "/api/queues/%2F/metered",
        Some(json!({"durable": false})),
    )
    .await;
    let (_c, ch) = b.channel().await;
    for _ in 0..2 {
        within(ch.basic_publish(
            "".into(),
            "metered".into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let port = b.running.as_ref().unwrap().prometheus_addr.unwrap().port();
    let get = |path: &'static str| async move {
        let r = within(Client::new().get(format!("http://127.0.0.1:{port}{path}")).send())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        within(r.text()).await.unwrap()
    };
    let totals = within(async {
        loop {
            let t = get("/metrics").await;
            if t.lines().any(|l| l == "rabbitmq_queue_messages 2") {
                break t;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(totals.lines().any(|l| l == "rabbitmq_queues 1"), "{totals}");
    assert!(
        totals.lines().any(|l| l == "rabbitmq_queue_messages_ready 2"),
        "{totals}"
    );
    assert!(totals.contains("# TYPE rabbitmq_connections gauge"), "{totals}");
    assert!(!totals.contains("queue=\""), "no per-queue series on /metrics");
    assert!(
        totals
            .lines()
            .any(|l| l == "rabbitmq_global_messages_received_total 2"),
        "{totals}"
    );
    assert!(
        totals
            .lines()
            .any(|l| l == "rabbitmq_global_messages_routed_total 2"),
        "{totals}"
    );
    assert!(
        totals.contains("# TYPE rabbitmq_global_messages_acknowledged_total counter"),
        "{totals}"
    );
    assert!(
        totals.contains("rabbitmq_identity_info{rabbitmq_node=\""),
        "{totals}"
    );
    let per = get("/metrics/per-object").await;
    assert!(
        per.lines()
            .any(|l| l == "rabbitmq_queue_messages{vhost=\"/\",queue=\"metered\"} 2"),
        "{per}"
    );
}

/// Exchanges and exchange-to-exchange bindings over HTTP: declared (201,
/// then 204), bound with a Location to the new binding, used by a publish,
/// unbound through that location, and deleted (404 after).
#[tokio::test]
async fn exchanges_and_bindings_are_made_used_and_removed() {
    let b = Broker::start().await;
    let put = |path: &'static str, body: Value| {
        let b = &b;
        async move { b.http(Method::PUT, path, Some(body)).await.0 }
    };
    let x = json!({"type": "fanout", "durable": true});
    assert_eq!(
        put("/api/exchanges/%2F/front", x.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(put("/api/exchanges/%2F/front", x).await, StatusCode::NO_CONTENT);
    let d = json!({"type": "direct", "durable": false});
    assert_eq!(put("/api/exchanges/%2F/back", d).await, StatusCode::CREATED);
    assert_eq!(
        put("/api/queues/%2F/sink", json!({"durable": false})).await,
        StatusCode::CREATED
    );
    let (s, _) = b
        .http(
            Method::POST,
            "/api/bindings/%2F/e/back/q/sink",
            Some(json!({"routing_key": "k"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);

    let resp = within(
        Client::new()
            .post(b.http_url("/api/bindings/%2F/e/front/e/back"))
            .basic_auth("guest", Some("guest"))
            .json(&json!({"routing_key": "k"}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, "/api/bindings/%2F/e/front/e/back/k");
    let (_, between) = b
        .http(Method::GET, "/api/bindings/%2F/e/front/e/back", None)
        .await;
    assert_eq!(between[0]["destination_type"], "exchange");
    assert_eq!(between[0]["properties_key"], "k");

    let publish = || {
        let b = &b;
        async move {
            b.http(
                Method::POST,
                "/api/exchanges/%2F/front/publish",
                Some(json!({"properties": {}, "routing_key": "k", "payload": "via front", "payload_encoding": "string"})),
            )
            .await
            .1
        }
    };
    assert_eq!(publish().await, json!({"routed": true}), "front -> back -> sink");
    let (s, _) = b.http(Method::DELETE, &location, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, between) = b
        .http(Method::GET, "/api/bindings/%2F/e/front/e/back", None)
        .await;
    assert_eq!(between, json!([]));
    assert_eq!(publish().await, json!({"routed": false}), "unbound");
    let (s, _) = b.http(Method::DELETE, &location, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let (s, _) = b.http(Method::DELETE, "/api/exchanges/%2F/front", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = b.http(Method::GET, "/api/exchanges/%2F/front", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = b.http(Method::DELETE, "/api/exchanges/%2F/front", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // if-unused: back is still bound to sink.
    let (s, body) = b
        .http(Method::DELETE, "/api/exchanges/%2F/back?if-unused=true", None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    let (_, me) = b.http(Method::GET, "/api/whoami", None).await;
    assert_eq!(me["name"], "guest");
}
