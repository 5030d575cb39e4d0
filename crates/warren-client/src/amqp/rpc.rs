//! Requests and replies, as RabbitMQ's AMQP 1.0 clients' requester and
//! responder: an [`RpcClient`] sends each request to a queue with a
//! `message-id` of its own and `reply-to` naming where its replies come
//! (direct reply-to where the broker serves it, RabbitMQ 4.2's volatile
//! queue: a node the broker names for the client's receiving link, with
//! no queue between; else an exclusive reply queue of its own, declared
//! through the connection's management so recovery declares it again),
//! and matches replies by their `correlation-id`; an [`RpcServer`]
//! consumes the request queue, runs the application's handler, and sends
//! its reply to the request's `reply-to` with the request's `message-id`
//! as `correlation-id`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::address;
use super::connection::Connection;
use super::error::Error;
use super::events::Event;
use super::message::{Message, MessageId};
use super::spec::QueueSpec;
use super::{Consumer, Publisher, QueueInfo};
use crate::awaiting::Awaiting;

/// How long a call waits for its reply unless told otherwise.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(30);

type Pending = Arc<Mutex<HashMap<MessageId, oneshot::Sender<Result<Message, Error>>>>>;

/// Where an [`RpcClient`]'s replies come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplyTo {
    /// Direct reply-to where the broker serves it (RabbitMQ 4.2 and
    /// later, Warren), else an exclusive queue (the default).
    #[default]
    Direct,
    /// An exclusive, auto-delete queue of the client's own.
    ExclusiveQueue,
}

/// How to make an [`RpcClient`] ([`Connection::rpc_client_builder`]).
pub struct RpcClientBuilder {
    pub(crate) conn: Connection,
    pub(crate) request_queue: String,
    pub(crate) reply_to: ReplyTo,
    pub(crate) timeout: Duration,
}

impl RpcClientBuilder {
    /// Where replies come ([`ReplyTo::Direct`] by default).
    pub fn reply_to(mut self, reply_to: ReplyTo) -> Self {
        self.reply_to = reply_to;
        self
    }

    /// How long each call waits for its reply (30 s by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Attach the reply link and the request publisher.
    pub async fn build(self) -> Result<RpcClient, Error> {
        let conn = &self.conn;
        let prefix = format!(
            "{}-{}",
            conn.shared.settings.container_id,
            conn.shared.link_name("rpc")
        );
        let direct = match self.reply_to {
            ReplyTo::Direct => match conn.consumer().build_direct_reply_to().await {
                Ok(d) => Some(d),
                // A broker without direct reply-to refuses the dynamic
                // source (amqp:not-implemented): a queue it is.
                Err(Error::LinkRefused(why)) => {
                    tracing::debug!(reason = %why, "no direct reply-to; an exclusive reply queue instead");
                    None
                }
                Err(e) => return Err(e),
            },
            ReplyTo::ExclusiveQueue => None,
        };
        let (replies, reply_to) = match direct {
            Some((consumer, named)) => (consumer, Address::Named(named)),
            None => {
                let management = conn.management().await?;
                let declared: QueueInfo = management
                    .declare_queue(&QueueSpec::classic(&prefix).exclusive().auto_delete())
                    .await?;
                management.close();
                let consumer = conn
                    .consumer()
                    .queue(&declared.name)
                    .pre_settled()
                    .build()
                    .await?;
                (consumer, Address::Fixed(address::queue(&declared.name)))
            }
        };
        let publisher = conn.publisher().queue(&self.request_queue).build().await?;
        let pending: Pending = Arc::default();
        let replies = tokio::spawn(route_replies(replies, conn.events(), pending.clone()));
        Ok(RpcClient {
            publisher,
            reply_to,
            pending,
            next_id: AtomicU64::new(0),
            prefix,
            timeout: self.timeout,
            replies,
        })
    }
}

/// Where replies are sent to: a queue's address, or a direct reply-to
/// name (a new one after each recovery).
enum Address {
    Fixed(String),
    Named(Arc<Mutex<String>>),
}

/// Hand each reply to its call; calls in flight when the connection is
/// lost fail (their replies, to a name or queue of the lost connection,
/// never come).
async fn route_replies(mut replies: Consumer, mut events: super::Events, pending: Pending) {
    loop {
        tokio::select! {
            d = replies.receive() => {
                let Ok(d) = d else { break };
                let Some(id) = d.message.properties.correlation_id.clone() else {
                    continue;
                };
                if let Some(waiter) = pending.lock().remove(&id) {
                    let _ = waiter.send(Ok(d.message));
                }
            }
            e = events.next() => match e {
                Some(Event::Disconnected { error }) => {
                    for (_, waiter) in pending.lock().drain() {
                        let _ = waiter.send(Err(Error::ConnectionLost(error.to_string())));
                    }
                }
                Some(_) => {}
                None => break,
            },
        }
    }
}

/// Sends requests and waits for their replies
/// ([`Connection::rpc_client`], [`Connection::rpc_client_builder`]).
///
/// ```no_run
/// use warren_client::amqp::{Connection, Message};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let rpc = conn.rpc_client("time-service").await?;
/// let reply = rpc.call(Message::new("now?")).await?;
/// println!("{:?}", reply.data());
/// # Ok(())
/// # }
/// ```
pub struct RpcClient {
    publisher: Publisher,
    reply_to: Address,
    pending: Pending,
    next_id: AtomicU64,
    prefix: String,
    timeout: Duration,
    replies: JoinHandle<()>,
}

impl RpcClient {
    /// How long each call waits for its reply (30 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> RpcClient {
        self.timeout = timeout;
        self
    }

    /// Whether replies come by direct reply-to (else through a queue).
    pub fn is_direct(&self) -> bool {
        matches!(self.reply_to, Address::Named(_))
    }

    /// The address replies are sent to now (a direct reply-to name
    /// changes when the connection recovers).
    pub fn reply_address(&self) -> String {
        match &self.reply_to {
            Address::Fixed(a) => a.clone(),
            Address::Named(n) => n.lock().clone(),
        }
    }

    /// Send `request` (its `message-id` and `reply-to` set here) and wait
    /// for the reply; [`Error::Timeout`] if none comes in time,
    /// [`Error::RequestNotTaken`] if the broker does not take the
    /// request, [`Error::ConnectionLost`] if the connection is lost
    /// before the reply comes (direct reply-to is at most once, and an
    /// exclusive queue goes with its connection).
    pub async fn call(&self, request: Message) -> Result<Message, Error> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = MessageId::String(format!("{}-{n}", self.prefix));
        let (tx, rx) = oneshot::channel();
        let _awaiting = Awaiting::insert(&self.pending, id.clone(), tx);
        let request = request.message_id(id).reply_to(self.reply_address());
        match self.publisher.publish(request).await?.await? {
            super::Outcome::Accepted => {}
            other => return Err(Error::RequestNotTaken(format!("{other:?}"))),
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(Error::ConnectionClosed("the reply consumer ended".into())),
            Err(_) => Err(Error::Timeout(self.timeout)),
        }
    }

    /// Stop taking replies (the reply queue, if any, goes with the
    /// connection).
    pub fn close(self) {
        self.replies.abort();
        self.publisher.close();
    }
}

/// Answers requests from a queue with the application's handler
/// ([`Connection::rpc_server`]); runs until closed or the connection
/// ends.
///
/// ```no_run
/// use warren_client::amqp::{Connection, Message};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let server = conn
///     .rpc_server("time-service", |request: Message| async move {
///         let _ = request;
///         Ok::<_, String>(Message::new("12:00"))
///     })
///     .await?;
/// # server.close();
/// # Ok(())
/// # }
/// ```
pub struct RpcServer {
    task: JoinHandle<()>,
}

impl RpcServer {
    pub(crate) async fn start<F, Fut>(
        conn: &Connection,
        request_queue: &str,
        handler: F,
    ) -> Result<RpcServer, Error>
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Message, String>> + Send + 'static,
    {
        let mut requests = conn.consumer().queue(request_queue).build().await?;
        // Replies go where each request says (a null target, `to` set).
        let replies = conn.publisher().build().await?;
        let task = tokio::spawn(async move {
            while let Ok(d) = requests.receive().await {
                let (Some(reply_to), Some(id)) = (
                    d.message.properties.reply_to.clone(),
                    d.message.properties.message_id.clone(),
                ) else {
                    // Nowhere to answer: not a request.
                    d.discard();
                    continue;
                };
                match handler(d.message.clone()).await {
                    Ok(reply) => {
                        let reply = reply.correlation_id(id).to(reply_to);
                        match replies.publish(reply).await {
                            Ok(_) => d.accept(),
                            Err(e) => {
                                tracing::warn!("an RPC reply could not be sent: {e}");
                                d.requeue();
                            }
                        }
                    }
                    Err(why) => {
                        tracing::warn!("an RPC handler failed: {why}");
                        d.discard();
                    }
                }
            }
        });
        Ok(RpcServer { task })
    }

    /// Stop answering (requests not yet taken stay in the queue).
    pub fn close(self) {
        self.task.abort();
    }
}
