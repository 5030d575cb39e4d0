//! A virtual host: its exchanges, queues and bindings (the topology), and
//! routing over them. The topology sits behind one read-write lock: publishes
//! take it shared to route, declares take it exclusively. Routing follows
//! exchange-to-exchange bindings and alternate exchanges with a visited set,
//! so cycles among exchanges end. Queues (declare, removal, what their
//! calls ask for) are in `queues.rs`.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};
use warren_amqp091::{FieldTable, FieldValue, ShortStr};

use crate::changes::{Change, DefinitionsLog};
use crate::decl::{ExchangeDecl, QueueDecl};
use crate::error::BrokerError;
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::limits::{Limits, MAX_QUEUES};
use crate::policy::{pick, Policy};
use crate::queue::{Queue, QueueEnv, QueueKind};

mod queues;

#[derive(Default)]
struct Topology {
    exchanges: HashMap<ShortStr, Exchange>,
    queues: HashMap<ShortStr, Arc<Queue>>,
    /// For each destination, the exchanges with bindings to it.
    sources: HashMap<Destination, HashSet<ShortStr>>,
    policies: std::collections::BTreeMap<String, Arc<Policy>>,
    /// Bumped by every policy change; a queue ignores a policy chosen at
    /// an older version than the one it has.
    policy_version: u64,
    /// Set once the vhost is deleted (a deletion recorded as one change):
    /// what its last users still do to it is not recorded.
    retired: bool,
    /// max-queues and max-connections (see [`crate::limits`]).
    limits: Limits,
}

pub struct VHost {
    pub name: String,
    topology: RwLock<Topology>,
    env: QueueEnv,
    log: Arc<dyn DefinitionsLog>,
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish()
    }
}

/// The exchanges every vhost starts with (RabbitMQ's predeclared set).
const PREDECLARED: &[(&str, ExchangeKind, bool)] = &[
    ("", ExchangeKind::Direct, false),
    ("amq.direct", ExchangeKind::Direct, false),
    ("amq.fanout", ExchangeKind::Fanout, false),
    ("amq.topic", ExchangeKind::Topic, false),
    ("amq.headers", ExchangeKind::Headers, false),
    ("amq.match", ExchangeKind::Headers, false),
    ("amq.rabbitmq.trace", ExchangeKind::Topic, true),
];

/// What an `x-local-random` exchange may be bound to (RabbitMQ 4's
/// rabbit_exchange_type_local_random): classic queues, with an empty key.
fn check_local_random(t: &Topology, b: &Binding) -> Result<(), BrokerError> {
    if !b.routing_key.is_empty() {
        return Err(BrokerError::PreconditionFailed(format!(
            "Non empty binding '{}' key not permitted",
            b.routing_key
        )));
    }
    match &b.destination {
        Destination::Queue(q) => match t.queues.get(q).map(|q| q.kind()) {
            Some(QueueKind::Classic) | None => Ok(()),
            // RabbitMQ names the queue type's module.
            Some(QueueKind::Stream) => Err(BrokerError::PreconditionFailed(
                "Queue type rabbit_stream_queue not valid for this exchange type".into(),
            )),
            Some(QueueKind::Quorum) => Err(BrokerError::PreconditionFailed(
                "Queue type rabbit_quorum_queue not valid for this exchange type".into(),
            )),
        },
        // RabbitMQ looks the destination up as a queue.
        Destination::Exchange(_) => Err(BrokerError::PreconditionFailed("Destination not found".into())),
    }
}

/// A headers binding's x-match must be one of the four known values.
fn check_x_match(args: &FieldTable) -> Result<(), BrokerError> {
    match args.get("x-match") {
        None => Ok(()),
        Some(FieldValue::LongStr(v)) => match &v[..] {
            b"all" | b"any" | b"all-with-x" | b"any-with-x" => Ok(()),
            other => Err(BrokerError::PreconditionFailed(format!(
                "Invalid x-match field value <<\"{}\">>; expected all, any, all-with-x, or any-with-x",
                String::from_utf8_lossy(other)
            ))),
        },
        Some(other) => Err(BrokerError::PreconditionFailed(format!(
            "Invalid x-match field type {}; expected longstr",
            other.type_name()
        ))),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// Two argument values equal as RabbitMQ compares terms (numbers by value).
pub fn args_equal(a: Option<&FieldValue>, b: Option<&FieldValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => match (x.as_bytes(), y.as_bytes()) {
                (Some(i), Some(j)) => i == j,
                _ => x == y,
            },
        },
        _ => false,
    }
}

/// A typed argument value as RabbitMQ shows it in inequivalence errors.
fn show(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".into(),
        Some(v) => {
            let val = match (v.as_i64(), v.as_bytes(), v.as_bool()) {
                (Some(i), _, _) => i.to_string(),
                (_, Some(b), _) => String::from_utf8_lossy(b).into_owned(),
                (_, _, Some(b)) => b.to_string(),
                _ => format!("{v:?}"),
            };
            format!("the value '{val}' of type '{}'", v.type_name())
        }
    }
}

impl VHost {
    pub fn new(name: &str, env: QueueEnv, log: Arc<dyn DefinitionsLog>) -> VHost {
        let mut t = Topology::default();
        for (n, kind, internal) in PREDECLARED {
            let name = ShortStr::from(*n);
            // Predeclared exchanges are valid by construction.
            if let Ok(x) = Exchange::new(name.clone(), *kind, true, false, *internal, FieldTable::new()) {
                t.exchanges.insert(name, x);
            }
        }
        VHost {
            name: name.to_string(),
            topology: RwLock::new(t),
            env,
            log,
        }
    }

    fn not_found_exchange(&self, name: &[u8]) -> BrokerError {
        BrokerError::NotFound(format!(
            "no exchange '{}' in vhost '{}'",
            String::from_utf8_lossy(name),
            self.name
        ))
    }

    fn not_found_queue(&self, name: &[u8]) -> BrokerError {
        BrokerError::NotFound(format!(
            "no queue '{}' in vhost '{}'",
            String::from_utf8_lossy(name),
            self.name
        ))
    }

    fn default_exchange_refused(&self) -> BrokerError {
        BrokerError::AccessRefused("operation not permitted on the default exchange".into())
    }

    // ----- durable changes -------------------------------------------------

    /// Record a durable change while the topology lock `t` is held, so
    /// records keep the order of the changes.
    fn record(&self, t: &Topology, change: Change<'_>) -> Option<u64> {
        (!t.retired).then(|| self.log.record(change))
    }

    /// Record the durable exchanges a removal took with it.
    fn record_gone(&self, t: &Topology, gone: &[ShortStr]) -> Option<u64> {
        gone.iter().fold(None, |last, name| {
            self.record(
                t,
                Change::ExchangeDeleted {
                    vhost: &self.name,
                    name,
                },
            )
            .or(last)
        })
    }

    /// Wait, with no lock held, until what was recorded is durable.
    fn commit(&self, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            self.log.commit(ticket);
        }
    }

    /// The vhost is being deleted, its deletion recorded: record nothing
    /// more of it.
    pub(crate) fn retire(&self) {
        self.topology.write().retired = true;
    }

    // ----- limits ----------------------------------------------------------

    pub fn limits(&self) -> Limits {
        self.topology.read().limits.clone()
    }

    /// Change the vhost's limits under its lock (so two changes to
    /// different limits both land), recorded as its policies are. Queues
    /// already over a new max-queues stay; only new ones are refused, as
    /// in RabbitMQ.
    pub fn update_limits(&self, f: impl FnOnce(&mut Limits)) {
        let mut t = self.topology.write();
        f(&mut t.limits);
        let ticket = self.record(
            &t,
            Change::VHostLimits {
                vhost: &self.name,
                limits: &t.limits,
            },
        );
        drop(t);
        self.commit(ticket);
    }

    /// rabbit_vhost_limit's queue limit: counted over every queue of the
    /// vhost, exclusive ones included.
    fn check_queue_limit(&self, t: &Topology, name: &ShortStr) -> Result<(), BrokerError> {
        match t.limits.reached(MAX_QUEUES, t.queues.len()) {
            None => Ok(()),
            Some(limit) => Err(BrokerError::PreconditionFailed(format!(
                "cannot declare queue '{name}': queue limit in vhost '{}' ({limit}) is reached",
                self.name
            ))),
        }
    }

    // ----- policies --------------------------------------------------------

    /// The policy for queue `name` of `kind` now, and the version it was
    /// chosen at.
    fn queue_policy(t: &Topology, name: &[u8], kind: QueueKind) -> crate::queue::AppliedPolicy {
        (
            pick(t.policies.values(), |p| p.matches_queue(name, kind)),
            t.policy_version,
        )
    }

    /// The policy a new queue of this name and kind would have.
    pub fn policy_for_new_queue(&self, name: &[u8], kind: QueueKind) -> Option<Arc<Policy>> {
        Self::queue_policy(&self.topology.read(), name, kind).0
    }

    pub fn policies(&self) -> Vec<Arc<Policy>> {
        self.topology.read().policies.values().cloned().collect()
    }

    /// Add or replace a policy, then choose every queue's and exchange's
    /// policy anew. `arm` is called for each queue whose settings changed
    /// (its timers may need to run now). True if it replaced one.
    pub fn put_policy(&self, policy: Policy, arm: &mut dyn FnMut(&Arc<Queue>)) -> bool {
        let mut t = self.topology.write();
        let ticket = self.record(&t, Change::PolicySet(&policy));
        let replaced = t.policies.insert(policy.name.clone(), Arc::new(policy)).is_some();
        self.reapply_policies(t, ticket, arm);
        replaced
    }

    /// Remove a policy; false if there was none of that name.
    pub fn delete_policy(&self, name: &str, arm: &mut dyn FnMut(&Arc<Queue>)) -> bool {
        let mut t = self.topology.write();
        if t.policies.remove(name).is_none() {
            return false;
        }
        let ticket = self.record(
            &t,
            Change::PolicyCleared {
                vhost: &self.name,
                name,
            },
        );
        self.reapply_policies(t, ticket, arm);
        true
    }

    fn reapply_policies(
        &self,
        mut t: RwLockWriteGuard<'_, Topology>,
        ticket: Option<u64>,
        arm: &mut dyn FnMut(&Arc<Queue>),
    ) {
        t.policy_version += 1;
        let Topology {
            exchanges, policies, ..
        } = &mut *t;
        for x in exchanges.values_mut() {
            x.policy = pick(policies.values(), |p| p.matches_exchange(&x.name));
        }
        let queues: Vec<_> = t
            .queues
            .values()
            .map(|q| (q.clone(), Self::queue_policy(&t, &q.name, q.kind())))
            .collect();
        drop(t);
        self.commit(ticket);
        // Outside the topology lock: setting a policy takes the queue's.
        for (q, policy) in queues {
            let (changed, effects) = q.set_policy(policy);
            if changed {
                self.apply(&q, effects, arm);
                if q.needs_timer() {
                    arm(&q);
                }
            }
        }
    }

    // ----- exchanges -------------------------------------------------------

    /// The kind an exchange.declare names, or RabbitMQ's refusal.
    fn exchange_kind(&self, d: &ExchangeDecl) -> Result<ExchangeKind, BrokerError> {
        if d.name.is_empty() {
            return Err(self.default_exchange_refused());
        }
        // RabbitMQ 3.13+ refuses an unknown type on the channel (406).
        ExchangeKind::parse(&d.kind)
            .ok_or_else(|| BrokerError::PreconditionFailed(format!("unknown exchange type '{}'", d.kind)))
    }

    /// What a declare of `d` would do, without doing it: Ok(true) if an
    /// equivalent exchange exists, Ok(false) if it would be created, or
    /// the error the declare would give. A cluster checks this before it
    /// proposes the declare.
    pub fn exchange_declared(&self, d: &ExchangeDecl) -> Result<bool, BrokerError> {
        let kind = self.exchange_kind(d)?;
        self.check_declared_exchange(&self.topology.read(), d, kind)
    }

    /// Ok(true): `d` exists and is equivalent; Ok(false): it may be made.
    fn check_declared_exchange(
        &self,
        t: &Topology,
        d: &ExchangeDecl,
        kind: ExchangeKind,
    ) -> Result<bool, BrokerError> {
        if let Some(x) = t.exchanges.get(&d.name) {
            let what = |arg: &str, got: String, cur: String| {
                BrokerError::PreconditionFailed(format!(
                    "inequivalent arg '{arg}' for exchange '{}' in vhost '{}': received '{got}' but current is '{cur}'",
                    d.name, self.name
                ))
            };
            if x.kind != kind {
                return Err(what("type", kind.as_str().into(), x.kind.as_str().into()));
            }
            if x.durable != d.durable {
                return Err(what(
                    "durable",
                    yes_no(d.durable).into(),
                    yes_no(x.durable).into(),
                ));
            }
            if x.auto_delete != d.auto_delete {
                return Err(what(
                    "auto_delete",
                    yes_no(d.auto_delete).into(),
                    yes_no(x.auto_delete).into(),
                ));
            }
            if x.internal != d.internal {
                return Err(what(
                    "internal",
                    yes_no(d.internal).into(),
                    yes_no(x.internal).into(),
                ));
            }
            let (a, b) = (
                d.arguments.get("alternate-exchange"),
                x.arguments.get("alternate-exchange"),
            );
            if !args_equal(a, b) {
                return Err(BrokerError::PreconditionFailed(format!(
                    "inequivalent arg 'alternate-exchange' for exchange '{}' in vhost '{}': received {} but current is {}",
                    d.name,
                    self.name,
                    show(a),
                    show(b)
                )));
            }
            return Ok(true);
        }
        if d.name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        }
        Ok(false)
    }

    /// exchange.declare with passive=false. Returns whether it was created.
    pub fn declare_exchange(&self, d: ExchangeDecl) -> Result<bool, BrokerError> {
        let kind = self.exchange_kind(&d)?;
        let mut t = self.topology.write();
        if self.check_declared_exchange(&t, &d, kind)? {
            return Ok(false);
        }
        let mut x = Exchange::new(
            d.name.clone(),
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments.clone(),
        )?;
        x.policy = pick(t.policies.values(), |p| p.matches_exchange(&d.name));
        t.exchanges.insert(d.name.clone(), x);
        let ticket = if self.kept_exchange(d.durable) {
            self.record(
                &t,
                Change::ExchangeDeclared {
                    vhost: &self.name,
                    decl: &d,
                },
            )
        } else {
            None
        };
        drop(t);
        self.commit(ticket);
        Ok(true)
    }

    /// exchange.declare with passive=true.
    pub fn check_exchange(&self, name: &[u8]) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(self.default_exchange_refused());
        }
        if self.topology.read().exchanges.contains_key(name) {
            Ok(())
        } else {
            Err(self.not_found_exchange(name))
        }
    }

    pub fn delete_exchange(&self, name: &ShortStr, if_unused: bool) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(self.default_exchange_refused());
        }
        if name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "deletion of system exchange '{name}' in vhost '{}' not allowed",
                self.name
            )));
        }
        let mut t = self.topology.write();
        let Some(x) = t.exchanges.get(name) else {
            // RabbitMQ 3.x: deleting a missing exchange succeeds.
            return Ok(());
        };
        let dest = Destination::Exchange(name.clone());
        if if_unused && (!x.bindings().is_empty() || t.sources.get(&dest).is_some_and(|s| !s.is_empty())) {
            return Err(BrokerError::PreconditionFailed(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        let mut gone = Vec::new();
        Self::remove_exchange_locked(&mut t, name, &mut gone);
        let ticket = self.record_gone(&t, &gone);
        drop(t);
        self.commit(ticket);
        Ok(())
    }

    /// Remove exchange `name` and its bindings (from and to it); durable
    /// exchanges removed, this one and any auto-deleted as a result, are
    /// added to `gone`.
    fn remove_exchange_locked(t: &mut Topology, name: &ShortStr, gone: &mut Vec<ShortStr>) {
        let Some(x) = t.exchanges.remove(name) else {
            return;
        };
        if x.durable {
            gone.push(name.clone());
        }
        for b in x.bindings() {
            if let Some(s) = t.sources.get_mut(&b.destination) {
                s.remove(name);
            }
        }
        let dest = Destination::Exchange(name.clone());
        Self::unbind_destination_locked(t, &dest, gone);
    }

    /// Remove every binding leading to `dest`, auto-deleting sources left
    /// with no bindings.
    fn unbind_destination_locked(t: &mut Topology, dest: &Destination, gone: &mut Vec<ShortStr>) {
        let Some(sources) = t.sources.remove(dest) else {
            return;
        };
        for s in sources {
            let empty_auto = match t.exchanges.get_mut(&s) {
                Some(x) => {
                    x.unbind_destination(dest);
                    x.auto_delete && x.bindings().is_empty()
                }
                None => false,
            };
            if empty_auto {
                Self::remove_exchange_locked(t, &s, gone);
            }
        }
    }

    // ----- bindings --------------------------------------------------------

    fn check_bindable(&self, t: &Topology, source: &ShortStr, dest: &Destination) -> Result<(), BrokerError> {
        if source.is_empty() || matches!(dest, Destination::Exchange(n) if n.is_empty()) {
            return Err(self.default_exchange_refused());
        }
        if !t.exchanges.contains_key(source) {
            return Err(self.not_found_exchange(source));
        }
        match dest {
            Destination::Queue(q) if !t.queues.contains_key(q) => Err(self.not_found_queue(q)),
            Destination::Exchange(x) if !t.exchanges.contains_key(x) => Err(self.not_found_exchange(x)),
            _ => Ok(()),
        }
    }

    /// On a cluster this node holds every node's topology, so what it
    /// must have again after a restart is more than what is durable.
    fn clustered(&self) -> bool {
        self.env.replication.get().is_some()
    }

    /// Is an exchange recorded? Durable ones always; on a cluster every
    /// one (the cluster keeps it while this node restarts).
    fn kept_exchange(&self, durable: bool) -> bool {
        durable || self.clustered()
    }

    /// Is a queue recorded? Durable ones, and every queue whose home is
    /// another node (it outlives this node's restart). A transient queue
    /// of this node dies with it.
    fn kept_queue(q: &Queue) -> bool {
        (q.durable && q.exclusive_owner.is_none()) || q.home.is_some()
    }

    fn is_kept_dest(&self, t: &Topology, dest: &Destination) -> bool {
        match dest {
            Destination::Queue(q) => t.queues.get(q).is_some_and(|q| Self::kept_queue(q)),
            Destination::Exchange(x) => t.exchanges.get(x).is_some_and(|x| self.kept_exchange(x.durable)),
        }
    }

    /// Is a binding between these ends durable (for exports)?
    fn is_durable_dest(t: &Topology, dest: &Destination) -> bool {
        match dest {
            Destination::Queue(q) => t.queues.get(q).is_some_and(|q| q.durable),
            Destination::Exchange(x) => t.exchanges.get(x).is_some_and(|x| x.durable),
        }
    }

    pub fn bind(&self, source: &ShortStr, binding: Binding) -> Result<(), BrokerError> {
        let mut t = self.topology.write();
        self.check_bindable(&t, source, &binding.destination)?;
        match t.exchanges.get(source).map(|x| x.kind) {
            Some(ExchangeKind::Headers) => check_x_match(&binding.arguments)?,
            Some(ExchangeKind::LocalRandom) => check_local_random(&t, &binding)?,
            _ => {}
        }
        let dest = binding.destination.clone();
        let durable = self.is_kept_dest(&t, &dest)
            && t.exchanges
                .get(source)
                .is_some_and(|x| self.kept_exchange(x.durable));
        let kept = durable.then(|| binding.clone());
        let added = t.exchanges.get_mut(source).is_some_and(|x| x.bind(binding));
        let mut ticket = None;
        if added {
            t.sources.entry(dest).or_default().insert(source.clone());
            if let Some(binding) = &kept {
                ticket = self.record(
                    &t,
                    Change::Bound {
                        vhost: &self.name,
                        source,
                        binding,
                    },
                );
            }
        }
        drop(t);
        self.commit(ticket);
        Ok(())
    }

    /// The bindings from exchange `source` to `destination` (all of them
    /// when `destination` is None), for the management API's lookups.
    pub fn bindings_from(&self, source: &[u8], destination: Option<&Destination>) -> Vec<Binding> {
        let t = self.topology.read();
        let Some(x) = t.exchanges.get(source) else {
            return Vec::new();
        };
        x.bindings()
            .iter()
            .filter(|b| destination.is_none_or(|d| &b.destination == d))
            .cloned()
            .collect()
    }

    /// Remove a binding. Unbinding what is not bound (even from a missing
    /// queue or exchange) succeeds, as in RabbitMQ.
    pub fn unbind(&self, source: &ShortStr, binding: &Binding) -> Result<(), BrokerError> {
        if source.is_empty() || matches!(&binding.destination, Destination::Exchange(n) if n.is_empty()) {
            return Err(self.default_exchange_refused());
        }
        let mut t = self.topology.write();
        let durable = self.is_kept_dest(&t, &binding.destination);
        let (removed, still_bound, auto_empty) = match t.exchanges.get_mut(source) {
            Some(x) => {
                let removed = x.unbind(binding);
                let still = x.bindings().iter().any(|b| b.destination == binding.destination);
                (removed, still, x.auto_delete && x.bindings().is_empty())
            }
            None => (false, true, false),
        };
        if removed && !still_bound {
            if let Some(s) = t.sources.get_mut(&binding.destination) {
                s.remove(source);
            }
        }
        let mut ticket = None;
        if removed && durable {
            ticket = self.record(
                &t,
                Change::Unbound {
                    vhost: &self.name,
                    source,
                    binding,
                },
            );
        }
        if removed && auto_empty {
            let mut gone = Vec::new();
            Self::remove_exchange_locked(&mut t, source, &mut gone);
            ticket = self.record_gone(&t, &gone).or(ticket);
        }
        drop(t);
        self.commit(ticket);
        Ok(())
    }

    // ----- routing ---------------------------------------------------------

    /// Route a message published to `exchange` with `routing_keys` (the
    /// routing key plus CC/BCC): the queues it goes to, each once.
    /// Errors when the exchange is missing or internal (0-9-1 basic.publish).
    pub fn route(
        &self,
        exchange: &[u8],
        routing_keys: &[&[u8]],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
    ) -> Result<(), BrokerError> {
        self.route_checked(exchange, routing_keys, headers, out, true)
    }

    /// Routing for the broker's own publishes (dead letters), which may
    /// target internal exchanges.
    fn route_internal(
        &self,
        exchange: &[u8],
        routing_keys: &[&[u8]],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
    ) -> Result<(), BrokerError> {
        self.route_checked(exchange, routing_keys, headers, out, false)
    }

    fn route_checked(
        &self,
        exchange: &[u8],
        routing_keys: &[&[u8]],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
        refuse_internal: bool,
    ) -> Result<(), BrokerError> {
        let t = self.topology.read();
        let Some(x) = t.exchanges.get(exchange) else {
            return Err(self.not_found_exchange(exchange));
        };
        if refuse_internal && x.internal {
            return Err(BrokerError::AccessRefused(format!(
                "cannot publish to internal exchange '{}' in vhost '{}'",
                x.name, self.name
            )));
        }
        if exchange.is_empty() {
            // The default exchange binds every queue by its name.
            for k in routing_keys {
                if let Some(q) = t.queues.get(*k) {
                    if !out.iter().any(|o| Arc::ptr_eq(o, q)) {
                        out.push(q.clone());
                    }
                }
            }
            return Ok(());
        }
        let mut visited: Vec<&[u8]> = Vec::new();
        let mut dests = Vec::new();
        Self::route_from(&t, x, routing_keys, headers, &mut visited, &mut dests);
        for d in dests {
            if let Destination::Queue(n) = d {
                if let Some(q) = t.queues.get(&n) {
                    if !out.iter().any(|o| Arc::ptr_eq(o, q)) {
                        out.push(q.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// Follow `x`'s bindings (and onward exchange bindings), falling back to
    /// its alternate exchange when it routes to no queue.
    fn route_from<'a>(
        t: &'a Topology,
        x: &'a Exchange,
        keys: &[&[u8]],
        headers: Option<&FieldTable>,
        visited: &mut Vec<&'a [u8]>,
        out: &mut Vec<Destination>,
    ) {
        if visited.contains(&x.name.as_bytes()) {
            return;
        }
        visited.push(x.name.as_bytes());
        let before = out.iter().filter(|d| matches!(d, Destination::Queue(_))).count();
        let mut direct = Vec::new();
        for k in keys {
            x.route(k, headers, &mut direct);
        }
        for d in direct {
            match &d {
                Destination::Queue(_) => {
                    if !out.contains(&d) {
                        out.push(d)
                    }
                }
                Destination::Exchange(n) => {
                    if let Some(next) = t.exchanges.get(n) {
                        Self::route_from(t, next, keys, headers, visited, out);
                    }
                }
            }
        }
        let after = out.iter().filter(|d| matches!(d, Destination::Queue(_))).count();
        if after == before {
            // The argument wins over a policy's (RabbitMQ's rule).
            let name = x
                .alternate_exchange
                .as_deref()
                .or_else(|| x.policy.as_ref()?.alternate_exchange());
            if let Some(ae) = name.and_then(|n| t.exchanges.get(n)) {
                Self::route_from(t, ae, keys, headers, visited, out);
            }
        }
    }

    /// Every exchange, the predeclared ones included, as declared, with the
    /// policy that applies to it (for listings: the management API).
    pub fn exchanges(&self) -> Vec<(ExchangeDecl, Option<Arc<Policy>>)> {
        let t = self.topology.read();
        let mut xs: Vec<_> = t
            .exchanges
            .values()
            .map(|x| {
                let decl = ExchangeDecl {
                    name: x.name.clone(),
                    kind: x.kind.as_str().into(),
                    durable: x.durable,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments.clone(),
                };
                (decl, x.policy.clone())
            })
            .collect();
        xs.sort_by(|a, b| a.0.name.as_bytes().cmp(b.0.name.as_bytes()));
        xs
    }

    /// How many exchanges, the predeclared ones included.
    pub fn exchange_count(&self) -> usize {
        self.topology.read().exchanges.len()
    }

    /// Every binding, by source exchange (for listings).
    pub fn bindings(&self) -> Vec<(ShortStr, Binding)> {
        let t = self.topology.read();
        let mut bs: Vec<(ShortStr, Binding)> = t
            .exchanges
            .values()
            .flat_map(|x| x.bindings().iter().map(|b| (x.name.clone(), b.clone())))
            .collect();
        bs.sort_by(|a, b| {
            (
                a.0.as_bytes(),
                a.1.destination.name().as_bytes(),
                a.1.routing_key.as_bytes(),
            )
                .cmp(&(
                    b.0.as_bytes(),
                    b.1.destination.name().as_bytes(),
                    b.1.routing_key.as_bytes(),
                ))
        });
        bs
    }

    /// A snapshot for saving definitions: durable exchanges (not the
    /// predeclared ones), durable queues, and bindings between durable ends.
    pub fn durable_definitions(&self) -> (Vec<ExchangeDecl>, Vec<QueueDecl>, Vec<(ShortStr, Binding)>) {
        let t = self.topology.read();
        let mut xs = Vec::new();
        let mut bs = Vec::new();
        for x in t.exchanges.values() {
            if !x.durable {
                continue;
            }
            let predeclared = PREDECLARED
                .iter()
                .any(|(n, _, _)| n.as_bytes() == x.name.as_bytes());
            if !predeclared {
                xs.push(ExchangeDecl {
                    name: x.name.clone(),
                    kind: x.kind.as_str().into(),
                    durable: true,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments.clone(),
                });
            }
            for b in x.bindings() {
                if Self::is_durable_dest(&t, &b.destination) {
                    bs.push((x.name.clone(), b.clone()));
                }
            }
        }
        let qs = t
            .queues
            .values()
            .filter(|q| q.durable && q.exclusive_owner.is_none())
            .map(|q| QueueDecl {
                name: q.name.clone(),
                durable: true,
                exclusive: false,
                auto_delete: q.auto_delete,
                arguments: q.arguments.clone(),
            })
            .collect();
        (xs, qs, bs)
    }
}

impl crate::permissions::TopicExchanges for VHost {
    /// Is `name` a topic exchange (the only kind topic permissions
    /// check)?
    fn is_topic(&self, name: &[u8]) -> bool {
        self.topology
            .read()
            .exchanges
            .get(name)
            .is_some_and(|x| x.kind == crate::exchange::ExchangeKind::Topic)
    }
}
