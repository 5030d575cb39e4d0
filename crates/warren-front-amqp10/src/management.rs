//! RabbitMQ 4's AMQP management node: HTTP over AMQP 1.0 at the address
//! `/management`. A request is a message whose `subject` is the HTTP
//! method, `to` the path and body an amqp-value; the answer carries the
//! status code as its `subject`, the request's message-id as its
//! correlation-id and an amqp-value body. This module turns one request
//! into one response against a virtual host; the links that carry them
//! live in `connection/management.rs`.
//!
//! Paths (as RabbitMQ 4 serves them; names percent-encoded):
//! `PUT|GET|DELETE /queues/:q`, `DELETE /queues/:q/messages` (purge),
//! `PUT|DELETE /exchanges/:x`, `POST /bindings`,
//! `GET /bindings?src=&dstq=|dste=&key=`, and
//! `DELETE /bindings/src=:s;dstq=:q|dste=:x;key=:k;args=:a`.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use base64::Engine;
use bytes::BytesMut;
use warren_amqp091::{FieldTable, FieldValue, ShortStr};
use warren_amqp10::composite::composite;
use warren_amqp10::messaging::{self, AMQP_VALUE, APPLICATION_PROPERTIES, PROPERTIES};
use warren_amqp10::Value;
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};
use warren_core::queue::Queue;
use warren_core::{Access, Grant, Resource};
use warren_core::{BrokerError, VHost};

use super::{address, convert};
use warren_node::topology;
use warren_node::uri::percent_encode;
use warren_node::ServerCtx;

/// The node's address.
pub const ADDRESS: &str = "/management";

/// A request, as read from its message.
#[derive(Debug)]
pub struct Request {
    pub message_id: Option<Value>,
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// An answer: an HTTP status and an amqp-value body.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: Value,
}

impl Response {
    fn new(status: u16, body: Value) -> Response {
        Response { status, body }
    }

    fn error(status: u16, text: impl Into<String>) -> Response {
        Response::new(status, Value::String(text.into()))
    }
}

/// What a request did that the connection must know: a queue it declared
/// exclusive belongs to it (deleted when it closes).
#[derive(Debug, Default)]
pub struct Outcome {
    pub response: Option<Response>,
    /// When set, the response comes from it instead (a purge a quorum
    /// queue, or a queue's home node, answers once done).
    pub later: Option<LaterResponse>,
    pub exclusive: Option<Arc<Queue>>,
    pub created: Option<Arc<Queue>>,
}

/// A response that comes once something else has answered.
pub struct LaterResponse(pub std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>);

impl std::fmt::Debug for LaterResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LaterResponse")
    }
}

/// Read a request. RabbitMQ takes the sections in any order (some clients
/// put the body first), so this does too.
pub fn parse(message: &[u8]) -> Result<Request, String> {
    let mut r = Request {
        message_id: None,
        method: String::new(),
        path: String::new(),
        body: Value::Null,
    };
    for (code, v) in messaging::sections(message).map_err(|e| e.to_string())? {
        match (code, v) {
            (PROPERTIES, Value::List(f)) => {
                r.message_id = f.first().filter(|v| !v.is_null()).cloned();
                if let Some(Value::String(to)) = f.get(2) {
                    r.path = to.clone();
                }
                if let Some(Value::String(s)) = f.get(3) {
                    r.method = s.clone();
                }
            }
            (AMQP_VALUE, v) => r.body = v,
            _ => {}
        }
    }
    if r.method.is_empty() || r.path.is_empty() {
        return Err("a management request needs subject (the method) and to (the path)".into());
    }
    Ok(r)
}

/// Encode the response message for `request_id`.
pub fn encode(request_id: Option<&Value>, r: &Response, out: &mut BytesMut) {
    composite(
        PROPERTIES,
        vec![
            Value::Null,
            Value::Null,
            Value::Null,
            Value::String(r.status.to_string()),
            Value::Null,
            request_id.cloned().unwrap_or(Value::Null),
        ],
    )
    .encode(out);
    Value::described(
        APPLICATION_PROPERTIES,
        Value::Map(vec![(Value::string("http:response"), Value::string("1.1"))]),
    )
    .encode(out);
    Value::described(AMQP_VALUE, r.body.clone()).encode(out);
}

/// Carry out one request for `connection` on `vh`.
pub fn handle(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    grant: &Grant,
    connection: u64,
    req: &Request,
) -> Outcome {
    let node = ctx.config.node_name.as_str();
    let (path, query) = match req.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (req.path.as_str(), None),
    };
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let decode = |s: &str| address::decode_segment(s, &req.path).map_err(|e| e.to_string());
    let mut out = Outcome::default();
    if let Err(e) = authorize(grant, req.method.as_str(), &segments, &decode) {
        out.response = Some(broker_error(e));
        return out;
    }
    let response = match (req.method.as_str(), segments.as_slice()) {
        ("PUT", ["queues", q]) => match decode(q) {
            Ok(name) => declare_queue(ctx, vh, grant, connection, node, &name, &req.body, &mut out),
            Err(e) => Response::error(400, e),
        },
        ("GET", ["queues", q]) => {
            match decode(q).and_then(|n| vh.queue(n.as_bytes(), connection).map_err(|e| e.to_string())) {
                Ok(queue) => Response::new(200, queue_info(vh, node, &queue)),
                Err(e) => Response::error(404, e),
            }
        }
        ("DELETE", ["queues", q]) => match decode(q) {
            Ok(name) => match topology::now(
                ctx,
                topology::delete_queue(ctx, vh, &ShortStr::from(name.as_str()), false, false, connection),
            ) {
                Ok(n) => Response::new(200, message_count(n)),
                Err(e) => broker_error(e),
            },
            Err(e) => Response::error(400, e),
        },
        ("DELETE", ["queues", q, "messages"]) => match decode(q) {
            Ok(name) => match vh.queue(name.as_bytes(), connection) {
                Ok(queue) => {
                    out.later = Some(purge(ctx, vh, queue));
                    Response::new(200, Value::Null)
                }
                Err(e) => broker_error(e),
            },
            Err(e) => Response::error(400, e),
        },
        ("PUT", ["exchanges", x]) => match decode(x) {
            Ok(name) => declare_exchange(ctx, vh, grant, &name, &req.body),
            Err(e) => Response::error(400, e),
        },
        ("DELETE", ["exchanges", x]) => match decode(x) {
            Ok(name) => match topology::now(
                ctx,
                topology::delete_exchange(ctx, vh, &ShortStr::from(name.as_str()), false),
            ) {
                Ok(()) | Err(BrokerError::NotFound(_)) => Response::new(204, Value::Null),
                Err(e) => broker_error(e),
            },
            Err(e) => Response::error(400, e),
        },
        ("POST", ["bindings"]) => bind(ctx, vh, grant, &req.body),
        ("GET", ["bindings"]) => list_bindings(vh, query.unwrap_or("")),
        ("DELETE", ["bindings", spec]) => unbind(ctx, vh, grant, spec, &req.path),
        (_, ["queues", ..] | ["exchanges", ..] | ["bindings", ..]) => {
            Response::error(405, format!("{} is not allowed on {}", req.method, req.path))
        }
        _ => Response::error(404, format!("no such path: {}", req.path)),
    };
    out.response = Some(response);
    out
}

/// `DELETE /queues/:q/messages`: the count once purged, by the queue's
/// home node when another node leads it, else here (a quorum queue's
/// once its purge is applied, after the connection's earlier commands).
fn purge(ctx: &Arc<ServerCtx>, vh: &Arc<VHost>, queue: Arc<Queue>) -> LaterResponse {
    let done = |r: Result<u64, BrokerError>| match r {
        Ok(n) => Response::new(200, message_count(n)),
        Err(e) => broker_error(e),
    };
    if let (Some(home), Some(client)) = (queue.forward_home(), ctx.queue_client.clone()) {
        return LaterResponse(Box::pin(async move { done(client.purge(&queue, &home).await) }));
    }
    let (n, effects) = queue.purge();
    vh.apply(&queue, effects, &mut |_| {});
    LaterResponse(Box::pin(async move { done(Ok(n.wait().await.unwrap_or(0))) }))
}

/// The permission a queue or exchange request needs, as the same operation
/// over 0-9-1 would: configure to declare or delete, read to purge.
/// Bindings are checked where their ends are known ([`bind`], [`unbind`]).
fn authorize(
    grant: &Grant,
    method: &str,
    segments: &[&str],
    decode: &dyn Fn(&str) -> Result<String, String>,
) -> Result<(), BrokerError> {
    let (access, kind, name) = match (method, segments) {
        ("PUT" | "DELETE", ["queues", q]) => (Access::Configure, Resource::Queue, q),
        ("DELETE", ["queues", q, "messages"]) => (Access::Read, Resource::Queue, q),
        ("PUT" | "DELETE", ["exchanges", x]) => (Access::Configure, Resource::Exchange, x),
        _ => return Ok(()),
    };
    // A name that does not decode is reported by the request itself.
    match decode(name) {
        Ok(name) => grant.check(access, kind, &name),
        Err(_) => Ok(()),
    }
}

/// The status RabbitMQ's management node gives a broker error.
fn broker_error(e: BrokerError) -> Response {
    let status = match &e {
        BrokerError::NotFound(_) => 404,
        BrokerError::AccessRefused(_) => 403,
        BrokerError::PreconditionFailed(_) | BrokerError::ResourceLocked(_) => 409,
        _ => 400,
    };
    Response::error(status, e.to_string())
}

fn message_count(n: u64) -> Value {
    Value::Map(vec![(Value::string("message_count"), Value::Ulong(n))])
}

fn get<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(pairs) = body else { return None };
    pairs
        .iter()
        .find(|(k, _)| matches!(k, Value::String(s) | Value::Symbol(s) if s == key))
        .map(|(_, v)| v)
}

fn get_bool(body: &Value, key: &str, default: bool) -> Result<bool, Response> {
    match get(body, key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Response::error(400, format!("'{key}' must be a boolean"))),
    }
}

fn get_str(body: &Value, key: &str) -> Option<String> {
    match get(body, key) {
        Some(Value::String(s)) | Some(Value::Symbol(s)) => Some(s.clone()),
        _ => None,
    }
}

/// A request's `arguments` map as a 0-9-1 table (the types RabbitMQ's
/// 0-9-1 declare would carry).
fn arguments(body: &Value) -> Result<FieldTable, Response> {
    let mut t = FieldTable::new();
    match get(body, "arguments") {
        None | Some(Value::Null) => {}
        Some(Value::Map(pairs)) => {
            for (k, v) in pairs {
                let (Value::String(k) | Value::Symbol(k)) = k else {
                    return Err(Response::error(400, "argument names must be strings"));
                };
                let v = convert::field_value(v)
                    .ok_or_else(|| Response::error(400, format!("argument '{k}' has an unsupported type")))?;
                t.insert(k, v);
            }
        }
        Some(_) => return Err(Response::error(400, "'arguments' must be a map")),
    }
    Ok(t)
}

fn table_value(t: &FieldTable) -> Value {
    convert::value_of(&FieldValue::Table(t.clone())).unwrap_or(Value::Map(Vec::new()))
}

fn queue_info(vh: &VHost, node: &str, q: &Queue) -> Value {
    let s = q.stats();
    let kind = match q.arguments.get("x-queue-type") {
        Some(FieldValue::LongStr(t)) => String::from_utf8_lossy(t).into_owned(),
        _ => "classic".into(),
    };
    Value::Map(vec![
        (
            Value::string("name"),
            Value::String(q.name.to_str_lossy().into_owned()),
        ),
        (Value::string("vhost"), Value::string(&vh.name)),
        (Value::string("durable"), Value::Bool(q.declared_durable())),
        (Value::string("auto_delete"), Value::Bool(q.auto_delete)),
        (
            Value::string("exclusive"),
            Value::Bool(q.exclusive_owner.is_some()),
        ),
        (Value::string("type"), Value::String(kind)),
        (Value::string("arguments"), table_value(&q.arguments)),
        (Value::string("leader"), Value::string(node)),
        (Value::string("replicas"), Value::Array(vec![Value::string(node)])),
        (Value::string("message_count"), Value::Ulong(s.ready)),
        (Value::string("consumer_count"), Value::Uint(s.consumers)),
    ])
}

#[allow(clippy::too_many_arguments)]
fn declare_queue(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    grant: &Grant,
    connection: u64,
    node: &str,
    name: &str,
    body: &Value,
    out: &mut Outcome,
) -> Response {
    if name.is_empty() {
        return Response::error(400, "a queue needs a name");
    }
    let decl = (|| {
        Ok::<_, Response>(QueueDecl {
            name: name.into(),
            durable: get_bool(body, "durable", true)?,
            exclusive: get_bool(body, "exclusive", false)?,
            auto_delete: get_bool(body, "auto_delete", false)?,
            arguments: arguments(body)?,
        })
    })();
    let decl = match decl {
        Ok(d) => d,
        Err(r) => return r,
    };
    // Its dead letter exchange is checked as 0-9-1's queue.declare does.
    if let Err(e) = grant.check_declare(Resource::Queue, name, &decl.arguments) {
        return broker_error(e);
    }
    match topology::now(ctx, topology::declare_queue(ctx, vh, decl, connection, true)) {
        Ok((q, created)) => {
            let info = queue_info(vh, node, &q);
            if created {
                if q.exclusive_owner.is_some() {
                    out.exclusive = Some(q.clone());
                }
                out.created = Some(q);
                Response::new(201, info)
            } else {
                Response::new(200, info)
            }
        }
        Err(e) => broker_error(e),
    }
}

fn declare_exchange(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    grant: &Grant,
    name: &str,
    body: &Value,
) -> Response {
    let decl = (|| {
        Ok::<_, Response>(ExchangeDecl {
            name: name.into(),
            kind: get_str(body, "type")
                .unwrap_or_else(|| "direct".into())
                .as_str()
                .into(),
            durable: get_bool(body, "durable", true)?,
            auto_delete: get_bool(body, "auto_delete", false)?,
            internal: get_bool(body, "internal", false)?,
            arguments: arguments(body)?,
        })
    })();
    // Its alternate exchange is checked as 0-9-1's exchange.declare does.
    let decl = decl.and_then(
        |d| match grant.check_declare(Resource::Exchange, name, &d.arguments) {
            Ok(()) => Ok(d),
            Err(e) => Err(broker_error(e)),
        },
    );
    match decl.map(|d| topology::now(ctx, topology::declare_exchange(ctx, vh, d))) {
        Ok(Ok(_)) => Response::new(204, Value::Null),
        Ok(Err(e)) => broker_error(e),
        Err(r) => r,
    }
}

fn bind(ctx: &Arc<ServerCtx>, vh: &Arc<VHost>, grant: &Grant, body: &Value) -> Response {
    let Some(source) = get_str(body, "source") else {
        return Response::error(400, "a binding needs a source");
    };
    let destination = match (
        get_str(body, "destination_queue"),
        get_str(body, "destination_exchange"),
    ) {
        (Some(q), None) => Destination::Queue(q.as_str().into()),
        (None, Some(x)) => Destination::Exchange(x.as_str().into()),
        _ => {
            return Response::error(
                400,
                "a binding needs one of destination_queue and destination_exchange",
            )
        }
    };
    let key = get_str(body, "binding_key").unwrap_or_default();
    if let Err(e) = grant.check_bind(vh, &source, &destination, key.as_bytes()) {
        return broker_error(e);
    }
    let arguments = match arguments(body) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let b = Binding {
        destination,
        routing_key: key.as_str().into(),
        arguments,
    };
    match topology::now(ctx, topology::bind(ctx, vh, &source.as_str().into(), b)) {
        Ok(()) => Response::new(204, Value::Null),
        // RabbitMQ answers a missing source or destination with 400.
        Err(BrokerError::NotFound(e)) => Response::error(400, e),
        Err(e) => broker_error(e),
    }
}

/// The opaque `args` token of a binding's path: a hash of its arguments
/// (empty when it has none). Only this broker reads it back.
fn args_token(t: &FieldTable) -> String {
    if t.is_empty() {
        return String::new();
    }
    let mut b = BytesMut::new();
    t.encode(&mut b);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finish().to_be_bytes())
}

fn location(source: &str, b: &Binding) -> String {
    let (kind, dest) = match &b.destination {
        Destination::Queue(q) => ("dstq", q),
        Destination::Exchange(x) => ("dste", x),
    };
    format!(
        "/bindings/src={};{kind}={};key={};args={}",
        percent_encode(source),
        percent_encode(&dest.to_str_lossy()),
        percent_encode(&b.routing_key.to_str_lossy()),
        args_token(&b.arguments)
    )
}

/// A binding named by `key=value` pairs (a query string's, or a binding
/// path's `src=..;dstq=..;key=..;args=..`), values percent-encoded.
#[derive(Default)]
struct BindingSpec {
    source: Option<String>,
    destination: Option<Destination>,
    key: Option<String>,
    args: Option<String>,
}

impl BindingSpec {
    fn parse<'a>(pairs: impl Iterator<Item = &'a str>, whole: &str) -> Result<BindingSpec, Response> {
        let mut b = BindingSpec::default();
        for pair in pairs.filter(|p| !p.is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(Response::error(400, format!("bad binding path {whole}")));
            };
            let v = address::decode_segment(v, whole).map_err(|e| Response::error(400, e.to_string()))?;
            match k {
                "src" => b.source = Some(v),
                "dstq" => b.destination = Some(Destination::Queue(v.as_str().into())),
                "dste" => b.destination = Some(Destination::Exchange(v.as_str().into())),
                "key" => b.key = Some(v),
                "args" => b.args = Some(v),
                _ => {
                    return Err(Response::error(
                        400,
                        format!("unknown binding field '{k}' in {whole}"),
                    ))
                }
            }
        }
        Ok(b)
    }

    /// The bindings it names (any key and arguments where it names none).
    fn matching(&self, vh: &VHost, source: &str, destination: &Destination) -> Vec<Binding> {
        vh.bindings_from(source.as_bytes(), Some(destination))
            .into_iter()
            .filter(|b| {
                self.key
                    .as_ref()
                    .is_none_or(|k| b.routing_key.as_bytes() == k.as_bytes())
            })
            .filter(|b| self.args.as_ref().is_none_or(|a| &args_token(&b.arguments) == a))
            .collect()
    }
}

fn list_bindings(vh: &VHost, query: &str) -> Response {
    let spec = match BindingSpec::parse(query.split('&'), query) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (Some(src), Some(dest)) = (&spec.source, &spec.destination) else {
        return Response::error(400, "GET /bindings needs src and dstq or dste");
    };
    let list = spec
        .matching(vh, src, dest)
        .into_iter()
        .map(|b| {
            let (dk, dv) = match &b.destination {
                Destination::Queue(q) => ("destination_queue", q),
                Destination::Exchange(x) => ("destination_exchange", x),
            };
            Value::Map(vec![
                (Value::string("source"), Value::string(src)),
                (Value::string(dk), Value::String(dv.to_str_lossy().into_owned())),
                (
                    Value::string("binding_key"),
                    Value::String(b.routing_key.to_str_lossy().into_owned()),
                ),
                (Value::string("arguments"), table_value(&b.arguments)),
                (Value::string("location"), Value::String(location(src, &b))),
            ])
        })
        .collect();
    Response::new(200, Value::List(list))
}

/// DELETE /bindings/src=..;dstq=..;key=..;args=..: removing what is not
/// bound succeeds, as in RabbitMQ.
fn unbind(ctx: &Arc<ServerCtx>, vh: &Arc<VHost>, grant: &Grant, spec: &str, whole: &str) -> Response {
    let spec = match BindingSpec::parse(spec.split(';'), whole) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (Some(src), Some(dest), Some(key), Some(_)) =
        (&spec.source, &spec.destination, &spec.key, &spec.args)
    else {
        return Response::error(400, format!("bad binding path {whole}"));
    };
    if let Err(e) = grant.check_bind(vh, src, dest, key.as_bytes()) {
        return broker_error(e);
    }
    for b in spec.matching(vh, src, dest) {
        if let Err(e) = topology::now(ctx, topology::unbind(ctx, vh, &src.as_str().into(), b.clone())) {
            return broker_error(e);
        }
    }
    Response::new(204, Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: Value) -> Vec<u8> {
        let mut m = BytesMut::new();
        // The body first, as RabbitMQ's Python client writes body-less
        // requests.
        Value::described(AMQP_VALUE, body).encode(&mut m);
        composite(
            PROPERTIES,
            vec![
                Value::string("id-1"),
                Value::Null,
                Value::string(path),
                Value::string(method),
                Value::string("$me"),
            ],
        )
        .encode(&mut m);
        m.to_vec()
    }

    #[test]
    fn requests_parse_in_any_section_order_and_responses_encode() {
        let r = parse(&request("GET", "/queues/q%2F1", Value::Null)).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/queues/q%2F1"));
        assert_eq!(r.message_id, Some(Value::string("id-1")));
        assert!(parse(&[]).is_err());

        let mut out = BytesMut::new();
        encode(r.message_id.as_ref(), &Response::new(204, Value::Null), &mut out);
        let s = messaging::sections(&out).unwrap();
        let Value::List(props) = &s[0].1 else { panic!() };
        assert_eq!(props[3], Value::string("204"));
        assert_eq!(props[5], Value::string("id-1"));
    }

    #[test]
    fn percent_encoding_round_trips_through_locations() {
        assert_eq!(warren_node::uri::percent_encode("a b/c"), "a%20b%2Fc");
        let b = Binding {
            destination: Destination::Queue("q 1".into()),
            routing_key: "k".into(),
            arguments: FieldTable::new(),
        };
        assert_eq!(location("x", &b), "/bindings/src=x;dstq=q%201;key=k;args=");
    }
}
