//! The generated method codecs: every method round-trips, every truncation
//! of a method payload is an error (never a panic), and a few exact byte
//! layouts checked against the spec by hand.

use bytes::{Bytes, BytesMut};
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, FieldValue, Method};

fn table() -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-message-ttl", FieldValue::I32(1000));
    t.insert("name", FieldValue::from("v"));
    t
}

fn b(s: &'static [u8]) -> Bytes {
    Bytes::from_static(s)
}

/// One filled-in value of every method (bits set, strings non-empty).
fn all_methods() -> Vec<Method> {
    vec![
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: table(),
            mechanisms: b(b"PLAIN AMQPLAIN"),
            locales: b(b"en_US"),
        }
        .into(),
        ConnectionStartOk {
            client_properties: table(),
            mechanism: "PLAIN".into(),
            response: b(b"\0guest\0guest"),
            locale: "en_US".into(),
        }
        .into(),
        ConnectionSecure { challenge: b(b"c") }.into(),
        ConnectionSecureOk { response: b(b"r") }.into(),
        ConnectionTune {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 60,
        }
        .into(),
        ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 60,
        }
        .into(),
        ConnectionOpen {
            virtual_host: "/".into(),
            reserved_1: "r".into(),
            reserved_2: true,
        }
        .into(),
        ConnectionOpenOk {
            reserved_1: "r".into(),
        }
        .into(),
        ConnectionClose {
            reply_code: 320,
            reply_text: "CONNECTION_FORCED".into(),
            class_id: 10,
            method_id: 50,
        }
        .into(),
        ConnectionCloseOk {}.into(),
        ConnectionBlocked {
            reason: "low on memory".into(),
        }
        .into(),
        ConnectionUnblocked {}.into(),
        ConnectionUpdateSecret {
            new_secret: b(b"s"),
            reason: "r".into(),
        }
        .into(),
        ConnectionUpdateSecretOk {}.into(),
        ChannelOpen {
            reserved_1: "r".into(),
        }
        .into(),
        ChannelOpenOk { reserved_1: b(b"r") }.into(),
        ChannelFlow { active: true }.into(),
        ChannelFlowOk { active: true }.into(),
        ChannelClose {
            reply_code: 404,
            reply_text: "NOT_FOUND".into(),
            class_id: 50,
            method_id: 10,
        }
        .into(),
        ChannelCloseOk {}.into(),
        ExchangeDeclare {
            reserved_1: 0,
            exchange: "x".into(),
            kind: "topic".into(),
            passive: true,
            durable: true,
            auto_delete: true,
            internal: true,
            no_wait: true,
            arguments: table(),
        }
        .into(),
        ExchangeDeclareOk {}.into(),
        ExchangeDelete {
            reserved_1: 0,
            exchange: "x".into(),
            if_unused: true,
            no_wait: true,
        }
        .into(),
        ExchangeDeleteOk {}.into(),
        ExchangeBind {
            reserved_1: 0,
            destination: "d".into(),
            source: "s".into(),
            routing_key: "k".into(),
            no_wait: true,
            arguments: table(),
        }
        .into(),
        ExchangeBindOk {}.into(),
        ExchangeUnbind {
            reserved_1: 0,
            destination: "d".into(),
            source: "s".into(),
            routing_key: "k".into(),
            no_wait: true,
            arguments: table(),
        }
        .into(),
        ExchangeUnbindOk {}.into(),
        QueueDeclare {
            reserved_1: 0,
            queue: "q".into(),
            passive: true,
            durable: true,
            exclusive: true,
            auto_delete: true,
            no_wait: true,
            arguments: table(),
        }
        .into(),
        QueueDeclareOk {
            queue: "q".into(),
            message_count: 5,
            consumer_count: 2,
        }
        .into(),
        QueueBind {
            reserved_1: 0,
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            no_wait: true,
            arguments: table(),
        }
        .into(),
        QueueBindOk {}.into(),
        QueueUnbind {
            reserved_1: 0,
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            arguments: table(),
        }
        .into(),
        QueueUnbindOk {}.into(),
        QueuePurge {
            reserved_1: 0,
            queue: "q".into(),
            no_wait: true,
        }
        .into(),
        QueuePurgeOk { message_count: 3 }.into(),
        QueueDelete {
            reserved_1: 0,
            queue: "q".into(),
            if_unused: true,
            if_empty: true,
            no_wait: true,
        }
        .into(),
        QueueDeleteOk { message_count: 3 }.into(),
        BasicQos {
            prefetch_size: 0,
            prefetch_count: 10,
            global: true,
        }
        .into(),
        BasicQosOk {}.into(),
        BasicConsume {
            reserved_1: 0,
            queue: "q".into(),
            consumer_tag: "c".into(),
            no_local: true,
            no_ack: true,
            exclusive: true,
            no_wait: true,
            arguments: table(),
        }
        .into(),
        BasicConsumeOk {
            consumer_tag: "c".into(),
        }
        .into(),
        BasicCancel {
            consumer_tag: "c".into(),
            no_wait: true,
        }
        .into(),
        BasicCancelOk {
            consumer_tag: "c".into(),
        }
        .into(),
        BasicPublish {
            reserved_1: 0,
            exchange: "x".into(),
            routing_key: "k".into(),
            mandatory: true,
            immediate: true,
        }
        .into(),
        BasicReturn {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
        }
        .into(),
        BasicDeliver {
            consumer_tag: "c".into(),
            delivery_tag: u64::MAX,
            redelivered: true,
            exchange: "x".into(),
            routing_key: "k".into(),
        }
        .into(),
        BasicGet {
            reserved_1: 0,
            queue: "q".into(),
            no_ack: true,
        }
        .into(),
        BasicGetOk {
            delivery_tag: 7,
            redelivered: true,
            exchange: "x".into(),
            routing_key: "k".into(),
            message_count: 9,
        }
        .into(),
        BasicGetEmpty {
            reserved_1: "r".into(),
        }
        .into(),
        BasicAck {
            delivery_tag: 5,
            multiple: true,
        }
        .into(),
        BasicReject {
            delivery_tag: 5,
            requeue: true,
        }
        .into(),
        BasicRecoverAsync { requeue: true }.into(),
        BasicRecover { requeue: true }.into(),
        BasicRecoverOk {}.into(),
        BasicNack {
            delivery_tag: 5,
            multiple: true,
            requeue: true,
        }
        .into(),
        TxSelect {}.into(),
        TxSelectOk {}.into(),
        TxCommit {}.into(),
        TxCommitOk {}.into(),
        TxRollback {}.into(),
        TxRollbackOk {}.into(),
        ConfirmSelect { nowait: true }.into(),
        ConfirmSelectOk {}.into(),
    ]
}

fn encode(m: &Method) -> Bytes {
    let mut buf = BytesMut::new();
    m.encode(&mut buf);
    buf.freeze()
}

#[test]
fn every_method_roundtrips_and_has_a_name() {
    let all = all_methods();
    assert_eq!(all.len(), 64, "every method of the RabbitMQ-extended spec");
    for m in all {
        assert_eq!(Method::decode(encode(&m)).unwrap(), m, "{}", m.name());
        assert_ne!(m.name(), "unknown");
    }
}

#[test]
fn every_truncation_is_an_error() {
    for m in all_methods() {
        let full = encode(&m);
        for cut in 0..full.len() {
            if let Ok(got) = Method::decode(full.slice(..cut)) {
                panic!(
                    "{} decoded from {cut} of {} octets: {got:?}",
                    m.name(),
                    full.len()
                );
            }
        }
    }
}

#[test]
fn exact_bytes_of_basic_publish_and_queue_declare() {
    let p: Method = BasicPublish {
        reserved_1: 0,
        exchange: "x".into(),
        routing_key: "rk".into(),
        mandatory: true,
        immediate: false,
    }
    .into();
    assert_eq!(&encode(&p)[..], b"\x00\x3c\x00\x28\x00\x00\x01x\x02rk\x01");
    let q: Method = QueueDeclare {
        queue: "q".into(),
        durable: true,
        auto_delete: true,
        arguments: FieldTable::new(),
        ..Default::default()
    }
    .into();
    // durable is bit 1, auto-delete bit 3 of one octet (0-9-1 §4.2.5.2)
    assert_eq!(
        &encode(&q)[..],
        b"\x00\x32\x00\x0a\x00\x00\x01q\x0a\x00\x00\x00\x00"
    );
}

#[test]
fn unknown_ids_are_reported() {
    let r = Method::decode(Bytes::from_static(b"\x00\x3c\x03\xe7"));
    assert_eq!(
        r,
        Err(warren_amqp091::CodecError::UnknownMethod {
            class_id: 60,
            method_id: 999
        })
    );
}
