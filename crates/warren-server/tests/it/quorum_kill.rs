//! A single-node quorum queue across a SIGKILL: what a consumer of the
//! killed run held is delivered again. Its subscription may be the last
//! entry the queue's log holds (the commit that covers it written
//! nowhere, since a commit index is logged only with a later entry), so
//! the restarted member learns of that consumer only after it already
//! leads, and must let it go then too.

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use crate::binary::{free_port, spawn, wait_for_line};
use crate::common::*;

async fn connect(port: u16) -> (Connection, Channel) {
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let conn = within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .unwrap();
    let ch = within(conn.create_channel()).await.unwrap();
    (conn, ch)
}

#[tokio::test]
async fn what_a_consumer_held_when_its_node_was_killed_is_delivered_again() {
    let dir = temp_dir("qq-kill9");
    let port = free_port();
    let (mut child, _) = wait_for_line(spawn(port, &dir), "listener on").await;
    {
        let (_conn, ch) = connect(port).await;
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), s("quorum"));
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.queue_declare("held".into(), durable, args))
            .await
            .unwrap();
        within(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .unwrap();
        for i in 0..5 {
            assert!(publish_acked(&ch, "held", format!("m{i}").as_bytes()).await);
        }
        within(ch.basic_qos(10, BasicQosOptions::default()))
            .await
            .unwrap();
        let mut c = within(ch.basic_consume(
            "held".into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        for _ in 0..5 {
            within(c.next()).await.unwrap().unwrap();
        }
        child.kill().unwrap(); // SIGKILL, the five unacked
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    }
    let (mut child, _) = wait_for_line(spawn(port, &dir), "listener on").await;
    let (_conn, ch) = connect(port).await;
    until_depth(&ch, "held", 5).await;
    let m = within(ch.basic_get("held".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("m0 again");
    assert_eq!(m.delivery.data, b"m0");
    assert!(m.delivery.redelivered);
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
