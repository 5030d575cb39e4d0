//! Opening producers' compressed sub-entry batches for consumers that read
//! a stream through the queue interface (AMQP 0-9-1 and 1.0), which
//! RabbitMQ does not do (it skips them). Stream protocol clients get the
//! batches as stored and open them themselves. Codes as the stream
//! protocol numbers them: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (the
//! Java client's framed snappy and lz4 formats).

use std::io::Read;

/// Sub-batches may claim at most this much once opened (RabbitMQ's
/// max_uncompressed_sub_entry_batch_size): a bomb stops there.
pub const MAX_UNCOMPRESSED: u64 = 64 << 20;

pub fn decompress(codec: u8, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let limit = MAX_UNCOMPRESSED + 1;
    let read = match codec {
        0 => return Some(body.to_vec()),
        1 => flate2::read::GzDecoder::new(body)
            .take(limit)
            .read_to_end(&mut out),
        2 => snap::read::FrameDecoder::new(body)
            .take(limit)
            .read_to_end(&mut out),
        3 => lz4_flex::frame::FrameDecoder::new(body)
            .take(limit)
            .read_to_end(&mut out),
        4 => zstd::stream::read::Decoder::new(body).and_then(|d| d.take(limit).read_to_end(&mut out)),
        _ => return None,
    };
    match read {
        Ok(n) if (n as u64) <= MAX_UNCOMPRESSED => Some(out),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_codec_opens_what_it_closed_and_garbage_is_none() {
        let plain = b"a sub-entry batch, a sub-entry batch, a sub-entry batch".repeat(10);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let mut sn = snap::write::FrameEncoder::new(Vec::new());
        sn.write_all(&plain).unwrap();
        let sn = sn.into_inner().unwrap();
        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(&plain).unwrap();
        let lz = lz.finish().unwrap();
        let zs = zstd::stream::encode_all(&plain[..], 3).unwrap();
        for (codec, packed) in [(0u8, plain.clone()), (1, gz), (2, sn), (3, lz), (4, zs)] {
            assert_eq!(
                decompress(codec, &packed).as_deref(),
                Some(&plain[..]),
                "codec {codec}"
            );
            if codec > 0 {
                assert_eq!(decompress(codec, b"not compressed at all"), None, "codec {codec}");
            }
        }
        assert_eq!(decompress(7, b"x"), None);
    }
}
