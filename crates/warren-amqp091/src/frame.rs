//! Framing (0-9-1 §2.3.5, §4.2.3): `type:u8 channel:u16 size:u32 payload
//! frame-end(0xCE)`. [`Frame::parse`] takes one whole frame off the front of a
//! read buffer, or says it needs more bytes; it checks the declared size
//! against frame_max before waiting for the payload, so a peer can never make
//! the reader buffer more than one negotiated frame.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::methods::Method;
use crate::properties::BasicProperties;

/// What a client sends first (0-9-1 §4.2.2). A server that gets anything else
/// answers with this header and closes the socket.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;

/// Type octet, channel and size: what precedes every payload.
pub const FRAME_HEADER_SIZE: usize = 7;

/// Header plus frame-end: what a frame costs beyond its payload.
pub const FRAME_OVERHEAD: usize = FRAME_HEADER_SIZE + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    Method = 1,
    Header = 2,
    Body = 3,
    Heartbeat = 8,
}

impl FrameType {
    fn from_u8(v: u8) -> Result<FrameType, CodecError> {
        Ok(match v {
            1 => FrameType::Method,
            2 => FrameType::Header,
            3 => FrameType::Body,
            8 => FrameType::Heartbeat,
            other => return Err(CodecError::UnknownFrameType(other)),
        })
    }
}

/// The first seven octets of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameType,
    pub channel: u16,
    pub size: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameType,
    pub channel: u16,
    pub payload: Bytes,
}

impl Frame {
    /// Take one frame off the front of `buf`. `Ok(None)` means more bytes are
    /// needed. `frame_max` bounds the whole frame, overhead included
    /// (0-9-1 §4.2.3: frame_max counts the header and the end octet).
    pub fn parse(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, CodecError> {
        if buf.len() < FRAME_HEADER_SIZE {
            return Ok(None);
        }
        let kind = FrameType::from_u8(buf[0])?;
        let channel = u16::from_be_bytes([buf[1], buf[2]]);
        let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]);
        let total = size as u64 + FRAME_OVERHEAD as u64;
        if total > frame_max as u64 {
            return Err(CodecError::FrameTooLarge {
                size: size.saturating_add(8),
                max: frame_max,
            });
        }
        let total = total as usize;
        if buf.len() < total {
            return Ok(None);
        }
        let end = buf[total - 1];
        if end != FRAME_END {
            return Err(CodecError::BadFrameEnd(end));
        }
        buf.advance(FRAME_HEADER_SIZE);
        let payload = buf.split_to(size as usize).freeze();
        buf.advance(1);
        Ok(Some(Frame {
            kind,
            channel,
            payload,
        }))
    }
}

fn begin(buf: &mut BytesMut, kind: FrameType, channel: u16) -> usize {
    buf.put_u8(kind as u8);
    buf.put_u16(channel);
    let at = buf.len();
    buf.put_u32(0);
    at
}

fn finish(buf: &mut BytesMut, size_at: usize) {
    let size = (buf.len() - size_at - 4) as u32;
    buf[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    buf.put_u8(FRAME_END);
}

/// Append a method frame.
pub fn write_method(buf: &mut BytesMut, channel: u16, method: &Method) {
    let at = begin(buf, FrameType::Method, channel);
    method.encode(buf);
    finish(buf, at);
}

/// Append a basic.publish method frame from borrowed names: what
/// `write_method` of a `BasicPublish` writes, without first copying the
/// exchange and routing key into short strings of their own (a client
/// publishing at a high rate would pay two allocations a message).
pub fn write_basic_publish(
    buf: &mut BytesMut,
    channel: u16,
    exchange: &[u8],
    routing_key: &[u8],
    mandatory: bool,
    immediate: bool,
) {
    let at = begin(buf, FrameType::Method, channel);
    buf.put_u16(60); // class basic
    buf.put_u16(40); // method publish
    buf.put_u16(0); // reserved-1 (ticket)
    crate::primitives::put_shortstr(buf, exchange);
    crate::primitives::put_shortstr(buf, routing_key);
    buf.put_u8(u8::from(mandatory) | (u8::from(immediate) << 1));
    finish(buf, at);
}

/// Append a content header frame (0-9-1 §4.2.6.1) whose property flags and
/// list are already encoded (`raw_properties`, as received from a publisher).
pub fn write_content_header_raw(
    buf: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    raw_properties: &[u8],
) {
    let at = begin(buf, FrameType::Header, channel);
    buf.put_u16(class_id);
    buf.put_u16(0); // weight, always zero
    buf.put_u64(body_size);
    buf.put_slice(raw_properties);
    finish(buf, at);
}

/// Append a content header frame, encoding `properties`.
pub fn write_content_header(
    buf: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    properties: &BasicProperties,
) {
    let at = begin(buf, FrameType::Header, channel);
    buf.put_u16(class_id);
    buf.put_u16(0);
    buf.put_u64(body_size);
    properties.encode(buf);
    finish(buf, at);
}

/// Append the body as as many body frames as `frame_max` requires
/// (0-9-1 §4.2.6.2). An empty body gets no frame at all.
pub fn write_body(buf: &mut BytesMut, channel: u16, body: &[u8], frame_max: u32) {
    let chunk = (frame_max as usize).saturating_sub(FRAME_OVERHEAD).max(1);
    for part in body.chunks(chunk) {
        buf.reserve(part.len() + FRAME_OVERHEAD);
        let at = begin(buf, FrameType::Body, channel);
        buf.put_slice(part);
        finish(buf, at);
    }
}

/// A heartbeat frame: type 8 on channel 0 with an empty payload (§4.2.7).
pub fn write_heartbeat(buf: &mut BytesMut) {
    buf.put_slice(&[8, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{BasicQosOk, ChannelOpen};

    #[test]
    fn a_borrowed_publish_is_the_method_frame() {
        for (x, rk, m, i) in [
            ("", "q", false, false),
            ("amq.topic", "a.b", true, false),
            ("x", "", true, true),
        ] {
            let mut direct = BytesMut::new();
            write_basic_publish(&mut direct, 7, x.as_bytes(), rk.as_bytes(), m, i);
            let mut via = BytesMut::new();
            let publish = crate::methods::BasicPublish {
                exchange: x.into(),
                routing_key: rk.into(),
                mandatory: m,
                immediate: i,
                ..Default::default()
            };
            write_method(&mut via, 7, &Method::BasicPublish(publish));
            assert_eq!(direct, via, "{x} {rk} {m} {i}");
        }
    }

    #[test]
    fn exact_bytes_of_a_method_frame() {
        let mut b = BytesMut::new();
        write_method(&mut b, 1, &Method::BasicQosOk(BasicQosOk {}));
        assert_eq!(&b[..], b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x0b\xce");
    }

    #[test]
    fn parse_roundtrip_and_incomplete() {
        let mut b = BytesMut::new();
        write_method(&mut b, 7, &ChannelOpen::default().into());
        write_heartbeat(&mut b);
        let whole = b.clone();
        for cut in 0..whole.len() - 8 {
            let mut part = BytesMut::from(&whole[..cut]);
            assert_eq!(Frame::parse(&mut part, 4096).unwrap(), None, "cut {cut}");
        }
        let f = Frame::parse(&mut b, 4096).unwrap().unwrap();
        assert_eq!((f.kind, f.channel), (FrameType::Method, 7));
        assert_eq!(Method::decode(f.payload).unwrap(), ChannelOpen::default().into());
        let h = Frame::parse(&mut b, 4096).unwrap().unwrap();
        assert_eq!(h.kind, FrameType::Heartbeat);
        assert!(b.is_empty());
    }

    #[test]
    fn oversized_frame_is_refused_before_its_payload_arrives() {
        let mut b = BytesMut::from(&b"\x03\x00\x01\x00\x10\x00\x00"[..]);
        assert_eq!(
            Frame::parse(&mut b, 131072),
            Err(CodecError::FrameTooLarge {
                size: 0x100008,
                max: 131072
            })
        );
    }

    #[test]
    fn bad_frame_end_and_type() {
        let mut b = BytesMut::from(&b"\x08\x00\x00\x00\x00\x00\x00\x00"[..]);
        assert_eq!(Frame::parse(&mut b, 4096), Err(CodecError::BadFrameEnd(0)));
        let mut b = BytesMut::from(&b"\x09\x00\x00\x00\x00\x00\x00\xce"[..]);
        assert_eq!(Frame::parse(&mut b, 4096), Err(CodecError::UnknownFrameType(9)));
    }

    #[test]
    fn body_is_split_at_frame_max() {
        let mut b = BytesMut::new();
        write_body(&mut b, 1, &[7u8; 10], 8 + 4);
        // 10 octets in frames of at most 4 payload octets: 4 + 4 + 2.
        let mut sizes = vec![];
        while let Some(f) = Frame::parse(&mut b, 12).unwrap() {
            sizes.push(f.payload.len());
        }
        assert_eq!(sizes, vec![4, 4, 2]);
    }
}
