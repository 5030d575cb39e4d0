//! The transport performatives (spec 2.7): open, begin, attach, flow,
//! transfer, disposition, detach, end, close, and the error they carry.
//! Sources, targets and delivery states stay [`Value`]s here; the
//! messaging module gives them shape.

use bytes::{Bytes, BytesMut};

use crate::composite::{composite, opt, symbols, Fields};
use crate::error::CodecError;
use crate::value::Value;

pub mod descriptor {
    pub const OPEN: u64 = 0x10;
    pub const BEGIN: u64 = 0x11;
    pub const ATTACH: u64 = 0x12;
    pub const FLOW: u64 = 0x13;
    pub const TRANSFER: u64 = 0x14;
    pub const DISPOSITION: u64 = 0x15;
    pub const DETACH: u64 = 0x16;
    pub const END: u64 = 0x17;
    pub const CLOSE: u64 = 0x18;
    pub const ERROR: u64 = 0x1d;
}

/// `error` (2.8.14): a condition symbol such as `amqp:not-found`.
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpError {
    pub condition: String,
    pub description: Option<String>,
}

impl AmqpError {
    pub fn new(condition: &str, description: impl Into<String>) -> AmqpError {
        AmqpError {
            condition: condition.to_string(),
            description: Some(description.into()),
        }
    }

    pub fn to_value(&self) -> Value {
        composite(
            descriptor::ERROR,
            vec![
                Value::Symbol(self.condition.clone()),
                opt(self.description.clone(), Value::String),
            ],
        )
    }

    pub fn from_value(v: &Value) -> Result<AmqpError, CodecError> {
        let f = Fields::of(v, descriptor::ERROR, "error")?;
        Ok(AmqpError {
            condition: f
                .opt_symbol(0)?
                .ok_or_else(|| CodecError::invalid("error", "no condition"))?,
            description: f.opt_string(1)?,
        })
    }
}

fn opt_error(f: &Fields, i: usize) -> Result<Option<AmqpError>, CodecError> {
    match f.get(i) {
        Value::Null => Ok(None),
        v => AmqpError::from_value(v).map(Some),
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Open {
    pub container_id: String,
    pub hostname: Option<String>,
    pub max_frame_size: Option<u32>,
    pub channel_max: Option<u16>,
    /// Milliseconds.
    pub idle_time_out: Option<u32>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Begin {
    pub remote_channel: Option<u16>,
    pub next_outgoing_id: u32,
    pub incoming_window: u32,
    pub outgoing_window: u32,
    pub handle_max: Option<u32>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<Value>,
}

/// A link's role: `false` sender, `true` receiver (2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    #[default]
    Sender,
    Receiver,
}

impl Role {
    fn value(self) -> Value {
        Value::Bool(self == Role::Receiver)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attach {
    pub name: String,
    pub handle: u32,
    pub role: Role,
    /// 0 unsettled, 1 settled, 2 mixed (default).
    pub snd_settle_mode: Option<u8>,
    /// 0 first (default), 1 second.
    pub rcv_settle_mode: Option<u8>,
    pub source: Option<Value>,
    pub target: Option<Value>,
    pub unsettled: Option<Value>,
    pub incomplete_unsettled: bool,
    pub initial_delivery_count: Option<u32>,
    pub max_message_size: Option<u64>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flow {
    pub next_incoming_id: Option<u32>,
    pub incoming_window: u32,
    pub next_outgoing_id: u32,
    pub outgoing_window: u32,
    pub handle: Option<u32>,
    pub delivery_count: Option<u32>,
    pub link_credit: Option<u32>,
    pub available: Option<u32>,
    pub drain: bool,
    pub echo: bool,
    pub properties: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transfer {
    pub handle: u32,
    pub delivery_id: Option<u32>,
    pub delivery_tag: Option<Bytes>,
    pub message_format: Option<u32>,
    pub settled: Option<bool>,
    pub more: bool,
    pub rcv_settle_mode: Option<u8>,
    pub state: Option<Value>,
    pub resume: bool,
    pub aborted: bool,
    pub batchable: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Disposition {
    pub role: Role,
    pub first: u32,
    pub last: Option<u32>,
    pub settled: bool,
    pub state: Option<Value>,
    pub batchable: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detach {
    pub handle: u32,
    pub closed: bool,
    pub error: Option<AmqpError>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct End {
    pub error: Option<AmqpError>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Close {
    pub error: Option<AmqpError>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    Open(Open),
    Begin(Begin),
    Attach(Attach),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(End),
    Close(Close),
}

impl Performative {
    /// The performative's name, as the spec writes it (for errors).
    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => "open",
            Performative::Begin(_) => "begin",
            Performative::Attach(_) => "attach",
            Performative::Flow(_) => "flow",
            Performative::Transfer(_) => "transfer",
            Performative::Disposition(_) => "disposition",
            Performative::Detach(_) => "detach",
            Performative::End(_) => "end",
            Performative::Close(_) => "close",
        }
    }
}

fn role(f: &Fields, i: usize) -> Result<Role, CodecError> {
    match f.opt_bool(i)? {
        Some(true) => Ok(Role::Receiver),
        Some(false) => Ok(Role::Sender),
        None => Err(CodecError::invalid(f.what, "no role")),
    }
}

fn err_value(e: &Option<AmqpError>) -> Value {
    e.as_ref().map_or(Value::Null, AmqpError::to_value)
}

impl Performative {
    pub fn to_value(&self) -> Value {
        use descriptor::*;
        match self {
            Performative::Open(o) => composite(
                OPEN,
                vec![
                    Value::String(o.container_id.clone()),
                    opt(o.hostname.clone(), Value::String),
                    opt(o.max_frame_size, Value::Uint),
                    opt(o.channel_max, Value::Ushort),
                    opt(o.idle_time_out, Value::Uint),
                    Value::Null,
                    Value::Null,
                    symbols(&o.offered_capabilities),
                    symbols(&o.desired_capabilities),
                    o.properties.clone().unwrap_or(Value::Null),
                ],
            ),
            Performative::Begin(b) => composite(
                BEGIN,
                vec![
                    opt(b.remote_channel, Value::Ushort),
                    Value::Uint(b.next_outgoing_id),
                    Value::Uint(b.incoming_window),
                    Value::Uint(b.outgoing_window),
                    opt(b.handle_max, Value::Uint),
                    symbols(&b.offered_capabilities),
                    symbols(&b.desired_capabilities),
                    b.properties.clone().unwrap_or(Value::Null),
                ],
            ),
            Performative::Attach(a) => composite(
                ATTACH,
                vec![
                    Value::String(a.name.clone()),
                    Value::Uint(a.handle),
                    a.role.value(),
                    opt(a.snd_settle_mode, Value::Ubyte),
                    opt(a.rcv_settle_mode, Value::Ubyte),
                    a.source.clone().unwrap_or(Value::Null),
                    a.target.clone().unwrap_or(Value::Null),
                    a.unsettled.clone().unwrap_or(Value::Null),
                    if a.incomplete_unsettled {
                        Value::Bool(true)
                    } else {
                        Value::Null
                    },
                    opt(a.initial_delivery_count, Value::Uint),
                    opt(a.max_message_size, Value::Ulong),
                    symbols(&a.offered_capabilities),
                    symbols(&a.desired_capabilities),
                    a.properties.clone().unwrap_or(Value::Null),
                ],
            ),
            Performative::Flow(f) => composite(
                FLOW,
                vec![
                    opt(f.next_incoming_id, Value::Uint),
                    Value::Uint(f.incoming_window),
                    Value::Uint(f.next_outgoing_id),
                    Value::Uint(f.outgoing_window),
                    opt(f.handle, Value::Uint),
                    opt(f.delivery_count, Value::Uint),
                    opt(f.link_credit, Value::Uint),
                    opt(f.available, Value::Uint),
                    if f.drain { Value::Bool(true) } else { Value::Null },
                    if f.echo { Value::Bool(true) } else { Value::Null },
                    f.properties.clone().unwrap_or(Value::Null),
                ],
            ),
            Performative::Transfer(t) => composite(
                TRANSFER,
                vec![
                    Value::Uint(t.handle),
                    opt(t.delivery_id, Value::Uint),
                    opt(t.delivery_tag.clone(), Value::Binary),
                    opt(t.message_format, Value::Uint),
                    opt(t.settled, Value::Bool),
                    if t.more { Value::Bool(true) } else { Value::Null },
                    opt(t.rcv_settle_mode, Value::Ubyte),
                    t.state.clone().unwrap_or(Value::Null),
                    if t.resume { Value::Bool(true) } else { Value::Null },
                    if t.aborted { Value::Bool(true) } else { Value::Null },
                    if t.batchable {
                        Value::Bool(true)
                    } else {
                        Value::Null
                    },
                ],
            ),
            Performative::Disposition(d) => composite(
                DISPOSITION,
                vec![
                    d.role.value(),
                    Value::Uint(d.first),
                    opt(d.last, Value::Uint),
                    if d.settled { Value::Bool(true) } else { Value::Null },
                    d.state.clone().unwrap_or(Value::Null),
                    if d.batchable {
                        Value::Bool(true)
                    } else {
                        Value::Null
                    },
                ],
            ),
            Performative::Detach(d) => composite(
                DETACH,
                vec![
                    Value::Uint(d.handle),
                    if d.closed { Value::Bool(true) } else { Value::Null },
                    err_value(&d.error),
                ],
            ),
            Performative::End(e) => composite(END, vec![err_value(&e.error)]),
            Performative::Close(c) => composite(CLOSE, vec![err_value(&c.error)]),
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Performative::Transfer(t) if crate::transfer_fast::plain(t) => {
                crate::transfer_fast::encode(t, out)
            }
            p => p.to_value().encode(out),
        }
    }

    /// Decode the performative at the front of a frame body; returns it and
    /// the payload that follows (a transfer's message bytes).
    pub fn decode(body: &Bytes) -> Result<(Performative, Bytes), CodecError> {
        if let Some((t, payload)) = crate::transfer_fast::decode(body) {
            return Ok((Performative::Transfer(t), payload));
        }
        let mut s = &body[..];
        let v = Value::decode(&mut s)?;
        let payload = body.slice(body.len() - s.len()..);
        Ok((Performative::from_value(&v)?, payload))
    }

    pub fn from_value(v: &Value) -> Result<Performative, CodecError> {
        use descriptor::*;
        let code = v
            .as_described()
            .map(|(c, _)| c)
            .ok_or_else(|| CodecError::UnknownPerformative(format!("{v:?}")))?;
        Ok(match code {
            OPEN => {
                let f = Fields::of(v, OPEN, "open")?;
                Performative::Open(Open {
                    container_id: f
                        .opt_string(0)?
                        .ok_or_else(|| CodecError::invalid("open", "no container-id"))?,
                    hostname: f.opt_string(1)?,
                    max_frame_size: f.opt_uint(2)?,
                    channel_max: f.opt_ushort(3)?,
                    idle_time_out: f.opt_uint(4)?,
                    offered_capabilities: f.symbols(7)?,
                    desired_capabilities: f.symbols(8)?,
                    properties: f.opt_value(9),
                })
            }
            BEGIN => {
                let f = Fields::of(v, BEGIN, "begin")?;
                Performative::Begin(Begin {
                    remote_channel: f.opt_ushort(0)?,
                    next_outgoing_id: f.uint(1)?,
                    incoming_window: f.uint(2)?,
                    outgoing_window: f.uint(3)?,
                    handle_max: f.opt_uint(4)?,
                    offered_capabilities: f.symbols(5)?,
                    desired_capabilities: f.symbols(6)?,
                    properties: f.opt_value(7),
                })
            }
            ATTACH => {
                let f = Fields::of(v, ATTACH, "attach")?;
                Performative::Attach(Attach {
                    name: f
                        .opt_string(0)?
                        .ok_or_else(|| CodecError::invalid("attach", "no name"))?,
                    handle: f.uint(1)?,
                    role: role(&f, 2)?,
                    snd_settle_mode: f.opt_ubyte(3)?,
                    rcv_settle_mode: f.opt_ubyte(4)?,
                    source: f.opt_value(5),
                    target: f.opt_value(6),
                    unsettled: f.opt_value(7),
                    incomplete_unsettled: f.bool(8, false)?,
                    initial_delivery_count: f.opt_uint(9)?,
                    max_message_size: f.opt_ulong(10)?,
                    offered_capabilities: f.symbols(11)?,
                    desired_capabilities: f.symbols(12)?,
                    properties: f.opt_value(13),
                })
            }
            FLOW => {
                let f = Fields::of(v, FLOW, "flow")?;
                Performative::Flow(Flow {
                    next_incoming_id: f.opt_uint(0)?,
                    incoming_window: f.uint(1)?,
                    next_outgoing_id: f.uint(2)?,
                    outgoing_window: f.uint(3)?,
                    handle: f.opt_uint(4)?,
                    delivery_count: f.opt_uint(5)?,
                    link_credit: f.opt_uint(6)?,
                    available: f.opt_uint(7)?,
                    drain: f.bool(8, false)?,
                    echo: f.bool(9, false)?,
                    properties: f.opt_value(10),
                })
            }
            TRANSFER => {
                let f = Fields::of(v, TRANSFER, "transfer")?;
                Performative::Transfer(Transfer {
                    handle: f.uint(0)?,
                    delivery_id: f.opt_uint(1)?,
                    delivery_tag: f.opt_binary(2)?,
                    message_format: f.opt_uint(3)?,
                    settled: f.opt_bool(4)?,
                    more: f.bool(5, false)?,
                    rcv_settle_mode: f.opt_ubyte(6)?,
                    state: f.opt_value(7),
                    resume: f.bool(8, false)?,
                    aborted: f.bool(9, false)?,
                    batchable: f.bool(10, false)?,
                })
            }
            DISPOSITION => {
                let f = Fields::of(v, DISPOSITION, "disposition")?;
                Performative::Disposition(Disposition {
                    role: role(&f, 0)?,
                    first: f.uint(1)?,
                    last: f.opt_uint(2)?,
                    settled: f.bool(3, false)?,
                    state: f.opt_value(4),
                    batchable: f.bool(5, false)?,
                })
            }
            DETACH => {
                let f = Fields::of(v, DETACH, "detach")?;
                Performative::Detach(Detach {
                    handle: f.uint(0)?,
                    closed: f.bool(1, false)?,
                    error: opt_error(&f, 2)?,
                })
            }
            END => Performative::End(End {
                error: opt_error(&Fields::of(v, END, "end")?, 0)?,
            }),
            CLOSE => Performative::Close(Close {
                error: opt_error(&Fields::of(v, CLOSE, "close")?, 0)?,
            }),
            other => return Err(CodecError::UnknownPerformative(format!("{other:#x}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(p: Performative) {
        let mut b = BytesMut::new();
        p.encode(&mut b);
        b.extend_from_slice(b"payload");
        let (q, payload) = Performative::decode(&b.freeze()).unwrap();
        assert_eq!(q, p);
        assert_eq!(&payload[..], b"payload");
    }

    #[test]
    fn every_performative_roundtrips() {
        roundtrip(Performative::Open(Open {
            container_id: "c".into(),
            hostname: Some("h".into()),
            max_frame_size: Some(131072),
            channel_max: Some(7),
            idle_time_out: Some(60000),
            offered_capabilities: vec!["A".into()],
            desired_capabilities: vec!["B".into(), "C".into()],
            properties: Some(Value::Map(vec![(Value::symbol("product"), Value::string("x"))])),
        }));
        roundtrip(Performative::Begin(Begin {
            remote_channel: Some(1),
            next_outgoing_id: 0,
            incoming_window: 5000,
            outgoing_window: u32::MAX,
            handle_max: Some(255),
            ..Default::default()
        }));
        roundtrip(Performative::Attach(Attach {
            name: "l".into(),
            handle: 3,
            role: Role::Receiver,
            snd_settle_mode: Some(0),
            rcv_settle_mode: Some(0),
            source: Some(Value::described(
                0x28,
                Value::List(vec![Value::string("/queues/q")]),
            )),
            target: Some(Value::described(0x29, Value::List(vec![]))),
            initial_delivery_count: Some(0),
            max_message_size: Some(1 << 20),
            ..Default::default()
        }));
        roundtrip(Performative::Flow(Flow {
            next_incoming_id: Some(10),
            incoming_window: 100,
            next_outgoing_id: 4,
            outgoing_window: 100,
            handle: Some(1),
            delivery_count: Some(u32::MAX),
            link_credit: Some(1000),
            drain: true,
            echo: true,
            ..Default::default()
        }));
        roundtrip(Performative::Transfer(Transfer {
            handle: 1,
            delivery_id: Some(9),
            delivery_tag: Some(Bytes::from_static(b"\x00\x01")),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            ..Default::default()
        }));
        roundtrip(Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: 1,
            last: Some(100),
            settled: true,
            state: Some(Value::described(0x24, Value::List(vec![]))),
            batchable: false,
        }));
        roundtrip(Performative::Detach(Detach {
            handle: 2,
            closed: true,
            error: Some(AmqpError::new("amqp:not-found", "no queue 'x'")),
        }));
        roundtrip(Performative::End(End::default()));
        roundtrip(Performative::Close(Close {
            error: Some(AmqpError::new("amqp:connection:forced", "shutdown")),
        }));
    }

    #[test]
    fn exact_bytes_of_a_small_flow() {
        let f = Performative::Flow(Flow {
            incoming_window: 1,
            next_outgoing_id: 0,
            outgoing_window: 1,
            ..Default::default()
        });
        let mut b = BytesMut::new();
        f.encode(&mut b);
        // 0x00 smallulong 0x13, list8 (size 7, count 4): null, 1, 0, 1.
        assert_eq!(
            &b[..],
            &[0x00, 0x53, 0x13, 0xc0, 0x07, 0x04, 0x40, 0x52, 0x01, 0x43, 0x52, 0x01]
        );
    }

    #[test]
    fn missing_mandatory_fields_and_unknown_descriptors_are_errors() {
        let v = Value::described(descriptor::BEGIN, Value::List(vec![Value::Null]));
        assert!(Performative::from_value(&v).is_err());
        let v = Value::described(0x99, Value::List(vec![]));
        assert!(matches!(
            Performative::from_value(&v),
            Err(CodecError::UnknownPerformative(_))
        ));
        let v = Value::described(descriptor::OPEN, Value::List(vec![Value::Uint(1)]));
        assert!(
            Performative::from_value(&v).is_err(),
            "container-id of the wrong type"
        );
    }
}
