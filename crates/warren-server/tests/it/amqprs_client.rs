//! The same broker through a second, independent client (amqprs): its
//! strict parsing of server properties, confirms and returns through
//! callbacks, consuming with manual acks, channel errors, server-sent
//! cancel, basic.get, qos and transactions.

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::*;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::error::Error as AmqprsError;
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, FieldTable, FieldValue, Nack, Return};
use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::common::*;

type R<T> = Result<T, AmqprsError>;

#[derive(Debug, PartialEq)]
enum Ev {
    Closed(u16, String),
    Cancelled(String),
    Ack(u64, bool),
    Nack(u64, bool),
    Returned(u16, String, Vec<u8>),
}

struct ChCb(mpsc::UnboundedSender<Ev>);

#[async_trait]
impl ChannelCallback for ChCb {
    async fn close(&mut self, _c: &Channel, close: CloseChannel) -> R<()> {
        let _ = self
            .0
            .send(Ev::Closed(close.reply_code(), close.reply_text().clone()));
        Ok(())
    }
    async fn cancel(&mut self, _c: &Channel, cancel: Cancel) -> R<()> {
        let _ = self.0.send(Ev::Cancelled(cancel.consumer_tag().clone()));
        Ok(())
    }
    async fn flow(&mut self, _c: &Channel, active: bool) -> R<bool> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _c: &Channel, ack: Ack) {
        let _ = self.0.send(Ev::Ack(ack.delivery_tag(), ack.mutiple()));
    }
    async fn publish_nack(&mut self, _c: &Channel, nack: Nack) {
        let _ = self.0.send(Ev::Nack(nack.delivery_tag(), nack.multiple()));
    }
    async fn publish_return(&mut self, _c: &Channel, ret: Return, _p: BasicProperties, body: Vec<u8>) {
        let _ = self
            .0
            .send(Ev::Returned(ret.reply_code(), ret.reply_text().clone(), body));
    }
}

struct ConnCb;

#[async_trait]
impl ConnectionCallback for ConnCb {
    async fn close(&mut self, _c: &Connection, _close: Close) -> R<()> {
        Ok(())
    }
    async fn blocked(&mut self, _c: &Connection, _reason: String) {}
    async fn unblocked(&mut self, _c: &Connection) {}
    async fn secret_updated(&mut self, _c: &Connection) {}
}

async fn open(b: &Broker) -> (Connection, Channel, mpsc::UnboundedReceiver<Ev>) {
    let args = OpenConnectionArguments::new("127.0.0.1", b.port, "guest", "guest")
        .virtual_host("/")
        .finish();
    let conn = within(Connection::open(&args)).await.expect("amqprs connects");
    conn.register_callback(ConnCb).await.unwrap();
    let ch = within(conn.open_channel(None)).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    ch.register_callback(ChCb(tx)).await.unwrap();
    (conn, ch, rx)
}

async fn event(rx: &mut mpsc::UnboundedReceiver<Ev>) -> Ev {
    within(rx.recv()).await.expect("event")
}

#[tokio::test]
async fn server_properties_parse_strictly() {
    let b = Broker::start().await;
    let (conn, _ch, _rx) = open(&b).await;
    let sp = conn.server_properties();
    assert_eq!(sp.product(), "RabbitMQ");
    let c = sp.capabilities();
    assert!(c.publisher_confirms() && c.basic_nack() && c.consumer_cancel_notify() && c.connection_blocked());
    assert!(c.exchange_exchange_bindings() && c.per_consumer_qos() && c.consumer_priorities());
    assert!(c.authentication_failure_close() && c.direct_reply_to());
    assert_eq!(conn.frame_max(), 131072);
    assert_eq!(conn.channel_max(), 2047);
}

#[tokio::test]
async fn confirms_returns_consume_and_ack() {
    let b = Broker::start().await;
    let (_conn, ch, mut rx) = open(&b).await;
    let (q, _, _) = within(ch.queue_declare(QueueDeclareArguments::new("aq")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q, "aq");
    within(ch.confirm_select(ConfirmSelectArguments::default()))
        .await
        .unwrap();
    for n in 0..10u8 {
        ch.basic_publish(
            BasicProperties::default().with_priority(n).finish(),
            vec![n],
            BasicPublishArguments::new("", "aq"),
        )
        .await
        .unwrap();
    }
    // Acks may be merged with `multiple`; together they cover 1..=10.
    let mut confirmed = 0;
    while confirmed < 10 {
        match event(&mut rx).await {
            Ev::Ack(tag, multiple) => {
                assert!(tag > confirmed);
                assert!(multiple || tag == confirmed + 1);
                confirmed = tag;
            }
            other => panic!("{other:?}"),
        }
    }
    ch.basic_publish(
        BasicProperties::default(),
        b"lost".to_vec(),
        BasicPublishArguments::new("", "nowhere").mandatory(true).finish(),
    )
    .await
    .unwrap();
    assert_eq!(
        event(&mut rx).await,
        Ev::Returned(312, "NO_ROUTE".into(), b"lost".to_vec())
    );
    assert_eq!(event(&mut rx).await, Ev::Ack(11, false));

    within(ch.basic_qos(BasicQosArguments::new(0, 5, false)))
        .await
        .unwrap();
    let (_tag, mut msgs) =
        within(ch.basic_consume_rx(BasicConsumeArguments::new("aq", "").manual_ack(true).finish()))
            .await
            .unwrap();
    for n in 0..10u8 {
        let m = within(msgs.recv()).await.unwrap();
        assert_eq!(m.content.unwrap(), vec![n]);
        let d = m.deliver.unwrap();
        assert_eq!(m.basic_properties.unwrap().priority(), Some(n));
        ch.basic_ack(BasicAckArguments::new(d.delivery_tag(), false))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn channel_error_arrives_through_the_callback() {
    let b = Broker::start().await;
    let (conn, ch, mut rx) = open(&b).await;
    let r = within(ch.queue_declare(QueueDeclareArguments::new("missing").passive(true).finish())).await;
    assert!(r.is_err());
    assert_eq!(
        event(&mut rx).await,
        Ev::Closed(404, "NOT_FOUND - no queue 'missing' in vhost '/'".into())
    );
    assert!(conn.is_open());
    let ch2 = within(conn.open_channel(None)).await.unwrap();
    within(ch2.queue_declare(QueueDeclareArguments::new("present")))
        .await
        .unwrap();
}

#[tokio::test]
async fn server_cancel_on_queue_delete() {
    let b = Broker::start().await;
    let (_conn, ch, mut rx) = open(&b).await;
    within(ch.queue_declare(QueueDeclareArguments::new("gone")))
        .await
        .unwrap();
    let (tag, _msgs) = within(ch.basic_consume_rx(BasicConsumeArguments::new("gone", "ctag-1")))
        .await
        .unwrap();
    let (_c2, ch2, _rx2) = open(&b).await;
    within(ch2.queue_delete(QueueDeleteArguments::new("gone")))
        .await
        .unwrap();
    assert_eq!(event(&mut rx).await, Ev::Cancelled(tag));
}

#[tokio::test]
async fn get_topic_headers_and_tx() {
    let b = Broker::start().await;
    let (_conn, ch, _rx) = open(&b).await;
    within(ch.exchange_declare(ExchangeDeclareArguments::of_type("logs", ExchangeType::Topic)))
        .await
        .unwrap();
    within(ch.queue_declare(QueueDeclareArguments::new("errors")))
        .await
        .unwrap();
    within(ch.queue_bind(QueueBindArguments::new("errors", "logs", "*.error")))
        .await
        .unwrap();
    let mut h = FieldTable::new();
    h.insert("n".try_into().unwrap(), FieldValue::l(7));
    let props = BasicProperties::default()
        .with_headers(h)
        .with_correlation_id("c")
        .finish();
    ch.basic_publish(
        props,
        b"disk".to_vec(),
        BasicPublishArguments::new("logs", "db.error"),
    )
    .await
    .unwrap();
    ch.basic_publish(
        BasicProperties::default(),
        b"fine".to_vec(),
        BasicPublishArguments::new("logs", "db.info"),
    )
    .await
    .unwrap();
    let (ok, props, body) = within(ch.basic_get(BasicGetArguments::new("errors").no_ack(false).finish()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body, b"disk");
    assert_eq!(ok.message_count(), 0);
    assert_eq!(props.correlation_id().map(String::as_str), Some("c"));
    let n = props
        .headers()
        .and_then(|h| h.get(&"n".try_into().unwrap()).cloned());
    assert!(matches!(n, Some(FieldValue::l(7))), "{n:?}");
    ch.basic_ack(BasicAckArguments::new(ok.delivery_tag(), false))
        .await
        .unwrap();
    assert!(within(ch.basic_get(BasicGetArguments::new("errors")))
        .await
        .unwrap()
        .is_none());

    within(ch.tx_select()).await.unwrap();
    ch.basic_publish(
        BasicProperties::default(),
        b"t".to_vec(),
        BasicPublishArguments::new("logs", "x.error"),
    )
    .await
    .unwrap();
    assert!(within(ch.basic_get(BasicGetArguments::new("errors")))
        .await
        .unwrap()
        .is_none());
    within(ch.tx_commit()).await.unwrap();
    assert!(
        within(ch.basic_get(BasicGetArguments::new("errors").no_ack(true).finish()))
            .await
            .unwrap()
            .is_some()
    );
}
