//! The commands RabbitMQ 3.11 and later added that the codec's `Command`
//! does not carry: requests written by key, the answers read from a
//! response's rest, and the broker's ConsumerUpdate and its answer.

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::command::{begin_frame, code, end_frame, key, OffsetSpec};
use warren_stream::wire::{put_string, Reader};

use super::error::Error;

/// A request: `key`, version 1, the correlation id, then what `body`
/// writes.
pub(crate) fn request(out: &mut BytesMut, k: u16, correlation_id: u32, body: impl FnOnce(&mut BytesMut)) {
    let at = begin_frame(out);
    out.put_u16(k);
    out.put_u16(1);
    out.put_u32(correlation_id);
    body(out);
    end_frame(out, at);
}

/// A list of strings `[Count String...]`, written.
pub(crate) fn put_strings(out: &mut BytesMut, items: &[String]) {
    out.put_i32(items.len() as i32);
    for s in items {
        put_string(out, s);
    }
}

/// A list of strings (Route's and Partitions' streams), read.
pub(crate) fn strings(rest: Bytes) -> Result<Vec<String>, Error> {
    let mut r = Reader::new(rest);
    let n = r.count(2)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.string()?);
    }
    Ok(v)
}

/// StreamStats' statistics: names and values.
pub(crate) fn stats(rest: Bytes) -> Result<Vec<(String, i64)>, Error> {
    let mut r = Reader::new(rest);
    let n = r.count(10)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push((r.string()?, r.i64()?));
    }
    Ok(v)
}

/// ExchangeCommandVersions' list: key, lowest and highest version.
pub(crate) fn put_versions(out: &mut BytesMut, versions: &[(u16, u16, u16)]) {
    out.put_i32(versions.len() as i32);
    for (k, min, max) in versions {
        out.put_u16(*k);
        out.put_u16(*min);
        out.put_u16(*max);
    }
}

pub(crate) fn versions(rest: Bytes) -> Result<Vec<(u16, u16, u16)>, Error> {
    let mut r = Reader::new(rest);
    let n = r.count(6)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push((r.u16()?, r.u16()?, r.u16()?));
    }
    Ok(v)
}

/// The broker's ConsumerUpdate (after key and version): a subscription
/// became active or must step down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConsumerUpdateRequest {
    pub(crate) correlation_id: u32,
    pub(crate) subscription_id: u8,
    pub(crate) active: bool,
}

impl ConsumerUpdateRequest {
    /// Read from a whole frame (key and version first).
    pub(crate) fn decode(frame: Bytes) -> Result<ConsumerUpdateRequest, Error> {
        let mut r = Reader::new(frame);
        r.u16()?;
        r.u16()?;
        Ok(ConsumerUpdateRequest {
            correlation_id: r.u32()?,
            subscription_id: r.u8()?,
            active: r.u8()? != 0,
        })
    }
}

/// The answer to a ConsumerUpdate: OK and where the subscription reads
/// from (the broker heeds it only when the subscription became active).
pub(crate) fn consumer_update_answer(
    out: &mut BytesMut,
    correlation_id: u32,
    response: u16,
    from: OffsetSpec,
) {
    let at = begin_frame(out);
    out.put_u16(key::CONSUMER_UPDATE | key::RESPONSE);
    out.put_u16(1);
    out.put_u32(correlation_id);
    out.put_u16(response);
    from.encode(out);
    end_frame(out, at);
}

/// An answer for a subscription this side no longer has.
pub(crate) fn consumer_update_unknown(out: &mut BytesMut, correlation_id: u32) {
    consumer_update_answer(
        out,
        correlation_id,
        code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
        OffsetSpec::Next,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_stream::command::parse_frame;

    #[test]
    fn consumer_update_and_its_answer() {
        let mut out = BytesMut::new();
        let at = begin_frame(&mut out);
        out.put_u16(key::CONSUMER_UPDATE);
        out.put_u16(1);
        out.put_u32(77);
        out.put_u8(3);
        out.put_u8(1);
        end_frame(&mut out, at);
        let frame = parse_frame(&mut out, 1 << 20).unwrap().unwrap();
        let u = ConsumerUpdateRequest::decode(frame).unwrap();
        assert_eq!(
            u,
            ConsumerUpdateRequest {
                correlation_id: 77,
                subscription_id: 3,
                active: true
            }
        );

        consumer_update_answer(&mut out, 77, code::OK, OffsetSpec::Offset(42));
        let frame = parse_frame(&mut out, 1 << 20).unwrap().unwrap();
        assert_eq!(
            &frame[..],
            &[0x80, 0x1a, 0, 1, 0, 0, 0, 77, 0, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 42]
        );
    }

    #[test]
    fn lists_read_back() {
        let mut out = BytesMut::new();
        put_strings(&mut out, &["a-0".to_string(), "a-1".to_string()]);
        assert_eq!(strings(out.freeze()).unwrap(), vec!["a-0", "a-1"]);
        let mut out = BytesMut::new();
        put_versions(&mut out, &[(2, 1, 2)]);
        assert_eq!(versions(out.freeze()).unwrap(), vec![(2, 1, 2)]);
        let mut out = BytesMut::new();
        out.put_i32(1);
        put_string(&mut out, "first_chunk_id");
        out.put_i64(-1);
        assert_eq!(
            stats(out.freeze()).unwrap(),
            vec![("first_chunk_id".to_string(), -1)]
        );
        assert!(
            strings(Bytes::from_static(&[0, 0, 0, 9])).is_err(),
            "a count beyond the bytes"
        );
    }
}
