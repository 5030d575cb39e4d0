//! A channel's state, shared by the reader task (replies, confirms,
//! deliveries routed here), the handle's calls and recovery (reopening
//! the channel on a new wire as it was). It outlives the wires that
//! carry it; [`super::Channel`] is the handle applications call.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, Method};

use super::delivery::{Acker, Delivery};
use super::error::Error;
use super::events::Event;
use super::options::ConsumeOptions;
use super::outbound::Outbound;
use super::publish::{Confirms, Returned, Settle, DEFAULT_IN_FLIGHT};
use super::replies::{Answered, Replies, Undo, Unwanted};

pub(crate) use super::replies::{Content, Reply};
/// A consumer as its channel keeps it: where deliveries go, and what
/// recovery needs to start it again.
pub(crate) struct ConsumerEntry {
    pub(crate) tx: mpsc::Sender<Delivery>,
    pub(crate) rx: Arc<Mutex<mpsc::Receiver<Delivery>>>,
    pub(crate) queue: String,
    pub(crate) options: ConsumeOptions,
    /// Its [`super::Consumer`] was dropped and the broker asked to cancel
    /// it: what still comes for it goes back to the queue, until the
    /// cancel-ok ends the entry.
    pub(crate) dropped: bool,
    /// Dropped while no wire was open (a recovery under way, which may be
    /// starting it again): the cancel goes once the next wire is.
    cancel_owed: bool,
}

impl ConsumerEntry {
    /// A consumer started on `queue`: its deliveries go to `tx`.
    pub(crate) fn new(
        tx: mpsc::Sender<Delivery>,
        rx: Arc<Mutex<mpsc::Receiver<Delivery>>>,
        queue: String,
        options: ConsumeOptions,
    ) -> ConsumerEntry {
        ConsumerEntry {
            tx,
            rx,
            queue,
            options,
            dropped: false,
            cancel_owed: false,
        }
    }
}

/// The channel as the reader task, the handles and recovery share it. It
/// outlives the wires that carry it.
pub(crate) struct ChannelState {
    pub(crate) id: u16,
    replies: Replies,
    /// One call awaiting a reply at a time.
    pub(crate) calls: tokio::sync::Mutex<()>,
    pub(crate) confirms: Mutex<Confirms>,
    /// Told when confirms free in-flight slots (or the channel ends):
    /// publishes waiting at the limit look again.
    pub(crate) slot_freed: Notify,
    pub(crate) consumers: Mutex<HashMap<String, ConsumerEntry>>,
    /// The consumers whose basic.consume-ok has not come yet, in the
    /// order their requests went: the reader files each under its tag on
    /// its ok, before any delivery can follow.
    starting: Mutex<VecDeque<ConsumerEntry>>,
    ended: Mutex<Option<Error>>,
    pub(crate) prefetch: AtomicU16,
    pub(crate) transactional: AtomicBool,
    /// Unconfirmed publishes are published again after a recovery
    /// ([`super::RecoveryOptions::republish_unconfirmed`]).
    pub(crate) republish: AtomicBool,
}

impl ChannelState {
    pub(crate) fn new(id: u16) -> ChannelState {
        ChannelState {
            id,
            replies: Replies::default(),
            calls: tokio::sync::Mutex::new(()),
            confirms: Mutex::new(Confirms::new(DEFAULT_IN_FLIGHT)),
            slot_freed: Notify::new(),
            consumers: Mutex::new(HashMap::new()),
            starting: Mutex::new(VecDeque::new()),
            ended: Mutex::new(None),
            prefetch: AtomicU16::new(0),
            transactional: AtomicBool::new(false),
            republish: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.lock().is_some()
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        match self.ended.lock().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A reply from the broker, to the call waiting for it (or undone,
    /// if that call's caller went).
    fn answer(&self, r: Reply) {
        if let Answered::Unwanted(u, r) = self.replies.answer(r) {
            self.undo(&u, r);
        }
    }

    /// Send `m` on `wire` and wait for its reply; the caller holds
    /// `calls`. `starting` is the consumer a basic.consume starts, filed
    /// as its request is queued. Cancel-safe: dropped after the request
    /// went, its reply is undone when it comes ([`super::replies`]).
    pub(crate) async fn exchange(
        &self,
        wire: &Arc<Outbound>,
        m: Method,
        starting: Option<ConsumerEntry>,
    ) -> Result<Reply, Error> {
        self.check()?;
        let mut call = self.replies.expect(self, wire, &m);
        // Ended between the check and the slot: nobody would answer it.
        if wire.is_ended() || self.is_ended() {
            drop(call);
            self.check()?;
            return Err(wire.ended_error());
        }
        let mut starting = starting;
        wire.send_with(|buf| {
            write_method(buf, self.id, &m);
            // Queued with its request, in the order the oks will come.
            if let Some(entry) = starting.take() {
                self.starting.lock().push_back(entry);
            }
        })
        .await?;
        call.written();
        match call.reply().await {
            Some(r) => r,
            None => Err(self.check().err().unwrap_or_else(|| wire.ended_error())),
        }
    }

    /// A call on `wire` whatever the connection's state (recovery's).
    pub(crate) async fn call_method(&self, wire: &Arc<Outbound>, m: Method) -> Result<Method, Error> {
        let _one = self.calls.lock().await;
        match self.exchange(wire, m, None).await? {
            Reply::Method(m) => Ok(m),
            Reply::Got(_) => Err(Error::Protocol("an unexpected basic.get-ok".into())),
        }
    }

    /// Open this channel again on a new wire, as it was: its QoS, confirm
    /// and transaction modes, and its consumers under their tags. The
    /// caller has routed the wire's frames for this channel here. If the
    /// broker refuses a step (a consumer's queue is gone, say) the
    /// channel is closed as the broker says and the refusal reported;
    /// only a failing wire fails the recovery.
    pub(crate) async fn reopen(&self, wire: &Arc<Outbound>) -> Result<(), Error> {
        let _one = self.calls.lock().await;
        match self.restore(wire).await {
            Err(error @ Error::ChannelClosed { .. }) => {
                tracing::warn!(channel = self.id, "recovery could not restore a channel: {error}");
                wire.signals.emit(Event::TopologyRecoveryFailed {
                    what: format!("channel {}", self.id),
                    error,
                });
                Ok(())
            }
            // Closed by the application meanwhile.
            Err(_) if self.is_ended() && !wire.is_ended() => Ok(()),
            other => other,
        }
    }

    async fn restore(&self, wire: &Arc<Outbound>) -> Result<(), Error> {
        let call = |m: Method| async move {
            match self.exchange(wire, m, None).await? {
                Reply::Method(m) => Ok(m),
                Reply::Got(_) => Err(Error::Protocol("an unexpected basic.get-ok".into())),
            }
        };
        call(ChannelOpen::default().into()).await?;
        let prefetch = self.prefetch.load(Ordering::Relaxed);
        if prefetch > 0 {
            call(
                BasicQos {
                    prefetch_count: prefetch,
                    ..Default::default()
                }
                .into(),
            )
            .await?;
        }
        if self.confirms.lock().enabled {
            call(ConfirmSelect::default().into()).await?;
            // Publishes held over from the lost wire go first, renumbered.
            let resend = self.confirms.lock().restart();
            for frames in resend {
                wire.send(frames).await?;
            }
        }
        if self.transactional.load(Ordering::Relaxed) {
            call(TxSelect {}.into()).await?;
        }
        let consumers: Vec<(String, String, ConsumeOptions)> = {
            let mut consumers = self.consumers.lock();
            // Those dropped so far were on no wire that is left; one
            // dropped from here on is cancelled once this wire is open
            // (`cancel_owed`).
            consumers.retain(|_, c| !c.dropped);
            consumers
                .iter()
                .map(|(tag, c)| (tag.clone(), c.queue.clone(), c.options.clone()))
                .collect()
        };
        for (tag, queue, options) in consumers {
            call(
                BasicConsume {
                    queue: queue.as_str().into(),
                    consumer_tag: tag.as_str().into(),
                    no_ack: options.no_ack,
                    exclusive: options.exclusive,
                    arguments: options.arguments,
                    ..Default::default()
                }
                .into(),
            )
            .await?;
        }
        Ok(())
    }

    /// A server-named queue was declared again under a new name.
    pub(crate) fn queue_renamed(&self, old: &str, new: &str) {
        for c in self.consumers.lock().values_mut().filter(|c| c.queue == old) {
            c.queue = new.to_string();
        }
    }

    /// A confirm from the broker (basic.ack or basic.nack) settles its
    /// publishes, which go to `settled` for the caller to tell once it
    /// has routed the whole read (with no lock held): `Some(true)` if it
    /// freed an in-flight slot with publishers waiting for one, whom the
    /// caller also tells then, so they find every slot the read's
    /// confirms freed; `None` for any other method.
    pub(crate) fn confirm(&self, m: &Method, settled: &mut Vec<Settle>) -> Option<bool> {
        let (tag, multiple, ack) = match m {
            Method::BasicAck(a) => (a.delivery_tag, a.multiple, true),
            Method::BasicNack(n) => (n.delivery_tag, n.multiple, false),
            _ => return None,
        };
        Some(self.confirms.lock().settle(tag, multiple, ack, settled))
    }

    /// A method from the broker (content methods go to [`Self::content`],
    /// confirms to [`Self::confirm`]). A method for this channel, handled
    /// on the reader's task without waiting; one whose answer must be
    /// sent first comes back, for [`Self::answer_method`].
    pub(crate) fn method(&self, m: Method) -> Option<Method> {
        match m {
            // The broker cancelled a consumer (its queue was deleted):
            // its stream ends.
            Method::BasicCancel(c) => {
                self.consumers
                    .lock()
                    .remove(c.consumer_tag.to_str_lossy().as_ref());
            }
            m @ (Method::ChannelClose(_) | Method::ChannelFlow(_)) => return Some(m),
            // A dropped consumer's cancel, done: nobody waits for it.
            Method::BasicCancelOk(ok) if self.drop_cancelled(ok.consumer_tag.as_bytes()) => {}
            Method::BasicConsumeOk(ok) => {
                if let Some(entry) = self.starting.lock().pop_front() {
                    self.consumers
                        .lock()
                        .insert(ok.consumer_tag.to_str_lossy().into_owned(), entry);
                }
                self.answer(Reply::Method(Method::BasicConsumeOk(ok)));
            }
            m => self.answer(Reply::Method(m)),
        }
        None
    }

    /// channel.close and channel.flow from the broker: answered before
    /// anything else happens on the channel.
    pub(crate) async fn answer_method(&self, wire: &Outbound, m: Method) {
        match m {
            Method::ChannelClose(c) => {
                let mut buf = BytesMut::new();
                write_method(&mut buf, self.id, &Method::ChannelCloseOk(ChannelCloseOk {}));
                let _ = wire.send(buf.freeze()).await;
                self.closed(Error::ChannelClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_str_lossy().into_owned(),
                });
            }
            Method::ChannelFlow(f) => {
                let mut buf = BytesMut::new();
                write_method(
                    &mut buf,
                    self.id,
                    &Method::ChannelFlowOk(ChannelFlowOk { active: f.active }),
                );
                let _ = wire.send(buf.freeze()).await;
            }
            other => {
                self.method(other);
            }
        }
    }

    /// A whole message from the broker, handled without waiting; a
    /// delivery whose consumer's buffer is full comes back with the
    /// consumer's sender, for the reader to wait on.
    pub(crate) fn content(
        &self,
        wire: &Arc<Outbound>,
        c: Content,
    ) -> Option<(mpsc::Sender<Delivery>, Delivery)> {
        match c.method {
            Method::BasicDeliver(d) => {
                let acker = Acker {
                    wire: wire.clone(),
                    channel: self.id,
                    tag: d.delivery_tag,
                };
                let consumers = self.consumers.lock();
                let entry = find_consumer(&consumers, d.consumer_tag.as_bytes())?;
                if entry.dropped {
                    if !entry.options.no_ack {
                        requeue(wire, self.id, d.delivery_tag);
                    }
                    return None;
                }
                let delivery = Delivery::new(
                    d.delivery_tag,
                    d.redelivered,
                    d.exchange,
                    d.routing_key,
                    d.consumer_tag,
                    c.properties,
                    c.body,
                    acker,
                );
                // Bounded: a full buffer holds the socket back (TCP flow
                // control) rather than buffering without limit. The
                // common case, room in it, costs no clone of the sender.
                match entry.tx.try_send(delivery) {
                    Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                    Err(mpsc::error::TrySendError::Full(delivery)) => {
                        return Some((entry.tx.clone(), delivery))
                    }
                }
            }
            Method::BasicReturn(r) => self.confirms.lock().returned(Returned {
                reply_code: r.reply_code,
                reply_text: r.reply_text.to_str_lossy().into_owned(),
                exchange: r.exchange.to_str_lossy().into_owned(),
                routing_key: r.routing_key.to_str_lossy().into_owned(),
                // Checked on arrival; a table that still fails reads as none.
                properties: BasicProperties::decode(c.properties).unwrap_or_default(),
                body: c.body,
            }),
            Method::BasicGetOk(_) => self.answer(Reply::Got(Box::new(c))),
            _ => {}
        }
        None
    }

    /// The wire under the channel ended; the channel lives on for
    /// recovery. The call waiting and the unconfirmed publishes fail, and
    /// deliveries not yet taken by acknowledging consumers are dropped
    /// (the broker gives them again, marked redelivered; their acks
    /// could not reach it). A no-ack consumer keeps its buffer: those
    /// messages are already its.
    pub(crate) fn wire_lost(&self, why: &Error) {
        self.replies.fail(why);
        if self.republish.load(Ordering::Relaxed) {
            self.confirms.lock().hold(why);
        } else {
            self.confirms.lock().fail_all(why);
        }
        self.slot_freed.notify_waiters();
        self.starting.lock().clear();
        // Dropped consumers went with the wire's channel.
        self.consumers.lock().retain(|_, c| !c.dropped);
        for c in self.consumers.lock().values().filter(|c| !c.options.no_ack) {
            let mut rx = c.rx.lock();
            while rx.try_recv().is_ok() {}
        }
    }

    /// The channel ended for good: the call waiting, the publishes
    /// unconfirmed and the consumers learn it.
    pub(crate) fn closed(&self, why: Error) {
        {
            let mut e = self.ended.lock();
            if e.is_none() {
                *e = Some(why.clone());
            }
        }
        self.replies.fail(&why);
        self.confirms.lock().fail_all(&why);
        self.slot_freed.notify_waiters();
        self.consumers.lock().clear();
        self.starting.lock().clear();
    }
}

impl Undo for ChannelState {
    /// A reply whose caller went: a message a `basic.get` took goes back
    /// to its queue (one got without acknowledgement is the caller's,
    /// and gone with it); a consumer a `basic.consume` started is
    /// cancelled (its deliveries so far go back when it is). Anything
    /// else changed nothing to undo.
    fn undo(&self, unwanted: &Unwanted, reply: Result<Reply, Error>) {
        let m = match reply {
            Ok(Reply::Got(c)) if unwanted.get_acked => match c.method {
                Method::BasicGetOk(ok) => Method::BasicReject(BasicReject {
                    delivery_tag: ok.delivery_tag,
                    requeue: true,
                }),
                _ => return,
            },
            Ok(Reply::Method(Method::BasicConsumeOk(ok))) => {
                let _ =
                    self.consumer_dropped(&ok.consumer_tag.to_str_lossy(), || Some(unwanted.wire.clone()));
                return;
            }
            _ => return,
        };
        send_now(&unwanted.wire, self.id, m);
    }
}

impl ChannelState {
    /// The application dropped consumer `tag` without cancelling it;
    /// `wire` gives the channel's open wire, if it has one. The consumer
    /// is cancelled without waiting: the deliveries it never handed out
    /// go back to the queue (unless they were its already: no-ack), as do
    /// those still on their way, until the broker's cancel-ok. With no
    /// wire open the cancel waits for recovery's ([`Self::cancel_owed`]).
    /// Its queue, unless it was cancelled already (by the application or
    /// the broker).
    pub(crate) fn consumer_dropped(
        &self,
        tag: &str,
        wire: impl FnOnce() -> Option<Arc<Outbound>>,
    ) -> Option<String> {
        let mut consumers = self.consumers.lock();
        let entry = consumers.get_mut(tag)?;
        entry.dropped = true;
        if !entry.options.no_ack {
            let mut rx = entry.rx.lock();
            while let Ok(d) = rx.try_recv() {
                requeue(&d.acker.wire, self.id, d.delivery_tag);
            }
        }
        // Asked under the consumers' lock: recovery opens the next wire
        // before it looks for cancels owed under the same lock, so either
        // this finds that wire or recovery finds the debt.
        match wire() {
            Some(wire) => send_now(&wire, self.id, cancel(tag)),
            None => entry.cancel_owed = true,
        }
        Some(entry.queue.clone())
    }

    /// Recovery opened `wire` for use: cancel the consumers dropped while
    /// it was being restored (it may have started them again).
    pub(crate) fn cancel_owed(&self, wire: &Arc<Outbound>) {
        for (tag, entry) in self.consumers.lock().iter_mut() {
            if std::mem::take(&mut entry.cancel_owed) {
                send_now(wire, self.id, cancel(tag));
            }
        }
    }

    /// Whether `tag` is a dropped consumer's (now forgotten).
    fn drop_cancelled(&self, tag: &[u8]) -> bool {
        let mut consumers = self.consumers.lock();
        match std::str::from_utf8(tag) {
            Ok(t) if consumers.get(t).is_some_and(|c| c.dropped) => {
                consumers.remove(t);
                true
            }
            _ => false,
        }
    }
}

/// basic.cancel of consumer `tag`, answered (by a cancel-ok that ends
/// its entry).
fn cancel(tag: &str) -> Method {
    Method::BasicCancel(BasicCancel {
        consumer_tag: tag.into(),
        no_wait: false,
    })
}

/// basic.reject with requeue for delivery `tag`, without waiting.
fn requeue(wire: &Arc<Outbound>, channel: u16, tag: u64) {
    send_now(
        wire,
        channel,
        Method::BasicReject(BasicReject {
            delivery_tag: tag,
            requeue: true,
        }),
    );
}

/// Queue `m` on `wire` without waiting: at once if the outbox has room,
/// else from a task of its own (when there is a runtime to run it).
fn send_now(wire: &Arc<Outbound>, channel: u16, m: Method) {
    let mut encode = Some(move |buf: &mut BytesMut| write_method(buf, channel, &m));
    if !matches!(wire.try_send_with(&mut encode), Ok(None)) {
        return; // queued, or the wire ended (the broker takes it all back)
    }
    if let (Ok(rt), Some(encode)) = (tokio::runtime::Handle::try_current(), encode) {
        let wire = wire.clone();
        rt.spawn(async move { wire.send_with(encode).await });
    }
}

/// The consumer a delivery names: most channels have one, compared
/// directly, with no hashing (or UTF-8 check) of the tag.
fn find_consumer<'a>(consumers: &'a HashMap<String, ConsumerEntry>, tag: &[u8]) -> Option<&'a ConsumerEntry> {
    if consumers.len() == 1 {
        return consumers
            .iter()
            .next()
            .filter(|(t, _)| t.as_bytes() == tag)
            .map(|(_, e)| e);
    }
    consumers.get(std::str::from_utf8(tag).ok()?)
}
