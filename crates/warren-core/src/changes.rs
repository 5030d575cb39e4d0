//! Changes to what must survive a restart (vhosts, users and durable
//! exchanges, queues and bindings), told one by one to a [`DefinitionsLog`]
//! so it can persist each as a small record instead of rewriting the whole
//! set: a full rewrite per declare made declaring N durable queues cost
//! O(N²).
//!
//! Policies are definitions too (a vhost's, recorded under its topology
//! lock).
//!
//! The owner of the changed object records the change while still holding
//! the lock that ordered it (a vhost's topology lock, the broker's vhost or
//! user map), so records come out in the order the changes happened; it
//! then commits, with no lock held, and returns to its caller only once the
//! record is durable (declare-ok means the declaration survives a crash).

use warren_amqp091::ShortStr;

use crate::decl::{ExchangeDecl, QueueDecl};
use crate::exchange::Binding;
use crate::limits::Limits;
use crate::policy::Policy;
use crate::user::User;

/// One durable change. Removals carry names only: removing a queue also
/// removes the bindings to it, and removing an exchange the bindings from
/// and to it, so those are not recorded one by one; exchanges auto-deleted
/// as a consequence are recorded, each on its own.
#[derive(Debug)]
pub enum Change<'a> {
    VHostAdded(&'a str),
    /// Everything in the vhost goes with it.
    VHostDeleted(&'a str),
    /// A user added or changed (its permissions included).
    UserPut(&'a User),
    UserDeleted(&'a str),
    ExchangeDeclared {
        vhost: &'a str,
        decl: &'a ExchangeDecl,
    },
    ExchangeDeleted {
        vhost: &'a str,
        name: &'a ShortStr,
    },
    /// A durable queue, or (on a cluster) one that lives on another node,
    /// durable or not: `home` names that node.
    QueueDeclared {
        vhost: &'a str,
        decl: &'a QueueDecl,
        home: Option<&'a ShortStr>,
    },
    QueueDeleted {
        vhost: &'a str,
        name: &'a ShortStr,
    },
    Bound {
        vhost: &'a str,
        source: &'a ShortStr,
        binding: &'a Binding,
    },
    Unbound {
        vhost: &'a str,
        source: &'a ShortStr,
        binding: &'a Binding,
    },
    /// A policy added or replaced.
    PolicySet(&'a Policy),
    PolicyCleared {
        vhost: &'a str,
        name: &'a str,
    },
    /// A vhost's limits replaced (empty: cleared).
    VHostLimits {
        vhost: &'a str,
        limits: &'a Limits,
    },
}

/// Where durable changes go.
pub trait DefinitionsLog: Send + Sync {
    /// Take note of `change`. Called under the lock that ordered it, so it
    /// must be quick and must not do I/O. Returns a ticket for [`commit`].
    ///
    /// [`commit`]: DefinitionsLog::commit
    fn record(&self, change: Change<'_>) -> u64;

    /// Return once the record with `ticket` (and all before it) is
    /// durable. Called with no lock held; may block on an fsync.
    fn commit(&self, ticket: u64);
}

/// A log that keeps nothing: for brokers without a data directory (tests).
#[derive(Debug, Default)]
pub struct NoLog;

impl DefinitionsLog for NoLog {
    fn record(&self, _: Change<'_>) -> u64 {
        0
    }

    fn commit(&self, _: u64) {}
}
