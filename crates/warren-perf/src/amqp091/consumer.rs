//! One consumer: its own connection and channel, basic.qos, basic.consume,
//! and acks every N messages with `multiple` (or none, in autoack). Its
//! latency figure is arrival time minus the send time in the body's first
//! 8 bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warren_amqp091::methods::*;
use warren_amqp091::{ContentHeader, FieldTable, FrameType, Method};

use super::client::{Client, ClientError, Result};
use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub uri: Uri,
    pub name: String,
    pub queue: String,
    /// basic.qos prefetch-count; 0 for none.
    pub prefetch: u16,
    pub autoack: bool,
    pub ack_every: u32,
    /// Stop after this many (0: run until told to stop).
    pub messages: u64,
}

/// A delivery whose content is still arriving.
#[derive(Debug, Default)]
struct Incoming {
    tag: u64,
    size: u64,
    got: u64,
    sent_at: Option<u64>,
}

pub async fn run(spec: ConsumerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut c = Client::connect(&spec.uri, &spec.name).await?;
    c.open_channel(1).await?;
    if spec.prefetch > 0 {
        let qos = BasicQos {
            prefetch_count: spec.prefetch,
            ..Default::default()
        };
        match c.call(1, qos).await? {
            Method::BasicQosOk(_) => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected basic.qos-ok, got {other:?}"
                )))
            }
        }
    }
    let consume = BasicConsume {
        queue: spec.queue.as_str().into(),
        consumer_tag: spec.name.as_str().into(),
        no_ack: spec.autoack,
        arguments: FieldTable::new(),
        ..Default::default()
    };
    match c.call(1, consume).await? {
        Method::BasicConsumeOk(_) => {}
        other => {
            return Err(ClientError::Protocol(format!(
                "expected basic.consume-ok, got {other:?}"
            )))
        }
    }
    // Never hold more unacked than the prefetch allows, or both sides wait.
    let ack_every = match spec.prefetch {
        0 => spec.ack_every,
        p => spec.ack_every.min(p as u32),
    } as u64;
    let mut state = State {
        incoming: None,
        unacked: 0,
        last_tag: 0,
        received: 0,
        latencies: Vec::new(),
    };
    // Frames may already be buffered: set-up reads can take deliveries
    // along with consume-ok, and with prefetch 1 nothing more comes until
    // they are acked.
    let mut got = 1;
    while !stop.load(Ordering::Relaxed) && (spec.messages == 0 || state.received < spec.messages) {
        if got == 0 {
            c.ready(!c.wbuf.is_empty(), Duration::from_millis(50)).await?;
            c.try_flush()?;
        }
        got = c.try_read()?;
        let before = state.received;
        state.handle(&mut c, &spec, ack_every)?;
        if state.received > before {
            got = got.max(1);
        }
        stats
            .received
            .fetch_add(state.received - before, Ordering::Relaxed);
        stats.consumer_latencies(&state.latencies);
        state.latencies.clear();
        c.try_flush()?;
        tokio::task::yield_now().await;
    }
    if state.unacked > 0 && !spec.autoack {
        c.send(
            1,
            BasicAck {
                delivery_tag: state.last_tag,
                multiple: true,
            },
        );
    }
    let _ = c.flush().await;
    c.close().await;
    Ok(())
}

struct State {
    incoming: Option<Incoming>,
    unacked: u64,
    last_tag: u64,
    received: u64,
    latencies: Vec<u64>,
}

impl State {
    fn handle(&mut self, c: &mut Client, spec: &ConsumerSpec, ack_every: u64) -> Result<()> {
        let now = now_nanos();
        while let Some(f) = c.parse()? {
            match f.kind {
                FrameType::Method => {
                    let m = Method::decode(f.payload)?;
                    Client::check_closed(&m)?;
                    match m {
                        Method::BasicDeliver(d) => {
                            self.incoming = Some(Incoming {
                                tag: d.delivery_tag,
                                ..Default::default()
                            })
                        }
                        Method::BasicCancel(_) => {
                            return Err(ClientError::Protocol("the broker cancelled the consumer".into()))
                        }
                        _ => {}
                    }
                    continue;
                }
                FrameType::Header => {
                    let h = ContentHeader::decode(f.payload)?;
                    if let Some(i) = self.incoming.as_mut() {
                        i.size = h.body_size;
                    }
                }
                FrameType::Body => {
                    if let Some(i) = self.incoming.as_mut() {
                        if i.got == 0 && f.payload.len() >= 8 {
                            let mut ts = [0u8; 8];
                            ts.copy_from_slice(&f.payload[..8]);
                            i.sent_at = Some(u64::from_be_bytes(ts));
                        }
                        i.got += f.payload.len() as u64;
                    }
                }
                FrameType::Heartbeat => continue,
            }
            let done = self.incoming.as_ref().is_some_and(|i| i.got >= i.size);
            if !done {
                continue;
            }
            let Some(i) = self.incoming.take() else { continue };
            self.received += 1;
            if let Some(ts) = i.sent_at {
                self.latencies.push(now.saturating_sub(ts) / 1000);
            }
            if !spec.autoack {
                self.unacked += 1;
                self.last_tag = i.tag;
                if self.unacked >= ack_every {
                    c.send(
                        1,
                        BasicAck {
                            delivery_tag: i.tag,
                            multiple: ack_every > 1,
                        },
                    );
                    self.unacked = 0;
                }
            }
            if spec.messages > 0 && self.received >= spec.messages {
                break;
            }
        }
        Ok(())
    }
}
