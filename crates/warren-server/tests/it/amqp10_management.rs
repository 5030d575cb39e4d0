//! RabbitMQ 4's AMQP management node (`/management`) driven with the
//! fe2o3-amqp client: a link pair sharing one name, requests with the
//! HTTP method as subject and the path as `to`, answers with the status
//! as subject. (tests/python drives it with RabbitMQ's own client.)

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Body, Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};

use crate::common::*;

pub(crate) struct Node {
    sender: Sender,
    receiver: Receiver,
    next_id: u64,
}

impl Node {
    /// A connection and session with a request and a response link (the
    /// names differ: fe2o3-amqp refuses two links of one name, and a lone
    /// response link serves any request link).
    async fn open(b: &Broker) -> (ConnectionHandle<()>, SessionHandle<()>, Node) {
        Node::open_as(b, "guest", "guest").await
    }

    /// The same, logged in as `user` with `pass`.
    pub(crate) async fn open_as(
        b: &Broker,
        user: &str,
        pass: &str,
    ) -> (ConnectionHandle<()>, SessionHandle<()>, Node) {
        let url = format!("amqp://{user}:{pass}@127.0.0.1:{}", b.port);
        let mut conn = within(Connection::open("warren-test", url.as_str()))
            .await
            .unwrap();
        let mut session = within(Session::begin(&mut conn)).await.unwrap();
        let node = Node::on_session(&mut session).await;
        (conn, session, node)
    }

    /// The link pair on a session the caller has.
    pub(crate) async fn on_session(session: &mut SessionHandle<()>) -> Node {
        let sender = within(Sender::attach(session, "requests", "/management"))
            .await
            .unwrap();
        let receiver = within(Receiver::attach(session, "responses", "/management"))
            .await
            .unwrap();
        Node {
            sender,
            receiver,
            next_id: 0,
        }
    }

    pub(crate) async fn request(&mut self, method: &str, path: &str, body: Value) -> (String, Value) {
        self.next_id += 1;
        let id = format!("req-{}", self.next_id);
        let m = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(id.clone())
                    .to(path)
                    .subject(method)
                    .reply_to("$me")
                    .build(),
            )
            .value(body)
            .build();
        within(self.sender.send(m)).await.unwrap();
        let d: fe2o3_amqp::link::delivery::Delivery<Body<Value>> =
            within(self.receiver.recv()).await.unwrap();
        let p = d.message().properties.clone().unwrap();
        assert_eq!(
            p.correlation_id,
            Some(MessageId::String(id)),
            "answers say what they answer"
        );
        let body = match d.body() {
            Body::Value(v) => v.0.clone(),
            other => panic!("expected an amqp-value body, got {other:?}"),
        };
        (p.subject.unwrap(), body)
    }
}

pub(crate) fn map(pairs: &[(&str, Value)]) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in pairs {
        m.insert(Value::String(k.to_string()), v.clone());
    }
    Value::Map(m)
}

pub(crate) fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m.get(&Value::String(key.into())),
        _ => None,
    }
}

#[tokio::test]
async fn the_management_node_declares_binds_purges_and_deletes() {
    let b = Broker::start().await;
    let (mut conn, mut session, mut node) = Node::open(&b).await;

    let mut args = OrderedMap::new();
    args.insert(Value::String("x-max-length".into()), Value::Long(10));
    let decl = map(&[
        ("durable", Value::Bool(true)),
        ("exclusive", Value::Bool(false)),
        ("auto_delete", Value::Bool(false)),
        ("arguments", Value::Map(args)),
    ]);
    let (status, info) = node.request("PUT", "/queues/m%20q", decl.clone()).await;
    assert_eq!(status, "201");
    assert_eq!(field(&info, "name"), Some(&Value::String("m q".into())));
    assert_eq!(field(&info, "type"), Some(&Value::String("classic".into())));
    assert!(field(&info, "leader").is_some(), "RabbitMQ's client reads leader");
    // Again, the same: 200; different: 409.
    assert_eq!(node.request("PUT", "/queues/m%20q", decl).await.0, "200");
    let other = map(&[("durable", Value::Bool(false))]);
    assert_eq!(node.request("PUT", "/queues/m%20q", other).await.0, "409");

    let x = map(&[
        ("type", Value::String("fanout".into())),
        ("durable", Value::Bool(true)),
    ]);
    assert_eq!(node.request("PUT", "/exchanges/m-x", x).await.0, "204");
    let bind = map(&[
        ("source", Value::String("m-x".into())),
        ("destination_queue", Value::String("m q".into())),
        ("binding_key", Value::String("any".into())),
        ("arguments", Value::Map(OrderedMap::new())),
    ]);
    assert_eq!(node.request("POST", "/bindings", bind).await.0, "204");
    let (status, list) = node
        .request("GET", "/bindings?src=m-x&dstq=m%20q&key=any", Value::Null)
        .await;
    assert_eq!(status, "200");
    let Value::List(list) = list else {
        panic!("{list:?}")
    };
    assert_eq!(list.len(), 1);
    let location = match field(&list[0], "location") {
        Some(Value::String(l)) => l.clone(),
        other => panic!("{other:?}"),
    };

    // A message through the exchange lands in the queue; purge counts it.
    let (_c, ch) = b.channel().await;
    within(ch.basic_publish(
        "m-x".into(),
        "".into(),
        Default::default(),
        b"through the exchange",
        Default::default(),
    ))
    .await
    .unwrap();
    let (status, info) = node.request("GET", "/queues/m%20q", Value::Null).await;
    assert_eq!(status, "200");
    assert_eq!(field(&info, "message_count"), Some(&Value::Ulong(1)));
    let (status, purged) = node
        .request("DELETE", "/queues/m%20q/messages", Value::Null)
        .await;
    assert_eq!(
        (status.as_str(), field(&purged, "message_count")),
        ("200", Some(&Value::Ulong(1)))
    );

    // Unbind by the location the listing gave; then nothing is bound.
    assert_eq!(node.request("DELETE", &location, Value::Null).await.0, "204");
    let (_, list) = node
        .request("GET", "/bindings?src=m-x&dstq=m%20q", Value::Null)
        .await;
    assert_eq!(list, Value::List(vec![]));

    assert_eq!(
        node.request("DELETE", "/exchanges/m-x", Value::Null).await.0,
        "204"
    );
    assert_eq!(
        node.request("DELETE", "/queues/m%20q", Value::Null).await.0,
        "200"
    );
    assert_eq!(node.request("GET", "/queues/m%20q", Value::Null).await.0, "404");
    assert_eq!(node.request("GET", "/nowhere", Value::Null).await.0, "404");
    let _ = within(node.sender.close()).await;
    let _ = within(node.receiver.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// A queue declared exclusive through the node belongs to the connection
/// and goes with it.
#[tokio::test]
async fn an_exclusive_queue_declared_through_the_node_goes_with_its_connection() {
    let b = Broker::start().await;
    let (mut conn, mut session, mut node) = Node::open(&b).await;
    let decl = map(&[("exclusive", Value::Bool(true)), ("durable", Value::Bool(false))]);
    assert_eq!(node.request("PUT", "/queues/mine", decl).await.0, "201");
    let (_c, ch) = b.channel().await;
    let r = within(ch.queue_declare(
        "mine".into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    ))
    .await;
    assert!(r.is_err(), "another connection may not use it");
    let e = format!("{:?}", r.unwrap_err());
    assert!(
        e.contains("RESOURCE_LOCKED") || e.contains("ResourceLocked") || e.contains("405"),
        "{e}"
    );
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
    // Gone once its connection is.
    within(async {
        loop {
            let (_c, ch) = b.channel().await;
            let r = ch
                .queue_declare(
                    "mine".into(),
                    lapin::options::QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    Default::default(),
                )
                .await;
            if let Err(e) = r {
                if format!("{e:?}").contains("NOT_FOUND") || format!("{e:?}").contains("404") {
                    break;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// An exclusive, auto-delete queue declared durable (as RabbitMQ's AMQP
/// 1.0 clients declare every queue) is reported as declared, by the
/// declare's answer, a GET and the HTTP API, as RabbitMQ 4 reports it;
/// it still goes with its connection.
#[tokio::test]
async fn an_exclusive_auto_delete_queue_is_reported_as_declared() {
    let b = Broker::start().await;
    let (mut conn, mut session, mut node) = Node::open(&b).await;
    let decl = map(&[
        ("durable", Value::Bool(true)),
        ("exclusive", Value::Bool(true)),
        ("auto_delete", Value::Bool(true)),
    ]);
    let (status, put) = node.request("PUT", "/queues/excl-ad", decl).await;
    assert_eq!(status, "201");
    for (k, v) in [("durable", true), ("exclusive", true), ("auto_delete", true)] {
        assert_eq!(field(&put, k), Some(&Value::Bool(v)), "{k} in {put:?}");
    }
    assert_eq!(field(&put, "type"), Some(&Value::String("classic".into())));
    let (status, got) = node.request("GET", "/queues/excl-ad", Value::Null).await;
    assert_eq!(status, "200");
    assert_eq!(got, put, "GET answers as the declare did");
    let (_, q) = b
        .http(reqwest::Method::GET, "/api/queues/%2F/excl-ad", None)
        .await;
    assert_eq!(
        (q["durable"].as_bool(), q["exclusive"].as_bool()),
        (Some(true), Some(true))
    );
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
