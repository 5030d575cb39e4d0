//! A queue whose home is another node of the cluster, as this node holds
//! it: its name, flags and arguments (so routing, redeclares, bindings and
//! listings see it), and where it lives. Messages for it and consumers of
//! it belong to its home node; until the inter-node queue protocol
//! carries them, a publish routed here is refused (a nack under
//! confirms) and a consume is answered that it is not supported.

use std::sync::Arc;
use std::time::Instant;

use warren_amqp091::ShortStr;

use super::{
    ConsumerInfo, ConsumerSpec, Ctx, Entry, FlowWaiter, PublishOutcome, QueueStats, QueueType, Settle,
};
use crate::error::BrokerError;
use crate::message::MessageRef;

#[derive(Debug)]
pub struct RemoteQueue {
    home: ShortStr,
}

impl RemoteQueue {
    pub fn new(home: ShortStr) -> RemoteQueue {
        RemoteQueue { home }
    }
}

impl QueueType for RemoteQueue {
    fn publish(&mut self, _ctx: &mut Ctx, _msg: MessageRef) -> PublishOutcome {
        PublishOutcome::Rejected
    }

    fn consume(&mut self, ctx: &mut Ctx, _spec: ConsumerSpec) -> Result<(), BrokerError> {
        Err(BrokerError::NotImplemented(format!(
            "queue '{}' in vhost '{}' lives on node '{}'; consuming through another node is not supported yet",
            ctx.queue.name, ctx.queue.vhost, self.home
        )))
    }

    fn cancel(&mut self, _ctx: &mut Ctx, _consumer_id: u64) -> bool {
        false
    }

    fn settle(&mut self, _ctx: &mut Ctx, _consumer_id: Option<u64>, _entries: Vec<Entry>, _how: Settle) {}

    fn get(&mut self, _ctx: &mut Ctx, _no_ack: bool) -> Option<(Entry, u64)> {
        None
    }

    fn pump(&mut self, _ctx: &mut Ctx) {}

    fn purge(&mut self, _ctx: &mut Ctx) -> u64 {
        0
    }

    fn expire(&mut self, _ctx: &mut Ctx) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn delete(&mut self, _ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        Vec::new()
    }

    fn stats(&self) -> QueueStats {
        QueueStats::default()
    }

    fn consumers(&self) -> Vec<ConsumerInfo> {
        Vec::new()
    }

    fn wait_for_drain(&mut self, _waiter: Arc<dyn FlowWaiter>) -> bool {
        false
    }

    fn idle_since(&self) -> Option<Instant> {
        // Its home node decides when it expires.
        None
    }

    fn touch(&mut self, _now: Instant) {}
}
