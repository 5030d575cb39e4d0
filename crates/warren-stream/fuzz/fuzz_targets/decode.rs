//! The stream protocol's decoders over arbitrary bytes: frames, commands,
//! chunks, the broker's Publish reader. No panic, no allocation past the input, and a decoded command
//! re-encodes to something that decodes equal.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use warren_stream::command::parse_frame;
use warren_stream::publish::parse_publish;
use warren_stream::{Chunk, Command};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(f)) = parse_frame(&mut buf, 1 << 20) {
        if let Ok(c) = Command::decode(f) {
            let mut out = BytesMut::new();
            c.encode(&mut out);
            let again = parse_frame(&mut out, 0).unwrap().unwrap();
            assert_eq!(Command::decode(again).unwrap(), c);
        }
    }
    let _ = Command::decode(Bytes::copy_from_slice(data));
    let _ = Chunk::parse(&Bytes::copy_from_slice(data), true);
    // The broker's Publish reader (versions 1 and 2, sub-batches).
    if let Ok((_, entries)) = parse_publish(Bytes::copy_from_slice(data)) {
        assert!(entries.len() <= data.len() / 12);
    }
});
