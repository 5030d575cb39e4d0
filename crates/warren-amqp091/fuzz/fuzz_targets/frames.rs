//! Arbitrary bytes through the frame splitter, then each payload through the
//! decoder its frame type calls for: nothing may panic, and a frame is never
//! larger than the frame_max it was parsed with.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren_amqp091::{ContentHeader, Frame, FrameType, Method};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let frame_max = 4096;
    while let Ok(Some(f)) = Frame::parse(&mut buf, frame_max) {
        assert!(f.payload.len() + 8 <= frame_max as usize);
        match f.kind {
            FrameType::Method => {
                if let Ok(m) = Method::decode(f.payload) {
                    let mut out = BytesMut::new();
                    m.encode(&mut out);
                }
            }
            FrameType::Header => {
                let _ = ContentHeader::decode(f.payload);
            }
            _ => {}
        }
    }
});
