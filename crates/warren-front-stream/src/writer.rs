//! The stream writer: one thread that appends publishers' chunks to their
//! logs, so a publishing connection goes on reading and parsing while its
//! previous chunk is copied into the page cache (the largest cost of a
//! stream publish, measured: 55 % of the broker's CPU at 1 KB). Jobs run
//! in the order they were handed over, so a publisher's chunks keep their
//! order. Each connection keeps at most [`MAX_OUTSTANDING`] jobs in flight
//! and stops reading until they complete, so the queue is bounded.

use std::sync::mpsc;
use std::sync::Arc;

use warren_core::queue::StreamLog;
use warren_log::{Appended, Delta, LogError, Message};

/// Jobs a connection may have handed over and not seen completed.
pub const MAX_OUTSTANDING: usize = 8;

pub struct Job {
    pub log: Arc<StreamLog>,
    pub messages: Vec<Message>,
    pub delta: Delta,
    pub done: Box<dyn FnOnce(Result<Appended, LogError>) + Send>,
}

pub struct Writer {
    tx: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stream Writer")
    }
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::start()
    }
}

impl Writer {
    pub fn start() -> Writer {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("warren-stream-writer".into())
            .spawn(move || {
                for job in rx {
                    let r = if job.log.is_deleted() {
                        Err(LogError::Corrupt {
                            path: job.log.name.clone(),
                            why: "the stream was deleted".into(),
                        })
                    } else {
                        job.log.append(&job.messages, &job.delta)
                    };
                    (job.done)(r);
                }
            })
            .expect("spawn the stream writer");
        Writer { tx }
    }

    /// Hand a job over; if the thread is gone, run it here.
    pub fn submit(&self, job: Job) {
        if let Err(mpsc::SendError(job)) = self.tx.send(job) {
            let r = job.log.append(&job.messages, &job.delta);
            (job.done)(r);
        }
    }
}
