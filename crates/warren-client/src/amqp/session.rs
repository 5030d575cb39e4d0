//! The connection's one session (channel 0) and its links, as state the
//! reader task changes under one lock and the application's calls read:
//! session flow control (spec 2.5.6), link credit (2.6.7), the outcomes
//! publishers wait for, and the deliveries consumers are given. What is
//! to be sent is encoded into `out`, which the writer task writes.
//!
//! The session outlives the socket when the connection recovers: its
//! links keep their handles and names, [`Session::lost`] fails what was
//! in flight and counts a new wire (its `epoch`), [`Session::resume`]
//! takes the new wire's begin, and [`Session::reattach`] attaches the
//! links again once recovery has declared the topology.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};
use warren_amqp10::frame::{write_frame, FrameType};
use warren_amqp10::messaging::{self, Outcome as WireOutcome};
use warren_amqp10::performative::{Attach, Detach, Disposition, Flow, Role, Transfer};
use warren_amqp10::{Performative, Value};

use super::error::{Condition, Error};
use super::message::Message;
use super::metrics::Metrics;

/// The incoming window we grant, and grant again once half is used.
pub(crate) const INCOMING_WINDOW: u32 = 8192;

/// What became of a published message (its delivery's outcome).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The broker took it: routed to at least one queue and, for durable
    /// queues, kept.
    Accepted,
    /// Not routed anywhere (no binding matched), or dropped by the
    /// broker without error.
    Released,
    /// Refused, with the broker's reason (a full queue with
    /// `reject-publish`, a missing exchange ...).
    Rejected(Option<Condition>),
    /// Refused for now (`modified`).
    Modified,
}

/// When the writer must run after a settle (in order of urgency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Wake {
    /// Nothing new to write.
    No,
    /// A run of accepts began: it may grow a little first (the consumer
    /// writes it when it runs out of deliveries; the writer within
    /// [`ACCEPT_DELAY`] at most).
    Soon,
    /// A frame is queued.
    Now,
}

/// The longest an accept waits for others to go with it.
pub(crate) const ACCEPT_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// Who waits for a published message's outcome, and the place in its
/// publisher's in-flight limit it holds until told.
pub(crate) struct Waiter {
    pub tx: oneshot::Sender<Result<Outcome, Error>>,
    pub place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Waiter {
    fn tell(self, outcome: Result<Outcome, Error>) {
        let _ = self.tx.send(outcome);
        drop(self.place);
    }
}

/// A whole delivery for a consumer, as bytes: the consumer's task
/// decodes it (not the reader, under the session's lock), and a few
/// bytes cross the channel rather than a decoded message.
pub(crate) struct Incoming {
    pub delivery_id: u32,
    pub settled: bool,
    pub payload: Bytes,
    /// The wire it came on: settling it means nothing on another.
    pub epoch: u64,
}

pub(crate) enum Kind {
    Sender {
        /// Messages it may send now.
        credit: u32,
        delivery_count: u32,
    },
    Receiver {
        /// Where deliveries go; None once the link is gone (the
        /// consumer's stream then ends, and `gone` says why).
        deliveries: Option<mpsc::UnboundedSender<Incoming>>,
        /// Transfers received (its delivery count) and credit left.
        received: u32,
        credit: u32,
        /// Deliveries the application settled (or, pre-settled, took),
        /// and the most it may hold unsettled: credit is topped up to
        /// `window` less what it holds once half is used.
        settled: u32,
        window: u32,
        /// A delivery in several frames, so far.
        partial: Option<(Transfer, BytesMut)>,
        /// A stream's offset of the last delivery handed to the
        /// application (its `x-stream-offset`): attached again after a
        /// recovery, the link goes on from the next.
        position: Arc<Position>,
        /// Whether the broker named it the single active consumer.
        activity: Option<Arc<Activity>>,
    },
}

/// A consumer's single-active-consumer state as the broker last told it
/// (RabbitMQ 4.3: a flow whose properties hold `rabbitmq:active`), and
/// the application's handler of changes.
pub(crate) struct Activity {
    /// 0: not told; 1: inactive; 2: active.
    state: std::sync::atomic::AtomicU8,
    handler: Option<Box<dyn Fn(bool) + Send + Sync>>,
}

impl Activity {
    pub fn new(handler: Option<Box<dyn Fn(bool) + Send + Sync>>) -> Activity {
        Activity {
            state: Default::default(),
            handler,
        }
    }

    /// As last told; None before the broker said.
    pub fn get(&self) -> Option<bool> {
        match self.state.load(std::sync::atomic::Ordering::Acquire) {
            0 => None,
            s => Some(s == 2),
        }
    }

    fn set(&self, active: bool) {
        let new = if active { 2 } else { 1 };
        if self.state.swap(new, std::sync::atomic::Ordering::AcqRel) != new {
            if let Some(h) = &self.handler {
                h(active);
            }
        }
    }
}

impl Kind {
    /// A sending link, before the broker gives credit.
    pub fn sender() -> Kind {
        Kind::Sender {
            credit: 0,
            delivery_count: 0,
        }
    }

    /// A receiving link handing its deliveries to `deliveries`, holding
    /// at most `window` unsettled.
    pub fn receiver(deliveries: mpsc::UnboundedSender<Incoming>, window: u32) -> Kind {
        Kind::Receiver {
            deliveries: Some(deliveries),
            received: 0,
            credit: 0,
            settled: 0,
            window,
            partial: None,
            position: Arc::default(),
            activity: None,
        }
    }

    /// A receiver's stream position, which its consumer keeps.
    pub fn position(&self) -> Option<Arc<Position>> {
        match self {
            Kind::Receiver { position, .. } => Some(position.clone()),
            Kind::Sender { .. } => None,
        }
    }

    /// This receiver tells `activity` what the broker says of it.
    pub fn with_activity(mut self, a: Arc<Activity>) -> Kind {
        if let Kind::Receiver { activity, .. } = &mut self {
            *activity = Some(a);
        }
        self
    }

    fn role(&self) -> Role {
        match self {
            Kind::Sender { .. } => Role::Sender,
            Kind::Receiver { .. } => Role::Receiver,
        }
    }
}

/// The broker's answer to an attach, to come.
pub(crate) type AttachAnswer = oneshot::Receiver<Result<Attach, Error>>;

/// The epoch of a link whose attach is not on the current wire yet.
const NOT_ATTACHED: u64 = u64::MAX;

pub(crate) struct Link {
    pub name: String,
    pub kind: Kind,
    /// Its attach as first sent (handle and role filled in), to attach
    /// it again on a recovered wire.
    pub attach: Attach,
    /// The wire its attach went on.
    pub epoch: u64,
    /// Told once the broker answers the attach.
    pub attached: Option<oneshot::Sender<Result<Attach, Error>>>,
    /// Set once the broker detached it.
    pub gone: Option<Error>,
    /// A dynamic source's address as the broker named it, renamed at
    /// each attach (direct reply-to: a new name on each wire).
    pub named: Option<Arc<parking_lot::Mutex<String>>>,
}

pub(crate) struct Session {
    /// Frames for the writer.
    pub out: BytesMut,
    /// Why the connection ended, once it has.
    pub ended: Option<Error>,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_incoming_id: u32,
    incoming_window: u32,
    next_delivery_id: u32,
    next_handle: u32,
    pub links: HashMap<u32, Link>,
    /// The broker's handle of each link, to ours.
    by_remote: HashMap<u32, u32>,
    /// Published and not settled: delivery id to (link, who waits).
    unsettled: HashMap<u32, (u32, Waiter)>,
    /// Sender links whose publisher was dropped with outcomes to come:
    /// each is detached when its last one is told.
    closing: Vec<u32>,
    /// Deliveries accepted and not yet told, one after another.
    accepts: Option<(u32, u32)>,
    /// Where a performative is encoded before its frame.
    scratch: BytesMut,
    /// Where a message is encoded before its transfer.
    pub encoded: BytesMut,
    /// The largest frame the broker takes.
    pub max_frame: u32,
    /// Wires lost so far: deliveries and links say which one they
    /// belong to.
    pub epoch: u64,
    /// Lost, not yet attached again: new links wait for [`Session::reattach`].
    pub recovering: bool,
    /// The application's hooks, if it gave any.
    pub metrics: Option<Arc<dyn Metrics>>,
}

impl Session {
    pub fn new(remote_incoming_window: u32, next_incoming_id: u32, max_frame: u32) -> Session {
        Session {
            out: BytesMut::with_capacity(64 * 1024),
            ended: None,
            next_outgoing_id: 0,
            remote_incoming_window,
            next_incoming_id,
            incoming_window: INCOMING_WINDOW,
            next_delivery_id: 0,
            next_handle: 0,
            links: HashMap::default(),
            by_remote: HashMap::default(),
            unsettled: HashMap::default(),
            closing: Vec::new(),
            accepts: None,
            scratch: BytesMut::new(),
            encoded: BytesMut::new(),
            max_frame,
            epoch: 0,
            recovering: false,
            metrics: None,
        }
    }

    /// The session telling `metrics` what its links do.
    pub fn with_metrics(mut self, metrics: Option<Arc<dyn Metrics>>) -> Session {
        self.metrics = metrics;
        self
    }

    /// The wire was lost: what waits for an outcome is told
    /// [`Error::ConnectionLost`], what was queued for it is dropped, and
    /// every link counts from nothing again (the broker forgot it).
    pub fn lost(&mut self, why: &Error) {
        self.epoch += 1;
        self.recovering = true;
        self.out.clear();
        self.accepts = None;
        self.by_remote.clear();
        let lost = Error::ConnectionLost(why.to_string());
        for (_, (_, w)) in self.unsettled.drain() {
            w.tell(Err(lost.clone()));
        }
        for link in self.links.values_mut() {
            match &mut link.kind {
                Kind::Sender {
                    credit,
                    delivery_count,
                } => {
                    *credit = 0;
                    *delivery_count = 0;
                }
                Kind::Receiver {
                    received,
                    credit,
                    settled,
                    partial,
                    ..
                } => {
                    (*received, *credit, *settled) = (0, 0, 0);
                    *partial = None;
                }
            }
        }
    }

    /// A new wire's session began: flow control starts again from the
    /// broker's begin.
    pub fn resume(&mut self, remote_incoming_window: u32, next_incoming_id: u32, max_frame: u32) {
        self.next_outgoing_id = 0;
        self.remote_incoming_window = remote_incoming_window;
        self.next_incoming_id = next_incoming_id;
        self.incoming_window = INCOMING_WINDOW;
        self.next_delivery_id = 0;
        self.max_frame = max_frame;
    }

    /// Attach again every link not attached on this wire (those of the
    /// lost one, and those asked for while recovering), giving receivers
    /// their credit; a stream consumer goes on after the last offset it
    /// got. The answers recovery waits for: (handle, link name, answer)
    /// of each link nobody else waits on.
    pub fn reattach(&mut self) -> Vec<(u32, String, AttachAnswer)> {
        self.recovering = false;
        // A dropped publisher's link is not attached again: the outcomes
        // it waited for went with the lost wire.
        for handle in std::mem::take(&mut self.closing) {
            self.links.remove(&handle);
        }
        let epoch = self.epoch;
        let mut handles: Vec<u32> = self
            .links
            .iter()
            .filter(|(_, l)| l.gone.is_none() && l.epoch != epoch)
            .map(|(h, _)| *h)
            .collect();
        handles.sort_unstable();
        let mut waits = Vec::new();
        for handle in handles {
            let Some(link) = self.links.get_mut(&handle) else {
                continue;
            };
            link.epoch = epoch;
            let mut attach = link.attach.clone();
            let receiver = match &link.kind {
                Kind::Receiver { position, .. } => {
                    if let (Some(n), Some(source)) = (position.get(), &attach.source) {
                        attach.source = Some(super::consumer::from_offset(source, n.wrapping_add(1)));
                    }
                    true
                }
                Kind::Sender { .. } => false,
            };
            if link.attached.is_none() {
                let (tx, rx) = oneshot::channel();
                link.attached = Some(tx);
                waits.push((handle, link.name.clone(), rx));
            }
            self.send(&Performative::Attach(attach), &[]);
            if receiver {
                self.grant(handle);
            }
        }
        waits
    }

    /// Queue one performative (and payload) for the writer.
    pub fn send(&mut self, p: &Performative, payload: &[u8]) {
        // Accepts not yet written go first: frames keep their order.
        self.flush_accepts();
        self.put(p, payload);
    }

    /// Encode a frame into `out` (the performative through a buffer
    /// kept for it, as its size goes first: no allocation per frame).
    fn put(&mut self, p: &Performative, payload: &[u8]) {
        self.scratch.clear();
        p.encode(&mut self.scratch);
        write_frame(&mut self.out, FrameType::Amqp, 0, &[&self.scratch, payload]);
    }

    /// Write the run of accepted deliveries waiting (one disposition).
    pub fn flush_accepts(&mut self) {
        let Some((first, last)) = self.accepts.take() else {
            return;
        };
        self.put(
            &Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last: (last != first).then_some(last),
                settled: true,
                state: Some(messaging::accepted()),
                batchable: false,
            }),
            &[],
        );
    }

    /// Whether accepts wait to be written.
    pub fn has_accepts(&self) -> bool {
        self.accepts.is_some()
    }

    /// Why link `handle` (or the connection) is gone, if it is.
    pub fn why_gone(&self, handle: u32) -> Option<Error> {
        self.links
            .get(&handle)
            .and_then(|l| l.gone.clone())
            .or_else(|| self.ended.clone())
    }

    /// Attach a link: `attach` is filled in with its handle and role.
    /// While recovering it goes once the topology is back
    /// ([`Session::reattach`]), unless `now` (recovery's own links).
    pub fn attach(&mut self, mut attach: Attach, kind: Kind, now: bool) -> (u32, AttachAnswer) {
        let handle = self.next_handle;
        self.next_handle += 1;
        attach.handle = handle;
        attach.role = kind.role();
        if attach.role == Role::Sender {
            attach.initial_delivery_count = Some(0);
        }
        let (tx, rx) = oneshot::channel();
        let send = now || !self.recovering;
        self.links.insert(
            handle,
            Link {
                name: attach.name.clone(),
                kind,
                attach: attach.clone(),
                epoch: if send { self.epoch } else { NOT_ATTACHED },
                attached: Some(tx),
                gone: None,
                named: None,
            },
        );
        if send {
            self.send(&Performative::Attach(attach), &[]);
        }
        (handle, rx)
    }

    /// Detach (close) link `handle`; its deliveries and waiters end.
    pub fn detach(&mut self, handle: u32) {
        if let Some(link) = self.links.remove(&handle) {
            // Its broker handle stays known until the broker's detach:
            // transfers already on their way are dropped, not an error.
            if link.gone.is_none() && self.ended.is_none() && link.epoch == self.epoch {
                self.send(
                    &Performative::Detach(Detach {
                        handle,
                        closed: true,
                        error: None,
                    }),
                    &[],
                );
            }
            self.fail_unsettled(handle, &Error::ConnectionClosed("the link was closed".into()));
        }
    }

    /// Detach sender link `handle` once the outcomes of what it sent are
    /// all told (at once if none is to come): a dropped publisher's
    /// pending outcomes still arrive.
    pub fn detach_when_settled(&mut self, handle: u32) {
        if self.unsettled.values().any(|(h, _)| *h == handle) {
            self.closing.push(handle);
        } else {
            self.detach(handle);
        }
    }

    /// Detach the closing links with nothing left unsettled.
    fn detach_settled(&mut self) {
        let mut closing = std::mem::take(&mut self.closing);
        closing.retain(|&handle| {
            let waiting = self.unsettled.values().any(|(l, _)| *l == handle);
            if !waiting {
                self.detach(handle);
            }
            waiting
        });
        self.closing = closing;
    }

    /// Give receiver link `handle` its window of credit, less what the
    /// application holds unsettled.
    pub fn grant(&mut self, handle: u32) {
        let Some(Link {
            kind:
                Kind::Receiver {
                    received,
                    credit,
                    settled,
                    window,
                    ..
                },
            gone: None,
            epoch,
            ..
        }) = self.links.get_mut(&handle)
        else {
            return;
        };
        if *epoch != self.epoch {
            return; // attached again later, credit with it
        }
        let held = received.wrapping_sub(*settled);
        *credit = window.saturating_sub(held);
        let (delivery_count, credit) = (*received, *credit);
        let flow = self.flow(Some((handle, delivery_count, credit)));
        self.send(&Performative::Flow(flow), &[]);
    }

    /// The application is done with one delivery on receiver link
    /// `handle` (settled it, or took it pre-settled): more credit once
    /// half the window is used ([`Wake::Now`] then: the flow must go).
    pub fn done_with(&mut self, handle: u32) -> Wake {
        let Some(Link {
            kind:
                Kind::Receiver {
                    received,
                    credit,
                    settled,
                    window,
                    ..
                },
            ..
        }) = self.links.get_mut(&handle)
        else {
            return Wake::No;
        };
        *settled = settled.wrapping_add(1);
        let held = received.wrapping_sub(*settled);
        if credit.saturating_add(held) <= *window / 2 {
            self.grant(handle);
            return Wake::Now;
        }
        Wake::No
    }

    fn flow(&self, link: Option<(u32, u32, u32)>) -> Flow {
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: link.map(|l| l.0),
            delivery_count: link.map(|l| l.1),
            link_credit: link.map(|l| l.2),
            ..Default::default()
        }
    }

    /// Whether sender link `handle` may send a message of `frames`
    /// frames now; Err once it or the connection is gone.
    pub fn can_send(&self, handle: u32, len: usize) -> Result<bool, Error> {
        let frames = frames_for(len, self.max_frame);
        if let Some(e) = &self.ended {
            return Err(e.clone());
        }
        match self.links.get(&handle) {
            Some(Link { gone: Some(e), .. }) => Err(e.clone()),
            Some(Link {
                kind: Kind::Sender { credit, .. },
                ..
            }) => Ok(*credit > 0 && self.remote_incoming_window >= frames),
            _ => Err(Error::ConnectionClosed("the link was closed".into())),
        }
    }

    /// Send `message` on sender link `handle` (credit and window checked
    /// by the caller), in frames of at most `max_frame` bytes; its
    /// outcome goes to `outcome` (None: sent settled).
    pub fn transfer(&mut self, handle: u32, message: &[u8], outcome: Option<Waiter>) {
        let Some(Link {
            kind: Kind::Sender {
                credit,
                delivery_count,
            },
            ..
        }) = self.links.get_mut(&handle)
        else {
            return;
        };
        *credit = credit.saturating_sub(1);
        *delivery_count = delivery_count.wrapping_add(1);
        let id = self.next_delivery_id;
        self.next_delivery_id = id.wrapping_add(1);
        let settled = outcome.is_none();
        if let Some(o) = outcome {
            self.unsettled.insert(id, (handle, o));
        }
        let room = payload_room(self.max_frame);
        let mut rest = message;
        let mut first = true;
        loop {
            let take = rest.len().min(room);
            let (piece, after) = rest.split_at(take);
            rest = after;
            let t = Transfer {
                handle,
                delivery_id: first.then_some(id),
                delivery_tag: first.then(|| Bytes::copy_from_slice(&id.to_be_bytes())),
                message_format: first.then_some(0),
                settled: first.then_some(settled),
                more: !rest.is_empty(),
                ..Default::default()
            };
            self.send(&Performative::Transfer(t), piece);
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            self.remote_incoming_window = self.remote_incoming_window.saturating_sub(1);
            first = false;
            if rest.is_empty() {
                break;
            }
        }
    }

    /// Settle delivery `delivery_id` we received on link `handle`, with
    /// `state` (None: accepted). Accepts of deliveries one after another
    /// wait to go as one disposition, until the writer runs or another
    /// frame is queued; when the writer must run says the [`Wake`]. A
    /// delivery of a lost wire (`epoch`) is not settled: the broker took
    /// it back when the wire went.
    pub fn settle(&mut self, handle: u32, delivery_id: u32, state: Option<Value>, epoch: u64) -> Wake {
        if epoch != self.epoch {
            return Wake::No;
        }
        let queued = self.out.len();
        let wake = match (state, &mut self.accepts) {
            (None, Some((_, last))) if delivery_id == last.wrapping_add(1) => {
                *last = delivery_id;
                Wake::No
            }
            (None, _) => {
                let had = self.accepts.is_some();
                self.flush_accepts();
                self.accepts = Some((delivery_id, delivery_id));
                if had {
                    Wake::Now
                } else {
                    Wake::Soon
                }
            }
            (Some(state), _) => {
                self.send(
                    &Performative::Disposition(Disposition {
                        role: Role::Receiver,
                        first: delivery_id,
                        last: None,
                        settled: true,
                        state: Some(state),
                        batchable: false,
                    }),
                    &[],
                );
                Wake::Now
            }
        };
        self.done_with(handle);
        if self.out.len() > queued {
            Wake::Now
        } else {
            wake
        }
    }

    /// The broker's performative on the session. Err: the connection
    /// cannot go on.
    pub fn handle(&mut self, p: Performative, payload: Bytes) -> Result<(), Error> {
        match p {
            Performative::Attach(a) => {
                // The broker's end of one of our links.
                // (A management pair's two links share a name: the
                // broker's end of our sender is a receiver.)
                let found = self
                    .links
                    .iter_mut()
                    .find(|(_, l)| l.name == a.name && l.attached.is_some() && l.kind.role() != a.role);
                if let Some((ours, link)) = found {
                    self.by_remote.insert(a.handle, *ours);
                    if let (Some(named), Some(address)) =
                        (&link.named, a.source.as_ref().and_then(messaging::address))
                    {
                        *named.lock() = address;
                    }
                    if let Some(tx) = link.attached.take() {
                        let _ = tx.send(Ok(a));
                    }
                }
            }
            Performative::Detach(d) => self.detached(d),
            Performative::Flow(f) => self.flowed(f),
            Performative::Transfer(t) => self.transferred(t, payload)?,
            Performative::Disposition(d) => self.disposed(d),
            Performative::End(e) => {
                // Our one session is the connection's: it closes too.
                self.send(&Performative::Close(Default::default()), &[]);
                let why = match e.error {
                    Some(c) => Error::Closed(c.into()),
                    None => Error::ConnectionClosed("the broker ended the session".into()),
                };
                return Err(why);
            }
            Performative::Close(c) => {
                // Answered before the connection ends (2.4.5).
                self.send(&Performative::Close(Default::default()), &[]);
                let why = match c.error {
                    Some(c) => Error::Closed(c.into()),
                    None => Error::ConnectionClosed("the broker closed the connection".into()),
                };
                return Err(why);
            }
            Performative::Open(_) | Performative::Begin(_) => {
                return Err(Error::Protocol(format!(
                    "unexpected {} after the handshake",
                    p.name()
                )))
            }
        }
        Ok(())
    }

    fn detached(&mut self, d: Detach) {
        let Some(ours) = self.by_remote.remove(&d.handle) else {
            // A refused attach: the broker's attach (with a null
            // terminus) came first and mapped it; nothing else to do.
            return;
        };
        let why = match d.error {
            Some(c) => Error::LinkRefused(c.into()),
            None => Error::ConnectionClosed("the broker closed the link".into()),
        };
        if let Some(link) = self.links.get_mut(&ours) {
            if let Some(tx) = link.attached.take() {
                let _ = tx.send(Err(why.clone()));
            }
            link.gone = Some(why.clone());
            if let Kind::Receiver { deliveries, .. } = &mut link.kind {
                *deliveries = None;
            }
            if self.ended.is_none() {
                // Answer the broker's detach.
                self.send(
                    &Performative::Detach(Detach {
                        handle: ours,
                        closed: true,
                        error: None,
                    }),
                    &[],
                );
            }
        }
        self.fail_unsettled(ours, &why);
    }

    fn fail_unsettled(&mut self, handle: u32, why: &Error) {
        let ids: Vec<u32> = self
            .unsettled
            .iter()
            .filter(|(_, (h, _))| *h == handle)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, w)) = self.unsettled.remove(&id) {
                w.tell(Err(why.clone()));
            }
        }
    }

    fn flowed(&mut self, f: Flow) {
        // 2.5.6: what the broker still takes from us.
        let their_next_incoming = f.next_incoming_id.unwrap_or(0);
        self.remote_incoming_window = their_next_incoming
            .wrapping_add(f.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        let Some(remote) = f.handle else { return };
        let Some(ours) = self.by_remote.get(&remote).copied() else {
            return;
        };
        if let Some(Link {
            kind: Kind::Receiver {
                activity: Some(a), ..
            },
            ..
        }) = self.links.get(&ours)
        {
            if let Some(active) = f.properties.as_ref().and_then(active_property) {
                a.set(active);
            }
            return;
        }
        if let Some(Link {
            kind: Kind::Sender {
                credit,
                delivery_count,
            },
            ..
        }) = self.links.get_mut(&ours)
        {
            // 2.6.7: the receiver's delivery count and credit, against ours.
            if let (Some(dc), Some(lc)) = (f.delivery_count, f.link_credit) {
                *credit = dc.wrapping_add(lc).wrapping_sub(*delivery_count);
            } else if let Some(lc) = f.link_credit {
                *credit = lc;
            }
        }
    }

    fn transferred(&mut self, t: Transfer, payload: Bytes) -> Result<(), Error> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            let flow = self.flow(None);
            self.send(&Performative::Flow(flow), &[]);
        }
        let Some(ours) = self.by_remote.get(&t.handle).copied() else {
            return Err(Error::Protocol(format!(
                "a transfer on unknown handle {}",
                t.handle
            )));
        };
        let Some(Link {
            kind:
                Kind::Receiver {
                    deliveries,
                    received,
                    credit,
                    partial,
                    settled,
                    window,
                    ..
                },
            ..
        }) = self.links.get_mut(&ours)
        else {
            // Closed on our side meanwhile: dropped (the broker requeues
            // what was unsettled when the detach reaches it).
            return Ok(());
        };
        // RabbitMQ 3.x's plugin takes a flow's credit as counted from its
        // own sends, so deliveries it had on their way come on top (at
        // most the credit left when we topped up, under half the
        // window): allowed, up to twice the window held, which still
        // bounds memory.
        if partial.is_none() && received.wrapping_sub(*settled) >= window.saturating_mul(2) {
            return Err(Error::Protocol("a transfer far beyond the credit given".into()));
        }
        let (more, aborted) = (t.more, t.aborted);
        let (first, whole) = match (partial.take(), more || aborted) {
            // A delivery in one frame, read where it lies.
            (None, false) => (t, payload),
            (begun, _) => {
                let (first, mut body) = begun.unwrap_or_else(|| (t, BytesMut::new()));
                body.extend_from_slice(&payload);
                if aborted {
                    *received = received.wrapping_add(1);
                    *credit = credit.saturating_sub(1);
                    return Ok(());
                }
                if more {
                    if body.len() > MAX_MESSAGE {
                        return Err(Error::Protocol("a delivery larger than 128 MiB".into()));
                    }
                    *partial = Some((first, body));
                    return Ok(());
                }
                (first, body.freeze())
            }
        };
        *received = received.wrapping_add(1);
        *credit = credit.saturating_sub(1);
        let Some(delivery_id) = first.delivery_id else {
            return Err(Error::Protocol("a delivery without an id".into()));
        };
        if let Some(d) = deliveries {
            let _ = d.send(Incoming {
                delivery_id,
                settled: first.settled.unwrap_or(false),
                payload: whole,
                epoch: self.epoch,
            });
        }
        Ok(())
    }

    fn disposed(&mut self, d: Disposition) {
        if d.role != Role::Receiver {
            return; // about deliveries we received: we settle them
        }
        let outcome = match d.state.as_ref().and_then(messaging::outcome) {
            Some(WireOutcome::Accepted) => Outcome::Accepted,
            Some(WireOutcome::Released) => Outcome::Released,
            Some(WireOutcome::Modified) => Outcome::Modified,
            Some(WireOutcome::Rejected) => Outcome::Rejected(rejected_condition(d.state.as_ref())),
            Some(WireOutcome::Received) | None => return,
        };
        let last = d.last.unwrap_or(d.first);
        let mut id = d.first;
        loop {
            if let Some((_, w)) = self.unsettled.remove(&id) {
                if let Some(m) = &self.metrics {
                    m.outcome(&outcome);
                }
                w.tell(Ok(outcome.clone()));
            }
            if id == last {
                break;
            }
            id = id.wrapping_add(1);
        }
        if !self.closing.is_empty() {
            self.detach_settled();
        }
        if !d.settled {
            self.send(
                &Performative::Disposition(Disposition {
                    role: Role::Sender,
                    first: d.first,
                    last: d.last,
                    settled: true,
                    state: d.state,
                    batchable: false,
                }),
                &[],
            );
        }
    }

    /// The connection ended: every waiter is told why.
    pub fn end(&mut self, why: Error) {
        if self.ended.is_some() {
            return;
        }
        for (_, (_, w)) in self.unsettled.drain() {
            w.tell(Err(why.clone()));
        }
        for link in self.links.values_mut() {
            if let Some(tx) = link.attached.take() {
                let _ = tx.send(Err(why.clone()));
            }
            link.gone = Some(why.clone());
            if let Kind::Receiver { deliveries, .. } = &mut link.kind {
                *deliveries = None;
            }
        }
        self.ended = Some(why);
    }
}

/// A stream delivery's offset (its `x-stream-offset`), kept for where a
/// recovered link goes on.
/// A stream consumer's offset of the last delivery handed over (none
/// yet: 0; else the offset plus one), kept by its consumer and read by
/// recovery.
#[derive(Debug, Default)]
pub(crate) struct Position(std::sync::atomic::AtomicU64);

impl Position {
    pub fn get(&self) -> Option<u64> {
        self.0.load(std::sync::atomic::Ordering::Acquire).checked_sub(1)
    }

    pub fn set(&self, offset: u64) {
        self.0
            .store(offset.saturating_add(1), std::sync::atomic::Ordering::Release);
    }
}

/// A message's stream offset (`x-stream-offset`), if it came from one.
pub(crate) fn stream_offset(m: &Message) -> Option<u64> {
    match m.annotation_value("x-stream-offset") {
        Some(Value::Long(n)) => Some(*n as u64),
        Some(Value::Ulong(n)) => Some(*n),
        _ => None,
    }
}

/// A delivery larger than this (in several frames) is refused.
const MAX_MESSAGE: usize = 128 << 20;

/// A link flow's `rabbitmq:active` property.
fn active_property(properties: &Value) -> Option<bool> {
    let Value::Map(m) = properties else { return None };
    m.iter().find_map(|(k, v)| match (k, v) {
        (Value::Symbol(k) | Value::String(k), Value::Bool(b)) if k == "rabbitmq:active" => Some(*b),
        _ => None,
    })
}

/// Payload bytes a transfer frame of `max_frame` bytes carries (its
/// header and the transfer performative take the rest).
fn payload_room(max_frame: u32) -> usize {
    (max_frame as usize).saturating_sub(128).max(256)
}

/// Frames a message of `len` bytes takes.
fn frames_for(len: usize, max_frame: u32) -> u32 {
    len.div_ceil(payload_room(max_frame)).max(1) as u32
}

fn rejected_condition(state: Option<&Value>) -> Option<Condition> {
    let (_, inner) = state?.as_described()?;
    let Value::List(fields) = inner else { return None };
    let e = fields.first()?;
    warren_amqp10::performative::AmqpError::from_value(e)
        .ok()
        .map(Condition::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp10::Frame;

    /// The dispositions queued in `out`, as (first, last, outcome).
    fn dispositions(out: &mut BytesMut) -> Vec<(u32, Option<u32>, Option<WireOutcome>)> {
        let mut found = Vec::new();
        while let Some(f) = Frame::parse(out, 1 << 20).unwrap() {
            if let (Performative::Disposition(d), _) = Performative::decode(&f.body).unwrap() {
                found.push((d.first, d.last, d.state.as_ref().and_then(messaging::outcome)));
            }
        }
        found
    }

    #[test]
    fn accepts_one_after_another_go_as_one_disposition_in_order() {
        let mut s = Session::new(100, 0, 1 << 20);
        assert_eq!(s.settle(0, 4, None, 0), Wake::Soon, "a run begins: it may grow");
        assert_eq!(s.settle(0, 5, None, 0), Wake::No, "the run grows");
        assert_eq!(s.settle(0, 6, None, 0), Wake::No);
        assert_eq!(
            s.settle(0, 9, None, 0),
            Wake::Now,
            "not next: the run is queued, another begins"
        );
        assert_eq!(
            s.settle(0, 10, Some(messaging::released()), 0),
            Wake::Now,
            "another outcome goes at once"
        );
        assert_eq!(s.settle(0, 11, None, 0), Wake::Soon);
        assert_eq!(
            s.settle(0, 12, None, 7),
            Wake::No,
            "a lost wire's delivery is not settled"
        );
        s.flush_accepts();
        assert_eq!(
            dispositions(&mut s.out),
            vec![
                (4, Some(6), Some(WireOutcome::Accepted)),
                (9, None, Some(WireOutcome::Accepted)),
                (10, None, Some(WireOutcome::Released)),
                (11, None, Some(WireOutcome::Accepted)),
            ]
        );
        s.flush_accepts();
        assert!(s.out.is_empty(), "nothing twice");
    }
}
