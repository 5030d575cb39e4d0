//! A permission's regular expression, compiled once: the vhost
//! permissions' configure / write / read and the topic permissions' write
//! / read patterns alike. Matched unanchored, as RabbitMQ's `re:run` does;
//! an empty pattern grants nothing (RabbitMQ reads it as `^$`).

use regex::Regex;

use crate::error::{BrokerError, Result};

/// One compiled pattern; `.*` (the usual grant) skips the regex entirely so
/// the per-publish check costs a branch. Topic permissions compile theirs
/// the same way.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    pub(crate) source: String,
    regex: Option<Regex>,
}

impl Pattern {
    pub(crate) fn new(source: &str) -> Result<Pattern> {
        let regex = match source {
            ".*" => None,
            "" => Some(Regex::new("^$").expect("valid")),
            s => Some(
                Regex::new(s)
                    .map_err(|e| BrokerError::PreconditionFailed(format!("invalid regex '{s}': {e}")))?,
            ),
        };
        Ok(Pattern {
            source: source.to_string(),
            regex,
        })
    }

    pub(crate) fn matches(&self, name: &str) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(name))
    }
}
