//! Method payloads: whatever decodes must encode back to bytes that decode
//! to the same method (the codec has one meaning for every input it takes).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use warren_amqp091::Method;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Method::decode(Bytes::copy_from_slice(data)) {
        let mut out = BytesMut::new();
        m.encode(&mut out);
        let again = Method::decode(out.freeze()).expect("re-encoded method decodes");
        assert_eq!(format!("{m:?}"), format!("{again:?}"));
    }
});
