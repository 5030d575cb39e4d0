//! What a node reads that it did not write this run: its write-ahead log
//! after a crash (any bytes on disk) and Raft messages from a peer. No
//! panic, no allocation past the input, and the whole records end inside
//! the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((records, end)) = warren_raft::wal::scan(data) {
        assert!(end <= data.len());
        assert!(records.len() <= data.len() / 17 + 1);
    }
    let _ = warren_raft::decode_message(data);
});
