//! warren-client's AMQP 1.0 RPC client and server against an in-process
//! Warren, following RabbitMQ's AMQP 1.0 clients' requester and
//! responder tests.

mod support;

use std::time::Duration;

use support::amqp::{wait_for_count, warren};
use support::within;
use warren_client::amqp::{Connection, Error, Message, QueueSpec};

/// An RPC server answers each request to its reply-to with the request's
/// id as correlation id; concurrent calls each get their own reply; a
/// call nobody answers times out; a handler's error discards the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_requests_get_their_own_replies() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("rpc-upper")))
        .await
        .unwrap();
    within(m.declare_queue(&QueueSpec::classic("rpc-nobody")))
        .await
        .unwrap();
    let server = within(conn.rpc_server("rpc-upper", |request: Message| async move {
        let text = String::from_utf8_lossy(request.data().unwrap_or_default()).to_uppercase();
        if text == "FAIL" {
            return Err("asked to fail".to_string());
        }
        Ok(Message::new(text))
    }))
    .await
    .unwrap();
    let client = within(conn.rpc_client("rpc-upper")).await.unwrap();
    let calls = (0..20).map(|i| client.call(Message::new(format!("call {i}"))));
    let replies = within(futures_util::future::join_all(calls)).await;
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r.unwrap().data(), Some(format!("CALL {i}").as_bytes()));
    }
    let quick = within(conn.rpc_client("rpc-upper"))
        .await
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    match within(quick.call(Message::new("fail"))).await {
        Err(Error::Timeout(_)) => {}
        other => panic!("a failed handler sends no reply: {other:?}"),
    }
    let unanswered = within(conn.rpc_client("rpc-nobody"))
        .await
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    match within(unanswered.call(Message::new("anyone?"))).await {
        Err(Error::Timeout(_)) => {}
        other => panic!("expected a time-out, got {other:?}"),
    }
    assert_eq!(
        wait_for_count(&m, "rpc-nobody", 1).await,
        1,
        "the request waits in its queue"
    );
    server.close();
    conn.close().await;
}
