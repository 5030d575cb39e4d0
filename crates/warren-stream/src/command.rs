//! Frames and commands of the stream protocol (PROTOCOL.adoc): every frame
//! is `Size Key Version ...`; a response has the request's key with the top
//! bit set, its correlation id and a response code. Commands are encoded
//! and decoded symmetrically so a client and the broker share them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::wire::{put_bytes, put_pairs, put_string, Reader};

pub mod key {
    pub const DECLARE_PUBLISHER: u16 = 0x0001;
    pub const PUBLISH: u16 = 0x0002;
    pub const PUBLISH_CONFIRM: u16 = 0x0003;
    pub const PUBLISH_ERROR: u16 = 0x0004;
    pub const QUERY_PUBLISHER_SEQUENCE: u16 = 0x0005;
    pub const DELETE_PUBLISHER: u16 = 0x0006;
    pub const SUBSCRIBE: u16 = 0x0007;
    pub const DELIVER: u16 = 0x0008;
    pub const CREDIT: u16 = 0x0009;
    pub const STORE_OFFSET: u16 = 0x000a;
    pub const QUERY_OFFSET: u16 = 0x000b;
    pub const UNSUBSCRIBE: u16 = 0x000c;
    pub const CREATE: u16 = 0x000d;
    pub const DELETE: u16 = 0x000e;
    pub const METADATA: u16 = 0x000f;
    pub const METADATA_UPDATE: u16 = 0x0010;
    pub const PEER_PROPERTIES: u16 = 0x0011;
    pub const SASL_HANDSHAKE: u16 = 0x0012;
    pub const SASL_AUTHENTICATE: u16 = 0x0013;
    pub const TUNE: u16 = 0x0014;
    pub const OPEN: u16 = 0x0015;
    pub const CLOSE: u16 = 0x0016;
    pub const HEARTBEAT: u16 = 0x0017;
    // Added by RabbitMQ 3.11 and later.
    pub const ROUTE: u16 = 0x0018;
    pub const PARTITIONS: u16 = 0x0019;
    /// Sent by the broker: a single-active-consumer subscription became
    /// (in)active; the client answers with where it reads from.
    pub const CONSUMER_UPDATE: u16 = 0x001a;
    pub const EXCHANGE_COMMAND_VERSIONS: u16 = 0x001b;
    pub const STREAM_STATS: u16 = 0x001c;
    pub const CREATE_SUPER_STREAM: u16 = 0x001d;
    pub const DELETE_SUPER_STREAM: u16 = 0x001e;
    /// Set on the key of every response.
    pub const RESPONSE: u16 = 0x8000;
}

/// Response codes.
pub mod code {
    pub const OK: u16 = 0x01;
    pub const STREAM_DOES_NOT_EXIST: u16 = 0x02;
    pub const SUBSCRIPTION_ID_ALREADY_EXISTS: u16 = 0x03;
    pub const SUBSCRIPTION_ID_DOES_NOT_EXIST: u16 = 0x04;
    pub const STREAM_ALREADY_EXISTS: u16 = 0x05;
    pub const STREAM_NOT_AVAILABLE: u16 = 0x06;
    pub const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
    pub const AUTHENTICATION_FAILURE: u16 = 0x08;
    pub const SASL_ERROR: u16 = 0x09;
    pub const SASL_CHALLENGE: u16 = 0x0a;
    pub const AUTHENTICATION_FAILURE_LOOPBACK: u16 = 0x0b;
    pub const VIRTUAL_HOST_ACCESS_FAILURE: u16 = 0x0c;
    pub const UNKNOWN_FRAME: u16 = 0x0d;
    pub const FRAME_TOO_LARGE: u16 = 0x0e;
    pub const INTERNAL_ERROR: u16 = 0x0f;
    pub const ACCESS_REFUSED: u16 = 0x10;
    pub const PRECONDITION_FAILED: u16 = 0x11;
    pub const PUBLISHER_DOES_NOT_EXIST: u16 = 0x12;
    pub const OFFSET_NOT_FOUND: u16 = 0x13;
    /// A QueryOffset's answer when no offset is stored (the same value).
    pub const NO_OFFSET: u16 = 0x13;
}

/// Where a subscription starts (Subscribe's OffsetSpecification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    First,
    Last,
    Next,
    Offset(u64),
    /// Milliseconds since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    /// `first`, `last`, `next`, a number (an offset), or `@MILLIS` (a timestamp).
    pub fn parse(s: &str) -> Option<OffsetSpec> {
        match s {
            "first" => Some(OffsetSpec::First),
            "last" => Some(OffsetSpec::Last),
            "next" => Some(OffsetSpec::Next),
            _ => match s.strip_prefix('@') {
                Some(t) => t.parse().ok().map(OffsetSpec::Timestamp),
                None => s.parse().ok().map(OffsetSpec::Offset),
            },
        }
    }

    /// As Subscribe and the answer to ConsumerUpdate carry it: a type,
    /// then the offset or timestamp for those two types.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            OffsetSpec::First => out.put_u16(1),
            OffsetSpec::Last => out.put_u16(2),
            OffsetSpec::Next => out.put_u16(3),
            OffsetSpec::Offset(o) => {
                out.put_u16(4);
                out.put_u64(*o);
            }
            OffsetSpec::Timestamp(t) => {
                out.put_u16(5);
                out.put_i64(*t);
            }
        }
    }

    pub fn decode(r: &mut Reader) -> Result<OffsetSpec, CodecError> {
        Ok(match r.u16()? {
            1 => OffsetSpec::First,
            2 => OffsetSpec::Last,
            3 => OffsetSpec::Next,
            4 => OffsetSpec::Offset(r.u64()?),
            5 => OffsetSpec::Timestamp(r.i64()?),
            t => return Err(CodecError::Invalid(format!("offset type {t}"))),
        })
    }
}

/// A response to a request: its key (without the response bit), the
/// correlation id, the code, and what follows for the commands that say
/// more (peer properties, mechanisms, open's properties, offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub key: u16,
    pub correlation_id: u32,
    pub code: u16,
    pub rest: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    PeerProperties {
        correlation_id: u32,
        properties: Vec<(String, String)>,
    },
    SaslHandshake {
        correlation_id: u32,
    },
    SaslAuthenticate {
        correlation_id: u32,
        mechanism: String,
        data: Bytes,
    },
    Tune {
        frame_max: u32,
        heartbeat: u32,
    },
    Open {
        correlation_id: u32,
        vhost: String,
    },
    Close {
        correlation_id: u32,
        code: u16,
        reason: String,
    },
    Heartbeat,
    Create {
        correlation_id: u32,
        stream: String,
        arguments: Vec<(String, String)>,
    },
    Delete {
        correlation_id: u32,
        stream: String,
    },
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
    /// (publishing id, message) pairs.
    Publish {
        publisher_id: u8,
        messages: Vec<(u64, Bytes)>,
    },
    PublishConfirm {
        publisher_id: u8,
        ids: Vec<u64>,
    },
    /// (publishing id, code) pairs.
    PublishError {
        publisher_id: u8,
        errors: Vec<(u64, u16)>,
    },
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Vec<(String, String)>,
    },
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    /// A chunk, as stored (see [`crate::chunk`]).
    Deliver {
        subscription_id: u8,
        chunk: Bytes,
    },
    Credit {
        subscription_id: u8,
        credit: u16,
    },
    /// The broker's answer to a bad Credit (the only response without a
    /// correlation id).
    CreditError {
        code: u16,
        subscription_id: u8,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffset {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    /// The last publishing id the broker has from a named publisher.
    QueryPublisherSequence {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    Response(Response),
}

/// Frames are size-prefixed: cut one from `buf` once it is whole, refusing
/// a size above `max` from the prefix alone.
pub fn parse_frame(buf: &mut BytesMut, max: u32) -> Result<Option<Bytes>, CodecError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if max > 0 && size > max {
        return Err(CodecError::FrameTooLarge { size, max });
    }
    if size < 4 {
        return Err(CodecError::Invalid(format!("frame size {size}")));
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    let mut f = buf.split_to(4 + size as usize);
    let _ = f.split_to(4);
    Ok(Some(f.freeze()))
}

/// Reserve a frame's size prefix; [`end_frame`] fills it in.
pub fn begin_frame(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_u32(0);
    at
}

pub fn end_frame(out: &mut BytesMut, at: usize) {
    let size = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

/// A Publish frame's head for `count` messages; each then goes in with
/// [`put_published`], and [`end_frame`] closes it. Lets a producer batch
/// without building a `Command`.
pub fn begin_publish(out: &mut BytesMut, publisher_id: u8, count: u32) -> usize {
    begin_publish_version(out, publisher_id, count, 1)
}

/// [`begin_publish`] for a version: 2 puts a filter value (a string, or
/// -1 for none) between each message's publishing id and the message.
pub fn begin_publish_version(out: &mut BytesMut, publisher_id: u8, count: u32, version: u16) -> usize {
    let at = begin_frame(out);
    out.put_u16(key::PUBLISH);
    out.put_u16(version);
    out.put_u8(publisher_id);
    out.put_i32(count as i32);
    at
}

/// The bytes of a Publish frame before its first message: size, key,
/// version, publisher id, count.
pub const PUBLISH_HEAD: usize = 13;

/// Write the head of Publish frame `frame` (all of it: [`PUBLISH_HEAD`]
/// bytes kept for the head, then its messages) in place: a producer that
/// encodes its messages first sends the frame it encoded them into.
pub fn put_publish_head(frame: &mut [u8], publisher_id: u8, count: u32, version: u16) {
    let size = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame[4..6].copy_from_slice(&key::PUBLISH.to_be_bytes());
    frame[6..8].copy_from_slice(&version.to_be_bytes());
    frame[8] = publisher_id;
    frame[9..13].copy_from_slice(&(count as i32).to_be_bytes());
}

pub fn put_published(out: &mut BytesMut, publishing_id: u64, message: &[u8]) {
    out.put_u64(publishing_id);
    put_bytes(out, message);
}

impl Command {
    /// Write this command as one frame.
    pub fn encode(&self, out: &mut BytesMut) {
        let at = begin_frame(out);
        let head = |out: &mut BytesMut, k: u16| {
            out.put_u16(k);
            out.put_u16(1);
        };
        match self {
            Command::PeerProperties {
                correlation_id,
                properties,
            } => {
                head(out, key::PEER_PROPERTIES);
                out.put_u32(*correlation_id);
                put_pairs(out, properties);
            }
            Command::SaslHandshake { correlation_id } => {
                head(out, key::SASL_HANDSHAKE);
                out.put_u32(*correlation_id);
            }
            Command::SaslAuthenticate {
                correlation_id,
                mechanism,
                data,
            } => {
                head(out, key::SASL_AUTHENTICATE);
                out.put_u32(*correlation_id);
                put_string(out, mechanism);
                put_bytes(out, data);
            }
            Command::Tune { frame_max, heartbeat } => {
                head(out, key::TUNE);
                out.put_u32(*frame_max);
                out.put_u32(*heartbeat);
            }
            Command::Open {
                correlation_id,
                vhost,
            } => {
                head(out, key::OPEN);
                out.put_u32(*correlation_id);
                put_string(out, vhost);
            }
            Command::Close {
                correlation_id,
                code,
                reason,
            } => {
                head(out, key::CLOSE);
                out.put_u32(*correlation_id);
                out.put_u16(*code);
                put_string(out, reason);
            }
            Command::Heartbeat => head(out, key::HEARTBEAT),
            Command::Create {
                correlation_id,
                stream,
                arguments,
            } => {
                head(out, key::CREATE);
                out.put_u32(*correlation_id);
                put_string(out, stream);
                put_pairs(out, arguments);
            }
            Command::Delete {
                correlation_id,
                stream,
            } => {
                head(out, key::DELETE);
                out.put_u32(*correlation_id);
                put_string(out, stream);
            }
            Command::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                head(out, key::DECLARE_PUBLISHER);
                out.put_u32(*correlation_id);
                out.put_u8(*publisher_id);
                // No name is an empty string (RabbitMQ refuses a null one).
                put_string(out, reference.as_deref().unwrap_or(""));
                put_string(out, stream);
            }
            Command::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                head(out, key::DELETE_PUBLISHER);
                out.put_u32(*correlation_id);
                out.put_u8(*publisher_id);
            }
            Command::Publish {
                publisher_id,
                messages,
            } => {
                head(out, key::PUBLISH);
                out.put_u8(*publisher_id);
                out.put_i32(messages.len() as i32);
                for (id, m) in messages {
                    put_published(out, *id, m);
                }
            }
            Command::PublishConfirm { publisher_id, ids } => {
                head(out, key::PUBLISH_CONFIRM);
                out.put_u8(*publisher_id);
                out.put_i32(ids.len() as i32);
                for id in ids {
                    out.put_u64(*id);
                }
            }
            Command::PublishError { publisher_id, errors } => {
                head(out, key::PUBLISH_ERROR);
                out.put_u8(*publisher_id);
                out.put_i32(errors.len() as i32);
                for (id, c) in errors {
                    out.put_u64(*id);
                    out.put_u16(*c);
                }
            }
            Command::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                head(out, key::SUBSCRIBE);
                out.put_u32(*correlation_id);
                out.put_u8(*subscription_id);
                put_string(out, stream);
                offset.encode(out);
                out.put_u16(*credit);
                put_pairs(out, properties);
            }
            Command::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                head(out, key::UNSUBSCRIBE);
                out.put_u32(*correlation_id);
                out.put_u8(*subscription_id);
            }
            Command::Deliver {
                subscription_id,
                chunk,
            } => {
                head(out, key::DELIVER);
                out.put_u8(*subscription_id);
                out.put_slice(chunk);
            }
            Command::Credit {
                subscription_id,
                credit,
            } => {
                head(out, key::CREDIT);
                out.put_u8(*subscription_id);
                out.put_u16(*credit);
            }
            Command::CreditError {
                code,
                subscription_id,
            } => {
                head(out, key::CREDIT | key::RESPONSE);
                out.put_u16(*code);
                out.put_u8(*subscription_id);
            }
            Command::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                head(out, key::STORE_OFFSET);
                put_string(out, reference);
                put_string(out, stream);
                out.put_u64(*offset);
            }
            Command::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                head(out, key::QUERY_OFFSET);
                out.put_u32(*correlation_id);
                put_string(out, reference);
                put_string(out, stream);
            }
            Command::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            } => {
                head(out, key::QUERY_PUBLISHER_SEQUENCE);
                out.put_u32(*correlation_id);
                put_string(out, reference);
                put_string(out, stream);
            }
            Command::Response(r) => {
                head(out, r.key | key::RESPONSE);
                out.put_u32(r.correlation_id);
                out.put_u16(r.code);
                out.put_slice(&r.rest);
            }
        }
        end_frame(out, at);
    }

    /// Decode one frame's content (after the size prefix).
    pub fn decode(frame: Bytes) -> Result<Command, CodecError> {
        let mut r = Reader::new(frame);
        let k = r.u16()?;
        let _version = r.u16()?;
        if k & key::RESPONSE != 0 {
            let k = k & !key::RESPONSE;
            if k == key::CREDIT {
                return Ok(Command::CreditError {
                    code: r.u16()?,
                    subscription_id: r.u8()?,
                });
            }
            if k == key::TUNE {
                // The client's answer to Tune is a Tune.
                return Ok(Command::Tune {
                    frame_max: r.u32()?,
                    heartbeat: r.u32()?,
                });
            }
            return Ok(Command::Response(Response {
                key: k,
                correlation_id: r.u32()?,
                code: r.u16()?,
                rest: r.rest(),
            }));
        }
        Ok(match k {
            key::PEER_PROPERTIES => Command::PeerProperties {
                correlation_id: r.u32()?,
                properties: r.pairs()?,
            },
            key::SASL_HANDSHAKE => Command::SaslHandshake {
                correlation_id: r.u32()?,
            },
            key::SASL_AUTHENTICATE => Command::SaslAuthenticate {
                correlation_id: r.u32()?,
                mechanism: r.string()?,
                data: r.opt_bytes()?.unwrap_or_default(),
            },
            key::TUNE => Command::Tune {
                frame_max: r.u32()?,
                heartbeat: r.u32()?,
            },
            key::OPEN => Command::Open {
                correlation_id: r.u32()?,
                vhost: r.string()?,
            },
            key::CLOSE => Command::Close {
                correlation_id: r.u32()?,
                code: r.u16()?,
                reason: r.string()?,
            },
            key::HEARTBEAT => Command::Heartbeat,
            key::CREATE => Command::Create {
                correlation_id: r.u32()?,
                stream: r.string()?,
                arguments: r.pairs()?,
            },
            key::DELETE => Command::Delete {
                correlation_id: r.u32()?,
                stream: r.string()?,
            },
            key::DECLARE_PUBLISHER => Command::DeclarePublisher {
                correlation_id: r.u32()?,
                publisher_id: r.u8()?,
                reference: r.opt_string()?.filter(|s| !s.is_empty()),
                stream: r.string()?,
            },
            key::DELETE_PUBLISHER => Command::DeletePublisher {
                correlation_id: r.u32()?,
                publisher_id: r.u8()?,
            },
            key::PUBLISH => {
                let publisher_id = r.u8()?;
                let n = r.count(12)?;
                let mut messages = Vec::with_capacity(n);
                for _ in 0..n {
                    let id = r.u64()?;
                    messages.push((id, r.opt_bytes()?.unwrap_or_default()));
                }
                Command::Publish {
                    publisher_id,
                    messages,
                }
            }
            key::PUBLISH_CONFIRM => {
                let publisher_id = r.u8()?;
                let n = r.count(8)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(r.u64()?);
                }
                Command::PublishConfirm { publisher_id, ids }
            }
            key::PUBLISH_ERROR => {
                let publisher_id = r.u8()?;
                let n = r.count(10)?;
                let mut errors = Vec::with_capacity(n);
                for _ in 0..n {
                    errors.push((r.u64()?, r.u16()?));
                }
                Command::PublishError { publisher_id, errors }
            }
            key::SUBSCRIBE => {
                let correlation_id = r.u32()?;
                let subscription_id = r.u8()?;
                let stream = r.string()?;
                let offset = OffsetSpec::decode(&mut r)?;
                let credit = r.u16()?;
                // Properties are optional in early versions of the protocol.
                let properties = if r.remaining() > 0 { r.pairs()? } else { Vec::new() };
                Command::Subscribe {
                    correlation_id,
                    subscription_id,
                    stream,
                    offset,
                    credit,
                    properties,
                }
            }
            key::UNSUBSCRIBE => Command::Unsubscribe {
                correlation_id: r.u32()?,
                subscription_id: r.u8()?,
            },
            key::DELIVER => Command::Deliver {
                subscription_id: r.u8()?,
                chunk: r.rest(),
            },
            key::CREDIT => Command::Credit {
                subscription_id: r.u8()?,
                credit: r.u16()?,
            },
            key::STORE_OFFSET => Command::StoreOffset {
                reference: r.string()?,
                stream: r.string()?,
                offset: r.u64()?,
            },
            key::QUERY_OFFSET => Command::QueryOffset {
                correlation_id: r.u32()?,
                reference: r.string()?,
                stream: r.string()?,
            },
            key::QUERY_PUBLISHER_SEQUENCE => Command::QueryPublisherSequence {
                correlation_id: r.u32()?,
                reference: r.string()?,
                stream: r.string()?,
            },
            other => return Err(CodecError::UnknownKey(other)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(c: Command) {
        let mut out = BytesMut::new();
        c.encode(&mut out);
        let f = parse_frame(&mut out, 1 << 20).unwrap().unwrap();
        assert_eq!(Command::decode(f).unwrap(), c);
        assert!(out.is_empty());
    }

    #[test]
    fn a_publish_head_written_in_place_is_the_one_begun_in_order() {
        for version in [1, 2] {
            let mut begun = BytesMut::new();
            let at = begin_publish_version(&mut begun, 7, 1, version);
            begun.put_u64(42);
            if version == 2 {
                begun.put_i16(-1);
            }
            put_bytes(&mut begun, b"m");
            end_frame(&mut begun, at);
            let mut placed = begun.clone();
            placed[..PUBLISH_HEAD].fill(0);
            put_publish_head(&mut placed, 7, 1, version);
            assert_eq!(placed, begun);
        }
    }

    #[test]
    fn every_command_roundtrips() {
        let pairs = vec![("product".to_string(), "warren".to_string())];
        for c in [
            Command::PeerProperties {
                correlation_id: 1,
                properties: pairs.clone(),
            },
            Command::SaslHandshake { correlation_id: 2 },
            Command::SaslAuthenticate {
                correlation_id: 3,
                mechanism: "PLAIN".into(),
                data: Bytes::from_static(b"\0g\0g"),
            },
            Command::Tune {
                frame_max: 1 << 20,
                heartbeat: 60,
            },
            Command::Open {
                correlation_id: 4,
                vhost: "/".into(),
            },
            Command::Close {
                correlation_id: 5,
                code: 1,
                reason: "bye".into(),
            },
            Command::Heartbeat,
            Command::Create {
                correlation_id: 6,
                stream: "s".into(),
                arguments: pairs.clone(),
            },
            Command::Delete {
                correlation_id: 7,
                stream: "s".into(),
            },
            Command::DeclarePublisher {
                correlation_id: 8,
                publisher_id: 1,
                reference: None,
                stream: "s".into(),
            },
            Command::DeclarePublisher {
                correlation_id: 8,
                publisher_id: 1,
                reference: Some("p".into()),
                stream: "s".into(),
            },
            Command::DeletePublisher {
                correlation_id: 9,
                publisher_id: 1,
            },
            Command::Publish {
                publisher_id: 1,
                messages: vec![(1, Bytes::from_static(b"a")), (2, Bytes::new())],
            },
            Command::PublishConfirm {
                publisher_id: 1,
                ids: vec![1, 2, 3],
            },
            Command::PublishError {
                publisher_id: 1,
                errors: vec![(4, code::PUBLISHER_DOES_NOT_EXIST)],
            },
            Command::Subscribe {
                correlation_id: 10,
                subscription_id: 0,
                stream: "s".into(),
                offset: OffsetSpec::Offset(42),
                credit: 10,
                properties: pairs.clone(),
            },
            Command::Subscribe {
                correlation_id: 10,
                subscription_id: 0,
                stream: "s".into(),
                offset: OffsetSpec::Timestamp(-1),
                credit: 1,
                properties: vec![],
            },
            Command::Unsubscribe {
                correlation_id: 11,
                subscription_id: 0,
            },
            Command::Deliver {
                subscription_id: 0,
                chunk: Bytes::from_static(b"chunk bytes"),
            },
            Command::Credit {
                subscription_id: 0,
                credit: 1,
            },
            Command::CreditError {
                code: code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                subscription_id: 9,
            },
            Command::StoreOffset {
                reference: "c".into(),
                stream: "s".into(),
                offset: 7,
            },
            Command::QueryOffset {
                correlation_id: 12,
                reference: "c".into(),
                stream: "s".into(),
            },
            Command::QueryPublisherSequence {
                correlation_id: 13,
                reference: "p".into(),
                stream: "s".into(),
            },
            Command::Response(Response {
                key: key::OPEN,
                correlation_id: 4,
                code: code::OK,
                rest: Bytes::from_static(b"\0\0\0\0"),
            }),
        ] {
            roundtrip(c);
        }
    }

    #[test]
    fn exact_bytes_of_a_credit() {
        let mut out = BytesMut::new();
        Command::Credit {
            subscription_id: 3,
            credit: 1,
        }
        .encode(&mut out);
        assert_eq!(&out[..], &[0, 0, 0, 7, 0x00, 0x09, 0, 1, 3, 0, 1]);
    }

    #[test]
    fn truncated_oversized_and_lying_frames() {
        let mut out = BytesMut::new();
        Command::Open {
            correlation_id: 1,
            vhost: "vh".into(),
        }
        .encode(&mut out);
        let full = out.clone();
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert_eq!(parse_frame(&mut b, 1 << 20), Ok(None), "cut {cut}");
        }
        let mut big = BytesMut::from(&[0x7f, 0, 0, 0, 0, 0][..]);
        assert!(matches!(
            parse_frame(&mut big, 1 << 20),
            Err(CodecError::FrameTooLarge { .. })
        ));
        // A publish claiming a million messages in a few bytes.
        let lie = Bytes::from_static(&[0, 2, 0, 1, 1, 0, 0x0f, 0x42, 0x40, 0, 0]);
        assert!(Command::decode(lie).is_err());
        assert_eq!(
            Command::decode(Bytes::from_static(&[0x01, 0x23, 0, 1])),
            Err(CodecError::UnknownKey(0x123))
        );
        for cut in 0..full.len() - 4 {
            let _ = Command::decode(Bytes::copy_from_slice(&full[4..4 + cut]));
        }
    }

    #[test]
    fn offset_specs_parse() {
        assert_eq!(OffsetSpec::parse("first"), Some(OffsetSpec::First));
        assert_eq!(OffsetSpec::parse("next"), Some(OffsetSpec::Next));
        assert_eq!(OffsetSpec::parse("17"), Some(OffsetSpec::Offset(17)));
        assert_eq!(
            OffsetSpec::parse("@1700000000000"),
            Some(OffsetSpec::Timestamp(1_700_000_000_000))
        );
        assert_eq!(OffsetSpec::parse("soon"), None);
    }
}
