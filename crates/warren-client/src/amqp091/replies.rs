//! A channel's replies: the call waiting for the broker's answer, and the
//! calls whose callers went (their future dropped) after the request was
//! written but before the answer came.
//!
//! A reply of the kind a dropped call expects, while it is outstanding,
//! is taken for the oldest such call's: a channel answers its calls in
//! order, except that RabbitMQ may send a basic.consume-ok after the
//! reply to a call that followed it (its queue sends it), so replies are
//! matched by kind, not only by place. The replies of dropped calls are
//! not handed to whoever calls next; what they leave
//! behind is undone by the channel ([`super::channel_state`]): a message
//! a dropped `basic.get` took goes back to its queue, a consumer a dropped
//! `basic.consume` started is cancelled. This is what makes every call
//! cancel-safe.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use warren_amqp091::Method;

use super::error::Error;
use super::outbound::Outbound;

/// A message with its method, as the reader assembled it.
pub(crate) struct Content {
    pub(crate) method: Method,
    /// As they came, their layout checked: decoded only when read.
    pub(crate) properties: Bytes,
    pub(crate) body: Bytes,
}

/// What a call waits for.
pub(crate) enum Reply {
    Method(Method),
    Got(Box<Content>),
}

/// Undoes what a reply nobody waits for did (the channel, which knows
/// its consumers).
pub(crate) trait Undo {
    fn undo(&self, unwanted: &Unwanted, reply: Result<Reply, Error>);
}

/// What it takes to undo a reply nobody waits for any more.
#[derive(Clone)]
pub(crate) struct Unwanted {
    /// The wire the request went on (a delivery tag names a message on
    /// that wire only).
    pub(crate) wire: Arc<Outbound>,
    /// The request was a `basic.get` that must be acknowledged: its
    /// message goes back to the queue.
    pub(crate) get_acked: bool,
    /// The request's class and method ids.
    request: (u16, u16),
}

/// Whether `reply` (class and method ids) answers `request`: the method
/// after it in its class, but for the two with other answers.
fn answers(request: (u16, u16), reply: (u16, u16)) -> bool {
    const EXCHANGE: u16 = 40;
    const BASIC: u16 = 60;
    request.0 == reply.0
        && match request {
            (EXCHANGE, 40) => reply.1 == 51,               // unbind: unbind-ok
            (BASIC, 70) => reply.1 == 71 || reply.1 == 72, // get: get-ok or get-empty
            (_, m) => reply.1 == m + 1,
        }
}

fn ids(m: &Method) -> (u16, u16) {
    (m.class_id(), m.method_id())
}

struct Waiting {
    id: u64,
    tx: oneshot::Sender<Result<Reply, Error>>,
    unwanted: Unwanted,
}

#[derive(Default)]
struct Slot {
    next_id: u64,
    waiting: Option<Waiting>,
    /// Requests on the wire whose callers went, oldest first.
    dropped: VecDeque<Unwanted>,
}

/// The reply slot of one channel.
#[derive(Default)]
pub(crate) struct Replies {
    slot: Mutex<Slot>,
}

/// Where a reply from the broker went.
pub(crate) enum Answered {
    /// To the call waiting (or there was none to tell).
    Told,
    /// To a call whose caller went: the channel undoes what it did.
    Unwanted(Unwanted, Result<Reply, Error>),
}

impl Replies {
    /// Make ready for the reply to a request about to go on `wire`. The
    /// returned [`Call`] must be told when the request is written.
    pub(crate) fn expect<'a>(
        &'a self,
        undo: &'a (dyn Undo + Sync),
        wire: &Arc<Outbound>,
        request: &Method,
    ) -> Call<'a> {
        let (tx, rx) = oneshot::channel();
        let unwanted = Unwanted {
            wire: wire.clone(),
            get_acked: matches!(request, Method::BasicGet(g) if !g.no_ack),
            request: ids(request),
        };
        let mut slot = self.slot.lock();
        let id = slot.next_id;
        slot.next_id += 1;
        slot.waiting = Some(Waiting {
            id,
            tx,
            unwanted: unwanted.clone(),
        });
        Call {
            replies: self,
            undo,
            id,
            rx: Some(rx),
            written: false,
            unwanted,
        }
    }

    /// A reply from the broker: the oldest dropped call's that expects
    /// its kind if there is one, else the waiting call's.
    pub(crate) fn answer(&self, r: Reply) -> Answered {
        let mut slot = self.slot.lock();
        let kind = match &r {
            Reply::Method(m) => ids(m),
            Reply::Got(c) => ids(&c.method),
        };
        if let Some(at) = slot.dropped.iter().position(|d| answers(d.request, kind)) {
            let u = slot.dropped.remove(at).expect("found");
            return Answered::Unwanted(u, Ok(r));
        }
        let Some(w) = slot.waiting.take() else {
            return Answered::Told;
        };
        drop(slot);
        match w.tx.send(Ok(r)) {
            Ok(()) => Answered::Told,
            // Its caller went between our taking the slot and now.
            Err(r) => Answered::Unwanted(w.unwanted, r),
        }
    }

    /// The wire ended (or the channel): no reply is coming to anything
    /// asked on it. The waiting call gets `why`.
    pub(crate) fn fail(&self, why: &Error) {
        let mut slot = self.slot.lock();
        slot.dropped.clear();
        if let Some(w) = slot.waiting.take() {
            let _ = w.tx.send(Err(why.clone()));
        }
    }
}

/// A call awaiting its reply. Dropped unanswered, it leaves its reply to
/// be undone when it comes (or undoes it at once, if it came already).
pub(crate) struct Call<'a> {
    replies: &'a Replies,
    undo: &'a (dyn Undo + Sync),
    id: u64,
    rx: Option<oneshot::Receiver<Result<Reply, Error>>>,
    written: bool,
    unwanted: Unwanted,
}

impl Call<'_> {
    /// The request is on its way: from now on a reply will come.
    pub(crate) fn written(&mut self) {
        self.written = true;
    }

    /// The reply; None if the slot was given up without one.
    pub(crate) async fn reply(&mut self) -> Option<Result<Reply, Error>> {
        let rx = self.rx.as_mut()?;
        let r = rx.await.ok();
        self.rx = None;
        r
    }

    /// Dropped before its reply came: what the reply does is to be undone
    /// (returned if it came already), or nothing if the request never
    /// went.
    fn abandon(&mut self) -> Option<(Unwanted, Result<Reply, Error>)> {
        let mut rx = self.rx.take()?;
        let mut slot = self.replies.slot.lock();
        if slot.waiting.as_ref().is_some_and(|w| w.id == self.id) {
            slot.waiting = None;
            if self.written {
                slot.dropped.push_back(self.unwanted.clone());
            }
            return None;
        }
        drop(slot);
        // Answered already: the reply is here (or its sender, finding us
        // gone, undoes it itself).
        rx.try_recv().ok().map(|r| (self.unwanted.clone(), r))
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if let Some((unwanted, r)) = self.abandon() {
            self.undo.undo(&unwanted, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::answers;

    #[test]
    fn a_reply_answers_its_request_kind_only() {
        assert!(answers((50, 10), (50, 11)), "queue.declare: declare-ok");
        assert!(answers((60, 20), (60, 21)), "basic.consume: consume-ok");
        assert!(
            answers((60, 70), (60, 71)) && answers((60, 70), (60, 72)),
            "get: ok or empty"
        );
        assert!(answers((40, 40), (40, 51)), "exchange.unbind: unbind-ok");
        assert!(!answers((60, 20), (50, 11)), "a declare-ok is not a consume's");
        assert!(!answers((50, 10), (60, 11)), "another class");
    }
}
