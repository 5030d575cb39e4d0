//! The transfer performative written and read straight from bytes: every
//! message crosses the wire under one, so the general path (a [`Value`]
//! tree, a vector of fields, the delivery tag copied) costs on each. Only
//! the usual shape takes this path: handle, delivery-id, delivery-tag,
//! message-format, settled and more, with the later fields absent or
//! at their defaults. Anything else (a delivery state, resume, aborted,
//! a constructor not expected here) goes the general way, which also
//! gives malformed input its error.

use bytes::{BufMut, Bytes, BytesMut};

use crate::performative::Transfer;

/// The transfer's descriptor, as a small ulong (described type 0x00).
const HEAD: [u8; 3] = [0x00, 0x53, 0x14];

/// Whether `t` has the usual shape this module writes.
pub(crate) fn plain(t: &Transfer) -> bool {
    t.state.is_none() && t.rcv_settle_mode.is_none() && !t.resume && !t.aborted && !t.batchable
}

fn put_uint(b: &mut BytesMut, v: Option<u32>) {
    match v {
        None => b.put_u8(0x40),
        Some(0) => b.put_u8(0x43),
        Some(v) if v < 256 => b.put_slice(&[0x52, v as u8]),
        Some(v) => {
            b.put_u8(0x70);
            b.put_u32(v);
        }
    }
}

/// Write a plain transfer ([`plain`]) into `out`: the fields go straight
/// in, and the list's size is filled in after them.
pub(crate) fn encode(t: &Transfer, out: &mut BytesMut) {
    const COUNT: u8 = 6;
    // Without the tag the fields take at most 17 bytes: a tag under 200
    // keeps the list's size within a byte.
    let wide = t.delivery_tag.as_ref().is_some_and(|tag| tag.len() >= 200);
    out.put_slice(&HEAD);
    let size_at = out.len() + 1;
    if wide {
        out.put_u8(0xd0);
        out.put_u32(0);
        out.put_u32(COUNT as u32);
    } else {
        out.put_slice(&[0xc0, 0, COUNT]);
    }
    let fields_at = out.len();
    put_uint(out, Some(t.handle));
    put_uint(out, t.delivery_id);
    match &t.delivery_tag {
        None => out.put_u8(0x40),
        Some(tag) if tag.len() < 256 => {
            out.put_slice(&[0xa0, tag.len() as u8]);
            out.put_slice(tag);
        }
        Some(tag) => {
            out.put_u8(0xb0);
            out.put_u32(tag.len() as u32);
            out.put_slice(tag);
        }
    }
    put_uint(out, t.message_format);
    out.put_u8(match t.settled {
        None => 0x40,
        Some(true) => 0x41,
        Some(false) => 0x42,
    });
    out.put_u8(if t.more { 0x41 } else { 0x42 });
    // The size counts the count's bytes and the fields.
    let n = out.len() - fields_at;
    if wide {
        out[size_at..size_at + 4].copy_from_slice(&((n + 4) as u32).to_be_bytes());
    } else {
        out[size_at] = (n + 1) as u8;
    }
}

/// Read a transfer at the front of `body` if it has the usual shape;
/// with the payload after it. None: take the general path.
pub(crate) fn decode(body: &Bytes) -> Option<(Transfer, Bytes)> {
    let b = &body[..];
    if b.len() < 4 || b[..3] != HEAD {
        return None;
    }
    let (count, mut at, end) = match b[3] {
        0x45 => (0, 4, 4),
        0xc0 => {
            let size = *b.get(4)? as usize;
            (*b.get(5)? as usize, 6, 5 + size)
        }
        0xd0 => {
            let size = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?) as usize;
            let count = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?) as usize;
            (count, 12, 8usize.checked_add(size)?)
        }
        _ => return None,
    };
    // No handle (a list of nothing) is the general path's error.
    if end > b.len() || count == 0 || count > 11 {
        return None;
    }
    let mut t = Transfer::default();
    for i in 0..count {
        let code = *b.get(at)?;
        at += 1;
        // The value of field `i`: only the constructors a plain transfer
        // uses; any other (a state, an ubyte settle mode) is the general
        // path's to read.
        match (i, code) {
            (_, 0x40) => {
                if i == 0 {
                    return None; // handle is mandatory
                }
            }
            (0 | 1 | 3, 0x43) => set_uint(&mut t, i, 0),
            (0 | 1 | 3, 0x52) => {
                let v = *b.get(at)? as u32;
                at += 1;
                set_uint(&mut t, i, v);
            }
            (0 | 1 | 3, 0x70) => {
                let v = u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?);
                at += 4;
                set_uint(&mut t, i, v);
            }
            (2, 0xa0) => {
                let n = *b.get(at)? as usize;
                at += 1;
                b.get(at..at + n)?;
                t.delivery_tag = Some(body.slice(at..at + n));
                at += n;
            }
            (2, 0xb0) => {
                let n = u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize;
                at += 4;
                b.get(at..at.checked_add(n)?)?;
                t.delivery_tag = Some(body.slice(at..at + n));
                at += n;
            }
            (4 | 5 | 8 | 9 | 10, 0x41 | 0x42) => set_bool(&mut t, i, code == 0x41),
            (4 | 5 | 8 | 9 | 10, 0x56) => {
                let v = match *b.get(at)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                at += 1;
                set_bool(&mut t, i, v);
            }
            _ => return None,
        }
    }
    if at != end {
        return None;
    }
    Some((t, body.slice(end..)))
}

fn set_uint(t: &mut Transfer, i: usize, v: u32) {
    match i {
        0 => t.handle = v,
        1 => t.delivery_id = Some(v),
        _ => t.message_format = Some(v),
    }
}

fn set_bool(t: &mut Transfer, i: usize, v: bool) {
    match i {
        4 => t.settled = Some(v),
        5 => t.more = v,
        8 => t.resume = v,
        9 => t.aborted = v,
        _ => t.batchable = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::performative::Performative;
    use crate::value::Value;

    fn transfers() -> Vec<Transfer> {
        let mut v = Vec::new();
        for handle in [0, 7, 255, 256, 70_000] {
            for id in [None, Some(0), Some(200), Some(u32::MAX)] {
                for tag in [
                    None,
                    Some(Bytes::from_static(b"\x00\x00\x00\x07")),
                    Some(Bytes::from(vec![9u8; 300])),
                ] {
                    for settled in [None, Some(true), Some(false)] {
                        for more in [false, true] {
                            v.push(Transfer {
                                handle,
                                delivery_id: id,
                                delivery_tag: tag.clone(),
                                message_format: id.map(|_| 0),
                                settled,
                                more,
                                ..Default::default()
                            });
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn the_fast_path_reads_what_the_general_one_writes_and_the_other_way_round() {
        for t in transfers() {
            let p = Performative::Transfer(t.clone());
            // Written fast, read by the general decoder.
            let mut fast = BytesMut::new();
            encode(&t, &mut fast);
            fast.put_slice(b"payload");
            let fast = fast.freeze();
            let mut s = &fast[..];
            let v = Value::decode(&mut s).unwrap();
            assert_eq!(Performative::from_value(&v).unwrap(), p);
            assert_eq!(s, b"payload");
            // Written by the general encoder, read fast.
            let mut general = BytesMut::new();
            p.to_value().encode(&mut general);
            general.put_slice(b"payload");
            let (back, payload) = decode(&general.freeze()).expect("a plain transfer");
            assert_eq!(back, t);
            assert_eq!(&payload[..], b"payload");
        }
    }

    #[test]
    fn what_is_not_plain_or_is_cut_short_goes_the_general_way() {
        let mut with_state = Transfer {
            handle: 1,
            delivery_id: Some(1),
            ..Default::default()
        };
        with_state.state = Some(crate::messaging::accepted());
        let mut b = BytesMut::new();
        Performative::Transfer(with_state).to_value().encode(&mut b);
        assert!(decode(&b.freeze()).is_none());
        let t = Transfer {
            handle: 3,
            delivery_id: Some(9),
            delivery_tag: Some(Bytes::from_static(b"tag")),
            message_format: Some(0),
            settled: Some(false),
            ..Default::default()
        };
        let mut b = BytesMut::new();
        encode(&t, &mut b);
        let b = b.freeze();
        for n in 0..b.len() {
            assert!(decode(&b.slice(..n)).is_none(), "{n}");
        }
    }
}
