//! Every AMQP 1.0 decoder over arbitrary bytes: frames, values,
//! performatives, SASL, message sections, and a receiver's filters (the
//! SQL filter's text, property filters read from a value and judged on
//! the bytes as a message). No panic, bounded work, a decoded value
//! re-encodes to something that decodes equal, and the transfer's fast
//! path reads what the general decoder reads.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use warren_amqp10::{filtex, messaging, sasl::Sasl, sql_filter, Frame, Performative, Value};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(f)) = Frame::parse(&mut buf, 1 << 20) {
        let _ = Performative::decode(&f.body);
    }
    let mut s = data;
    if let Ok(v) = Value::decode(&mut s) {
        let again = Value::decode(&mut &v.to_bytes()[..]).expect("re-encoded value decodes");
        // NaN is not equal to itself: compare encodings.
        assert_eq!(again.to_bytes(), v.to_bytes());
        let _ = Performative::from_value(&v);
        let _ = Sasl::from_value(&v);
        let filter = filtex::MessageFilter {
            properties: filtex::properties_filter(&v).unwrap_or_default(),
            application_properties: filtex::application_properties_filter(&v).unwrap_or_default(),
            sql: None,
        };
        let _ = filter.matches(s);
    }
    // A transfer read by the fast path reads the same by the general one
    // (value tree, then fields), payload and all.
    if let Ok((p @ Performative::Transfer(_), payload)) = Performative::decode(&Bytes::copy_from_slice(data)) {
        let mut s = data;
        let general = Value::decode(&mut s).ok().and_then(|v| Performative::from_value(&v).ok());
        assert_eq!(general, Some(p), "the transfer fast path disagrees");
        assert_eq!(&payload[..], s);
    }
    let _ = messaging::sections(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(e) = sql_filter::parse(text) {
            let fields = sql_filter::Fields {
                priority: None,
                properties: &[],
                application: &[],
                now_ms: 0,
            };
            let _ = e.matches(&fields);
        }
    }
});
