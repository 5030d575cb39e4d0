//! The futures a producer's publishes resolve through: a [`Confirm`] per
//! message, or a [`BatchConfirm`] for all the messages of one send. The
//! words on one send call's messages live in one [`Batch`], shared by its
//! futures and by the producer's outstanding entries, which settle them
//! as the broker answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use super::error::{Error, ResponseCode};

/// What the broker said of one published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confirmation {
    /// Stored (on a majority of a replicated stream's members).
    Confirmed {
        /// The message's publishing id.
        publishing_id: u64,
    },
    /// Refused (PublishError), with the broker's code.
    Rejected {
        /// The message's publishing id.
        publishing_id: u64,
        /// Why.
        code: ResponseCode,
    },
}

impl Confirmation {
    /// True for [`Confirmation::Confirmed`].
    pub fn is_confirmed(&self) -> bool {
        matches!(self, Confirmation::Confirmed { .. })
    }
}

pub(crate) type Told = Result<Confirmation, Error>;

/// The words on the messages of one send call, shared by its futures: one
/// allocation per call rather than a channel per message. Each message
/// has a [`Confirm`] of its own, or the call one [`BatchConfirm`] for all.
pub(crate) struct Batch {
    state: Mutex<BatchState>,
}

pub(crate) struct BatchState {
    /// Messages registered so far (their ids stay with their frames).
    len: u32,
    /// One future per message: each one's word, once it has come (and
    /// until its future takes it), and the tasks awaiting them (made on
    /// the first wait).
    told: Vec<Option<Told>>,
    wakers: Vec<Option<Waker>>,
    /// One future for all: the counts.
    counted: Option<Counted>,
}

#[derive(Default)]
struct Counted {
    outstanding: usize,
    /// Every message of the call is registered.
    sealed: bool,
    outcome: BatchConfirmation,
    waker: Option<Waker>,
}

impl Batch {
    /// For one [`Confirm`] per message.
    pub(crate) fn each() -> Arc<Batch> {
        Batch::new(None)
    }

    /// For one [`BatchConfirm`].
    pub(crate) fn counted() -> Arc<Batch> {
        Batch::new(Some(Counted::default()))
    }

    fn new(counted: Option<Counted>) -> Arc<Batch> {
        Arc::new(Batch {
            state: Mutex::new(BatchState {
                len: 0,
                told: Vec::new(),
                wakers: Vec::new(),
                counted,
            }),
        })
    }

    /// The messages registered so far.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().len as usize
    }

    /// Its state, locked (to register or settle several entries at once).
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, BatchState> {
        self.state.lock()
    }

    /// Every message is registered: a [`BatchConfirm`] may resolve.
    pub(crate) fn seal(&self) {
        let mut st = self.state.lock();
        if let Some(c) = st.counted.as_mut() {
            c.sealed = true;
            if c.outstanding == 0 {
                if let Some(w) = c.waker.take() {
                    w.wake();
                }
            }
        }
    }
}

impl BatchState {
    /// `n` messages follow those registered before; the index of the
    /// first.
    pub(crate) fn append(&mut self, n: usize) -> u32 {
        let base = self.len;
        self.len += n as u32;
        match self.counted.as_mut() {
            Some(c) => c.outstanding += n,
            None => self.told.resize(self.len as usize, None),
        }
        base
    }

    /// Give the messages from index `first` on, under publishing ids
    /// `ids`, the broker's `word`, waking whoever awaits them.
    pub(crate) fn tell(&mut self, first: u32, ids: &[u64], word: &Word<'_>) {
        let state = self;
        let count = ids.len() as u32;
        if let Some(c) = state.counted.as_mut() {
            match word {
                Word::Confirmed => c.outcome.confirmed += count as usize,
                Word::Rejected(code) => c.outcome.rejected.extend(ids.iter().map(|&id| (id, *code))),
                Word::Failed(e) => {
                    c.outcome.failed += count as usize;
                    c.outcome.error.get_or_insert_with(|| (*e).clone());
                }
            }
            c.outstanding -= count as usize;
            if c.outstanding == 0 && c.sealed {
                if let Some(w) = c.waker.take() {
                    w.wake();
                }
            }
            return;
        }
        for (k, &id) in (first as usize..).zip(ids) {
            state.told[k] = Some(word.told(id));
            if let Some(w) = state.wakers.get_mut(k).and_then(Option::take) {
                w.wake();
            }
        }
    }
}

/// What the broker said of a run of entries (or why it never will).
pub(crate) enum Word<'a> {
    Confirmed,
    Rejected(ResponseCode),
    Failed(&'a Error),
}

impl Word<'_> {
    /// The word for the message under `publishing_id`.
    fn told(&self, publishing_id: u64) -> Told {
        match self {
            Word::Confirmed => Ok(Confirmation::Confirmed { publishing_id }),
            Word::Rejected(code) => Ok(Confirmation::Rejected {
                publishing_id,
                code: *code,
            }),
            Word::Failed(e) => Err((*e).clone()),
        }
    }
}

/// The broker's answer to one publish: a future resolving to its
/// [`Confirmation`], or to an error when the producer or its connection
/// ended first (the message may or may not have been stored).
#[must_use = "a confirm says whether the broker stored the message"]
pub struct Confirm(Awaited);

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Confirm")
    }
}

enum Awaited {
    /// Message `index` of a frame's batch.
    One { batch: Arc<Batch>, index: u32 },
    /// Several partitions' words on one message (a super stream key
    /// bound to more than one).
    All(Pin<Box<dyn Future<Output = Told> + Send>>),
    /// Resolved already.
    Done,
}

impl Confirm {
    /// The futures of `batch`'s messages, in order.
    pub(crate) fn each_of(batch: &Arc<Batch>) -> impl Iterator<Item = Confirm> + '_ {
        (0..batch.len() as u32).map(|index| {
            Confirm(Awaited::One {
                batch: batch.clone(),
                index,
            })
        })
    }

    /// One confirm for a message sent to several streams: the first that
    /// is not a confirmation, else the first.
    pub(crate) fn all(confirms: Vec<Confirm>) -> Confirm {
        Confirm(Awaited::All(Box::pin(async move {
            let told = futures_util::future::join_all(confirms).await;
            let bad = told.iter().position(|t| !matches!(t, Ok(c) if c.is_confirmed()));
            told.into_iter()
                .nth(bad.unwrap_or(0))
                .unwrap_or(Err(Error::Protocol("a message sent nowhere".into())))
        })))
    }
}

impl Future for Confirm {
    type Output = Result<Confirmation, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let told = match &mut self.0 {
            Awaited::One { batch, index } => {
                let i = *index as usize;
                let mut state = batch.state.lock();
                match state.told[i].take() {
                    Some(t) => t,
                    None => {
                        if state.wakers.len() < state.told.len() {
                            let n = state.told.len();
                            state.wakers.resize(n, None);
                        }
                        match &state.wakers[i] {
                            Some(w) if w.will_wake(cx.waker()) => {}
                            _ => state.wakers[i] = Some(cx.waker().clone()),
                        }
                        return Poll::Pending;
                    }
                }
            }
            Awaited::All(f) => match f.as_mut().poll(cx) {
                Poll::Ready(t) => t,
                Poll::Pending => return Poll::Pending,
            },
            Awaited::Done => panic!("a Confirm polled after it resolved"),
        };
        self.0 = Awaited::Done;
        Poll::Ready(told)
    }
}

/// What the broker said of the messages of one
/// [`super::Producer::send_all`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BatchConfirmation {
    /// Messages stored (on a majority of a replicated stream's members).
    pub confirmed: usize,
    /// Messages refused (PublishError): publishing id and code.
    pub rejected: Vec<(u64, ResponseCode)>,
    /// Messages whose producer or connection ended first (they may or
    /// may not have been stored), and the first such error.
    pub failed: usize,
    /// Why they failed.
    pub error: Option<Error>,
}

impl BatchConfirmation {
    /// True if every message was confirmed.
    pub fn all_confirmed(&self) -> bool {
        self.rejected.is_empty() && self.failed == 0
    }
}

/// The broker's answer to every message of one
/// [`super::Producer::send_all`]: a future resolving once each is
/// settled.
#[must_use = "a confirm says whether the broker stored the messages"]
pub struct BatchConfirm(Option<Arc<Batch>>);

impl BatchConfirm {
    pub(crate) fn new(batch: Arc<Batch>) -> BatchConfirm {
        BatchConfirm(Some(batch))
    }
}

impl std::fmt::Debug for BatchConfirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchConfirm")
    }
}

impl Future for BatchConfirm {
    type Output = BatchConfirmation;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BatchConfirmation> {
        let batch = self.0.as_ref().expect("a BatchConfirm polled after it resolved");
        let outcome = {
            let mut st = batch.state.lock();
            let c = st.counted.as_mut().expect("a counted batch");
            if !(c.sealed && c.outstanding == 0) {
                match &c.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => c.waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            std::mem::take(&mut c.outcome)
        };
        self.0 = None;
        Poll::Ready(outcome)
    }
}
