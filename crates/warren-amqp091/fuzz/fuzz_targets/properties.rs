//! Basic properties: the full decoder and the fast scan a broker runs on
//! every publish must never panic, and must agree where both succeed.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use warren_amqp091::properties::RoutingHints;
use warren_amqp091::BasicProperties;

fuzz_target!(|data: &[u8]| {
    let hints = RoutingHints::scan(data);
    if let Ok(p) = BasicProperties::decode(Bytes::copy_from_slice(data)) {
        let h = hints.expect("the scan accepts what the decoder accepts");
        assert_eq!(h.priority, p.priority);
        assert_eq!(h.delivery_mode, p.delivery_mode);
        assert_eq!(h.has_headers, p.headers.is_some());
        let again = BasicProperties::decode(p.to_bytes()).expect("re-encoded properties decode");
        assert_eq!(format!("{p:?}"), format!("{again:?}"));
    }
});
