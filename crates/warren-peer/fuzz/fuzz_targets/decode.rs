//! The inter-node decoders over arbitrary bytes, with the handshake's
//! frame limit and the running one: no panic, no allocation past the
//! input, and a decoded message re-encodes to one that decodes equal.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren_peer::{parse_frame, Message, FRAME_MAX, HANDSHAKE_FRAME_MAX};

fuzz_target!(|data: &[u8]| {
    for max in [HANDSHAKE_FRAME_MAX, FRAME_MAX] {
        let mut buf = BytesMut::from(data);
        while let Ok(Some(f)) = parse_frame(&mut buf, max) {
            if let Ok(m) = Message::decode(f) {
                let mut out = BytesMut::new();
                m.encode(&mut out);
                let again = parse_frame(&mut out, FRAME_MAX).unwrap().unwrap();
                assert_eq!(Message::decode(again).unwrap(), m);
                assert!(out.is_empty());
            }
        }
    }
});
