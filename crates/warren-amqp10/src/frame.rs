//! Frames (spec 2.3): an 8-byte header (size, data offset, type, channel),
//! an extended header we skip, and a body holding one performative and,
//! for transfers, the payload after it. Also the protocol headers that open
//! a connection (2.2) and its SASL layer (5.3.2).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;

pub const AMQP_HEADER: &[u8; 8] = b"AMQP\x00\x01\x00\x00";
pub const SASL_HEADER: &[u8; 8] = b"AMQP\x03\x01\x00\x00";
/// The smallest max-frame-size a peer may set (2.7.1, MIN-MAX-FRAME-SIZE).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    Amqp,
    Sasl,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameType,
    pub channel: u16,
    /// Performative and payload; empty for a heartbeat (an empty frame).
    pub body: Bytes,
}

impl Frame {
    /// Cut one frame from the front of `buf`: Ok(None) until it is whole.
    /// A frame larger than `max` is refused from its header alone.
    pub fn parse(buf: &mut BytesMut, max: u32) -> Result<Option<Frame>, CodecError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let doff = buf[4];
        let kind = match buf[5] {
            0 => FrameType::Amqp,
            1 => FrameType::Sasl,
            t => return Err(CodecError::invalid("frame type", format!("{t}"))),
        };
        if size > max {
            return Err(CodecError::FrameTooLarge { size, max });
        }
        if doff < 2 || (doff as u32) * 4 > size {
            return Err(CodecError::invalid(
                "frame",
                format!("data offset {doff} with size {size}"),
            ));
        }
        if buf.len() < size as usize {
            return Ok(None);
        }
        let channel = u16::from_be_bytes([buf[6], buf[7]]);
        let mut f = buf.split_to(size as usize);
        f.advance(doff as usize * 4);
        Ok(Some(Frame {
            kind,
            channel,
            body: f.freeze(),
        }))
    }
}

/// Write a frame whose body is `body` (performative then payload).
pub fn write_frame(out: &mut BytesMut, kind: FrameType, channel: u16, body: &[&[u8]]) {
    let len: usize = body.iter().map(|b| b.len()).sum();
    out.put_u32((8 + len) as u32);
    out.put_u8(2);
    out.put_u8(match kind {
        FrameType::Amqp => 0,
        FrameType::Sasl => 1,
    });
    out.put_u16(channel);
    for b in body {
        out.put_slice(b);
    }
}

/// An empty frame: keeps an idle connection alive (2.4.5).
pub fn write_heartbeat(out: &mut BytesMut) {
    out.put_slice(&[0, 0, 0, 8, 2, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_bytes_and_roundtrip() {
        let mut out = BytesMut::new();
        write_frame(&mut out, FrameType::Sasl, 3, &[b"ab", b"c"]);
        assert_eq!(&out[..], b"\x00\x00\x00\x0b\x02\x01\x00\x03abc");
        let f = Frame::parse(&mut out, 1024).unwrap().unwrap();
        assert_eq!(
            (f.kind, f.channel, &f.body[..]),
            (FrameType::Sasl, 3, &b"abc"[..])
        );
        assert!(out.is_empty());
    }

    #[test]
    fn extended_header_is_skipped_and_heartbeats_are_empty() {
        let mut b = BytesMut::from(&b"\x00\x00\x00\x0e\x03\x00\x00\x01XXXXhi"[..]);
        let f = Frame::parse(&mut b, 1024).unwrap().unwrap();
        assert_eq!(&f.body[..], b"hi");
        let mut hb = BytesMut::new();
        write_heartbeat(&mut hb);
        assert!(Frame::parse(&mut hb, 1024).unwrap().unwrap().body.is_empty());
    }

    #[test]
    fn partial_oversized_and_malformed() {
        let mut b = BytesMut::from(&b"\x00\x00\x00\x0b\x02\x00\x00\x00ab"[..]);
        assert_eq!(Frame::parse(&mut b, 1024), Ok(None));
        let mut big = BytesMut::from(&b"\x00\x10\x00\x00\x02\x00\x00\x00"[..]);
        assert_eq!(
            Frame::parse(&mut big, 4096),
            Err(CodecError::FrameTooLarge {
                size: 0x100000,
                max: 4096
            })
        );
        let mut bad = BytesMut::from(&b"\x00\x00\x00\x08\x01\x00\x00\x00"[..]);
        assert!(Frame::parse(&mut bad, 1024).is_err(), "doff below 2");
        let mut bad = BytesMut::from(&b"\x00\x00\x00\x08\x02\x07\x00\x00"[..]);
        assert!(Frame::parse(&mut bad, 1024).is_err(), "unknown type");
    }
}
