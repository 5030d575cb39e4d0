//! What can go wrong decoding inter-node bytes.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("truncated input: {0}")]
    Truncated(&'static str),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    FrameTooLarge { size: u32, max: u32 },
    #[error("unknown frame kind 0x{0:02x}")]
    UnknownKind(u8),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}
