//! The management API's live views with real clients: channels and
//! consumers of a lapin connection, per-queue and broker-wide message
//! counters with rates (`message_stats`), messages published and got
//! through the API (as the web UI and rabbitmqadmin do), and the web UI's
//! files served from the API port.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::BasicProperties;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

/// Poll `path` until `ok` holds for its body (10 s at most).
async fn until(b: &Broker, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = b.http(Method::GET, path, None).await;
        if ok(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never got there: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn channels_consumers_and_message_rates() {
    let b = Broker::start_with(|c| c.collect_statistics_interval = 1000).await;
    let (conn, ch) = b.channel().await;
    within(ch.basic_qos(7, BasicQosOptions::default())).await.unwrap();
    within(ch.confirm_select(Default::default())).await.unwrap();
    declare(&ch, "stats-q", Default::default()).await;
    for i in 0..10 {
        within(async {
            ch.basic_publish(
                "".into(),
                "stats-q".into(),
                BasicPublishOptions::default(),
                format!("m{i}").as_bytes(),
                BasicProperties::default(),
            )
            .await?
            .await
        })
        .await
        .unwrap();
    }
    let mut consumer = within(ch.basic_consume(
        "stats-q".into(),
        "c1".into(),
        BasicConsumeOptions::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    // Seven arrive (the prefetch); ack four of them, and the last three
    // follow: six stay unacknowledged.
    for i in 0..7 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        if i < 4 {
            within(d.ack(BasicAckOptions::default())).await.unwrap();
        }
    }

    let chans = until(&b, "/api/channels", |v| {
        v.as_array()
            .and_then(|a| a.first())
            .is_some_and(|c| c["messages_unacknowledged"] == 6 && c["consumer_count"] == 1)
    })
    .await;
    let c = &chans[0];
    assert_eq!(c["prefetch_count"], 7);
    assert_eq!(c["confirm"], true);
    assert_eq!(c["number"], 1);
    let conns = b.http(Method::GET, "/api/connections", None).await.1;
    let conn_name = conns[0]["name"].as_str().unwrap().to_string();
    assert_eq!(c["connection_details"]["name"], conn_name.as_str());
    assert_eq!(c["name"], format!("{conn_name} (1)").as_str());
    assert!(conns[0]["channels"].as_u64() == Some(1), "{conns}");
    assert!(conns[0]["recv_oct"].as_u64().unwrap() > 0);
    assert!(conns[0]["send_oct"].as_u64().unwrap() > 0);
    let encoded = conn_name.replace(' ', "%20").replace('>', "%3E");
    let (st, one) = b
        .http(Method::GET, &format!("/api/connections/{encoded}/channels"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(one.as_array().unwrap().len(), 1);
    let (_, in_vhost) = b.http(Method::GET, "/api/vhosts/%2F/channels", None).await;
    assert_eq!(in_vhost.as_array().unwrap().len(), 1);
    let (st, by_name) = b
        .http(Method::GET, &format!("/api/channels/{encoded}%20(1)"), None)
        .await;
    assert_eq!((st, &by_name["number"]), (StatusCode::OK, &json!(1)));

    let (_, consumers) = b.http(Method::GET, "/api/consumers", None).await;
    let cs = consumers.as_array().unwrap();
    assert_eq!(cs.len(), 1, "{consumers}");
    assert_eq!(cs[0]["consumer_tag"], "c1");
    assert_eq!(cs[0]["queue"]["name"], "stats-q");
    assert_eq!(cs[0]["ack_required"], true);
    assert_eq!(cs[0]["prefetch_count"], 7);
    assert_eq!(cs[0]["channel_details"]["connection_name"], conn_name.as_str());

    // Counters at once; a non-zero rate once a sample covers the burst.
    let q = until(&b, "/api/queues/%2F/stats-q", |q| {
        q["message_stats"]["publish_details"]["rate"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    })
    .await;
    let ms = &q["message_stats"];
    assert_eq!(ms["publish"], 10, "{q}");
    assert_eq!(ms["deliver"], 10);
    assert_eq!(ms["deliver_get"], 10);
    assert_eq!(ms["ack"], 4);
    assert!(q["memory"].as_u64().unwrap() > 0);
    let o = b.http(Method::GET, "/api/overview", None).await.1;
    assert_eq!(o["message_stats"]["publish"], 10, "{o}");
    assert_eq!(o["message_stats"]["confirm"], 10);
    assert_eq!(o["object_totals"]["channels"], 1);
    drop(consumer);
    within(conn.close(200, "bye".into())).await.unwrap();
    until(&b, "/api/channels", |v| {
        v.as_array().is_some_and(|a| a.is_empty())
    })
    .await;
}

#[tokio::test]
async fn publish_and_get_through_the_api() {
    let b = Broker::start().await;
    let (st, _) = b
        .http(
            Method::PUT,
            "/api/queues/%2F/peek",
            Some(json!({"durable": true})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    for i in 0..3 {
        let (st, r) = b
            .http(
                Method::POST,
                "/api/exchanges/%2F/amq.default/publish",
                Some(json!({
                    "properties": {"delivery_mode": 2, "headers": {"n": i}},
                    "routing_key": "peek",
                    "payload": format!("p{i}"),
                    "payload_encoding": "string",
                })),
            )
            .await;
        assert_eq!((st, &r), (StatusCode::OK, &json!({"routed": true})));
    }
    let (_, r) = b
        .http(
            Method::POST,
            "/api/exchanges/%2F/amq.direct/publish",
            Some(json!({"properties": {}, "routing_key": "nobody", "payload": "x", "payload_encoding": "string"})),
        )
        .await;
    assert_eq!(r, json!({"routed": false}));

    // Peek at two, requeueing them; then take all three.
    let get = |count: u64, ackmode: &'static str| {
        let b = &b;
        async move {
            b.http(
                Method::POST,
                "/api/queues/%2F/peek/get",
                Some(json!({"count": count, "ackmode": ackmode, "encoding": "auto", "truncate": 50000})),
            )
            .await
        }
    };
    let (st, got) = get(2, "ack_requeue_true").await;
    assert_eq!(st, StatusCode::OK);
    let got = got.as_array().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["payload"], "p0");
    assert_eq!(got[0]["payload_encoding"], "string");
    assert_eq!(got[0]["routing_key"], "peek");
    assert_eq!(got[0]["redelivered"], false);
    assert_eq!(got[0]["properties"]["delivery_mode"], 2);
    assert_eq!(got[0]["properties"]["headers"]["n"], 0);
    assert_eq!(got[1]["message_count"], 1);
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/peek", None).await;
    assert_eq!(q["messages"], 3, "requeued: {q}");

    let (_, got) = get(10, "ack_requeue_false").await;
    let got = got.as_array().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0]["redelivered"], true);
    assert_eq!(got[2]["payload"], "p2");
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/peek", None).await;
    assert_eq!(q["messages"], 0, "taken: {q}");
    assert_eq!(q["message_stats"]["get"], 5);

    // A user_id that is not the caller's is refused, as a channel would.
    let (st, _) = b
        .http(
            Method::POST,
            "/api/exchanges/%2F/amq.default/publish",
            Some(json!({"properties": {"user_id": "mallory"}, "routing_key": "peek", "payload": "x", "payload_encoding": "string"})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, e) = get(1, "sideways").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{e}");
    let (st, _) = b
        .http(
            Method::POST,
            "/api/queues/%2F/missing/get",
            Some(json!({"count": 1, "ackmode": "ack_requeue_true"})),
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_web_ui_is_served_from_the_api_port() {
    let b = Broker::start().await;
    let get = |path: &'static str| {
        let url = b.http_url(path);
        async move { within(Client::new().get(url).send()).await.unwrap() }
    };
    let r = get("/").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = within(r.text()).await.unwrap();
    assert!(
        html.contains("/ui/app.js") && html.contains("/ui/app.css"),
        "{html}"
    );
    for (path, kind) in [("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")] {
        let r = get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(
            r.headers()["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert!(within(r.text()).await.unwrap().len() > 100, "{path}");
    }
}

/// Messages published over the stream protocol count in the stream's own
/// `message_stats` as well as broker-wide.
// Multi-threaded: a failed assertion drops the producer, whose Drop
// blocks on a close that needs the broker's tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_publishes_count_on_the_stream() {
    use rabbitmq_stream_client::types::Message;
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("counted")).await.unwrap();
    let producer = within(env.producer().build("counted")).await.unwrap();
    let msgs: Vec<Message> = (0..5)
        .map(|i| Message::builder().body(format!("s{i}")).build())
        .collect();
    let confirmed = within(producer.batch_send_with_confirm(msgs)).await.unwrap();
    assert_eq!(confirmed.len(), 5);
    within(producer.close()).await.unwrap();
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/counted", None).await;
    assert_eq!(q["type"], "stream");
    assert_eq!(q["message_stats"]["publish"], 5, "{q}");
    let (_, o) = b.http(Method::GET, "/api/overview", None).await;
    assert_eq!(o["message_stats"]["publish"], 5, "{o}");
    assert_eq!(o["message_stats"]["confirm"], 5, "{o}");
}
