//! The same runs through lapin.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

use crate::Outcome;

pub async fn publish(uri: &str, q: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .expect("connects");
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut pending = VecDeque::with_capacity(in_flight);
    let (start, mut acked) = (Instant::now(), 0u64);
    while start.elapsed() < secs {
        let c = ch
            .basic_publish(
                "".into(),
                q.into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .unwrap();
        pending.push_back(c);
        if pending.len() >= in_flight {
            assert!(pending.pop_front().unwrap().await.unwrap().is_ack());
            acked += 1;
        }
    }
    for c in pending {
        assert!(c.await.unwrap().is_ack());
        acked += 1;
    }
    let elapsed = start.elapsed();
    let _ = conn.close(200, "done".into()).await;
    Outcome {
        messages: acked,
        elapsed,
        note: String::new(),
    }
}

pub async fn consume(uri: &str, q: &str, n: u64, ack_every: u64, prefetch: u16) -> Outcome {
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .expect("connects");
    let ch = conn.create_channel().await.unwrap();
    ch.basic_qos(prefetch, BasicQosOptions::default()).await.unwrap();
    let start = Instant::now();
    let mut consumer = ch
        .basic_consume(
            q.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut got = 0u64;
    while got < n {
        let d = consumer.next().await.expect("a delivery").unwrap();
        got += 1;
        if got.is_multiple_of(ack_every) || got == n {
            d.ack(BasicAckOptions { multiple: true }).await.unwrap();
        }
    }
    let elapsed = start.elapsed();
    let _ = conn.close(200, "done".into()).await;
    Outcome {
        messages: got,
        elapsed,
        note: String::new(),
    }
}
