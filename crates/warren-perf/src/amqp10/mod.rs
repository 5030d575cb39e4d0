//! AMQP 1.0 workloads: each producer is a sending link and each consumer a
//! receiving link, on a connection and session of its own, to the node
//! `--amqp10-address` names for its queue (`/amq/queue/NAME` for RabbitMQ
//! 3.x's plugin; `/queues/NAME` for RabbitMQ 4 and Warren). Queues are
//! declared over AMQP 0-9-1 first, on the same port.
//!
//! Producers send unsettled transfers when confirms are on (the in-flight
//! limit counts unsettled deliveries; the broker's disposition settles
//! them) and pre-settled ones otherwise, within link credit and the
//! session's incoming window. Consumers grant credit (`-q`), refill it
//! when half is used, and accept in batches of `-A` with one disposition
//! over the range, or receive pre-settled in autoack.

pub mod conn;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::task::JoinSet;
use warren_amqp10::messaging::{self, Header, Outcome};
use warren_amqp10::performative::{Attach, Disposition, Flow, Role, Transfer};
use warren_amqp10::Performative;

use crate::options::{Options, Uri};
use crate::stats::{now_nanos, Stats};
use conn::{Amqp10Error, Conn, Result, INCOMING_WINDOW};

/// After the stop signal, how long a producer waits for settlements.
const SETTLE_GRACE: Duration = Duration::from_secs(5);
const BATCH_BYTES: usize = 128 << 10;

pub fn address(opts: &Options, queue: &str) -> String {
    opts.amqp10_address.replace("{queue}", queue)
}

/// Start the run's consumers and producers in the caller's task sets;
/// each task's error becomes the caller's error type `E`.
pub fn spawn<E>(
    opts: &Options,
    uris: &[Uri],
    queues: &[String],
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
    consumers: &mut JoinSet<std::result::Result<(), E>>,
    producers: &mut JoinSet<std::result::Result<(), E>>,
) where
    E: From<Amqp10Error> + Send + 'static,
{
    for i in 0..opts.consumers {
        let uri = uris[i as usize % uris.len()].clone();
        let addr = address(opts, &queues[i as usize % queues.len()]);
        // AMQP 1.0 has no "unlimited" credit: -q 0 grants 1000.
        let (credit, autoack, ack_every, limit) = (
            if opts.qos == 0 { 1000 } else { opts.qos },
            opts.autoack,
            opts.ack_every.max(1),
            opts.cmessages,
        );
        let (stats, stop) = (stats.clone(), stop.clone());
        consumers.spawn(async move {
            receiver(
                uri,
                format!("warren-perf-consumer-{i}"),
                addr,
                credit,
                autoack,
                ack_every,
                limit,
                stats,
                stop,
            )
            .await
            .map_err(E::from)
        });
    }
    for i in 0..opts.producers {
        let uri = uris[(i + opts.consumers) as usize % uris.len()].clone();
        let addr = address(opts, &queues[i as usize % queues.len()]);
        let spec = SenderSpec {
            size: opts.size,
            persistent: opts.persistent,
            confirm: opts.confirm,
            rate: opts.rate,
            messages: opts.pmessages,
        };
        let (stats, stop) = (stats.clone(), stop.clone());
        producers.spawn(async move {
            sender(uri, format!("warren-perf-producer-{i}"), addr, spec, stats, stop)
                .await
                .map_err(E::from)
        });
    }
}

struct SenderSpec {
    size: usize,
    persistent: bool,
    confirm: u32,
    rate: u64,
    messages: u64,
}

async fn sender(
    uri: Uri,
    name: String,
    addr: String,
    spec: SenderSpec,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut c = Conn::connect(&uri, &name).await?;
    let settled = spec.confirm == 0;
    c.send(
        0,
        &Performative::Attach(Attach {
            name: format!("{name}-link"),
            handle: 0,
            role: Role::Sender,
            snd_settle_mode: Some(if settled { 1 } else { 0 }),
            rcv_settle_mode: Some(0),
            source: Some(messaging::source(&name)),
            target: Some(messaging::target(&addr)),
            initial_delivery_count: Some(0),
            ..Default::default()
        }),
        &[],
    );
    c.flush().await?;
    loop {
        match c.next().await? {
            (Performative::Attach(a), _) => {
                if a.target.is_none() {
                    return Err(Amqp10Error::Refused(format!("no target {addr}")));
                }
                break;
            }
            (p, _) => {
                let mut dummy = (0, 0);
                on_sender_frame(&mut c, p, &mut dummy, &mut VecDeque::new(), &stats);
            }
        }
    }
    let header = Header {
        durable: spec.persistent,
        ..Default::default()
    };
    let mut body = vec![0u8; spec.size];
    let mut payload = BytesMut::new();
    // (credit left, our delivery-count)
    let mut link = (0u32, 0u32);
    let mut outstanding: VecDeque<(u32, u64)> = VecDeque::new();
    let mut next_id = 0u32;
    let mut sent = 0u64;
    let started = Instant::now();
    let mut stopping: Option<Instant> = None;
    loop {
        let stopped = stop.load(Ordering::Relaxed) || (spec.messages > 0 && sent >= spec.messages);
        if stopped
            && (outstanding.is_empty() || stopping.get_or_insert_with(Instant::now).elapsed() > SETTLE_GRACE)
        {
            break;
        }
        let mut n = 0u64;
        while !stopped && c.wbuf.len() < BATCH_BYTES && link.0 > 0 && c.remote_incoming_window > 0 {
            if !settled && outstanding.len() >= spec.confirm as usize {
                break;
            }
            if spec.messages > 0 && sent >= spec.messages {
                break;
            }
            if spec.rate > 0 && Duration::from_secs_f64(sent as f64 / spec.rate as f64) > started.elapsed() {
                break;
            }
            let ts = now_nanos();
            if body.len() >= 8 {
                body[..8].copy_from_slice(&ts.to_be_bytes());
            }
            payload.clear();
            messaging::encode_message(&mut payload, &header, &body);
            // Split to the broker's max-frame-size (2.6.14: `more` on all
            // but the last frame; only the first names the delivery).
            let chunk = (c.peer_max_frame as usize).saturating_sub(64).max(256);
            let frames = payload.len().div_ceil(chunk).max(1);
            if frames as u32 > c.remote_incoming_window {
                break;
            }
            for (k, part) in payload.chunks(chunk).enumerate() {
                let first = k == 0;
                let t = Performative::Transfer(Transfer {
                    handle: 0,
                    delivery_id: first.then_some(next_id),
                    delivery_tag: first.then(|| Bytes::copy_from_slice(&next_id.to_be_bytes())),
                    message_format: first.then_some(0),
                    settled: first.then_some(settled),
                    more: k + 1 < frames,
                    ..Default::default()
                });
                c.send(0, &t, part);
                c.next_outgoing_id = c.next_outgoing_id.wrapping_add(1);
                c.remote_incoming_window -= 1;
            }
            if !settled {
                outstanding.push_back((next_id, ts));
            }
            next_id = next_id.wrapping_add(1);
            link.0 -= 1;
            link.1 = link.1.wrapping_add(1);
            sent += 1;
            n += 1;
        }
        if n > 0 {
            stats.sent.fetch_add(n, Ordering::Relaxed);
        }
        let flushed = c.try_flush()?;
        let mut got = c.try_read()?;
        // Parse whatever is buffered, new or not: set-up reads can leave
        // the first flow (our credit) behind the attach.
        while let Some((p, _)) = c.parse_performative()? {
            on_sender_frame(&mut c, p, &mut link, &mut outstanding, &stats);
            got = got.max(1);
        }
        if n > 0 || got > 0 {
            tokio::task::yield_now().await;
            continue;
        }
        c.ready(!flushed, Duration::from_millis(50)).await?;
    }
    let _ = c.try_flush();
    c.close().await;
    Ok(())
}

fn on_sender_frame(
    c: &mut Conn,
    p: Performative,
    link: &mut (u32, u32),
    outstanding: &mut VecDeque<(u32, u64)>,
    stats: &Stats,
) {
    match p {
        Performative::Flow(f) => {
            // Session (2.5.6): what the peer still takes.
            let next_in = f.next_incoming_id.unwrap_or(0);
            c.remote_incoming_window = next_in
                .wrapping_add(f.incoming_window)
                .wrapping_sub(c.next_outgoing_id);
            // Link (2.6.7): credit = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd).
            if f.handle == Some(0) {
                if let (Some(dc), Some(lc)) = (f.delivery_count, f.link_credit) {
                    link.0 = dc.wrapping_add(lc).wrapping_sub(link.1);
                } else if let Some(lc) = f.link_credit {
                    link.0 = lc;
                }
            }
        }
        Performative::Disposition(d) if d.role == Role::Receiver => {
            let last = d.last.unwrap_or(d.first);
            let ok = d.state.as_ref().and_then(messaging::outcome) == Some(Outcome::Accepted);
            let now = now_nanos();
            let (mut acked, mut nacked) = (0, 0);
            let mut lat = Vec::new();
            // Serial-number ranges (RFC 1982) could wrap; the perf tool's
            // runs stay far below 2^31 deliveries per link.
            outstanding.retain(|&(id, ts)| {
                if id >= d.first && id <= last {
                    if ok {
                        acked += 1;
                        lat.push(now.saturating_sub(ts) / 1000);
                    } else {
                        nacked += 1;
                    }
                    false
                } else {
                    true
                }
            });
            stats.confirmed.fetch_add(acked, Ordering::Relaxed);
            stats.nacked.fetch_add(nacked, Ordering::Relaxed);
            stats.confirm_latencies(&lat);
        }
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
async fn receiver(
    uri: Uri,
    name: String,
    addr: String,
    credit: u32,
    autoack: bool,
    ack_every: u32,
    limit: u64,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut c = Conn::connect(&uri, &name).await?;
    c.send(
        0,
        &Performative::Attach(Attach {
            name: format!("{name}-link"),
            handle: 0,
            role: Role::Receiver,
            snd_settle_mode: Some(if autoack { 1 } else { 0 }),
            rcv_settle_mode: Some(0),
            source: Some(messaging::source(&addr)),
            target: Some(messaging::target(&name)),
            ..Default::default()
        }),
        &[],
    );
    c.flush().await?;
    let mut delivery_count = loop {
        match c.next().await? {
            (Performative::Attach(a), _) => {
                if a.source.is_none() {
                    return Err(Amqp10Error::Refused(format!("no source {addr}")));
                }
                break a.initial_delivery_count.unwrap_or(0);
            }
            _ => continue,
        }
    };
    let flow = |c: &mut Conn, delivery_count: u32, credit: u32| {
        c.incoming_window = INCOMING_WINDOW;
        let f = Performative::Flow(Flow {
            next_incoming_id: Some(c.next_incoming_id),
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: c.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: Some(0),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            ..Default::default()
        });
        c.send(0, &f, &[]);
    };
    flow(&mut c, delivery_count, credit);
    c.flush().await?;
    let mut left = credit;
    let mut received = 0u64;
    let mut unacked: Option<(u32, u32)> = None;
    let mut last_id = 0u32;
    let mut partial: Option<(u32, bool, BytesMut)> = None;
    let mut lat = Vec::new();
    // Transfers may already be buffered from the set-up reads.
    let mut got = 1;
    while !stop.load(Ordering::Relaxed) && (limit == 0 || received < limit) {
        if got == 0 {
            c.ready(!c.wbuf.is_empty(), Duration::from_millis(50)).await?;
            c.try_flush()?;
        }
        got = c.try_read()?;
        let before = received;
        while let Some((p, payload)) = c.parse_performative()? {
            let Performative::Transfer(t) = p else { continue };
            c.next_incoming_id = c.next_incoming_id.wrapping_add(1);
            c.incoming_window = c.incoming_window.saturating_sub(1);
            let (id, settled, mut buf) = match partial.take() {
                Some(p) => p,
                None => (
                    t.delivery_id.unwrap_or(0),
                    t.settled.unwrap_or(false),
                    BytesMut::new(),
                ),
            };
            buf.extend_from_slice(&payload);
            if t.more {
                partial = Some((id, settled, buf));
                continue;
            }
            received += 1;
            last_id = id;
            delivery_count = delivery_count.wrapping_add(1);
            left = left.saturating_sub(1);
            if let Some(ts) = sent_at(&buf) {
                lat.push(now_nanos().saturating_sub(ts) / 1000);
            }
            if !settled && !autoack {
                let (first, n) = unacked.map_or((id, 1), |(f, n)| (f, n + 1));
                unacked = Some((first, n));
                if n >= ack_every {
                    accept(&mut c, first, id);
                    unacked = None;
                }
            }
            if limit > 0 && received >= limit {
                break;
            }
        }
        if left <= credit / 2 || c.incoming_window < INCOMING_WINDOW / 2 {
            left = credit;
            flow(&mut c, delivery_count, credit);
        }
        if received > before {
            got = got.max(1);
        }
        stats.received.fetch_add(received - before, Ordering::Relaxed);
        stats.consumer_latencies(&lat);
        lat.clear();
        c.try_flush()?;
        tokio::task::yield_now().await;
    }
    if let Some((first, _)) = unacked {
        accept(&mut c, first, last_id);
    }
    let _ = c.flush().await;
    c.close().await;
    Ok(())
}

fn accept(c: &mut Conn, first: u32, last: u32) {
    c.send(
        0,
        &Performative::Disposition(Disposition {
            role: Role::Receiver,
            first,
            last: Some(last),
            settled: true,
            state: Some(messaging::accepted()),
            batchable: false,
        }),
        &[],
    );
}

/// The send time in the first 8 bytes of the message's data.
fn sent_at(message: &[u8]) -> Option<u64> {
    let body = messaging::data_body(message).ok()?;
    let b: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}
