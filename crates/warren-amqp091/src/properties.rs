//! Content headers (0-9-1 §4.2.6.1) and the basic class's properties
//! (0-9-1 §1.8 "basic" fields). A header payload is `class-id weight
//! body-size property-flags property-list`; flags are 16-bit words whose
//! lowest bit says another word follows, and bit 15 of the first word is the
//! first property.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::primitives::{put_shortstr, Reader, ShortStr};
use crate::table::FieldTable;

/// A decoded content header frame, properties left as received so that a
/// broker can forward them without re-encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentHeader {
    pub class_id: u16,
    pub body_size: u64,
    /// Property flags and list, exactly as on the wire.
    pub raw_properties: Bytes,
}

impl ContentHeader {
    pub fn decode(payload: Bytes) -> Result<ContentHeader, CodecError> {
        let mut r = Reader::new(payload);
        let class_id = r.short()?;
        let _weight = r.short()?;
        let body_size = r.longlong()?;
        let raw_properties = r.take(r.remaining(), "properties")?;
        Ok(ContentHeader {
            class_id,
            body_size,
            raw_properties,
        })
    }
}

const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
const DELIVERY_MODE: u16 = 1 << 12;
const PRIORITY: u16 = 1 << 11;
const CORRELATION_ID: u16 = 1 << 10;
const REPLY_TO: u16 = 1 << 9;
const EXPIRATION: u16 = 1 << 8;
const MESSAGE_ID: u16 = 1 << 7;
const TIMESTAMP: u16 = 1 << 6;
const KIND: u16 = 1 << 5;
const USER_ID: u16 = 1 << 4;
const APP_ID: u16 = 1 << 3;
const CLUSTER_ID: u16 = 1 << 2;

/// The basic class's message properties. `delivery_mode` 2 is persistent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BasicProperties {
    pub content_type: Option<ShortStr>,
    pub content_encoding: Option<ShortStr>,
    pub headers: Option<FieldTable>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<ShortStr>,
    pub reply_to: Option<ShortStr>,
    pub expiration: Option<ShortStr>,
    pub message_id: Option<ShortStr>,
    pub timestamp: Option<u64>,
    pub kind: Option<ShortStr>,
    pub user_id: Option<ShortStr>,
    pub app_id: Option<ShortStr>,
    pub cluster_id: Option<ShortStr>,
}

impl BasicProperties {
    /// Decode property flags and list (the bytes after body-size).
    pub fn decode(raw: Bytes) -> Result<BasicProperties, CodecError> {
        let mut r = Reader::new(raw);
        let flags = r.short()?;
        let mut more = flags & 1 != 0;
        while more {
            // Basic has 14 properties; a continuation word may only be empty.
            let extra = r.short()?;
            if extra & !1 != 0 {
                return Err(CodecError::Malformed("property flags"));
            }
            more = extra & 1 != 0;
        }
        let s = |r: &mut Reader, bit: u16| -> Result<Option<ShortStr>, CodecError> {
            if flags & bit != 0 {
                Ok(Some(r.shortstr()?))
            } else {
                Ok(None)
            }
        };
        let content_type = s(&mut r, CONTENT_TYPE)?;
        let content_encoding = s(&mut r, CONTENT_ENCODING)?;
        let headers = if flags & HEADERS != 0 {
            Some(r.table()?)
        } else {
            None
        };
        let delivery_mode = if flags & DELIVERY_MODE != 0 {
            Some(r.octet()?)
        } else {
            None
        };
        let priority = if flags & PRIORITY != 0 {
            Some(r.octet()?)
        } else {
            None
        };
        let correlation_id = s(&mut r, CORRELATION_ID)?;
        let reply_to = s(&mut r, REPLY_TO)?;
        let expiration = s(&mut r, EXPIRATION)?;
        let message_id = s(&mut r, MESSAGE_ID)?;
        let timestamp = if flags & TIMESTAMP != 0 {
            Some(r.timestamp()?)
        } else {
            None
        };
        let kind = s(&mut r, KIND)?;
        let user_id = s(&mut r, USER_ID)?;
        let app_id = s(&mut r, APP_ID)?;
        let cluster_id = s(&mut r, CLUSTER_ID)?;
        Ok(BasicProperties {
            content_type,
            content_encoding,
            headers,
            delivery_mode,
            priority,
            correlation_id,
            reply_to,
            expiration,
            message_id,
            timestamp,
            kind,
            user_id,
            app_id,
            cluster_id,
        })
    }

    /// Encode property flags and list.
    pub fn encode(&self, buf: &mut BytesMut) {
        let mut flags = 0u16;
        let set = |flags: &mut u16, present: bool, bit: u16| {
            if present {
                *flags |= bit
            }
        };
        set(&mut flags, self.content_type.is_some(), CONTENT_TYPE);
        set(&mut flags, self.content_encoding.is_some(), CONTENT_ENCODING);
        set(&mut flags, self.headers.is_some(), HEADERS);
        set(&mut flags, self.delivery_mode.is_some(), DELIVERY_MODE);
        set(&mut flags, self.priority.is_some(), PRIORITY);
        set(&mut flags, self.correlation_id.is_some(), CORRELATION_ID);
        set(&mut flags, self.reply_to.is_some(), REPLY_TO);
        set(&mut flags, self.expiration.is_some(), EXPIRATION);
        set(&mut flags, self.message_id.is_some(), MESSAGE_ID);
        set(&mut flags, self.timestamp.is_some(), TIMESTAMP);
        set(&mut flags, self.kind.is_some(), KIND);
        set(&mut flags, self.user_id.is_some(), USER_ID);
        set(&mut flags, self.app_id.is_some(), APP_ID);
        set(&mut flags, self.cluster_id.is_some(), CLUSTER_ID);
        buf.put_u16(flags);
        let s = |buf: &mut BytesMut, v: &Option<ShortStr>| {
            if let Some(v) = v {
                put_shortstr(buf, v)
            }
        };
        s(buf, &self.content_type);
        s(buf, &self.content_encoding);
        if let Some(h) = &self.headers {
            h.encode(buf);
        }
        if let Some(v) = self.delivery_mode {
            buf.put_u8(v);
        }
        if let Some(v) = self.priority {
            buf.put_u8(v);
        }
        s(buf, &self.correlation_id);
        s(buf, &self.reply_to);
        s(buf, &self.expiration);
        s(buf, &self.message_id);
        if let Some(v) = self.timestamp {
            buf.put_u64(v);
        }
        s(buf, &self.kind);
        s(buf, &self.user_id);
        s(buf, &self.app_id);
        s(buf, &self.cluster_id);
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }
}

/// The few properties a broker needs on every publish, read without
/// decoding the rest: the headers table is skipped by its length prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoutingHints {
    pub has_headers: bool,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub has_expiration: bool,
    pub has_reply_to: bool,
    pub has_user_id: bool,
}

impl RoutingHints {
    pub fn scan(raw: &[u8]) -> Result<RoutingHints, CodecError> {
        let mut pos = 0usize;
        let take = |pos: &mut usize, n: usize| -> Result<usize, CodecError> {
            let at = *pos;
            if raw.len() < at + n {
                return Err(CodecError::Truncated("properties"));
            }
            *pos += n;
            Ok(at)
        };
        let at = take(&mut pos, 2)?;
        let flags = u16::from_be_bytes([raw[at], raw[at + 1]]);
        if flags & 1 != 0 {
            // Rare; let the full decoder handle continuation words.
            let p = BasicProperties::decode(Bytes::copy_from_slice(raw))?;
            return Ok(RoutingHints {
                has_headers: p.headers.is_some(),
                delivery_mode: p.delivery_mode,
                priority: p.priority,
                has_expiration: p.expiration.is_some(),
                has_reply_to: p.reply_to.is_some(),
                has_user_id: p.user_id.is_some(),
            });
        }
        let skip_short = |pos: &mut usize| -> Result<(), CodecError> {
            let at = take(pos, 1)?;
            take(pos, raw[at] as usize)?;
            Ok(())
        };
        let mut h = RoutingHints::default();
        if flags & CONTENT_TYPE != 0 {
            skip_short(&mut pos)?;
        }
        if flags & CONTENT_ENCODING != 0 {
            skip_short(&mut pos)?;
        }
        if flags & HEADERS != 0 {
            h.has_headers = true;
            let at = take(&mut pos, 4)?;
            let n = u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
            take(&mut pos, n as usize)?;
        }
        if flags & DELIVERY_MODE != 0 {
            h.delivery_mode = Some(raw[take(&mut pos, 1)?]);
        }
        if flags & PRIORITY != 0 {
            h.priority = Some(raw[take(&mut pos, 1)?]);
        }
        h.has_expiration = flags & EXPIRATION != 0;
        h.has_reply_to = flags & REPLY_TO != 0;
        h.has_user_id = flags & USER_ID != 0;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::FieldValue;

    fn full() -> BasicProperties {
        let mut h = FieldTable::new();
        h.insert("k", FieldValue::from("v"));
        BasicProperties {
            content_type: Some("text/plain".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(h),
            delivery_mode: Some(2),
            priority: Some(5),
            correlation_id: Some("c".into()),
            reply_to: Some("r".into()),
            expiration: Some("1000".into()),
            message_id: Some("m".into()),
            timestamp: Some(42),
            kind: Some("t".into()),
            user_id: Some("guest".into()),
            app_id: Some("a".into()),
            cluster_id: None,
        }
    }

    #[test]
    fn roundtrip() {
        let p = full();
        assert_eq!(BasicProperties::decode(p.to_bytes()).unwrap(), p);
        let empty = BasicProperties::default();
        assert_eq!(&empty.to_bytes()[..], b"\x00\x00");
        assert_eq!(BasicProperties::decode(empty.to_bytes()).unwrap(), empty);
    }

    #[test]
    fn exact_bytes() {
        let p = BasicProperties {
            delivery_mode: Some(2),
            priority: Some(1),
            ..Default::default()
        };
        assert_eq!(&p.to_bytes()[..], b"\x18\x00\x02\x01");
    }

    #[test]
    fn truncated_is_an_error() {
        let b = full().to_bytes();
        for cut in 0..b.len() {
            assert!(BasicProperties::decode(b.slice(..cut)).is_err(), "cut {cut}");
            // The scan stops after priority; it must never panic on a cut.
            let _ = RoutingHints::scan(&b[..cut]);
        }
    }

    #[test]
    fn hints_match_full_decode() {
        let h = RoutingHints::scan(&full().to_bytes()).unwrap();
        assert_eq!(
            h,
            RoutingHints {
                has_headers: true,
                delivery_mode: Some(2),
                priority: Some(5),
                has_expiration: true,
                has_reply_to: true,
                has_user_id: true,
            }
        );
    }

    #[test]
    fn content_header_keeps_raw_properties() {
        let mut b = BytesMut::new();
        b.put_u16(60);
        b.put_u16(0);
        b.put_u64(12);
        full().encode(&mut b);
        let h = ContentHeader::decode(b.freeze()).unwrap();
        assert_eq!((h.class_id, h.body_size), (60, 12));
        assert_eq!(BasicProperties::decode(h.raw_properties).unwrap(), full());
    }
}
