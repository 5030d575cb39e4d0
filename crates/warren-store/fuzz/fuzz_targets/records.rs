//! The store's record decoder over arbitrary bytes, as recovery and tail
//! reads meet them after a torn or corrupt write: no panic, no allocation
//! past the input, and every record that parses and decodes re-encodes to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren_store::record::{self, MessageRecord, Parsed, KIND_MESSAGE};

fuzz_target!(|data: &[u8]| {
    // Payload decoders on raw bytes (random bytes rarely pass the CRC).
    let head = record::decode_head(data);
    let msg = record::decode_message(data);
    assert_eq!(head.map(|h| h.seq), msg.as_ref().map(|m| m.seq));
    let _ = record::decode_range(data);

    let mut pos = 0;
    while pos < data.len() {
        match record::parse(&data[pos..]) {
            Parsed::Record { kind, payload, size } => {
                if kind == KIND_MESSAGE {
                    let head = record::decode_head(payload);
                    if let Some(m) = record::decode_message(payload) {
                        assert_eq!(head.map(|h| h.seq), Some(m.seq));
                        let mut out = Vec::new();
                        MessageRecord {
                            seq: m.seq,
                            persistent: m.persistent,
                            expires_at_ms: m.expires_at_ms,
                            exchange: &m.exchange,
                            routing_key: &m.routing_key,
                            properties: &m.properties,
                            body: &m.body,
                        }
                        .encode(&mut out);
                        // Flags other than bit 0 are dropped on re-encode.
                        if payload[8] <= 1 {
                            assert_eq!(&out[..], &data[pos..pos + size]);
                        }
                    }
                } else {
                    let _ = record::decode_range(payload);
                }
                pos += size;
            }
            Parsed::Incomplete { .. } | Parsed::Corrupt(_) => break,
        }
    }
});
