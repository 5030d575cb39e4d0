//! warren-client's AMQP 1.0 RPC client and server against an in-process
//! Warren, following RabbitMQ's AMQP 1.0 clients' requester and
//! responder tests: replies by direct reply-to (the default where the
//! broker serves it) and through an exclusive queue, and direct reply-to
//! across a recovery (a new name; a call in flight fails as lost).

mod support;

use std::time::Duration;

use support::amqp::{wait_for_count, warren, with_queue};
use support::within;
use warren_client::amqp::{Connection, Error, Event, Message, QueueSpec, RecoveryOptions, ReplyTo};

/// An RPC server answers each request to its reply-to with the request's
/// id as correlation id; concurrent calls each get their own reply; a
/// call nobody answers times out; a handler's error discards the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_requests_get_their_own_replies() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "rpc-upper").await;
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
    assert!(client.is_direct(), "Warren serves direct reply-to");
    assert!(
        client
            .reply_address()
            .starts_with("/queues/amq.rabbitmq.reply-to."),
        "{}",
        client.reply_address()
    );
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

/// Asked for, replies come through an exclusive queue of the client's
/// own, and nothing else changes for the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_through_an_exclusive_queue_when_asked() {
    let (uri, _broker) = warren().await;
    let (conn, _m) = with_queue(&uri, "rpc-echo").await;
    let server = within(conn.rpc_server("rpc-echo", |request: Message| async move {
        Ok(Message::new(request.data().unwrap_or_default().to_vec()))
    }))
    .await
    .unwrap();
    let client = within(
        conn.rpc_client_builder("rpc-echo")
            .reply_to(ReplyTo::ExclusiveQueue)
            .build(),
    )
    .await
    .unwrap();
    assert!(!client.is_direct());
    let reply_queue = client.reply_address();
    assert!(reply_queue.starts_with("/queues/"), "{reply_queue}");
    assert!(!reply_queue.contains("amq.rabbitmq.reply-to"), "{reply_queue}");
    for i in 0..5 {
        let reply = within(client.call(Message::new(format!("echo {i}"))))
            .await
            .unwrap();
        assert_eq!(reply.data(), Some(format!("echo {i}").as_bytes()));
    }
    server.close();
    conn.close().await;
}

/// Direct reply-to across a recovery: the connection closed through the
/// management API, a call waiting for its reply then fails as lost (the
/// reply goes to a name of the lost connection), and once recovered the
/// client has a new name and calls work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_gets_a_new_name_after_a_recovery() {
    let (targets, _broker) = support::targets().await;
    let t = &targets[0];
    let server_conn = within(Connection::open(&t.uri)).await.unwrap();
    let m = within(server_conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("rpc-slow")))
        .await
        .unwrap();
    let server = within(server_conn.rpc_server("rpc-slow", |request: Message| async move {
        if request.data() == Some(&b"slow"[..]) {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        Ok(Message::new("done"))
    }))
    .await
    .unwrap();
    let conn = within(
        Connection::builder(&t.uri)
            .container_id("rpc-recovering")
            .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(300)))
            .open(),
    )
    .await
    .unwrap();
    let mut events = conn.events();
    let client = within(conn.rpc_client("rpc-slow")).await.unwrap();
    assert!(client.is_direct());
    let before = client.reply_address();
    assert_eq!(
        within(client.call(Message::new("quick"))).await.unwrap().data(),
        Some(&b"done"[..])
    );
    let (lost, _) = tokio::join!(client.call(Message::new("slow")), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        support::close_through_the_api(t, "rpc-recovering").await;
    });
    match lost {
        Err(Error::ConnectionLost(_)) => {}
        other => panic!("a call in flight at the loss fails as lost: {other:?}"),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Event::Recovered)) => break,
            Ok(Some(_)) => continue,
            other => panic!("no recovery: {other:?}"),
        }
    }
    // The new wire's name comes with the reply link's attach answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.reply_address() == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reply name never changed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(client
        .reply_address()
        .starts_with("/queues/amq.rabbitmq.reply-to."));
    assert_eq!(
        within(client.call(Message::new("quick"))).await.unwrap().data(),
        Some(&b"done"[..])
    );
    server.close();
    conn.close().await;
    server_conn.close().await;
}
