//! Sub-entry batches' compression, codes as the stream protocol numbers
//! them: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (the Java client's
//! framed snappy and lz4 formats). A producer closes a batch, and the
//! consumers of the stream open it: stream protocol clients, and the
//! broker's own for consumers reading through the queue interface (AMQP
//! 0-9-1 and 1.0), which RabbitMQ does not do (it skips them).

use std::io::{Read, Write};

/// Sub-batches may claim at most this much once opened (RabbitMQ's
/// max_uncompressed_sub_entry_batch_size): a bomb stops there.
pub const MAX_UNCOMPRESSED: u64 = 64 << 20;

/// Open a batch compressed with `codec`; None for an unknown codec, bytes
/// that do not open, or more than [`MAX_UNCOMPRESSED`] once opened.
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

/// Close a batch with `codec` (None for an unknown one).
pub fn compress(codec: u8, plain: &[u8]) -> Option<Vec<u8>> {
    Some(match codec {
        0 => plain.to_vec(),
        1 => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(plain).ok()?;
            gz.finish().ok()?
        }
        2 => {
            let mut sn = snap::write::FrameEncoder::new(Vec::new());
            sn.write_all(plain).ok()?;
            sn.into_inner().ok()?
        }
        3 => {
            let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
            lz.write_all(plain).ok()?;
            lz.finish().ok()?
        }
        4 => zstd::stream::encode_all(plain, 3).ok()?,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_opens_what_it_closed_and_garbage_is_none() {
        let plain = b"a sub-entry batch, a sub-entry batch, a sub-entry batch".repeat(10);
        for codec in 0..=4u8 {
            let packed = compress(codec, &plain).unwrap();
            if codec > 0 {
                assert!(packed.len() < plain.len(), "codec {codec} compresses");
            }
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
        assert_eq!(compress(7, b"x"), None);
    }
}
