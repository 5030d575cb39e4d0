//! An answer a queue gives at once or later. A quorum queue answers a
//! basic.get or a purge only once its command is applied, after every
//! command the same client sent before it (RabbitMQ's order); the
//! other queue types answer at once.

use tokio::sync::oneshot;

/// A get's or purge's answer: now, or once the queue has it.
#[derive(Debug)]
pub enum Answer<T> {
    Now(T),
    Later(Later<T>),
}

impl<T> Answer<T> {
    /// The answer; `None` when the queue gave up on it (deleted, or its
    /// command never applied within the time a publish may wait).
    pub async fn wait(self) -> Option<T> {
        match self {
            Answer::Now(v) => Some(v),
            Answer::Later(l) => l.0.await.ok(),
        }
    }
}

/// The waiting side of an answer to come.
#[derive(Debug)]
pub struct Later<T>(oneshot::Receiver<T>);

/// The queue's side: kept once the answer is known.
#[derive(Debug)]
pub struct Promise<T>(oneshot::Sender<T>);

impl<T> Promise<T> {
    /// Give the answer; back if the asker is gone.
    pub fn keep(self, v: T) -> Result<(), T> {
        self.0.send(v)
    }
}

/// A promise and the answer it will give.
pub fn promise<T>() -> (Promise<T>, Answer<T>) {
    let (tx, rx) = oneshot::channel();
    (Promise(tx), Answer::Later(Later(rx)))
}
