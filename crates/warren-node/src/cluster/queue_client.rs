//! The client side of the queue protocol (`warren_peer::queue`): what this
//! node does for its connections with queues whose home is another node.
//!
//! - Publishes go to the home with an id per node pair; each gets a
//!   [`RemoteConfirm`] that the home's confirm answers. At most
//!   [`UNCONFIRMED_HIGH`] publishes (or [`UNCONFIRMED_HIGH_BYTES`]) per
//!   home are unconfirmed before publishers are asked to pause, until the
//!   count is back under the low marks: RabbitMQ's credit flow between a
//!   channel and a queue, over the link.
//! - A consumer here is a proxy's twin: the home runs a consumer on its
//!   queue that forwards deliveries, and this node hands them to the
//!   connection's sink. The home may send [`CONSUMER_CREDIT`] deliveries
//!   ahead; more credit is granted as the sink takes them, so a slow
//!   client stops its home rather than growing this node's memory.
//!   Prefetch is the home's to count (it sees every settle). An AMQP 1.0
//!   receiver's link credit caps what is granted, so its home never sends
//!   more than the receiver asked for (unless the receiver lowers its
//!   credit while a grant is on its way).
//! - basic.get and queue.purge are requests answered by the home.
//!
//! When the link to a home goes down, its unconfirmed publishes are
//! nacked, its consumers here are cancelled (0-9-1 basic.cancel), and its
//! requests fail.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use warren_amqp091::ShortStr;
use warren_core::message::{Message as AmqpMessage, MessageRef};
use warren_core::queue::{ConsumerSpec, Delivery, Entry, FlowWaiter, Queue, RemoteConfirm, Settle};
use warren_core::replication::RemotePublish;
use warren_core::BrokerError;
use warren_peer::queue::{settle, QueueMsg, WireMessage, MESSAGE_OVERHEAD};
use warren_peer::{Message, FRAME_MAX};

use super::links::DataSender;

/// Unconfirmed publishes to one home before publishers pause, and the
/// level under which they resume.
pub const UNCONFIRMED_HIGH: usize = 2000;
pub const UNCONFIRMED_LOW: usize = 1000;
pub const UNCONFIRMED_HIGH_BYTES: usize = 64 << 20;
pub const UNCONFIRMED_LOW_BYTES: usize = 32 << 20;
/// Deliveries a home may send a consumer here before it hears more
/// credit; credit goes back in grants of [`CREDIT_GRANT`].
pub const CONSUMER_CREDIT: u32 = 512;
pub const CREDIT_GRANT: u32 = 128;
/// How long a request to a home may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The 0-9-1 error for a queue whose home cannot be reached (RabbitMQ's
/// words).
pub fn home_down(queue: &Queue, home: &str) -> BrokerError {
    BrokerError::NotFound(format!(
        "home node '{home}' of {} queue '{}' in vhost '{}' is down or inaccessible",
        if queue.durable { "durable" } else { "non-durable" },
        queue.name,
        queue.vhost
    ))
}

/// A message as it crosses a link.
pub fn wire_message(m: &AmqpMessage) -> WireMessage {
    WireMessage {
        exchange: m.exchange.clone().into_bytes(),
        routing_key: m.routing_key.clone().into_bytes(),
        properties: m.raw_properties.clone(),
        body: m.body.clone(),
    }
}

/// A message from a link, rebuilt as a publish would have built it.
pub fn from_wire(m: WireMessage) -> Result<AmqpMessage, BrokerError> {
    let (msg, _) = AmqpMessage::from_publish(
        ShortStr::from_bytes(m.exchange),
        ShortStr::from_bytes(m.routing_key),
        m.properties,
        m.body,
    )?;
    Ok(msg)
}

/// Can `m` cross a link in one frame?
pub fn fits_a_frame(m: &AmqpMessage) -> bool {
    m.body.len() + m.raw_properties.len() + MESSAGE_OVERHEAD < FRAME_MAX as usize
}

/// This node's dealings with one home.
#[derive(Default)]
struct Home {
    link: Option<DataSender>,
    next_id: u64,
    unconfirmed: VecDeque<(u64, Arc<RemoteConfirm>, usize)>,
    bytes: usize,
    waiters: Vec<Arc<dyn FlowWaiter>>,
}

impl Home {
    fn below_low(&self) -> bool {
        self.unconfirmed.len() < UNCONFIRMED_LOW && self.bytes < UNCONFIRMED_LOW_BYTES
    }
}

impl RemoteConsumer {
    /// Credit to grant now, if the sink has room: up to
    /// [`CONSUMER_CREDIT`] (an AMQP 1.0 receiver's link credit, if less)
    /// in flight. With `batch`, only once that is at least a
    /// [`CREDIT_GRANT`] (or all the receiver's credit), so credit goes
    /// back in a few messages, not one per delivery.
    fn grant(&mut self, batch: bool) -> Option<u32> {
        let cap = match &self.spec.link_credit {
            Some(l) => CONSUMER_CREDIT.min(l.get().1),
            None => CONSUMER_CREDIT,
        };
        let want = cap.saturating_sub(self.in_flight);
        let min = if batch { CREDIT_GRANT.min(cap).max(1) } else { 1 };
        if !self.started || want < min || want == 0 || !self.spec.sink.has_room() {
            return None;
        }
        self.in_flight += want;
        Some(want)
    }
}

struct RemoteConsumer {
    home: String,
    queue: Arc<Queue>,
    spec: ConsumerSpec,
    /// Granted to the home and not yet delivered here.
    in_flight: u32,
    /// Credit first granted (after the front end answered the consume).
    started: bool,
    /// The home's answer to the consume, for a front end that waits.
    answer_tx: Option<oneshot::Sender<Result<(), BrokerError>>>,
    answer_rx: Option<oneshot::Receiver<Result<(), BrokerError>>>,
}

/// What a request waits for.
enum Waiting {
    Consume(u64),
    Get(
        Arc<Queue>,
        oneshot::Sender<Result<Option<(Entry, u64)>, BrokerError>>,
    ),
    Purge(oneshot::Sender<Result<u64, BrokerError>>),
}

#[derive(Default)]
struct Requests {
    next: u64,
    waiting: HashMap<u64, (String, Waiting)>,
}

#[derive(Default)]
pub struct QueueClient {
    homes: Mutex<HashMap<String, Arc<Mutex<Home>>>>,
    consumers: Mutex<HashMap<u64, RemoteConsumer>>,
    requests: Mutex<Requests>,
    /// Set once this node's name is known, for messages.
    node: OnceLock<String>,
}

impl QueueClient {
    pub fn new(node: &str) -> Arc<QueueClient> {
        let c = QueueClient::default();
        let _ = c.node.set(node.to_string());
        Arc::new(c)
    }

    fn home(&self, node: &str) -> Arc<Mutex<Home>> {
        self.homes.lock().entry(node.to_string()).or_default().clone()
    }

    fn link(&self, node: &str) -> Option<DataSender> {
        self.home(node).lock().link.clone()
    }

    pub fn is_up(&self, node: &str) -> bool {
        self.home(node).lock().link.is_some()
    }

    pub fn up(&self, node: &str, data: DataSender) {
        // A new link that replaces one still up (the peer dialled again
        // before this side saw the old one fail): the home forgot what the
        // old one carried, so end that first.
        if self.is_up(node) {
            self.down(node);
        }
        self.home(node).lock().link = Some(data);
    }

    /// The link to `node` is gone: nack what it had not confirmed, cancel
    /// its consumers here, fail its requests.
    pub fn down(&self, node: &str) {
        let home = self.home(node);
        let (pending, waiters) = {
            let mut h = home.lock();
            h.link = None;
            h.bytes = 0;
            (std::mem::take(&mut h.unconfirmed), std::mem::take(&mut h.waiters))
        };
        for (_, c, _) in pending {
            c.resolve(false);
        }
        for w in waiters {
            w.resume();
        }
        let gone: Vec<RemoteConsumer> = {
            let mut cs = self.consumers.lock();
            let ids: Vec<u64> = cs
                .iter()
                .filter(|(_, c)| c.home == node)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| cs.remove(&id)).collect()
        };
        for c in gone {
            let err = home_down(&c.queue, node);
            match c.answer_tx {
                Some(tx) if c.answer_rx.is_none() => {
                    let _ = tx.send(Err(err));
                }
                _ => c.spec.sink.cancelled(c.spec.channel, c.spec.tag.clone()),
            }
        }
        let failed: Vec<(String, Waiting)> = {
            let mut r = self.requests.lock();
            let ids: Vec<u64> = r
                .waiting
                .iter()
                .filter(|(_, (h, _))| h == node)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| r.waiting.remove(&id)).collect()
        };
        for (_, w) in failed {
            let err = || BrokerError::NotFound(format!("home node '{node}' is down or inaccessible"));
            match w {
                Waiting::Consume(_) => {}
                Waiting::Get(q, tx) => {
                    let _ = tx.send(Err(home_down(&q, node)));
                }
                Waiting::Purge(tx) => {
                    let _ = tx.send(Err(err()));
                }
            }
        }
    }

    pub fn publish(&self, queue: &Arc<Queue>, home: &ShortStr, msg: &MessageRef) -> Option<RemotePublish> {
        if !fits_a_frame(msg) {
            return None;
        }
        let h = self.home(&home.to_str_lossy());
        let mut h = h.lock();
        let link = h.link.as_ref()?;
        let id = h.next_id;
        let m = Message::Queue(QueueMsg::Publish {
            id,
            vhost: queue.vhost.clone(),
            queue: queue.name.clone().into_bytes(),
            message: wire_message(msg),
        });
        if link.send(m).is_err() {
            return None;
        }
        h.next_id += 1;
        let confirm = RemoteConfirm::new();
        let size = msg.body.len();
        h.unconfirmed.push_back((id, confirm.clone(), size));
        h.bytes += size;
        let flow = h.unconfirmed.len() >= UNCONFIRMED_HIGH || h.bytes >= UNCONFIRMED_HIGH_BYTES;
        Some(RemotePublish { confirm, flow })
    }

    pub fn wait_for_credit(&self, home: &ShortStr, waiter: Arc<dyn FlowWaiter>) -> bool {
        let h = self.home(&home.to_str_lossy());
        let mut h = h.lock();
        if h.below_low() || h.link.is_none() {
            return false;
        }
        if !h.waiters.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
            h.waiters.push(waiter);
        }
        true
    }

    fn confirmed(&self, node: &str, first: u64, count: u32, ok: bool) {
        let h = self.home(node);
        let mut done = Vec::new();
        let waiters = {
            let mut h = h.lock();
            let end = first.saturating_add(count as u64);
            while let Some((id, _, _)) = h.unconfirmed.front() {
                if *id >= end {
                    break;
                }
                let (id, c, size) = h.unconfirmed.pop_front().expect("front exists");
                h.bytes -= size;
                // Ids before `first` were answered in an earlier range;
                // one missing here would be a home's mistake: refuse it.
                done.push((c, ok && id >= first));
            }
            if h.below_low() {
                std::mem::take(&mut h.waiters)
            } else {
                Vec::new()
            }
        };
        for (c, ok) in done {
            c.resolve(ok);
        }
        for w in waiters {
            w.resume();
        }
    }

    pub fn consume(
        &self,
        queue: &Arc<Queue>,
        home: &ShortStr,
        spec: ConsumerSpec,
    ) -> Result<(), BrokerError> {
        let node = home.to_str_lossy().to_string();
        let link = self.link(&node).ok_or_else(|| home_down(queue, &node))?;
        let req = self.request(&node, Waiting::Consume(spec.id));
        let mut arguments = BytesMut::new();
        spec.arguments.encode(&mut arguments);
        // A channel-wide limit (global qos) cannot be shared with another
        // node's counting: the home applies it to this consumer alone.
        let mut prefetch = spec.prefetch;
        if let Some(l) = &spec.channel_limit {
            let global = l.limit.load(std::sync::atomic::Ordering::Relaxed);
            if global != 0 && (prefetch == 0 || global < prefetch) {
                prefetch = global;
            }
        }
        let m = Message::Queue(QueueMsg::Consume {
            req,
            consumer: spec.id,
            vhost: queue.vhost.clone(),
            queue: queue.name.clone().into_bytes(),
            tag: spec.tag.clone().into_bytes(),
            no_ack: spec.no_ack,
            exclusive: spec.exclusive,
            prefetch,
            priority: spec.priority,
            credit: 0,
            arguments: arguments.freeze(),
        });
        if link.send(m).is_err() {
            self.requests.lock().waiting.remove(&req);
            return Err(home_down(queue, &node));
        }
        let (tx, rx) = oneshot::channel();
        self.consumers.lock().insert(
            spec.id,
            RemoteConsumer {
                home: node,
                queue: queue.clone(),
                spec,
                in_flight: 0,
                started: false,
                answer_tx: Some(tx),
                answer_rx: Some(rx),
            },
        );
        Ok(())
    }

    /// The home's answer to consumer `id`'s consume, for a front end that
    /// waits for it before answering its client (take it at once after
    /// the consume; None if already taken or answered).
    pub fn consume_answer(&self, id: u64) -> Option<oneshot::Receiver<Result<(), BrokerError>>> {
        self.consumers
            .lock()
            .get_mut(&id)
            .and_then(|c| c.answer_rx.take())
    }

    pub fn cancel(&self, id: u64) -> bool {
        let Some(c) = self.consumers.lock().remove(&id) else {
            return false;
        };
        if let Some(link) = self.link(&c.home) {
            let _ = link.send(Message::Queue(QueueMsg::Cancel { consumer: id }));
        }
        true
    }

    pub fn settle(&self, home: &ShortStr, consumer_id: Option<u64>, seqs: Vec<u64>, how: Settle) {
        if seqs.is_empty() {
            return;
        }
        let Some(link) = self.link(&home.to_str_lossy()) else {
            // The home requeued them when the link went.
            return;
        };
        let how = match how {
            Settle::Ack => settle::ACK,
            Settle::Requeue => settle::REQUEUE,
            Settle::Discard => settle::DISCARD,
        };
        let _ = link.send(Message::Queue(QueueMsg::Settle {
            consumer: consumer_id.unwrap_or(0),
            how,
            seqs,
        }));
    }

    /// Grant credit to `queue`'s consumers here whose sinks have room:
    /// the first grant after the consume was answered, then what they
    /// have taken since.
    pub fn pump(&self, queue: &Arc<Queue>) {
        let mut grants: Vec<(String, u64, u32)> = Vec::new();
        {
            let mut cs = self.consumers.lock();
            for (id, c) in cs.iter_mut() {
                if !Arc::ptr_eq(&c.queue, queue) {
                    continue;
                }
                c.started = true;
                if let Some(credit) = c.grant(false) {
                    grants.push((c.home.clone(), *id, credit));
                }
            }
        }
        for (home, consumer, credit) in grants {
            if let Some(link) = self.link(&home) {
                let _ = link.send(Message::Queue(QueueMsg::Credit { consumer, credit }));
            }
        }
    }

    /// Ask the home of consumer `consumer` to drain it (an AMQP 1.0
    /// drain); false if it cannot be asked.
    pub fn drain(&self, consumer: u64) -> bool {
        let home = match self.consumers.lock().get(&consumer) {
            Some(c) if c.started => c.home.clone(),
            _ => return false,
        };
        match self.link(&home) {
            Some(link) => link.send(Message::Queue(QueueMsg::Drain { consumer })).is_ok(),
            None => false,
        }
    }

    /// The home drained `consumer`: nothing granted is on its way now.
    fn drained(&self, consumer: u64) {
        let sink = {
            let mut cs = self.consumers.lock();
            let Some(c) = cs.get_mut(&consumer) else { return };
            c.in_flight = 0;
            c.spec.sink.clone()
        };
        sink.drained(consumer);
    }

    fn request(&self, home: &str, w: Waiting) -> u64 {
        let mut r = self.requests.lock();
        r.next += 1;
        let id = r.next;
        r.waiting.insert(id, (home.to_string(), w));
        id
    }

    /// basic.get on a queue at its home.
    /// basic.get on a queue at `home` (its home, or a quorum queue's
    /// leader's node).
    pub async fn get(
        &self,
        queue: &Arc<Queue>,
        home: &ShortStr,
        no_ack: bool,
    ) -> Result<Option<(Entry, u64)>, BrokerError> {
        let q = queue.clone();
        self.ask(
            queue,
            home,
            move |tx| Waiting::Get(q, tx),
            |req| QueueMsg::Get {
                req,
                vhost: queue.vhost.clone(),
                queue: queue.name.clone().into_bytes(),
                no_ack,
            },
        )
        .await
    }

    /// queue.purge on a queue at `home`: how many went.
    pub async fn purge(&self, queue: &Arc<Queue>, home: &ShortStr) -> Result<u64, BrokerError> {
        self.ask(queue, home, Waiting::Purge, |req| QueueMsg::Purge {
            req,
            vhost: queue.vhost.clone(),
            queue: queue.name.clone().into_bytes(),
        })
        .await
    }

    /// Send the request `message` makes (given its id) to `queue`'s home
    /// and wait for the answer, which `waiting` routes back.
    async fn ask<T>(
        &self,
        queue: &Arc<Queue>,
        home: &ShortStr,
        waiting: impl FnOnce(oneshot::Sender<Result<T, BrokerError>>) -> Waiting,
        message: impl FnOnce(u64) -> QueueMsg,
    ) -> Result<T, BrokerError> {
        let home = home.to_str_lossy().to_string();
        let link = self.link(&home).ok_or_else(|| home_down(queue, &home))?;
        let (tx, rx) = oneshot::channel();
        let req = self.request(&home, waiting(tx));
        if link.send(Message::Queue(message(req))).is_err() {
            self.requests.lock().waiting.remove(&req);
            return Err(home_down(queue, &home));
        }
        self.answer(req, rx, || home_down(queue, &home)).await
    }

    async fn answer<T>(
        &self,
        req: u64,
        rx: oneshot::Receiver<Result<T, BrokerError>>,
        lost: impl Fn() -> BrokerError,
    ) -> Result<T, BrokerError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(lost()),
            Err(_) => {
                self.requests.lock().waiting.remove(&req);
                Err(lost())
            }
        }
    }

    /// A queue-protocol message meant for this side.
    pub fn received(&self, from: &str, m: QueueMsg) {
        match m {
            QueueMsg::Confirm { first, count, ok } => self.confirmed(from, first, count, ok),
            QueueMsg::Deliver {
                consumer,
                seq,
                redelivered,
                message,
            } => self.delivered(from, consumer, seq, redelivered, message),
            QueueMsg::Drained { consumer } => self.drained(consumer),
            QueueMsg::Cancelled { consumer } => {
                if let Some(c) = self.consumers.lock().remove(&consumer) {
                    c.spec.sink.cancelled(c.spec.channel, c.spec.tag.clone());
                }
            }
            QueueMsg::Got {
                req,
                handle,
                redelivered,
                remaining,
                message,
            } => {
                let Some((_, Waiting::Get(_, tx))) = self.take_request(from, req) else {
                    // Nobody waits any more: give it back.
                    self.settle(&ShortStr::from(from), None, vec![handle], Settle::Requeue);
                    return;
                };
                let r = from_wire(message).map(|m| {
                    Some((
                        Entry {
                            seq: handle,
                            message: Arc::new(m),
                            redelivered,
                            delivery_count: 0,
                            expires_at: None,
                            stored: false,
                            annotated: false,
                        },
                        remaining,
                    ))
                });
                let _ = tx.send(r);
            }
            QueueMsg::Answer {
                req,
                code,
                text,
                value,
            } => self.answered(from, req, code, text, value),
            other => {
                tracing::warn!(peer = %from, kind = other.kind(), "a home's queue message sent to a client node; ignored")
            }
        }
    }

    fn take_request(&self, from: &str, req: u64) -> Option<(String, Waiting)> {
        let mut r = self.requests.lock();
        match r.waiting.get(&req) {
            Some((h, _)) if h == from => r.waiting.remove(&req),
            _ => None,
        }
    }

    fn answered(&self, from: &str, req: u64, code: u16, text: String, value: u64) {
        let Some((_, w)) = self.take_request(from, req) else {
            return;
        };
        let result = if code == 0 {
            Ok(())
        } else {
            Err(BrokerError::from_code(code, text))
        };
        match w {
            Waiting::Consume(id) => {
                let mut cs = self.consumers.lock();
                let Some(c) = cs.get_mut(&id) else { return };
                let waited = c.answer_rx.is_none();
                let tx = c.answer_tx.take();
                if result.is_err() {
                    let c = cs.remove(&id).expect("just seen");
                    drop(cs);
                    if !waited {
                        // No front end waits for the answer: end the
                        // consumer as the broker would.
                        c.spec.sink.cancelled(c.spec.channel, c.spec.tag.clone());
                        return;
                    }
                }
                if let Some(tx) = tx {
                    let _ = tx.send(result);
                }
            }
            Waiting::Get(_, tx) => {
                let _ = tx.send(result.map(|_| None));
            }
            Waiting::Purge(tx) => {
                let _ = tx.send(result.map(|_| value));
            }
        }
    }

    fn delivered(&self, from: &str, consumer: u64, seq: u64, redelivered: bool, message: WireMessage) {
        let mut cs = self.consumers.lock();
        let Some(c) = cs.get_mut(&consumer) else {
            drop(cs);
            // Cancelled here while it was on its way: back to the queue
            // (a no-ack delivery is already gone at the home).
            self.settle(&ShortStr::from(from), Some(consumer), vec![seq], Settle::Requeue);
            return;
        };
        let message = match from_wire(message) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                tracing::warn!(peer = %from, "a delivery that does not parse: {e}; discarded");
                drop(cs);
                self.settle(&ShortStr::from(from), Some(consumer), vec![seq], Settle::Discard);
                return;
            }
        };
        let spec = &c.spec;
        spec.sink.deliver(Delivery {
            channel: spec.channel,
            consumer_tag: spec.tag.clone(),
            consumer_id: spec.id,
            no_ack: spec.no_ack,
            queue: c.queue.clone(),
            entry: Entry {
                seq,
                message,
                redelivered,
                delivery_count: 0,
                expires_at: None,
                stored: false,
                annotated: false,
            },
        });
        spec.took_credit();
        c.in_flight = c.in_flight.saturating_sub(1);
        if let Some(credit) = c.grant(true) {
            drop(cs);
            if let Some(link) = self.link(from) {
                let _ = link.send(Message::Queue(QueueMsg::Credit { consumer, credit }));
            }
        } else if !c.spec.sink.has_room() {
            // Granted from `pump` once the connection has written some.
            let q: Weak<Queue> = Arc::downgrade(&c.queue);
            c.spec.sink.wait_for_room(q);
        }
    }
}
