//! Requests and replies over queues, as RabbitMQ's AMQP 1.0 clients'
//! requester and responder: an [`RpcClient`] sends each request to a
//! queue with a `message-id` of its own and `reply-to` naming a reply
//! queue of its own (exclusive, declared through the connection's
//! management so recovery declares it again), and matches replies by
//! their `correlation-id`; an [`RpcServer`] consumes the request queue,
//! runs the application's handler, and sends its reply to the request's
//! `reply-to` with the request's `message-id` as `correlation-id`.

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
use super::message::{Message, MessageId};
use super::spec::QueueSpec;
use super::{Publisher, QueueInfo};

/// How long a call waits for its reply unless told otherwise.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(30);

type Pending = Arc<Mutex<HashMap<MessageId, oneshot::Sender<Message>>>>;

/// Sends requests and waits for their replies
/// ([`Connection::rpc_client`]).
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
    reply_to: String,
    pending: Pending,
    next_id: AtomicU64,
    prefix: String,
    timeout: Duration,
    replies: JoinHandle<()>,
}

impl RpcClient {
    pub(crate) async fn new(conn: &Connection, request_queue: &str) -> Result<RpcClient, Error> {
        let reply_queue = conn.shared.link_name("rpc-replies");
        let reply_queue = format!("{}-{reply_queue}", conn.shared.settings.container_id);
        let management = conn.management().await?;
        let declared: QueueInfo = management
            .declare_queue(&QueueSpec::classic(&reply_queue).exclusive().auto_delete())
            .await?;
        management.close();
        let mut replies = conn
            .consumer()
            .queue(&declared.name)
            .pre_settled()
            .build()
            .await?;
        let publisher = conn.publisher().queue(request_queue).build().await?;
        let pending: Pending = Arc::default();
        let routing = pending.clone();
        let replies = tokio::spawn(async move {
            while let Ok(d) = replies.receive().await {
                let Some(id) = d.message.properties.correlation_id.clone() else {
                    continue;
                };
                if let Some(waiter) = routing.lock().remove(&id) {
                    let _ = waiter.send(d.message);
                }
            }
        });
        Ok(RpcClient {
            publisher,
            reply_to: address::queue(&declared.name),
            pending,
            next_id: AtomicU64::new(0),
            prefix: reply_queue,
            timeout: DEFAULT_RPC_TIMEOUT,
            replies,
        })
    }

    /// How long each call waits for its reply (30 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> RpcClient {
        self.timeout = timeout;
        self
    }

    /// Send `request` (its `message-id` and `reply-to` set here) and wait
    /// for the reply; [`Error::Timeout`] if none comes in time,
    /// [`Error::RequestNotTaken`] if the broker does not take the
    /// request.
    pub async fn call(&self, request: Message) -> Result<Message, Error> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = MessageId::String(format!("{}-{n}", self.prefix));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id.clone(), tx);
        let forget = |pending: &Pending| {
            pending.lock().remove(&id);
        };
        let request = request.message_id(id.clone()).reply_to(self.reply_to.clone());
        let outcome = match self.publisher.publish(request).await {
            Ok(published) => published.await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(super::Outcome::Accepted) => {}
            Ok(other) => {
                forget(&self.pending);
                return Err(Error::RequestNotTaken(format!("{other:?}")));
            }
            Err(e) => {
                forget(&self.pending);
                return Err(e);
            }
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(Error::ConnectionClosed("the reply consumer ended".into())),
            Err(_) => {
                forget(&self.pending);
                Err(Error::Timeout(self.timeout))
            }
        }
    }

    /// Stop taking replies (the reply queue goes with the connection).
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
