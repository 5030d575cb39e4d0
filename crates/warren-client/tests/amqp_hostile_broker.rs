//! warren-client's AMQP 1.0 consumer against a scripted broker that
//! delivers a message it cannot read: the consumer gets an error for it,
//! the delivery is rejected (so its credit comes back), and the next
//! delivery is read as usual.

mod support;

use bytes::BytesMut;
use support::scripted_amqp10::{accept_consumer, data_message, put_transfer};
use support::within;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use warren_amqp10::messaging;
use warren_amqp10::Performative;
use warren_client::amqp::{Connection, Error};

#[tokio::test]
async fn an_unreadable_delivery_is_rejected_and_the_next_one_read() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker = tokio::spawn(async move {
        let mut wire = accept_consumer(&listener).await;
        // Delivery 0 cannot be read; delivery 1 can.
        let good = data_message(b"fine");
        let mut out = BytesMut::new();
        for (id, payload) in [(0u32, &b"\x00\x53\x75\xb0\xff\xff"[..]), (1, &good[..])] {
            put_transfer(&mut out, id, payload);
        }
        wire.socket.write_all(&out).await.unwrap();
        // The client's dispositions: 0 rejected, 1 accepted.
        let mut told = Vec::new();
        while told.len() < 2 {
            if let Performative::Disposition(d) = wire.next().await {
                told.push((d.first, d.state.as_ref().and_then(messaging::outcome)));
            }
        }
        told
    });
    let conn = within(Connection::open(&format!(
        "amqp://guest:guest@127.0.0.1:{port}/%2f"
    )))
    .await
    .unwrap();
    let mut consumer = within(conn.consumer().queue("q").build()).await.unwrap();
    match within(consumer.receive()).await {
        Err(Error::Protocol(_)) => {}
        other => panic!("expected a protocol error, got {other:?}"),
    }
    let d = within(consumer.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"fine"[..]));
    d.accept();
    let told = within(broker).await.unwrap();
    assert_eq!(
        told,
        vec![
            (0, Some(messaging::Outcome::Rejected)),
            (1, Some(messaging::Outcome::Accepted))
        ]
    );
}
