//! Typed bodies: a `Codec` (feature `serde`) turns a value into a body
//! and back and names the content type it writes. `Json` (feature
//! `json`) is the one built in; another format (MessagePack, CBOR, ...)
//! is the same trait over its serde crate. Raw bytes stay the default:
//! nothing here is on the way of a publish that does not ask for it.
//!
//! ```
//! # #[cfg(feature = "json")] {
//! use warren_client::codec::{Codec, Json};
//!
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct Order { id: u32 }
//!
//! let body = Json::encode(&Order { id: 7 }).unwrap();
//! assert_eq!(Json::CONTENT_TYPE, "application/json");
//! assert_eq!(Json::decode::<Order>(&body).unwrap(), Order { id: 7 });
//! # }
//! ```

/// A body that would not encode or decode, or whose content type is not
/// the codec's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{content_type}: {reason}")]
#[non_exhaustive]
pub struct CodecError {
    /// The content type the codec reads and writes.
    pub content_type: String,
    /// What went wrong.
    pub reason: String,
}

impl CodecError {
    /// An error of the codec for `content_type`.
    pub fn new(content_type: &str, reason: impl std::fmt::Display) -> CodecError {
        CodecError {
            content_type: content_type.into(),
            reason: reason.to_string(),
        }
    }
}

/// A serde format for message bodies.
#[cfg(feature = "serde")]
pub trait Codec {
    /// The content type its bodies carry (the `content-type` property).
    const CONTENT_TYPE: &'static str;

    /// `value` as a body.
    fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError>;

    /// A body back as a value.
    fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, CodecError>;
}

/// JSON through serde_json, as `application/json`.
#[cfg(feature = "json")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

#[cfg(feature = "json")]
impl Codec for Json {
    const CONTENT_TYPE: &'static str = "application/json";

    fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(value).map_err(|e| CodecError::new(Self::CONTENT_TYPE, e))
    }

    fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
        serde_json::from_slice(body).map_err(|e| CodecError::new(Self::CONTENT_TYPE, e))
    }
}
