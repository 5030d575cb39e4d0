//! Every AMQP 1.0 decoder over arbitrary bytes: frames, values,
//! performatives, SASL, message sections, and a receiver's filters (the
//! SQL filter's text, property filters read from a value and judged on
//! the bytes as a message). No panic, bounded work, a decoded value
//! re-encodes to something that decodes equal, and the fast paths (a
//! transfer; a list or map read in place) read what the general decoder
//! reads.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use warren_amqp10::compound::{described_code, list_into, map_pairs, Key};
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
    // A described list or map read in place reads as the general
    // decoder reads it, and what it reads generally it reads in place
    // (the general one may refuse more: symbols that are not ASCII,
    // nesting counted from the section).
    let mut s = data;
    if described_code(&mut s).is_some() {
        let general = Value::decode(&mut &data[..]).ok();
        let inner = match &general {
            Some(Value::Described(_, inner)) => Some(&**inner),
            _ => None,
        };
        let mut slots: [Value; 13] = std::array::from_fn(|_| Value::Null);
        match (list_into(&mut { s }, &mut slots), inner) {
            (Ok(n), Some(Value::List(items))) => {
                assert_eq!(n, items.len());
                for (a, b) in items.iter().zip(&slots) {
                    assert_eq!(a.to_bytes(), b.to_bytes(), "a field read in place differs");
                }
            }
            (Ok(n), Some(Value::Null)) => assert_eq!(n, 0),
            (Ok(_), Some(other)) => panic!("read in place as a list, generally {other:?}"),
            (Err(e), Some(Value::List(_))) => panic!("a list read generally is refused in place: {e}"),
            _ => {}
        }
        let mut pairs = Vec::new();
        let read = map_pairs(&mut { s }, |k, v| {
            pairs.push((k, v));
            Ok(())
        });
        match (read, inner) {
            (Ok(()), Some(Value::Map(items))) => {
                assert_eq!(pairs.len(), items.len());
                for ((k, v), (gk, gv)) in pairs.iter().zip(items) {
                    match (k, gk) {
                        (Key::Text(t), Value::String(g) | Value::Symbol(g)) => assert_eq!(t, g),
                        (Key::Other(o), g) => assert_eq!(o.to_bytes(), g.to_bytes()),
                        (k, g) => panic!("key {k:?} read generally as {g:?}"),
                    }
                    assert_eq!(v.to_bytes(), gv.to_bytes());
                }
            }
            (Ok(()), Some(Value::Null)) => assert!(pairs.is_empty()),
            (Ok(()), Some(other)) => panic!("read in place as a map, generally {other:?}"),
            (Err(e), Some(Value::Map(_))) => panic!("a map read generally is refused in place: {e}"),
            _ => {}
        }
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
