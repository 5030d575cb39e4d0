//! The queue protocol's two sides on one node, as the links and the broker
//! see them: the links hand every queue message to [`Queues`], which
//! passes it to the home side (`queue_host.rs`) or the client side
//! (`queue_client.rs`) by kind; the broker's queues reach the cluster
//! through [`Hook`] (removals it decides, and remote queues' calls).

use std::sync::Arc;

use warren_amqp091::ShortStr;
use warren_core::message::MessageRef;
use warren_core::queue::{ConsumerSpec, FlowWaiter, Queue, Settle};
use warren_core::replication::{RemotePublish, Replication};
use warren_core::BrokerError;
use warren_peer::queue::QueueMsg;

use super::links::{DataSender, QueueEvents};
use super::queue_client::QueueClient;
use super::queue_host::QueueHost;
use super::removals::Removals;

pub struct Queues {
    pub client: Arc<QueueClient>,
    pub host: Arc<QueueHost>,
    /// Direct reply-to consumers here, for replies published elsewhere.
    pub replies: Arc<crate::reply_to::Registry>,
    /// Stream replication.
    pub streams: Arc<dyn super::replicas::StreamReplicas>,
}

impl QueueEvents for Queues {
    fn up(&self, node: &str, data: DataSender) {
        self.host.up(node, data.clone());
        self.streams.up(node, data.clone());
        self.client.up(node, data);
    }

    fn down(&self, node: &str) {
        self.client.down(node);
        self.host.down(node);
        self.streams.down(node);
    }

    fn stream(&self, from: &str, m: warren_peer::stream::StreamMsg) {
        self.streams.received(from, m);
    }

    fn received(&self, from: &str, m: QueueMsg) {
        match m {
            QueueMsg::Confirm { .. }
            | QueueMsg::Deliver { .. }
            | QueueMsg::Cancelled { .. }
            | QueueMsg::Drained { .. }
            | QueueMsg::Got { .. }
            | QueueMsg::Answer { .. } => self.client.received(from, m),
            QueueMsg::Reply { name, message } => match super::queue_client::from_wire(message) {
                Ok(msg) => {
                    self.replies.deliver(&name, Arc::new(msg));
                }
                Err(e) => tracing::warn!(peer = %from, "a reply that does not parse: {e}"),
            },
            _ => self.host.received(from, m),
        }
    }

    fn batch_done(&self, from: &str) {
        self.host.batch_done(from);
    }
}

/// The broker's way into the cluster (`warren_core::replication`).
pub struct Hook {
    pub removals: Arc<Removals>,
    pub client: Arc<QueueClient>,
}

impl Replication for Hook {
    fn remove_queue(&self, vhost: &str, queue: &Arc<Queue>) {
        self.removals.remove_queue(vhost, queue);
    }

    fn publish(&self, queue: &Arc<Queue>, home: &ShortStr, msg: &MessageRef) -> Option<RemotePublish> {
        self.client.publish(queue, home, msg)
    }

    fn consume(&self, queue: &Arc<Queue>, home: &ShortStr, spec: ConsumerSpec) -> Result<(), BrokerError> {
        self.client.consume(queue, home, spec)
    }

    fn cancel(&self, consumer_id: u64) -> bool {
        self.client.cancel(consumer_id)
    }

    fn settle(&self, home: &ShortStr, consumer_id: Option<u64>, seqs: Vec<u64>, how: Settle) {
        self.client.settle(home, consumer_id, seqs, how);
    }

    fn pump(&self, queue: &Arc<Queue>) {
        self.client.pump(queue);
    }

    fn drain(&self, consumer_id: u64) -> bool {
        self.client.drain(consumer_id)
    }

    fn wait_for_credit(&self, home: &ShortStr, waiter: Arc<dyn FlowWaiter>) -> bool {
        self.client.wait_for_credit(home, waiter)
    }
}
