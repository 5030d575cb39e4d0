//! The same runs through amqprs. Its confirms arrive as delivery tags in
//! a callback, so the application keeps what is outstanding itself: here
//! a queue of tags settled from the front and a semaphore for the limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicPublishArguments, BasicQosArguments, Channel,
    ConfirmSelectArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::error::Error as AmqprsError;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::Outcome;

fn open_args(uri: &str) -> OpenConnectionArguments {
    // amqp://user:pass@host:port/vhost, as bench/client.sh passes it.
    let rest = uri.trim_start_matches("amqp://");
    let (auth, hostpath) = rest.split_once('@').expect("user:pass@");
    let (user, pass) = auth.split_once(':').expect("user:pass");
    let hostport = hostpath.split('/').next().unwrap();
    let (host, port) = hostport.split_once(':').expect("host:port");
    OpenConnectionArguments::new(host, port.parse().unwrap(), user, pass)
        .virtual_host("/")
        .finish()
}

/// Outstanding publishes by delivery tag; acks settle from the front.
struct Outstanding {
    tags: Mutex<VecDeque<u64>>,
    slots: Arc<Semaphore>,
    acked: std::sync::atomic::AtomicU64,
}

struct Confirms(Arc<Outstanding>);

#[async_trait]
impl ChannelCallback for Confirms {
    async fn close(&mut self, _c: &Channel, _close: CloseChannel) -> Result<(), AmqprsError> {
        Ok(())
    }
    async fn cancel(&mut self, _c: &Channel, _cancel: Cancel) -> Result<(), AmqprsError> {
        Ok(())
    }
    async fn flow(&mut self, _c: &Channel, active: bool) -> Result<bool, AmqprsError> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _c: &Channel, ack: Ack) {
        let mut tags = self.0.tags.lock();
        let mut settled = 0;
        if ack.mutiple() {
            while tags.front().is_some_and(|t| *t <= ack.delivery_tag()) {
                tags.pop_front();
                settled += 1;
            }
        } else if let Some(i) = tags.iter().position(|t| *t == ack.delivery_tag()) {
            tags.remove(i);
            settled = 1;
        }
        self.0
            .acked
            .fetch_add(settled as u64, std::sync::atomic::Ordering::Relaxed);
        self.0.slots.add_permits(settled);
    }
    async fn publish_nack(&mut self, _c: &Channel, nack: Nack) {
        panic!("nacked {}", nack.delivery_tag());
    }
    async fn publish_return(&mut self, _c: &Channel, _r: Return, _p: BasicProperties, _b: Vec<u8>) {}
}

pub async fn publish(uri: &str, q: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let conn = Connection::open(&open_args(uri)).await.expect("connects");
    let ch = conn.open_channel(None).await.unwrap();
    let out = Arc::new(Outstanding {
        tags: Mutex::new(VecDeque::new()),
        slots: Arc::new(Semaphore::new(in_flight)),
        acked: Default::default(),
    });
    ch.register_callback(Confirms(out.clone())).await.unwrap();
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    let start = Instant::now();
    let mut tag = 0u64;
    while start.elapsed() < secs {
        out.slots.acquire().await.unwrap().forget();
        tag += 1;
        out.tags.lock().push_back(tag);
        ch.basic_publish(
            BasicProperties::default(),
            body.to_vec(),
            BasicPublishArguments::new("", q),
        )
        .await
        .unwrap();
    }
    // Wait for the rest.
    let _ = out.slots.acquire_many(in_flight as u32).await.unwrap();
    let elapsed = start.elapsed();
    let _ = conn.close().await;
    Outcome {
        messages: out.acked.load(std::sync::atomic::Ordering::Relaxed),
        elapsed,
        note: String::new(),
    }
}

pub async fn consume(uri: &str, q: &str, n: u64, ack_every: u64, prefetch: u16) -> Outcome {
    let conn = Connection::open(&open_args(uri)).await.expect("connects");
    let ch = conn.open_channel(None).await.unwrap();
    ch.basic_qos(BasicQosArguments::new(0, prefetch, false))
        .await
        .unwrap();
    let start = Instant::now();
    let (_tag, mut rx) = ch
        .basic_consume_rx(BasicConsumeArguments::new(q, "").manual_ack(true).finish())
        .await
        .unwrap();
    let mut got = 0u64;
    while got < n {
        let m = rx.recv().await.expect("a delivery");
        got += 1;
        if got.is_multiple_of(ack_every) || got == n {
            let tag = m.deliver.unwrap().delivery_tag();
            ch.basic_ack(BasicAckArguments::new(tag, true)).await.unwrap();
        }
    }
    let elapsed = start.elapsed();
    let _ = conn.close().await;
    Outcome {
        messages: got,
        elapsed,
        note: String::new(),
    }
}
