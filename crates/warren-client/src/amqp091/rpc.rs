//! Requests and replies over RabbitMQ's direct reply-to: the requester
//! consumes the pseudo-queue `amq.rabbitmq.reply-to` (no acks) and names
//! it as `reply_to` in each request; the broker routes a reply published
//! to that name straight back to this channel, with no queue declared.
//! Replies find their request by `correlation_id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use warren_amqp091::BasicProperties;

use super::channel::Channel;
use super::connection::Connection;
use super::delivery::Delivery;
use super::error::Error;
use super::events::Event;
use super::options::ConsumeOptions;
use super::publish::Confirm;
use crate::awaiting::Awaiting;

/// The pseudo-queue replies come from.
pub const DIRECT_REPLY_TO: &str = "amq.rabbitmq.reply-to";

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Delivery, Error>>>>>;

/// Sends requests and waits for their replies, on a channel of its own.
///
/// ```no_run
/// use std::time::Duration;
/// use warren_client::amqp091::{Connection, Properties, RpcClient};
///
/// # async fn run() -> Result<(), warren_client::amqp091::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let rpc = RpcClient::new(&conn).await?;
/// let reply = rpc
///     .call("", "rpc-queue", Properties::default(), "ping".into(), Duration::from_secs(5))
///     .await?;
/// println!("{:?}", reply.body);
/// # Ok(())
/// # }
/// ```
///
/// A responder answers with [`reply`].
pub struct RpcClient {
    channel: Channel,
    waiting: Waiting,
    next: AtomicU64,
    /// Tells apart the correlation ids of clients sharing a responder.
    prefix: String,
    router: tokio::task::JoinHandle<()>,
    watcher: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("channel", &self.channel)
            .finish()
    }
}

impl RpcClient {
    /// Open a channel on `conn` and consume its direct replies. It
    /// recovers with the connection; requests in flight when the
    /// connection is lost fail with [`Error::ConnectionLost`] (their
    /// replies would go to the old reply address).
    pub async fn new(conn: &Connection) -> Result<RpcClient, Error> {
        let channel = conn.channel().await?;
        let mut replies = channel
            .consume(
                DIRECT_REPLY_TO,
                ConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
            )
            .await?;
        let waiting: Waiting = Arc::default();
        let w = waiting.clone();
        let router = tokio::spawn(async move {
            while let Some(reply) = replies.next().await {
                let id = reply
                    .properties()
                    .correlation_id
                    .as_ref()
                    .map(|c| c.to_str_lossy().into_owned());
                // A reply nobody waits for any more (timed out) is dropped.
                if let Some(tx) = id.and_then(|id| w.lock().remove(&id)) {
                    let _ = tx.send(Ok(reply));
                }
            }
            for (_, tx) in w.lock().drain() {
                let _ = tx.send(Err(Error::ConnectionLost("the reply consumer ended".into())));
            }
        });
        let mut events = conn.events();
        let w = waiting.clone();
        let watcher = tokio::spawn(async move {
            while let Some(e) = events.next().await {
                if let Event::Disconnected { error } = e {
                    for (_, tx) in w.lock().drain() {
                        let _ = tx.send(Err(Error::ConnectionLost(format!(
                            "lost before the reply: {error}"
                        ))));
                    }
                }
            }
        });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let prefix = format!("{:x}.{nanos:x}", std::process::id());
        Ok(RpcClient {
            channel,
            waiting,
            next: AtomicU64::new(0),
            prefix,
            router,
            watcher,
        })
    }

    /// Publish a request to `exchange` with `routing_key` and wait up to
    /// `timeout` for its reply. `reply_to` and `correlation_id` are set
    /// here; the other properties are the caller's.
    pub async fn call(
        &self,
        exchange: &str,
        routing_key: &str,
        mut properties: BasicProperties,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Delivery, Error> {
        let id = format!("{}-{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed));
        properties.reply_to = Some(DIRECT_REPLY_TO.into());
        properties.correlation_id = Some(id.as_str().into());
        let (tx, rx) = oneshot::channel();
        let _awaiting = Awaiting::insert(&self.waiting, id, tx);
        // Not held while the reply is awaited: in confirm mode the
        // request is written when its confirm is let go (or awaited).
        drop(
            self.channel
                .publish(exchange, routing_key, properties, body)
                .await?,
        );
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(Error::ConnectionLost("the reply consumer ended".into())),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        self.router.abort();
        self.watcher.abort();
    }
}

/// Answer `request` on `channel`: publish `body` to its `reply_to` with
/// its `correlation_id` (and the other `properties` given). A delivery
/// without `reply_to` is no request: [`Error::NotARequest`].
///
/// ```no_run
/// use warren_client::amqp091::{reply, Consumer, Channel, Properties};
///
/// # async fn serve(ch: Channel, mut requests: Consumer) -> Result<(), warren_client::amqp091::Error> {
/// while let Some(request) = requests.next().await {
///     let _sent = reply(&ch, &request, Properties::default(), "pong".into()).await?;
///     request.ack().await?;
/// }
/// # Ok(())
/// # }
/// ```
pub async fn reply(
    channel: &Channel,
    request: &Delivery,
    mut properties: BasicProperties,
    body: Bytes,
) -> Result<Confirm, Error> {
    let Some(to) = request.properties().reply_to.as_ref() else {
        return Err(Error::NotARequest);
    };
    properties.correlation_id = request.properties().correlation_id.clone();
    channel.publish("", &to.to_str_lossy(), properties, body).await
}
