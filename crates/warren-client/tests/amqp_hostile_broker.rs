//! warren-client's AMQP 1.0 consumer against a scripted broker that
//! delivers a message it cannot read: the consumer gets an error for it,
//! the delivery is rejected (so its credit comes back), and the next
//! delivery is read as usual.

mod support;

use bytes::{Bytes, BytesMut};
use support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::messaging::{self, DATA};
use warren_amqp10::performative::{Attach, Begin, Flow, Open, Role, Transfer};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};
use warren_client::amqp::{Connection, Error};

async fn next_frame(s: &mut TcpStream, buf: &mut BytesMut) -> Frame {
    loop {
        if let Some(f) = Frame::parse(buf, 1 << 20).unwrap() {
            if !f.body.is_empty() {
                return f;
            }
            continue;
        }
        assert!(s.read_buf(buf).await.unwrap() > 0, "the client hung up");
    }
}

async fn header(s: &mut TcpStream, buf: &mut BytesMut, want: &[u8]) {
    while buf.len() < 8 {
        s.read_buf(buf).await.unwrap();
    }
    assert_eq!(&buf.split_to(8)[..], want);
    s.write_all(want).await.unwrap();
}

fn put(out: &mut BytesMut, p: Performative, payload: &[u8]) {
    let mut perf = BytesMut::new();
    p.encode(&mut perf);
    write_frame(out, FrameType::Amqp, 0, &[&perf, payload]);
}

#[tokio::test]
async fn an_unreadable_delivery_is_rejected_and_the_next_one_read() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        header(&mut s, &mut buf, SASL_HEADER).await;
        let mut out = BytesMut::new();
        let mechs = Sasl::Mechanisms(vec!["PLAIN".into()]).to_value().to_bytes();
        write_frame(&mut out, FrameType::Sasl, 0, &[&mechs]);
        s.write_all(&out).await.unwrap();
        next_frame(&mut s, &mut buf).await; // sasl-init
        let mut out = BytesMut::new();
        let ok = Sasl::Outcome { code: sasl::OK }.to_value().to_bytes();
        write_frame(&mut out, FrameType::Sasl, 0, &[&ok]);
        s.write_all(&out).await.unwrap();
        header(&mut s, &mut buf, AMQP_HEADER).await;
        next_frame(&mut s, &mut buf).await; // open
        next_frame(&mut s, &mut buf).await; // begin
        let mut out = BytesMut::new();
        put(
            &mut out,
            Performative::Open(Open {
                container_id: "hostile".into(),
                ..Default::default()
            }),
            &[],
        );
        put(
            &mut out,
            Performative::Begin(Begin {
                remote_channel: Some(0),
                incoming_window: 100,
                outgoing_window: 100,
                ..Default::default()
            }),
            &[],
        );
        s.write_all(&out).await.unwrap();
        // The consumer's attach: answered; then its flow.
        let f = next_frame(&mut s, &mut buf).await;
        let (Performative::Attach(a), _) = Performative::decode(&f.body).unwrap() else {
            panic!("expected attach")
        };
        let mut out = BytesMut::new();
        put(
            &mut out,
            Performative::Attach(Attach {
                name: a.name.clone(),
                handle: 7,
                role: Role::Sender,
                source: a.source.clone(),
                target: a.target.clone(),
                initial_delivery_count: Some(0),
                ..Default::default()
            }),
            &[],
        );
        s.write_all(&out).await.unwrap();
        let f = next_frame(&mut s, &mut buf).await;
        assert!(matches!(
            Performative::decode(&f.body).unwrap().0,
            Performative::Flow(Flow { .. })
        ));
        // Delivery 0 cannot be read; delivery 1 can.
        let mut good = BytesMut::new();
        Value::described(DATA, Value::Binary(Bytes::from_static(b"fine"))).encode(&mut good);
        let mut out = BytesMut::new();
        for (id, payload) in [(0u32, &b"\x00\x53\x75\xb0\xff\xff"[..]), (1, &good[..])] {
            put(
                &mut out,
                Performative::Transfer(Transfer {
                    handle: 7,
                    delivery_id: Some(id),
                    delivery_tag: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
                    message_format: Some(0),
                    ..Default::default()
                }),
                payload,
            );
        }
        s.write_all(&out).await.unwrap();
        // The client's dispositions: 0 rejected, 1 accepted.
        let mut told = Vec::new();
        while told.len() < 2 {
            let f = next_frame(&mut s, &mut buf).await;
            if let (Performative::Disposition(d), _) = Performative::decode(&f.body).unwrap() {
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
