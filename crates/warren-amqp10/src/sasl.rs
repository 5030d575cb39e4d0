//! The SASL layer (spec 5.3): mechanisms offered, the client's init (PLAIN
//! or ANONYMOUS here), and the outcome.

use bytes::Bytes;

use crate::composite::{composite, opt, Fields};
use crate::error::CodecError;
use crate::value::Value;

pub const MECHANISMS: u64 = 0x40;
pub const INIT: u64 = 0x41;
pub const OUTCOME: u64 = 0x44;

/// sasl-outcome codes (5.3.3.6).
pub const OK: u8 = 0;
pub const AUTH: u8 = 1;

#[derive(Debug, Clone, PartialEq)]
pub enum Sasl {
    Mechanisms(Vec<String>),
    Init {
        mechanism: String,
        initial_response: Option<Bytes>,
        hostname: Option<String>,
    },
    Outcome {
        code: u8,
    },
}

impl Sasl {
    pub fn to_value(&self) -> Value {
        match self {
            Sasl::Mechanisms(m) => composite(
                MECHANISMS,
                vec![Value::Array(m.iter().map(|s| Value::Symbol(s.clone())).collect())],
            ),
            Sasl::Init {
                mechanism,
                initial_response,
                hostname,
            } => composite(
                INIT,
                vec![
                    Value::Symbol(mechanism.clone()),
                    opt(initial_response.clone(), Value::Binary),
                    opt(hostname.clone(), Value::String),
                ],
            ),
            Sasl::Outcome { code } => composite(OUTCOME, vec![Value::Ubyte(*code)]),
        }
    }

    pub fn from_value(v: &Value) -> Result<Sasl, CodecError> {
        match v.as_described().map(|(c, _)| c) {
            Some(MECHANISMS) => {
                let f = Fields::of(v, MECHANISMS, "sasl-mechanisms")?;
                Ok(Sasl::Mechanisms(f.symbols(0)?))
            }
            Some(INIT) => {
                let f = Fields::of(v, INIT, "sasl-init")?;
                Ok(Sasl::Init {
                    mechanism: f
                        .opt_symbol(0)?
                        .ok_or_else(|| CodecError::invalid("sasl-init", "no mechanism"))?,
                    initial_response: f.opt_binary(1)?,
                    hostname: f.opt_string(2)?,
                })
            }
            Some(OUTCOME) => {
                let f = Fields::of(v, OUTCOME, "sasl-outcome")?;
                Ok(Sasl::Outcome {
                    code: f
                        .opt_ubyte(0)?
                        .ok_or_else(|| CodecError::invalid("sasl-outcome", "no code"))?,
                })
            }
            _ => Err(CodecError::invalid("sasl frame", format!("{v:?}"))),
        }
    }

    /// PLAIN's initial response (RFC 4616): authzid NUL authcid NUL passwd.
    pub fn plain(user: &str, pass: &str) -> Sasl {
        Sasl::Init {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from(format!("\0{user}\0{pass}"))),
            hostname: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips() {
        for s in [
            Sasl::Mechanisms(vec!["PLAIN".into(), "ANONYMOUS".into()]),
            Sasl::plain("guest", "guest"),
            Sasl::Outcome { code: OK },
        ] {
            let b = s.to_value().to_bytes();
            let mut x = &b[..];
            assert_eq!(Sasl::from_value(&Value::decode(&mut x).unwrap()).unwrap(), s);
        }
    }
}
