//! Field tables (nested tables and arrays included): no panic, bounded
//! depth, and a decoded table re-encodes to something that decodes equal.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use warren_amqp091::FieldTable;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = FieldTable::decode_from(Bytes::copy_from_slice(data)) {
        let mut out = BytesMut::new();
        t.encode(&mut out);
        let again = FieldTable::decode_from(out.freeze()).expect("re-encoded table decodes");
        // NaN floats are not equal to themselves; compare the encodings.
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        t.encode(&mut a);
        again.encode(&mut b);
        assert_eq!(a, b);
    }
});
