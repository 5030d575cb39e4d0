//! A vhost's queues: lookup, declare (here or, on a cluster, as a
//! reference to another node's), redeclare checks, removal with the
//! bindings to them, and carrying out what queue calls ask for (dead
//! letters, auto-delete).

use std::sync::Arc;

use warren_amqp091::{FieldValue, ShortStr};

use super::{args_equal, show, yes_no, VHost};
use crate::changes::Change;
use crate::decl::QueueDecl;
use crate::error::BrokerError;
use crate::exchange::Destination;
use crate::queue::{dead_letter, Effects, Queue, QueueKind, EQUIVALENCE_ARGS};
use crate::queue::{RemoteConfirm, Ticket};

/// A sync round asked for with nobody to tell: the source's leader looks
/// at the ticket again on its timer.
struct NoWaiter;

impl warren_store::SyncWaiter for NoWaiter {
    fn synced(&self) {}
}

impl VHost {
    fn exclusive_locked(&self, q: &Queue) -> BrokerError {
        BrokerError::ResourceLocked(format!(
            "cannot obtain exclusive access to locked queue '{}' in vhost '{}'. It could be originally \
             declared on another connection or the exclusive property value does not match that of the \
             original declaration.",
            q.name, self.name
        ))
    }

    /// Look a queue up for use by `connection` (exclusive queues only for
    /// their owner).
    pub fn queue(&self, name: &[u8], connection: u64) -> Result<Arc<Queue>, BrokerError> {
        let t = self.topology.read();
        let q = t.queues.get(name).ok_or_else(|| self.not_found_queue(name))?;
        if q.exclusive_owner.is_some_and(|o| o != connection) {
            return Err(self.exclusive_locked(q));
        }
        Ok(q.clone())
    }

    /// The queue named `name`, whoever owns it (for listings).
    pub fn find_queue(&self, name: &[u8]) -> Option<Arc<Queue>> {
        self.topology.read().queues.get(name).cloned()
    }

    /// queue.declare (non-passive). Returns the queue and whether it is new.
    pub fn declare_queue(&self, d: QueueDecl, connection: u64) -> Result<(Arc<Queue>, bool), BrokerError> {
        // RabbitMQ checks the reserved prefix on every non-passive declare,
        // even of a queue that exists.
        if d.name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        }
        self.declare_queue_unchecked(d, connection)
    }

    /// Declare without the reserved-name check: for restoring stored
    /// definitions, which include durable server-named (`amq.gen-`) queues.
    pub fn declare_queue_unchecked(
        &self,
        d: QueueDecl,
        connection: u64,
    ) -> Result<(Arc<Queue>, bool), BrokerError> {
        self.declare_queue_at(d, connection, None)
    }

    /// An existing queue named as `d` names it, checked as a redeclare by
    /// `connection` (None if there is no such queue): what a cluster looks
    /// at before it proposes a declare.
    pub fn declared_queue(&self, d: &QueueDecl, connection: u64) -> Option<Result<Arc<Queue>, BrokerError>> {
        let d = QueueDecl {
            durable: d.durable && !d.exclusive,
            ..d.clone()
        };
        let q = self.topology.read().queues.get(&d.name).cloned()?;
        Some(self.redeclare(&q, &d, connection))
    }

    /// Would one more queue named `name` pass the vhost's max-queues?
    pub fn check_new_queue(&self, name: &ShortStr) -> Result<(), BrokerError> {
        self.check_queue_limit(&self.topology.read(), name)
    }

    /// Declare a queue that lives on node `home` of the cluster (None:
    /// here), for `connection` (its owner if exclusive; an owner on
    /// another node is [`crate::queue::REMOTE_OWNER`]).
    pub fn declare_queue_at(
        &self,
        d: QueueDecl,
        connection: u64,
        home: Option<ShortStr>,
    ) -> Result<(Arc<Queue>, bool), BrokerError> {
        // An exclusive queue is never durable: it dies with its connection.
        let asked_durable = d.durable;
        let d = QueueDecl {
            durable: d.durable && !d.exclusive,
            ..d
        };
        let kind = match d.arguments.get("x-queue-type").and_then(|v| v.as_bytes()) {
            Some(b"stream") => QueueKind::Stream,
            Some(b"quorum") => QueueKind::Quorum,
            _ => QueueKind::Classic,
        };
        // A quorum queue is held as a member wherever its group has one,
        // whatever node its definition names (its first leader's).
        let home = match (&home, kind, self.env.quorum.get()) {
            (Some(_), QueueKind::Quorum, Some(s)) if s.is_member(&self.name, &d.name) => None,
            _ => home,
        };
        // So is a replicated stream, by its placement.
        let home = match (&home, kind, self.env.streams.get()) {
            (Some(_), QueueKind::Stream, Some(s)) if s.is_member(&self.name, &d.name) => None,
            _ => home,
        };
        let policy = {
            let t = self.topology.read();
            if let Some(q) = t.queues.get(&d.name) {
                return self.redeclare(q, &d, connection).map(|q| (q, false));
            }
            self.check_queue_limit(&t, &d.name)?;
            Self::queue_policy(&t, &d.name, kind)
        };
        let seen = policy.1;
        let owner = d.exclusive.then_some(connection);
        let q = match &home {
            None => Queue::new(
                d.name.clone(),
                &self.name,
                d.durable,
                d.auto_delete,
                owner,
                d.arguments.clone(),
                policy,
                &self.env,
            )?,
            Some(node) => Queue::remote(
                d.name.clone(),
                &self.name,
                d.durable,
                d.auto_delete,
                d.exclusive,
                d.arguments.clone(),
                policy,
                &self.env,
                node.clone(),
            )?,
        };
        let mut t = self.topology.write();
        if let Some(existing) = t.queues.get(&d.name) {
            // Lost a race with another declare: treat as a redeclare.
            let existing = existing.clone();
            drop(t);
            return self.redeclare(&existing, &d, connection).map(|q| (q, false));
        }
        if let Err(e) = self.check_queue_limit(&t, &d.name) {
            // Another declare took the last place while this queue was made.
            drop(t);
            self.destroy_queue(&q);
            return Err(e);
        }
        if asked_durable {
            q.set_declared_durable();
        }
        t.queues.insert(d.name.clone(), q.clone());
        let ticket = if Self::kept_queue(&q) {
            self.record(
                &t,
                Change::QueueDeclared {
                    vhost: &self.name,
                    decl: &d,
                    home: home.as_ref(),
                },
            )
        } else {
            None
        };
        // A policy changed while the queue was being made, before the
        // change could see it: choose again.
        let late = (t.policy_version != seen).then(|| Self::queue_policy(&t, &d.name, kind));
        drop(t);
        self.commit(ticket);
        if let Some(policy) = late {
            let (_, effects) = q.set_policy(policy);
            self.apply(&q, effects, &mut |_| {});
        }
        Ok((q, true))
    }

    fn redeclare(&self, q: &Arc<Queue>, d: &QueueDecl, connection: u64) -> Result<Arc<Queue>, BrokerError> {
        if q.exclusive_owner.is_some_and(|o| o != connection) {
            return Err(self.exclusive_locked(q));
        }
        let what = |arg: &str, got: bool, cur: bool| {
            BrokerError::PreconditionFailed(format!(
                "inequivalent arg '{arg}' for queue '{}' in vhost '{}': received '{}' but current is '{}'",
                q.name,
                self.name,
                yes_no(got),
                yes_no(cur)
            ))
        };
        if q.durable != d.durable {
            return Err(what("durable", d.durable, q.durable));
        }
        if q.exclusive_owner.is_some() != d.exclusive {
            return Err(self.exclusive_locked(q));
        }
        if q.auto_delete != d.auto_delete {
            return Err(what("auto_delete", d.auto_delete, q.auto_delete));
        }
        for arg in EQUIVALENCE_ARGS {
            let (got, cur) = (d.arguments.get(arg), q.arguments.get(arg));
            // x-queue-type "classic" is the same as no type.
            let is_classic =
                |v: Option<&FieldValue>| v.is_none() || v.and_then(|v| v.as_bytes()) == Some(b"classic");
            if *arg == "x-queue-type" && is_classic(got) && is_classic(cur) {
                continue;
            }
            if !args_equal(got, cur) {
                return Err(BrokerError::PreconditionFailed(format!(
                    "inequivalent arg '{arg}' for queue '{}' in vhost '{}': received {} but current is {}",
                    q.name,
                    self.name,
                    show(got),
                    show(cur)
                )));
            }
        }
        q.touch();
        Ok(q.clone())
    }

    /// Remove a queue from the topology (and its bindings). The caller then
    /// empties it and notifies its consumers.
    pub fn remove_queue(&self, name: &ShortStr) -> Option<Arc<Queue>> {
        self.remove_queue_where(name, |_| true)
    }

    fn remove_queue_where(
        &self,
        name: &ShortStr,
        pred: impl FnOnce(&Arc<Queue>) -> bool,
    ) -> Option<Arc<Queue>> {
        let mut t = self.topology.write();
        if !t.queues.get(name).is_some_and(pred) {
            return None;
        }
        let q = t.queues.remove(name)?;
        let mut gone = Vec::new();
        Self::unbind_destination_locked(&mut t, &Destination::Queue(name.clone()), &mut gone);
        let mut ticket = None;
        if Self::kept_queue(&q) {
            ticket = self.record(
                &t,
                Change::QueueDeleted {
                    vhost: &self.name,
                    name,
                },
            );
        }
        ticket = self.record_gone(&t, &gone).or(ticket);
        drop(t);
        self.commit(ticket);
        Some(q)
    }

    /// Remove `q` only if it is still the queue registered under its name
    /// (checked and removed under one lock).
    pub fn remove_queue_if_same(&self, q: &Arc<Queue>) -> bool {
        self.remove_queue_where(&q.name, |x| Arc::ptr_eq(x, q)).is_some()
    }

    /// A quorum queue's members changed and this node became one, or
    /// stopped being one, or its home (the member other nodes reach it
    /// through) moved: `old` is replaced under its name, bindings and all,
    /// by a queue of the same declaration held at `home` (None: a member
    /// here). The caller destroys `old` (a member's local state goes with
    /// it; a queue of another node holds nothing). None if `old` is no
    /// longer the queue under its name.
    pub fn rehome_queue(
        &self,
        old: &Arc<Queue>,
        home: Option<ShortStr>,
    ) -> Result<Option<Arc<Queue>>, BrokerError> {
        let policy = Self::queue_policy(&self.topology.read(), &old.name, old.kind());
        let q = match &home {
            None => Queue::new(
                old.name.clone(),
                &self.name,
                old.durable,
                old.auto_delete,
                None,
                old.arguments.clone(),
                policy,
                &self.env,
            )?,
            Some(node) => Queue::remote(
                old.name.clone(),
                &self.name,
                old.durable,
                old.auto_delete,
                false,
                old.arguments.clone(),
                policy,
                &self.env,
                node.clone(),
            )?,
        };
        let mut t = self.topology.write();
        if !t.queues.get(&old.name).is_some_and(|x| Arc::ptr_eq(x, old)) {
            // Deleted meanwhile (the metadata changes that do both apply
            // one at a time, so only a local removal races this).
            return Ok(None);
        }
        t.queues.insert(old.name.clone(), q.clone());
        let decl = QueueDecl {
            name: old.name.clone(),
            durable: old.durable,
            exclusive: false,
            auto_delete: old.auto_delete,
            arguments: old.arguments.clone(),
        };
        let ticket = self.record(
            &t,
            Change::QueueDeclared {
                vhost: &self.name,
                decl: &decl,
                home: home.as_ref(),
            },
        );
        drop(t);
        self.commit(ticket);
        Ok(Some(q))
    }

    /// Is `q` still the queue registered under its name?
    pub fn queue_is_current(&self, q: &Arc<Queue>) -> bool {
        self.topology
            .read()
            .queues
            .get(&q.name)
            .is_some_and(|x| Arc::ptr_eq(x, q))
    }

    /// queue.delete's if-empty and if-unused, as `q` stands now.
    pub fn check_delete(&self, q: &Queue, if_unused: bool, if_empty: bool) -> Result<(), BrokerError> {
        let stats = q.stats();
        if if_empty && stats.ready > 0 {
            return Err(BrokerError::PreconditionFailed(format!(
                "queue '{}' in vhost '{}' not empty",
                q.name, self.name
            )));
        }
        if if_unused && stats.consumers > 0 {
            return Err(BrokerError::PreconditionFailed(format!(
                "queue '{}' in vhost '{}' in use",
                q.name, self.name
            )));
        }
        Ok(())
    }

    /// queue.delete: how many ready messages went with it. A missing queue
    /// deletes nothing and is no error (RabbitMQ makes delete idempotent).
    pub fn delete_queue(
        &self,
        name: &ShortStr,
        if_unused: bool,
        if_empty: bool,
        connection: u64,
    ) -> Result<u64, BrokerError> {
        let q = match self.queue(name, connection) {
            Ok(q) => q,
            Err(BrokerError::NotFound(_)) => return Ok(0),
            Err(e) => return Err(e),
        };
        self.check_delete(&q, if_unused, if_empty)?;
        if !self.remove_queue_if_same(&q) {
            return Ok(0);
        }
        Ok(self.destroy_queue(&q))
    }

    /// A queue the broker itself removes (auto-delete, x-expires, its
    /// exclusive owner gone): at once on a single node; on a cluster,
    /// through the cluster's metadata (see [`crate::replication`]).
    pub fn discard_queue(&self, q: &Arc<Queue>) {
        match self.env.replication.get() {
            Some(r) => {
                if self.queue_is_current(q) {
                    r.remove_queue(&self.name, q);
                }
            }
            None => {
                if self.remove_queue_if_same(q) {
                    self.destroy_queue(q);
                }
            }
        }
    }

    /// Empty a queue already removed from the topology and tell its
    /// consumers (server-sent basic.cancel). Returns the ready count.
    pub fn destroy_queue(&self, q: &Arc<Queue>) -> u64 {
        let ready = q.stats().ready;
        let (consumers, _effects) = q.delete_contents();
        for c in consumers {
            c.sink.cancelled(c.channel, c.tag);
        }
        ready
    }

    /// Carry out what a queue call asked for: route its dead letters (and
    /// theirs, to a bounded depth) and delete an auto-delete queue. `arm`
    /// is called for each queue that got a message with a deadline.
    pub fn apply(&self, queue: &Arc<Queue>, effects: Effects, arm: &mut dyn FnMut(&Arc<Queue>)) {
        self.apply_depth(queue, effects, arm, 0)
    }

    fn apply_depth(
        &self,
        queue: &Arc<Queue>,
        effects: Effects,
        arm: &mut dyn FnMut(&Arc<Queue>),
        depth: usize,
    ) {
        if effects.arm_timer {
            arm(queue);
        }
        if effects.delete_queue {
            self.discard_queue(queue);
        }
        // Dead letters can dead-letter again (a DLX queue with its own TTL);
        // cycles are cut by `is_cycle`, and depth bounds the rest.
        if depth > 32 {
            return;
        }
        for dl in effects.dead_letters {
            let keys: Vec<&[u8]> = dl.routing_keys.iter().map(|k| k.as_bytes()).collect();
            let headers = dl.message.headers();
            let mut targets = Vec::new();
            if self
                .route_internal(&dl.exchange, &keys, headers.as_ref(), &mut targets)
                .is_err()
            {
                // A missing DLX drops the message, as in RabbitMQ (one
                // dead-lettered at least once is tried again).
                if let Some(c) = &dl.confirm {
                    c.routed(Vec::new());
                }
                continue;
            }
            let msg = Arc::new(dl.message);
            let mut tickets = Vec::new();
            for t in targets {
                if dead_letter::is_cycle(&msg, &t.name) {
                    continue;
                }
                let (outcome, mut e) = t.publish(msg.clone());
                if dl.confirm.is_some() {
                    tickets.push(self.dead_letter_ticket(outcome, e.sync.take()));
                }
                self.apply_depth(&t, e, arm, depth + 1);
            }
            if let Some(c) = &dl.confirm {
                c.routed(tickets);
            }
        }
    }

    /// What tells an at-least-once dead letter's source that a target
    /// has it: the publish's own ticket (an fsync is asked for, as a
    /// confirming publisher's would be), done at once for a target that
    /// writes nothing, refused for one that refused it.
    fn dead_letter_ticket(&self, outcome: crate::queue::PublishOutcome, sync: Option<Ticket>) -> Ticket {
        let done = |ok: bool| {
            let c = RemoteConfirm::new();
            c.resolve(ok);
            Ticket::Remote(c)
        };
        match (outcome, sync) {
            (crate::queue::PublishOutcome::Enqueued, Some(t)) => {
                if let Ticket::Disk(_) = t {
                    if let Some(s) = self.env.storage.as_ref() {
                        let w: Arc<dyn warren_store::SyncWaiter> = Arc::new(NoWaiter);
                        t.wake(Some(s.syncer()), &w);
                    }
                }
                t
            }
            (crate::queue::PublishOutcome::Enqueued, None) => done(true),
            _ => done(false),
        }
    }

    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.topology.read().queues.values().cloned().collect()
    }
}
