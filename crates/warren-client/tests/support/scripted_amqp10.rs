//! A scripted AMQP 1.0 broker for the tests that need one to misbehave
//! or to watch the client's frames: it speaks SASL and opens the
//! connection and session, answers one consumer's attach and takes its
//! first flow, and leaves the rest to the test.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::messaging::DATA;
use warren_amqp10::performative::{Attach, Begin, Flow, Open, Role, Transfer};
use warren_amqp10::sasl::{self, Sasl};
use warren_amqp10::{Frame, Performative, Value, AMQP_HEADER, SASL_HEADER};

/// The link handle the scripted broker gives the consumer's link.
pub const HANDLE: u32 = 7;

/// One client's wire, after the consumer's first flow.
pub struct Wire {
    pub socket: TcpStream,
    pub buf: BytesMut,
    /// The credit the consumer's first flow gave.
    pub credit: u32,
}

impl Wire {
    /// The next frame with a body, read as far as needed.
    pub async fn next_frame(&mut self) -> Frame {
        next_frame(&mut self.socket, &mut self.buf).await
    }

    /// The next performative the client sent.
    pub async fn next(&mut self) -> Performative {
        let f = self.next_frame().await;
        Performative::decode(&f.body).unwrap().0
    }

    /// Write `p` (with `payload`) at once.
    pub async fn send(&mut self, p: Performative, payload: &[u8]) {
        let mut out = BytesMut::new();
        put(&mut out, p, payload);
        self.socket.write_all(&out).await.unwrap();
    }
}

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

/// Encode one frame of `p` (and `payload`) onto `out`.
pub fn put(out: &mut BytesMut, p: Performative, payload: &[u8]) {
    let mut perf = BytesMut::new();
    p.encode(&mut perf);
    write_frame(out, FrameType::Amqp, 0, &[&perf, payload]);
}

/// A message of one data section holding `body`, encoded.
pub fn data_message(body: &'static [u8]) -> BytesMut {
    let mut out = BytesMut::new();
    Value::described(DATA, Value::Binary(Bytes::from_static(body))).encode(&mut out);
    out
}

/// Encode delivery `id` on the consumer's link, whole in one transfer
/// carrying `payload`, onto `out`.
pub fn put_transfer(out: &mut BytesMut, id: u32, payload: &[u8]) {
    put(
        out,
        Performative::Transfer(Transfer {
            handle: HANDLE,
            delivery_id: Some(id),
            delivery_tag: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
            message_format: Some(0),
            ..Default::default()
        }),
        payload,
    );
}

/// Take one client on `listener` up to its consumer's first flow.
pub async fn accept_consumer(listener: &TcpListener) -> Wire {
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
            container_id: "scripted".into(),
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
    let mut wire = Wire {
        socket: s,
        buf,
        credit: 0,
    };
    // The consumer's attach: answered; then its flow.
    let Performative::Attach(a) = wire.next().await else {
        panic!("expected attach")
    };
    wire.send(
        Performative::Attach(Attach {
            name: a.name.clone(),
            handle: HANDLE,
            role: Role::Sender,
            source: a.source.clone(),
            target: a.target.clone(),
            initial_delivery_count: Some(0),
            ..Default::default()
        }),
        &[],
    )
    .await;
    let Performative::Flow(Flow { link_credit, .. }) = wire.next().await else {
        panic!("expected the consumer's flow")
    };
    wire.credit = link_credit.unwrap_or(0);
    wire
}
