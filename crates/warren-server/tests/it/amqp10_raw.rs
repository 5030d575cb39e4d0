//! A raw AMQP 1.0 receiver for tests that must see every frame: it logs
//! in, opens a session, attaches one receiving link, and then sends flows
//! and dispositions and reads performatives exactly as the test says.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::messaging;
use warren_amqp10::performative::{Attach, Begin, Disposition, Flow, Open, Performative, Role, Transfer};
use warren_amqp10::sasl::Sasl;
use warren_amqp10::{Frame, AMQP_HEADER, SASL_HEADER};

pub struct RawReceiver {
    s: TcpStream,
    out: BytesMut,
    buf: BytesMut,
    /// Transfers received so far (the session's next incoming id).
    pub next_in: u32,
}

impl RawReceiver {
    /// Log in, open, begin, and attach a receiving link to `source`.
    pub async fn attach(port: u16, source: &str) -> RawReceiver {
        RawReceiver::attach_with(
            port,
            Attach {
                name: "r".into(),
                handle: 0,
                role: Role::Receiver,
                snd_settle_mode: Some(0),
                rcv_settle_mode: Some(0),
                source: Some(messaging::source(source)),
                target: Some(messaging::target("raw")),
                ..Default::default()
            },
        )
        .await
    }

    /// Log in, open, begin, and attach the link `attach` describes.
    pub async fn attach_with(port: u16, attach: Attach) -> RawReceiver {
        let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut r = RawReceiver {
            s,
            out: BytesMut::new(),
            buf: BytesMut::new(),
            next_in: 0,
        };
        r.out.extend_from_slice(SASL_HEADER);
        let init = Sasl::plain("guest", "guest").to_value().to_bytes();
        write_frame(&mut r.out, FrameType::Sasl, 0, &[&init]);
        r.out.extend_from_slice(AMQP_HEADER);
        r.send(Performative::Open(Open {
            container_id: "raw".into(),
            ..Default::default()
        }));
        r.send(Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 1_000_000,
            outgoing_window: 1_000_000,
            ..Default::default()
        }));
        r.send(Performative::Attach(attach));
        r.flush().await;
        r
    }

    fn send(&mut self, p: Performative) {
        self.send_on(0, p);
    }

    /// Queue a performative on `channel` (sent with the next flush).
    pub fn send_on(&mut self, channel: u16, p: Performative) {
        let mut body = BytesMut::new();
        p.encode(&mut body);
        write_frame(&mut self.out, FrameType::Amqp, channel, &[&body]);
    }

    /// Queue an unsettled one-frame transfer of a data section.
    pub fn transfer(&mut self, channel: u16, handle: u32, delivery_id: u32, data: &[u8]) {
        let mut body = BytesMut::new();
        Performative::Transfer(Transfer {
            handle,
            delivery_id: Some(delivery_id),
            delivery_tag: Some(Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
            message_format: Some(0),
            settled: Some(false),
            ..Default::default()
        })
        .encode(&mut body);
        let mut msg = BytesMut::new();
        messaging::encode_message(&mut msg, &Default::default(), data);
        write_frame(&mut self.out, FrameType::Amqp, channel, &[&body, &msg]);
    }

    pub async fn flush(&mut self) {
        self.s.write_all(&self.out).await.unwrap();
        self.out.clear();
    }

    /// Grant `credit` from `delivery_count`, draining if asked.
    pub async fn flow(&mut self, delivery_count: u32, credit: u32, drain: bool) {
        self.send(Performative::Flow(Flow {
            next_incoming_id: Some(self.next_in),
            incoming_window: 1_000_000,
            next_outgoing_id: 0,
            outgoing_window: 1_000_000,
            handle: Some(0),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            drain,
            ..Default::default()
        }));
        self.flush().await;
    }

    /// Accept delivery `id` (sent with the next flow or flush).
    pub fn accept(&mut self, id: u32) {
        self.send(Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: id,
            last: None,
            settled: true,
            state: Some(messaging::accepted()),
            batchable: false,
        }));
    }

    /// Read performatives until `done` says so, or, with `wait`, until
    /// nothing comes for that long. Transfers come with their payload.
    pub async fn read(
        &mut self,
        wait: Option<Duration>,
        mut done: impl FnMut(&[(Performative, Bytes)]) -> bool,
    ) -> Vec<(Performative, Bytes)> {
        let mut got = Vec::new();
        loop {
            if self.buf.len() >= 8 && &self.buf[..4] == b"AMQP" {
                let _ = self.buf.split_to(8);
                continue;
            }
            match Frame::parse(&mut self.buf, 1 << 20).unwrap() {
                Some(f) if f.kind == FrameType::Amqp && !f.body.is_empty() => {
                    let (p, payload) = Performative::decode(&f.body).unwrap();
                    if matches!(p, Performative::Transfer(_)) {
                        self.next_in = self.next_in.wrapping_add(1);
                    }
                    got.push((p, payload));
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            if done(&got) {
                return got;
            }
            let read = self.s.read_buf(&mut self.buf);
            match wait {
                // A hang-up ends the read: the caller checks what came.
                Some(d) => match tokio::time::timeout(d, read).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return got,
                },
                None => {
                    if !matches!(read.await, Ok(n) if n > 0) {
                        return got;
                    }
                }
            }
        }
    }
}

/// The transfers among `frames`: (delivery-id, the message's body).
pub fn transfers(frames: &[(Performative, Bytes)]) -> Vec<(u32, Bytes)> {
    frames
        .iter()
        .filter_map(|(p, payload)| match p {
            Performative::Transfer(t) => Some((t.delivery_id?, messaging::data_body(payload).ok()?)),
            _ => None,
        })
        .collect()
}
