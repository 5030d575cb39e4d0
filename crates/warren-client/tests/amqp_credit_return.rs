//! A consumer on a runtime of one thread gives its credit back while it
//! still works through a burst of deliveries, not after the last one:
//! the broker, having sent a whole window at once, would otherwise wait
//! idle for the application to finish. A scripted broker sends a window
//! of deliveries in one write and notes how many the application had
//! taken when the flow topping the credit up arrived.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use support::scripted_amqp10::{accept_consumer, data_message, put_transfer};
use support::within;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use warren_amqp10::performative::Flow;
use warren_amqp10::Performative;
use warren_client::amqp::Connection;

const WINDOW: u32 = 10;

#[tokio::test(flavor = "current_thread")]
async fn credit_goes_back_before_the_burst_is_taken() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken = Arc::new(AtomicUsize::new(0));
    let seen = taken.clone();
    // The broker on a thread of its own: the application below blocks
    // its thread while it "works" on a delivery.
    let broker = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = TcpListener::from_std(listener).unwrap();
            let mut wire = accept_consumer(&listener).await;
            assert_eq!(wire.credit, WINDOW);
            let body = data_message(b"work");
            let mut out = BytesMut::new();
            for id in 0..WINDOW {
                put_transfer(&mut out, id, &body);
            }
            wire.socket.write_all(&out).await.unwrap();
            loop {
                if let Performative::Flow(Flow {
                    handle: Some(_),
                    link_credit: Some(c),
                    ..
                }) = wire.next().await
                {
                    if c > 0 {
                        return seen.load(Ordering::SeqCst);
                    }
                }
            }
        })
    });
    let conn = within(Connection::open(&format!(
        "amqp://guest:guest@127.0.0.1:{port}/%2f"
    )))
    .await
    .unwrap();
    let mut consumer = within(conn.consumer().queue("q").initial_credit(WINDOW).build())
        .await
        .unwrap();
    for _ in 0..WINDOW {
        let d = within(consumer.receive()).await.unwrap();
        taken.fetch_add(1, Ordering::SeqCst);
        d.accept();
        // Work on it, holding the thread as a busy application does.
        std::thread::sleep(Duration::from_millis(20));
    }
    let when = tokio::task::spawn_blocking(move || broker.join().unwrap())
        .await
        .unwrap();
    // Half the window settled tops the credit up; the flow must reach
    // the broker then (give or take the delivery being taken), not once
    // the application has taken all it was sent.
    assert!(
        when < WINDOW as usize,
        "the credit came back only after {when} of {WINDOW} deliveries were taken"
    );
}
