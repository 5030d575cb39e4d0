//! RabbitMQ 4's management node over AMQP 1.0 (`/management`, HTTP over
//! AMQP): queues, exchanges and bindings declared and deleted by
//! request-response on a pair of links. A request is a message whose
//! `subject` is the HTTP method, `to` the path and body a map; the answer
//! carries the status code as its `subject`.

use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};
use warren_amqp10::messaging;
use warren_amqp10::performative::Attach;
use warren_amqp10::Value;

use super::address::segment;
use super::connection::{Shared, CALL_TIMEOUT};
use super::error::Error;
use super::message::{Body, Message, MessageId};
use super::session::{Incoming, Kind};
use super::spec::{BindingSpec, ExchangeSpec, QueueInfo, QueueSpec};
use super::topology::Topology;

const NODE: &str = "/management";
/// Responses the broker may send before we ask again.
const CREDIT: u32 = 8;

/// Declares and deletes queues, exchanges and bindings
/// ([`Connection::management`](super::Connection::management)).
///
/// ```no_run
/// use warren_client::amqp::{BindingSpec, Connection, ExchangeSpec, QueueSpec};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let m = conn.management().await?;
/// m.declare_exchange(&ExchangeSpec::topic("events")).await?;
/// m.declare_queue(&QueueSpec::quorum("audit").delivery_limit(5)).await?;
/// m.bind(&BindingSpec::to_queue("events", "audit", "user.#")).await?;
/// let info = m.queue_info("audit").await?;
/// assert_eq!(info.kind, "quorum");
/// # Ok(())
/// # }
/// ```
pub struct Management {
    shared: Arc<Shared>,
    requests: u32,
    responses: u32,
    /// One request at a time: answers come in order.
    inbox: Mutex<mpsc::UnboundedReceiver<Incoming>>,
    next_id: std::sync::atomic::AtomicU64,
    /// What it declares is recorded for recovery (not recovery's own).
    records: bool,
}

impl Management {
    /// `now`: recovery's own, attached while the connection recovers.
    pub(crate) async fn open(shared: Arc<Shared>, now: bool) -> Result<Management, Error> {
        let name = shared.link_name("management-link-pair");
        let paired = Some(Value::Map(vec![(Value::symbol("paired"), Value::Bool(true))]));
        let requests = super::link::attach(
            &shared,
            Attach {
                name: name.clone(),
                snd_settle_mode: Some(1),
                rcv_settle_mode: Some(0),
                source: Some(messaging::source(NODE)),
                target: Some(messaging::target(NODE)),
                properties: paired.clone(),
                ..Default::default()
            },
            Kind::sender(),
            now,
        )
        .await?;
        // Detached if this call is dropped while the second link attaches.
        let requests = super::link::Held::new(&shared, requests);
        let (tx, rx) = mpsc::unbounded_channel();
        let responses = super::link::attach(
            &shared,
            Attach {
                name,
                snd_settle_mode: Some(1),
                rcv_settle_mode: Some(0),
                source: Some(messaging::source(NODE)),
                target: Some(messaging::target(NODE)),
                properties: paired,
                ..Default::default()
            },
            Kind::receiver(tx, CREDIT),
            now,
        )
        .await?;
        shared.with(|s| s.grant(responses));
        let requests = requests.keep();
        Ok(Management {
            shared,
            requests,
            responses,
            inbox: Mutex::new(rx),
            next_id: Default::default(),
            records: true,
        })
    }

    /// Recovery's own: declares what was recorded without recording it.
    pub(crate) fn unrecorded(mut self) -> Management {
        self.records = false;
        self
    }

    /// Change the recorded topology, unless this is recovery's own.
    fn record(&self, f: impl FnOnce(&mut Topology)) {
        if self.records {
            f(&mut self.shared.topology.lock());
        }
    }

    /// Declare a queue (idempotent: the same arguments again are fine,
    /// other ones a [`Error::Management`] with status 409).
    pub async fn declare_queue(&self, spec: &QueueSpec) -> Result<QueueInfo, Error> {
        let body = self
            .request(
                "PUT",
                &format!("/queues/{}", segment(&spec.name)),
                spec.to_body(),
                &[200, 201],
            )
            .await?;
        self.record(|t| t.queue(spec));
        Ok(QueueInfo::from_value(&body))
    }

    /// A queue's type, counts and members.
    pub async fn queue_info(&self, name: &str) -> Result<QueueInfo, Error> {
        let body = self
            .request("GET", &format!("/queues/{}", segment(name)), Value::Null, &[200])
            .await?;
        Ok(QueueInfo::from_value(&body))
    }

    /// Delete a queue; how many messages it held.
    pub async fn delete_queue(&self, name: &str) -> Result<u64, Error> {
        let body = self
            .request(
                "DELETE",
                &format!("/queues/{}", segment(name)),
                Value::Null,
                &[200],
            )
            .await?;
        self.record(|t| t.queue_deleted(name));
        Ok(message_count(&body))
    }

    /// Remove a queue's ready messages; how many.
    pub async fn purge_queue(&self, name: &str) -> Result<u64, Error> {
        let body = self
            .request(
                "DELETE",
                &format!("/queues/{}/messages", segment(name)),
                Value::Null,
                &[200],
            )
            .await?;
        Ok(message_count(&body))
    }

    /// Declare an exchange (idempotent as queues are).
    pub async fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<(), Error> {
        self.request(
            "PUT",
            &format!("/exchanges/{}", segment(&spec.name)),
            spec.to_body(),
            &[200, 201, 204],
        )
        .await?;
        self.record(|t| t.exchange(spec));
        Ok(())
    }

    /// Delete an exchange (and its bindings).
    pub async fn delete_exchange(&self, name: &str) -> Result<(), Error> {
        self.request(
            "DELETE",
            &format!("/exchanges/{}", segment(name)),
            Value::Null,
            &[200, 204],
        )
        .await?;
        self.record(|t| t.exchange_deleted(name));
        Ok(())
    }

    /// Bind; the binding's path, which [`Management::unbind`] takes.
    pub async fn bind(&self, spec: &BindingSpec) -> Result<String, Error> {
        self.request("POST", "/bindings", spec.to_body(), &[200, 201, 204])
            .await?;
        self.record(|t| t.bind(spec));
        Ok(spec.path())
    }

    /// Remove a binding made without arguments.
    pub async fn unbind(&self, spec: &BindingSpec) -> Result<(), Error> {
        self.request("DELETE", &spec.path(), Value::Null, &[200, 204])
            .await?;
        self.record(|t| t.unbind(spec));
        Ok(())
    }

    /// One request: its response's body when its status is one of `ok`.
    #[tracing::instrument(name = "amqp.management", skip(self, body, ok), level = "debug")]
    pub async fn request(&self, method: &str, path: &str, body: Value, ok: &[u16]) -> Result<Value, Error> {
        let mut inbox = self.inbox.lock().await;
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let m = Message::with_value(body)
            .transient()
            .message_id(MessageId::Ulong(id))
            .to(path)
            .subject(method)
            .reply_to("$me");
        let sent = self.shared.transfer_message(self.requests, &m, None);
        tokio::time::timeout(CALL_TIMEOUT, sent)
            .await
            .map_err(|_| Error::Timeout(CALL_TIMEOUT))??;
        // Its answer comes on this wire or not at all.
        let epoch = self.shared.epoch();
        let lost = self.shared.wait_for(|s| {
            Ok((s.epoch != epoch).then(|| Error::ConnectionLost("during a management request".into())))
        });
        tokio::pin!(lost);
        let answer = loop {
            let next = tokio::select! {
                next = tokio::time::timeout(CALL_TIMEOUT, inbox.recv()) => next,
                why = &mut lost => return Err(why?),
            }
            .map_err(|_| Error::Timeout(CALL_TIMEOUT))?;
            let Some(incoming) = next else {
                return Err(self.why_gone());
            };
            if incoming.epoch == epoch {
                let wake = self.shared.session.lock().done_with(self.responses);
                self.shared.wake(wake);
            }
            let answer = Message::decode_shared(&incoming.payload)?;
            if answer.properties.correlation_id == Some(MessageId::Ulong(id)) {
                break answer;
            }
        };
        let status: u16 = answer
            .properties
            .subject
            .as_deref()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::Protocol("a management response without a status".into()))?;
        let body = match answer.body {
            Body::Value(v) => v,
            Body::Data(_) => Value::Null,
        };
        if ok.contains(&status) {
            return Ok(body);
        }
        let text = match body {
            Value::String(s) => s,
            other => format!("{other:?}"),
        };
        Err(Error::Management { status, text })
    }

    fn why_gone(&self) -> Error {
        self.shared
            .session
            .lock()
            .why_gone(self.responses)
            .unwrap_or_else(|| Error::ConnectionClosed("the management link was closed".into()))
    }

    /// Close its links. Dropping it does the same.
    pub fn close(self) {}
}

impl Drop for Management {
    fn drop(&mut self) {
        self.shared.with(|s| {
            s.detach(self.requests);
            s.detach(self.responses);
        });
    }
}

fn message_count(body: &Value) -> u64 {
    match super::spec::get(body, "message_count") {
        Some(Value::Ulong(n)) => *n,
        Some(Value::Uint(n)) => *n as u64,
        _ => 0,
    }
}
