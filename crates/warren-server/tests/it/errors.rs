//! Errors as RabbitMQ gives them: channel-level ones close only the channel
//! (the connection keeps working), connection-level ones close the
//! connection with the right code and a clear text.

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};

use crate::common::*;

/// Run `op` on a fresh channel of `conn`; expect it to fail with `code`,
/// and the connection to stay usable.
async fn channel_error<F, Fut, T>(conn: &lapin::Connection, op: F) -> (u16, String)
where
    F: FnOnce(lapin::Channel) -> Fut,
    Fut: std::future::Future<Output = lapin::Result<T>>,
    T: std::fmt::Debug,
{
    let ch = within(conn.create_channel()).await.unwrap();
    let probe = ch.clone();
    let err = within(op(ch)).await.expect_err("operation should fail");
    let e = amqp_error(&err);
    assert!(!probe.status().connected(), "channel closed by the error");
    assert!(
        conn.status().connected(),
        "connection still open after a channel error"
    );
    // and the connection still works
    let ch2 = within(conn.create_channel()).await.unwrap();
    within(ch2.queue_declare("".into(), QueueDeclareOptions::default(), FieldTable::default()))
        .await
        .unwrap();
    e
}

#[tokio::test]
async fn channel_level_errors_keep_the_connection() {
    let b = Broker::start().await;
    let conn = b.lapin().await;

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_declare(
            "missing".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (404, "NOT_FOUND - no queue 'missing' in vhost '/'")
    );

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.exchange_declare(
            "nox".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (404, "NOT_FOUND - no exchange 'nox' in vhost '/'")
    );

    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "dq", FieldTable::default()).await;
    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_declare(
            "dq".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(code, 406);
    assert_eq!(text, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'dq' in vhost '/': received 'true' but current is 'false'");

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_declare(
            "dq".into(),
            QueueDeclareOptions::default(),
            table(&[("x-message-ttl", i(5))]),
        )
        .await
    })
    .await;
    assert_eq!(code, 406);
    assert!(text.contains("inequivalent arg 'x-message-ttl'"), "{text}");

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_declare(
            "amq.mine".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (
            403,
            "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'"
        )
    );

    let (code, _) = channel_error(&conn, |ch| async move {
        ch.exchange_declare(
            "amq.mine".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(code, 403);

    ch.exchange_declare(
        "ex1".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let (code, text) = channel_error(&conn, |ch| async move {
        ch.exchange_declare(
            "ex1".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(code, 406);
    assert_eq!(text, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'ex1' in vhost '/': received 'fanout' but current is 'direct'");

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_bind(
            "dq".into(),
            "".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange"
        )
    );

    let (code, _) = channel_error(&conn, |ch| async move {
        ch.queue_bind(
            "dq".into(),
            "nox".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(code, 404);

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.basic_consume(
            "".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (404, "NOT_FOUND - no previously declared queue")
    );

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.exchange_declare(
            "unk".into(),
            ExchangeKind::Custom("x-nope".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
    })
    .await;
    assert_eq!(
        (code, text.as_str()),
        (406, "PRECONDITION_FAILED - unknown exchange type 'x-nope'")
    );

    let (code, text) = channel_error(&conn, |ch| async move { ch.tx_commit().await }).await;
    assert_eq!(
        (code, text.as_str()),
        (406, "PRECONDITION_FAILED - channel is not transactional")
    );

    let (code, _) = channel_error(&conn, |ch| async move {
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        ch.tx_select().await
    })
    .await;
    assert_eq!(code, 406);

    let (code, text) = channel_error(&conn, |ch| async move {
        ch.queue_declare(
            "q-bad".into(),
            QueueDeclareOptions::default(),
            table(&[("x-overflow", s("sideways"))]),
        )
        .await
    })
    .await;
    assert_eq!(code, 406);
    assert!(
        text.starts_with("PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'q-bad'"),
        "{text}"
    );
}

#[tokio::test]
async fn unknown_delivery_tag_closes_only_the_channel() {
    let b = Broker::start().await;
    let conn = b.lapin().await;
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "ack", FieldTable::default()).await;
    ch.basic_ack(42, BasicAckOptions::default()).await.unwrap();
    // (the exact code and text are checked byte for byte in raw.rs)
    within(async {
        while ch.status().connected() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(conn.status().connected());
}

/// Publish on a fresh confirm-mode channel and return the channel error
/// the publish caused (the confirm future carries it).
async fn publish_error(
    conn: &lapin::Connection,
    x: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) -> (u16, String) {
    let ch = within(conn.create_channel()).await.unwrap();
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let err = within(async {
        ch.basic_publish(x.into(), key.into(), BasicPublishOptions::default(), body, props)
            .await
            .unwrap()
            .await
    })
    .await
    .expect_err("publish should fail");
    assert!(conn.status().connected());
    amqp_error(&err)
}

#[tokio::test]
async fn publish_errors() {
    let b = Broker::start_with(|c| c.max_message_size = 1000).await;
    let conn = b.lapin().await;
    assert_eq!(
        publish_error(&conn, "no-such-x", "k", b"m", BasicProperties::default()).await,
        (404, "NOT_FOUND - no exchange 'no-such-x' in vhost '/'".into())
    );
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_declare(
        "intern".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        publish_error(&conn, "intern", "k", b"m", BasicProperties::default()).await,
        (
            403,
            "ACCESS_REFUSED - cannot publish to internal exchange 'intern' in vhost '/'".into()
        )
    );
    assert_eq!(
        publish_error(&conn, "", "k", &[0u8; 2000], BasicProperties::default()).await,
        (
            406,
            "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000".into()
        )
    );
    assert_eq!(
        publish_error(
            &conn,
            "",
            "k",
            b"m",
            BasicProperties::default().with_expiration("soon".into())
        )
        .await,
        (
            406,
            "PRECONDITION_FAILED - invalid expiration 'soon': no_integer".into()
        )
    );
    assert_eq!(
        publish_error(
            &conn,
            "",
            "k",
            b"m",
            BasicProperties::default().with_user_id("mallory".into())
        )
        .await,
        (
            406,
            "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'"
                .into()
        )
    );
}

#[tokio::test]
async fn exclusive_queue_is_locked_for_other_connections() {
    let b = Broker::start().await;
    let (c1, ch1) = b.channel().await;
    within(ch1.queue_declare(
        "mine".into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let c2 = b.lapin().await;
    for op in 0..3 {
        let ch = c2.create_channel().await.unwrap();
        let err = match op {
            0 => ch
                .queue_declare(
                    "mine".into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map(|_| ()),
            1 => ch
                .basic_consume(
                    "mine".into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map(|_| ()),
            _ => ch
                .queue_purge("mine".into(), QueuePurgeOptions::default())
                .await
                .map(|_| ()),
        }
        .unwrap_err();
        let (code, text) = amqp_error(&err);
        assert_eq!(code, 405, "{text}");
        assert!(text.starts_with(
            "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost '/'"
        ));
    }
    // Closing the owner deletes the queue.
    c1.close(200, "bye".into()).await.unwrap();
    let ch = c2.create_channel().await.unwrap();
    let err = within(async {
        loop {
            match ch
                .queue_declare(
                    "mine".into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
            {
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                Err(e) => break e,
            }
        }
    })
    .await;
    assert_eq!(amqp_error(&err).0, 404);
}

#[tokio::test]
async fn connection_level_errors_close_the_connection() {
    let b = Broker::start().await;
    let conn = b.lapin().await;
    let ch = conn.create_channel().await.unwrap();
    let err = within(ch.basic_qos(10, BasicQosOptions::default()))
        .await
        .map(|_| ());
    assert!(err.is_ok());
    // prefetch_size is not implemented: 540, connection-level. lapin has no
    // way to send it, so reuse a consumer tag instead (530 NOT_ALLOWED).
    declare(&ch, "t", FieldTable::default()).await;
    let _held = ch
        .basic_consume(
            "t".into(),
            "dup".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let err = within(ch.basic_consume(
        "t".into(),
        "dup".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert!(err.is_amqp_hard_error() || !conn.status().connected(), "{err:?}");
    within(async {
        while conn.status().connected() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    // Other connections are unaffected.
    let (_c, ch) = b.channel().await;
    declare(&ch, "t", FieldTable::default()).await;
}
