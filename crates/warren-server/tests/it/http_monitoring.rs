//! The management API calls that probes, dashboards and tooling make
//! besides the object listings, answered as RabbitMQ 3.10 answered them
//! (compared): listener, vhost, certificate and cluster health checks,
//! the cluster's name, a node by name, `/api/auth` before login, empty
//! parameters, operator policies, limits and feature flags, users without
//! permissions, an exchange's bindings by side, and a user's connections
//! (listed and closed).

use lapin::options::QueueBindOptions;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn health_checks_answer_as_rabbitmq_does() {
    let b = Broker::start().await;
    let get = |path: String| {
        let b = &b;
        async move { b.http(Method::GET, &path, None).await }
    };
    let (s, v) = get(format!("/api/health/checks/port-listener/{}", b.port)).await;
    assert_eq!((s, v), (StatusCode::OK, json!({"status": "ok", "port": b.port})));
    // A port nothing listens on: 503 with the ports that are listened on.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (s, v) = get(format!("/api/health/checks/port-listener/{free}")).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        (&v["status"], &v["reason"], &v["missing"]),
        (&json!("failed"), &json!("No active listener"), &json!(free))
    );
    assert!(v["ports"].as_array().unwrap().contains(&json!(b.port)));
    assert_eq!(
        get("/api/health/checks/port-listener/x".into()).await.0,
        StatusCode::BAD_REQUEST
    );
    for (asked, named) in [
        ("amqp091", "amqp"),
        ("amqp1.0", "amqp"),
        ("management", "http"),
        ("stream", "stream"),
    ] {
        let (s, v) = get(format!("/api/health/checks/protocol-listener/{asked}")).await;
        assert_eq!(
            (s, v),
            (StatusCode::OK, json!({"status": "ok", "protocol": named})),
            "{asked}"
        );
    }
    let (s, v) = get("/api/health/checks/protocol-listener/mqtt".into()).await;
    assert_eq!(
        (s, &v["missing"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("mqtt"))
    );
    assert_eq!(
        get("/api/health/checks/virtual-hosts".into()).await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
    for check in ["node-is-quorum-critical", "node-is-mirror-sync-critical"] {
        let (s, v) = get(format!("/api/health/checks/{check}")).await;
        assert_eq!(
            (s, v),
            (
                StatusCode::OK,
                json!({"status": "ok", "reason": "single node cluster"})
            )
        );
    }
    let (s, _) = get("/api/health/checks/certificate-expiration/1/months".into()).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = get("/api/health/checks/certificate-expiration/1/fortnights".into()).await;
    assert_eq!(
        (s, &v["reason"]),
        (
            StatusCode::BAD_REQUEST,
            &json!("Time unit not recognised. Supported units: days, weeks, months, years.")
        )
    );
    // Health checks need a login, as RabbitMQ's do.
    let (s, _) = b
        .http_as(
            "guest",
            "wrong",
            Method::GET,
            "/api/health/checks/virtual-hosts",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn cluster_parameters_limits_and_the_rest_answer_as_rabbitmq_does() {
    let b = Broker::start().await;
    let (_, name) = b.http(Method::GET, "/api/cluster-name", None).await;
    let node = name["name"].as_str().unwrap().to_string();
    let (s, n) = b.http(Method::GET, &format!("/api/nodes/{node}"), None).await;
    assert_eq!((s, &n["name"]), (StatusCode::OK, &json!(node)));
    assert_eq!(
        b.http(Method::GET, "/api/nodes/nobody@nowhere", None).await.0,
        StatusCode::NOT_FOUND
    );
    // The login page reads /api/auth before anyone has logged in.
    let r = reqwest::get(b.http_url("/api/auth")).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["enable_uaa"],
        json!(false)
    );
    for path in [
        "/api/extensions",
        "/api/parameters",
        "/api/parameters/federation-upstream",
        "/api/parameters/shovel/%2F",
        "/api/operator-policies",
        "/api/operator-policies/%2F",
        "/api/vhost-limits",
        "/api/vhost-limits/%2F",
        "/api/user-limits",
        "/api/user-limits/guest",
        "/api/feature-flags",
        "/api/users/without-permissions",
    ] {
        assert_eq!(
            b.http(Method::GET, path, None).await,
            (StatusCode::OK, json!([])),
            "{path}"
        );
    }
    for path in [
        "/api/parameters/shovel/nowhere",
        "/api/vhost-limits/nowhere",
        "/api/user-limits/nobody",
    ] {
        assert_eq!(
            b.http(Method::GET, path, None).await.0,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    let (_, globals) = b.http(Method::GET, "/api/global-parameters", None).await;
    assert_eq!(globals, json!([{"name": "cluster_name", "value": node}]));
    let (s, g) = b
        .http(Method::GET, "/api/global-parameters/cluster_name", None)
        .await;
    assert_eq!((s, &g["value"]), (StatusCode::OK, &json!(node)));
    b.http(
        Method::PUT,
        "/api/users/lonely",
        Some(json!({"password": "p", "tags": ""})),
    )
    .await;
    let (_, users) = b.http(Method::GET, "/api/users/without-permissions", None).await;
    assert_eq!(users[0]["name"], "lonely");
}

#[tokio::test]
async fn exchange_bindings_by_side_and_a_users_connections() {
    let b = Broker::start().await;
    let (conn, ch) = b.channel().await;
    declare(&ch, "bq", Default::default()).await;
    within(ch.queue_bind(
        "bq".into(),
        "amq.topic".into(),
        "k.#".into(),
        QueueBindOptions::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    within(ch.exchange_bind(
        "amq.topic".into(),
        "amq.direct".into(),
        "d".into(),
        Default::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    let (s, from) = b
        .http(Method::GET, "/api/exchanges/%2F/amq.topic/bindings/source", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(from.as_array().map(Vec::len), Some(1));
    assert_eq!(
        (&from[0]["destination"], &from[0]["routing_key"]),
        (&json!("bq"), &json!("k.#"))
    );
    let (_, to) = b
        .http(
            Method::GET,
            "/api/exchanges/%2F/amq.topic/bindings/destination",
            None,
        )
        .await;
    assert_eq!(to.as_array().map(Vec::len), Some(1));
    assert_eq!(to[0]["source"], "amq.direct");
    assert_eq!(
        b.http(Method::GET, "/api/exchanges/%2F/nope/bindings/source", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    let (s, mine) = b.http(Method::GET, "/api/connections/username/guest", None).await;
    assert_eq!((s, mine.as_array().map(Vec::len)), (StatusCode::OK, Some(1)));
    assert_eq!(mine[0]["user"], "guest");
    let (s, _) = b
        .http(Method::DELETE, "/api/connections/username/guest", None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    for _ in 0..50 {
        if !conn.status().connected() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!conn.status().connected(), "the user's connection was closed");
}
