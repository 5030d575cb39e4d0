//! Codec errors. `Incomplete` is not a failure (wait for more bytes); every
//! other variant means the peer sent something malformed, and the front end
//! maps it to a reply code (0-9-1 §4.2.3: a bad frame is a FRAME_ERROR, a bad
//! method argument a SYNTAX_ERROR, an unknown method COMMAND_INVALID).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// More bytes are needed before anything can be decoded.
    #[error("incomplete input")]
    Incomplete,
    /// A field or table ran past the end of its frame.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A value that the grammar forbids (bad field type tag, bad bool...).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// The frame's type octet is not method, header, body or heartbeat.
    #[error("unknown frame type {0}")]
    UnknownFrameType(u8),
    /// The octet after the payload is not frame-end (0xCE).
    #[error("frame end octet is {0:#04x}, not 0xce")]
    BadFrameEnd(u8),
    /// The frame's declared size exceeds the negotiated frame_max.
    #[error("frame size {size} exceeds frame_max {max}")]
    FrameTooLarge { size: u32, max: u32 },
    /// A class/method pair the spec does not define.
    #[error("unknown method class {class_id} method {method_id}")]
    UnknownMethod { class_id: u16, method_id: u16 },
    /// Field tables nested deeper than we are willing to recurse.
    #[error("field table nested deeper than {0}")]
    TooDeep(usize),
}
