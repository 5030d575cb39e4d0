//! Direct reply-to (amq.rabbitmq.reply-to) with lapin: an RPC round trip
//! with no reply queue, and the errors RabbitMQ gives for misuse.

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

use crate::common::*;

#[tokio::test]
async fn rpc_round_trip_without_a_reply_queue() {
    let b = Broker::start().await;
    let (_c, server) = b.channel().await;
    declare(&server, "rpc", FieldTable::default()).await;
    let mut requests = within(server.basic_consume(
        "rpc".into(),
        "srv".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();

    let (_c2, client) = b.channel().await;
    let mut replies = within(client.basic_consume(
        "amq.rabbitmq.reply-to".into(),
        "cli".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(
        client.basic_publish(
            "".into(),
            "rpc".into(),
            BasicPublishOptions::default(),
            b"ping",
            BasicProperties::default()
                .with_reply_to("amq.rabbitmq.reply-to".into())
                .with_correlation_id("42".into()),
        ),
    )
    .await
    .unwrap();

    let req = within(requests.next()).await.unwrap().unwrap();
    let reply_to = req.properties.reply_to().clone().unwrap();
    assert!(
        reply_to.as_str().starts_with("amq.rabbitmq.reply-to."),
        "rewritten: {reply_to}"
    );
    within(server.basic_publish(
        "".into(),
        reply_to.as_str().into(),
        BasicPublishOptions::default(),
        b"pong",
        BasicProperties::default().with_correlation_id("42".into()),
    ))
    .await
    .unwrap();
    let rep = within(replies.next()).await.unwrap().unwrap();
    assert_eq!(rep.data, b"pong");
    assert_eq!(rep.routing_key.as_str(), reply_to.as_str());
    assert_eq!(rep.properties.correlation_id().as_ref().unwrap().as_str(), "42");
}

#[tokio::test]
async fn reply_to_misuse_errors() {
    let b = Broker::start().await;
    let conn = b.lapin().await;
    let ch = conn.create_channel().await.unwrap();
    let err = within(ch.basic_consume(
        "amq.rabbitmq.reply-to".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - reply consumer cannot acknowledge".into()
        )
    );

    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "rpc", FieldTable::default()).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let err = within(async {
        ch.basic_publish(
            "".into(),
            "rpc".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into()),
        )
        .await
        .unwrap()
        .await
    })
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist".into()
        )
    );

    // A reply to a consumer that is gone is dropped quietly.
    let ch = conn.create_channel().await.unwrap();
    within(ch.basic_publish(
        "".into(),
        "amq.rabbitmq.reply-to.nobody".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    ))
    .await
    .unwrap();
    declare(&ch, "", FieldTable::default()).await;
}
