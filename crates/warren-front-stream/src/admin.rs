//! Topology and bookkeeping commands: Create and Delete (a stream is a
//! durable queue of type stream in the connection's vhost), Metadata,
//! StreamStats, StoreOffset / QueryOffset, and super streams (an exchange
//! whose bindings to partition streams carry the partition order, as
//! RabbitMQ builds them): CreateSuperStream, DeleteSuperStream,
//! Partitions and Route.

use bytes::{BufMut, BytesMut};
use warren_amqp091::{FieldTable, FieldValue, ShortStr};
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};
use warren_core::queue::StreamRole;
use warren_core::BrokerError;
use warren_stream::command::key;
use warren_stream::wire::put_string;

use super::publish::StreamNodes;
use crate::conn::{response, Conn};
use warren_node::topology;
use warren_stream::command::code;

/// The binding argument that orders a super stream's partitions.
const PARTITION_ORDER: &str = "x-stream-partition-order";

/// The stream protocol's creation arguments as queue arguments.
fn queue_arguments(args: &[(String, String)]) -> Result<FieldTable, String> {
    let mut t = FieldTable::new();
    t.insert("x-queue-type", FieldValue::LongStr("stream".into()));
    for (k, v) in args {
        let int = || {
            v.parse::<i64>()
                .map_err(|_| format!("{k} must be a number, not '{v}'"))
        };
        match k.as_str() {
            "max-length-bytes" => t.insert("x-max-length-bytes", FieldValue::I64(int()?)),
            "max-age" => t.insert("x-max-age", FieldValue::LongStr(v.clone().into_bytes().into())),
            "stream-max-segment-size-bytes" => {
                t.insert("x-stream-max-segment-size-bytes", FieldValue::I64(int()?))
            }
            "stream-filter-size-bytes" => t.insert("x-stream-filter-size-bytes", FieldValue::I64(int()?)),
            "initial-cluster-size" => t.insert("x-initial-cluster-size", FieldValue::I64(int()?)),
            "queue-leader-locator" => t.insert(
                "x-queue-leader-locator",
                FieldValue::LongStr(v.clone().into_bytes().into()),
            ),
            // Others are ignored, as RabbitMQ's stream manager does.
            _ => {}
        }
    }
    Ok(t)
}

impl Conn {
    /// Declare stream `name` with `args`: the stream protocol code.
    fn declare_stream(&mut self, name: &str, args: &[(String, String)]) -> u16 {
        if name.is_empty() || name.len() > 255 {
            return code::PRECONDITION_FAILED;
        }
        let arguments = match queue_arguments(args) {
            Ok(a) => a,
            Err(e) => {
                tracing::info!(peer = %self.peer, "stream creation refused: {e}");
                return code::PRECONDITION_FAILED;
            }
        };
        let vh = self.vhost().clone();
        let existed = vh.queue(name.as_bytes(), 0).is_ok();
        let decl = QueueDecl {
            name: name.into(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments,
        };
        match topology::now(&self.ctx, topology::declare_queue(&self.ctx, &vh, decl, 0, true)) {
            Ok((q, _)) if existed && q.stream().is_some() => code::STREAM_ALREADY_EXISTS,
            Ok((q, _)) if q.stream().is_some() => code::OK,
            Ok(_) => code::PRECONDITION_FAILED,
            Err(BrokerError::AccessRefused(_)) => code::ACCESS_REFUSED,
            Err(e) => {
                tracing::info!(peer = %self.peer, "stream creation refused: {e}");
                code::PRECONDITION_FAILED
            }
        }
    }

    pub(super) fn create(&mut self, correlation_id: u32, name: &str, args: &[(String, String)]) {
        let c = self.declare_stream(name, args);
        self.respond(key::CREATE, correlation_id, c);
    }

    /// Delete stream `name`; false if there is none.
    fn remove_stream(&mut self, name: &str) -> bool {
        let vh = self.vhost().clone();
        let is_stream = vh.queue(name.as_bytes(), 0).is_ok_and(|q| q.stream().is_some());
        if !is_stream {
            return false;
        }
        let _ = topology::now(
            &self.ctx,
            topology::delete_queue(&self.ctx, &vh, &ShortStr::from(name), false, false, 0),
        );
        true
    }

    pub(super) fn delete(&mut self, correlation_id: u32, name: &str) {
        let c = if self.remove_stream(name) {
            code::OK
        } else {
            code::STREAM_DOES_NOT_EXIST
        };
        self.respond(key::DELETE, correlation_id, c);
        self.drop_deleted_streams();
    }

    /// The host and port clients should use for this broker.
    pub(super) fn advertised(&self) -> (String, u32) {
        let host = self
            .ctx
            .config
            .stream_advertised_host
            .clone()
            .unwrap_or_else(|| self.local.ip().to_string());
        // A TLS client is told the TLS port (stream.advertised_tls_port).
        let configured = if self.entry.tls().is_some() {
            self.ctx.config.stream_advertised_tls_port
        } else {
            self.ctx.config.stream_advertised_port
        };
        let port = configured.unwrap_or(self.local.port());
        (host, port as u32)
    }

    /// Metadata: each stream's leader and replicas as brokers (advertised
    /// host and port). A stream that is not replicated lives on one node:
    /// this one (the first broker listed) or, on a cluster, another node,
    /// whose stream endpoint its status reports gave, listed as leader
    /// and only member. A replicated stream lists its leader (0xffff while
    /// none is known, as RabbitMQ answers) and the members other than the
    /// leader that are reachable from here, as RabbitMQ lists only running
    /// members.
    pub(super) fn metadata(&mut self, correlation_id: u32, streams: &[String]) {
        let mut brokers: Vec<(String, u32)> = vec![self.advertised()];
        let tls = self.entry.tls().is_some();
        let mut answers: Vec<(u16, u16, Vec<u16>)> = Vec::with_capacity(streams.len());
        for s in streams {
            let nodes = match self.stream_nodes(s) {
                Ok(n) => n,
                Err(c) => {
                    answers.push((c, 0xffff, Vec::new()));
                    continue;
                }
            };
            let mut index_of = |node: &str| -> Option<u16> {
                if node == self.ctx.config.node_name {
                    return Some(0);
                }
                let b = self.ctx.cluster.as_ref()?.stream_endpoint_of(node, tls)?;
                let b = (b.0, b.1 as u32);
                Some(match brokers.iter().position(|x| *x == b) {
                    Some(i) => i as u16,
                    None => {
                        brokers.push(b);
                        (brokers.len() - 1) as u16
                    }
                })
            };
            let answer = match nodes {
                StreamNodes::Here => (code::OK, 0, Vec::new()),
                StreamNodes::Home(node) => match index_of(&node) {
                    Some(i) => (code::OK, i, vec![i]),
                    None => (code::STREAM_NOT_AVAILABLE, 0xffff, Vec::new()),
                },
                StreamNodes::Replicated { leader, replicas } => {
                    let l = leader.as_deref().and_then(&mut index_of).unwrap_or(0xffff);
                    let r = replicas.iter().filter_map(|n| index_of(n)).collect();
                    (code::OK, l, r)
                }
            };
            answers.push(answer);
        }
        let mut rest = BytesMut::new();
        rest.put_u32(correlation_id);
        rest.put_i32(brokers.len() as i32);
        for (i, (host, port)) in brokers.iter().enumerate() {
            rest.put_u16(i as u16);
            put_string(&mut rest, host);
            rest.put_u32(*port);
        }
        rest.put_i32(streams.len() as i32);
        for (s, (c, leader, replicas)) in streams.iter().zip(answers) {
            put_string(&mut rest, s);
            rest.put_u16(c);
            rest.put_u16(leader);
            rest.put_i32(replicas.len() as i32);
            for r in replicas {
                rest.put_u16(r);
            }
        }
        // No response code at the top of a metadata response.
        self.command(key::METADATA | key::RESPONSE, |out| out.put_slice(&rest));
    }

    pub(super) fn stream_stats(&mut self, correlation_id: u32, stream: &str) {
        let mut rest = BytesMut::new();
        let c = match self.stream_log(stream) {
            Ok(log) => {
                let (first, last) = match log.chunk_ids() {
                    Some((f, l)) => (f as i64, l as i64),
                    None => (-1, -1),
                };
                // A replicated stream's committed chunk is what a majority
                // has; otherwise every chunk written.
                let committed = match log.role() {
                    StreamRole::Alone => last,
                    _ => log.committed().map_or(-1, |c| c as i64),
                };
                let stats = [
                    ("first_chunk_id", first),
                    ("committed_chunk_id", committed),
                    ("last_chunk_id", last),
                ];
                rest.put_i32(stats.len() as i32);
                for (k, v) in stats {
                    put_string(&mut rest, k);
                    rest.put_i64(v);
                }
                code::OK
            }
            Err(c) => {
                rest.put_i32(0);
                c
            }
        };
        response(&mut self.wbuf, key::STREAM_STATS, correlation_id, c, &rest);
    }

    pub(super) fn store_offset(&mut self, reference: &str, stream: &str, offset: u64) {
        // No answer either way (a missing stream is logged and dropped).
        match self.stream_log(stream) {
            // Only the leader writes: a replica's node sends it there.
            Ok(log) if matches!(log.role(), StreamRole::Replica { .. }) => {
                let sent = self
                    .ctx
                    .stream_replicas
                    .as_ref()
                    .is_some_and(|s| s.track(&log, reference, offset));
                if !sent {
                    tracing::warn!(
                        stream,
                        "an offset not stored: the stream's leader is not reachable"
                    );
                }
            }
            Ok(log) => {
                if let Err(e) = log.store_offset(reference, offset) {
                    tracing::error!(stream, "cannot store an offset: {e}");
                }
            }
            Err(_) => tracing::debug!(peer = %self.peer, stream, "store offset on a missing stream"),
        }
    }

    pub(super) fn query_offset(&mut self, correlation_id: u32, reference: &str, stream: &str) {
        let (c, offset) = match self.stream_log(stream) {
            Ok(log) => match log.stored_offset(reference) {
                Some(o) => (code::OK, o),
                None => (code::NO_OFFSET, 0),
            },
            Err(c) => (c, 0),
        };
        response(
            &mut self.wbuf,
            key::QUERY_OFFSET,
            correlation_id,
            c,
            &offset.to_be_bytes(),
        );
    }

    /// A super stream's partitions, in partition order.
    fn partition_list(&self, super_stream: &str) -> Option<Vec<String>> {
        let vh = self.vhost();
        vh.check_exchange(super_stream.as_bytes()).ok()?;
        let mut parts: Vec<(i64, String)> = vh
            .bindings_from(super_stream.as_bytes(), None)
            .into_iter()
            .filter_map(|b| match b.destination {
                Destination::Queue(q) => {
                    let order = b
                        .arguments
                        .get(PARTITION_ORDER)
                        .and_then(|v| v.as_i64())
                        .unwrap_or(i64::MAX);
                    Some((order, q.to_str_lossy().into_owned()))
                }
                Destination::Exchange(_) => None,
            })
            .collect();
        parts.sort();
        parts.dedup_by(|a, b| a.1 == b.1);
        Some(parts.into_iter().map(|p| p.1).collect())
    }

    /// Where `stream` stands among `super_stream`'s partitions (RabbitMQ:
    /// its binding's partition order, else the number after the last `-`
    /// of its name); None if neither tells.
    pub(super) fn partition_index(&self, super_stream: &str, stream: &str) -> Option<usize> {
        self.partition_list(super_stream)
            .and_then(|parts| parts.iter().position(|p| p == stream))
            .or_else(|| stream.rsplit_once('-').and_then(|(_, n)| n.parse().ok()))
    }

    fn list_response(&mut self, k: u16, correlation_id: u32, c: u16, names: &[String]) {
        let mut rest = BytesMut::new();
        rest.put_i32(names.len() as i32);
        for n in names {
            put_string(&mut rest, n);
        }
        response(&mut self.wbuf, k, correlation_id, c, &rest);
    }

    pub(super) fn partitions(&mut self, correlation_id: u32, super_stream: &str) {
        match self.partition_list(super_stream) {
            Some(p) => self.list_response(key::PARTITIONS, correlation_id, code::OK, &p),
            None => self.list_response(key::PARTITIONS, correlation_id, code::STREAM_DOES_NOT_EXIST, &[]),
        }
    }

    pub(super) fn route(&mut self, correlation_id: u32, routing_key: &str, super_stream: &str) {
        let vh = self.vhost().clone();
        if vh.check_exchange(super_stream.as_bytes()).is_err() {
            return self.list_response(key::ROUTE, correlation_id, code::STREAM_DOES_NOT_EXIST, &[]);
        }
        let mut queues = Vec::new();
        let _ = vh.route(
            super_stream.as_bytes(),
            &[routing_key.as_bytes()],
            None,
            &mut queues,
        );
        let names: Vec<String> = queues
            .iter()
            .filter(|q| q.stream().is_some())
            .map(|q| q.name.to_str_lossy().into_owned())
            .collect();
        self.list_response(key::ROUTE, correlation_id, code::OK, &names);
    }

    pub(super) fn create_super_stream(
        &mut self,
        correlation_id: u32,
        name: &str,
        partitions: &[String],
        keys: &[String],
        args: &[(String, String)],
    ) {
        let c = self.declare_super_stream(name, partitions, keys, args);
        self.respond(key::CREATE_SUPER_STREAM, correlation_id, c);
    }

    fn declare_super_stream(
        &mut self,
        name: &str,
        partitions: &[String],
        keys: &[String],
        args: &[(String, String)],
    ) -> u16 {
        if name.is_empty() || partitions.is_empty() || partitions.len() != keys.len() {
            return code::PRECONDITION_FAILED;
        }
        let vh = self.vhost().clone();
        if vh.check_exchange(name.as_bytes()).is_ok() {
            return code::STREAM_ALREADY_EXISTS;
        }
        if partitions.iter().any(|p| vh.queue(p.as_bytes(), 0).is_ok()) {
            return code::STREAM_ALREADY_EXISTS;
        }
        let mut xargs = FieldTable::new();
        xargs.insert("x-super-stream", FieldValue::Bool(true));
        let decl = ExchangeDecl {
            name: name.into(),
            kind: "direct".into(),
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: xargs,
        };
        if let Err(e) = topology::now(&self.ctx, topology::declare_exchange(&self.ctx, &vh, decl)) {
            tracing::info!(peer = %self.peer, "super stream refused: {e}");
            return match e {
                BrokerError::AccessRefused(_) => code::ACCESS_REFUSED,
                _ => code::PRECONDITION_FAILED,
            };
        }
        // Partitions' leaders spread over the nodes unless a locator is
        // given (rabbitmq-streams add_super_stream's default, balanced).
        let mut args = args.to_vec();
        if !args.iter().any(|(k, _)| k == "queue-leader-locator") {
            args.push(("queue-leader-locator".into(), "balanced".into()));
        }
        for (i, (p, k)) in partitions.iter().zip(keys).enumerate() {
            let c = self.declare_stream(p, &args);
            if c != code::OK {
                return c;
            }
            let mut bargs = FieldTable::new();
            bargs.insert(PARTITION_ORDER, FieldValue::I64(i as i64));
            let b = Binding {
                destination: Destination::Queue(p.as_str().into()),
                routing_key: k.as_str().into(),
                arguments: bargs,
            };
            if topology::now(&self.ctx, topology::bind(&self.ctx, &vh, &name.into(), b)).is_err() {
                return code::PRECONDITION_FAILED;
            }
        }
        code::OK
    }

    pub(super) fn delete_super_stream(&mut self, correlation_id: u32, name: &str) {
        let Some(parts) = self.partition_list(name) else {
            return self.respond(
                key::DELETE_SUPER_STREAM,
                correlation_id,
                code::STREAM_DOES_NOT_EXIST,
            );
        };
        for p in &parts {
            self.remove_stream(p);
        }
        let vh = self.vhost().clone();
        let _ = topology::now(
            &self.ctx,
            topology::delete_exchange(&self.ctx, &vh, &name.into(), false),
        );
        self.respond(key::DELETE_SUPER_STREAM, correlation_id, code::OK);
        self.drop_deleted_streams();
    }
}
