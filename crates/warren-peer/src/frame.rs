//! Cutting frames from a byte stream: a 4-byte size, then that many bytes
//! (a 1-byte kind and the kind's fields).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;

/// Largest frame once the handshake is done. A batch of Raft messages is
/// cut to fit (the sender splits it), so this bounds what one read of a
/// peer can make a node buffer.
pub const FRAME_MAX: u32 = 16 << 20;

/// Largest frame before the peer has proved it knows the secret: a
/// handshake message is a few hundred bytes at most.
pub const HANDSHAKE_FRAME_MAX: u32 = 4096;

/// One frame: its kind and the bytes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub body: Bytes,
}

/// Cut one frame from the front of `buf` once it is whole. A size above
/// `max` is refused from the prefix alone, before anything is buffered
/// for it; a size of 0 (no kind) is invalid.
pub fn parse_frame(buf: &mut BytesMut, max: u32) -> Result<Option<Frame>, CodecError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size > max {
        return Err(CodecError::FrameTooLarge { size, max });
    }
    if size == 0 {
        return Err(CodecError::Invalid("a frame without a kind".into()));
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    buf.advance(4);
    let mut body = buf.split_to(size as usize).freeze();
    let kind = body.get_u8();
    Ok(Some(Frame { kind, body }))
}

/// Start a frame of `kind` in `out`; [`end_frame`] writes its size.
pub(crate) fn begin_frame(out: &mut BytesMut, kind: u8) -> usize {
    let at = out.len();
    out.put_u32(0);
    out.put_u8(kind);
    at
}

pub(crate) fn end_frame(out: &mut BytesMut, at: usize) {
    let size = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_a_whole_frame_and_refuses_oversized_ones_early() {
        let mut b = BytesMut::from(&[0u8, 0, 0, 3, 7, 1][..]);
        assert_eq!(parse_frame(&mut b, 100), Ok(None));
        b.extend_from_slice(&[2, 0, 0]);
        let f = parse_frame(&mut b, 100).unwrap().unwrap();
        assert_eq!((f.kind, &f.body[..]), (7, &[1u8, 2][..]));
        assert_eq!(&b[..], &[0u8, 0]);
        let mut big = BytesMut::from(&[0u8, 0, 0x10, 0x01][..]);
        assert_eq!(
            parse_frame(&mut big, HANDSHAKE_FRAME_MAX),
            Err(CodecError::FrameTooLarge {
                size: 0x1001,
                max: HANDSHAKE_FRAME_MAX
            })
        );
        let mut empty = BytesMut::from(&[0u8, 0, 0, 0][..]);
        assert!(parse_frame(&mut empty, 100).is_err());
    }
}
