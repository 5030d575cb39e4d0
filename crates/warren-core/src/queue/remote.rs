//! A queue whose home is another node of the cluster, as this node holds
//! it: its name, flags and arguments (so routing, redeclares, bindings and
//! listings see it), and where it lives. Messages for it and consumers of
//! it belong to its home node: this type hands every call to the
//! cluster's queue protocol ([`crate::replication::Replication`]), which
//! carries it over the link to the home and brings confirms and
//! deliveries back. Its figures (ready, unacked, consumers) are the
//! home's, as its last report (at most a second old) gave them.

use std::sync::Arc;
use std::time::Instant;

use warren_amqp091::ShortStr;

use super::{
    Answer, ConsumerInfo, ConsumerSpec, Ctx, Entry, FlowWaiter, PublishOutcome, QueueStats, QueueType,
    Settle, Ticket,
};
use crate::error::BrokerError;
use crate::message::MessageRef;
use crate::replication::ReplicationSlot;

#[derive(Debug)]
pub struct RemoteQueue {
    home: ShortStr,
    cluster: ReplicationSlot,
    figures: QueueStats,
    view: Option<super::QuorumView>,
}

impl RemoteQueue {
    pub fn new(home: ShortStr, cluster: ReplicationSlot) -> RemoteQueue {
        RemoteQueue {
            home,
            cluster,
            figures: QueueStats::default(),
            view: None,
        }
    }
}

impl QueueType for RemoteQueue {
    fn publish(&mut self, ctx: &mut Ctx, msg: MessageRef) -> PublishOutcome {
        let Some(c) = self.cluster.get() else {
            return PublishOutcome::Rejected;
        };
        match c.publish(ctx.queue, &self.home, &msg) {
            Some(p) => {
                ctx.effects.sync = Some(Ticket::Remote(p.confirm));
                ctx.effects.flow = p.flow;
                PublishOutcome::Enqueued
            }
            None => PublishOutcome::Rejected,
        }
    }

    fn consume(&mut self, ctx: &mut Ctx, spec: ConsumerSpec) -> Result<(), BrokerError> {
        match self.cluster.get() {
            Some(c) => c.consume(ctx.queue, &self.home, spec),
            None => Err(BrokerError::Internal(format!(
                "queue '{}' in vhost '{}' lives on node '{}', and this node is not in its cluster",
                ctx.queue.name, ctx.queue.vhost, self.home
            ))),
        }
    }

    fn cancel(&mut self, _ctx: &mut Ctx, consumer_id: u64) -> bool {
        self.cluster.get().is_some_and(|c| c.cancel(consumer_id))
    }

    fn settle(&mut self, _ctx: &mut Ctx, consumer_id: Option<u64>, entries: Vec<Entry>, how: Settle) {
        if let Some(c) = self.cluster.get() {
            c.settle(
                &self.home,
                consumer_id,
                entries.iter().map(|e| e.seq).collect(),
                how,
            );
        }
    }

    /// basic.get needs an answer from the home: the front ends ask the
    /// cluster for it (asynchronously) instead of calling this.
    fn get(&mut self, _ctx: &mut Ctx, _no_ack: bool) -> Answer<Option<(Entry, u64)>> {
        Answer::Now(None)
    }

    fn pump(&mut self, ctx: &mut Ctx) {
        if let Some(c) = self.cluster.get() {
            c.pump(ctx.queue);
        }
    }

    fn drain(&mut self, _ctx: &mut Ctx, consumer_id: u64) -> bool {
        self.cluster.get().is_some_and(|c| c.drain(consumer_id))
    }

    /// As `get`: the front ends ask the home.
    fn purge(&mut self, _ctx: &mut Ctx) -> Answer<u64> {
        Answer::Now(0)
    }

    fn expire(&mut self, _ctx: &mut Ctx) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Its consumers here are ended by the home (which cancels them when
    /// it deletes the queue).
    fn delete(&mut self, _ctx: &mut Ctx) -> Vec<ConsumerSpec> {
        Vec::new()
    }

    fn stats(&self) -> QueueStats {
        self.figures
    }

    fn set_figures(&mut self, figures: QueueStats) {
        self.figures = figures;
    }

    fn set_remote_view(&mut self, view: Option<super::QuorumView>) {
        self.view = view;
    }

    fn quorum_view(&mut self) -> Option<super::QuorumView> {
        self.view.clone()
    }

    fn consumers(&self) -> Vec<ConsumerInfo> {
        Vec::new()
    }

    fn wait_for_drain(&mut self, waiter: Arc<dyn FlowWaiter>) -> bool {
        self.cluster
            .get()
            .is_some_and(|c| c.wait_for_credit(&self.home, waiter))
    }

    fn idle_since(&self) -> Option<Instant> {
        // Its home node decides when it expires.
        None
    }

    fn touch(&mut self, _now: Instant) {}
}
