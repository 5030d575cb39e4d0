//! Frames for a scripted stream "broker" in a test: the opening's
//! answers (peer properties, SASL PLAIN, tune) and responses, written by
//! hand so a test can answer, hold back or garble what it likes.

use bytes::{BufMut, BytesMut};

/// A frame: size, key, version 1, then `body`.
pub fn frame(key: u16, body: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u32(4 + body.len() as u32);
    b.put_u16(key);
    b.put_u16(1);
    b.put_slice(body);
    b.to_vec()
}

/// A response to request `key` with correlation `id`, OK, then `rest`.
pub fn ok(key: u16, id: u32, rest: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u32(id);
    b.put_u16(1);
    b.put_slice(rest);
    frame(key | 0x8000, &b)
}

/// The answer to an opening request before `open` (peer properties,
/// SASL handshake, SASL authenticate, which the broker's tune follows;
/// nothing for the client's tune); None for any other key.
pub fn opening(key: u16, id: u32) -> Option<Vec<u8>> {
    let empty_map = 0i32.to_be_bytes();
    Some(match key {
        0x0011 => ok(key, id, &empty_map),
        0x0012 => {
            let mut m = BytesMut::new();
            m.put_i32(1);
            m.put_u16(5);
            m.put_slice(b"PLAIN");
            ok(key, id, &m)
        }
        0x0013 => {
            let mut r = ok(key, id, &[]);
            let mut tune = BytesMut::new();
            tune.put_u32(1 << 20);
            tune.put_u32(0);
            r.extend(frame(0x0014, &tune));
            r
        }
        0x0014 => Vec::new(),
        _ => return None,
    })
}
