//! RabbitMQ's vhost and user limits: a few named counts (`max-connections`
//! and `max-queues` per vhost, `max-connections` and `max-channels` per
//! user), each a whole number where a negative one means no limit, as
//! rabbit_vhost_limit and rabbit_auth_backend_internal keep them. The map
//! serializes as the JSON object RabbitMQ's API and definitions carry.
//!
//! Counting what a limit bounds is its owner's job: a vhost counts its
//! queues under its topology lock, the server's connection registry counts
//! connections and channels. This module only says whether a count has
//! reached a limit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const MAX_CONNECTIONS: &str = "max-connections";
pub const MAX_QUEUES: &str = "max-queues";
pub const MAX_CHANNELS: &str = "max-channels";

/// Which object a set of limits belongs to: it decides the names allowed
/// and the name RabbitMQ gives the set in its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsOf {
    VHost,
    User,
}

impl LimitsOf {
    /// RabbitMQ's component name ("vhost-limits", "user-limits").
    pub fn component(self) -> &'static str {
        match self {
            LimitsOf::VHost => "vhost-limits",
            LimitsOf::User => "user-limits",
        }
    }

    /// The limit names this object takes.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            LimitsOf::VHost => &[MAX_CONNECTIONS, MAX_QUEUES],
            LimitsOf::User => &[MAX_CONNECTIONS, MAX_CHANNELS],
        }
    }
}

/// A vhost's or a user's limits, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Limits(BTreeMap<String, i64>);

impl Limits {
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.get(name).copied()
    }

    pub fn set(&mut self, name: &str, value: i64) {
        self.0.insert(name.to_string(), value);
    }

    /// Remove one limit; false if it was not set.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The limit `name` when `count` objects have already reached it (so
    /// one more is refused); None when there is room or no limit.
    pub fn reached(&self, name: &str, count: usize) -> Option<i64> {
        self.get(name)
            .filter(|&limit| limit >= 0 && count as u64 >= limit as u64)
    }
}

impl FromIterator<(String, i64)> for Limits {
    fn from_iter<I: IntoIterator<Item = (String, i64)>>(iter: I) -> Self {
        Limits(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_is_unlimited_and_zero_refuses_all() {
        let mut l = Limits::default();
        assert_eq!(l.reached(MAX_QUEUES, 1_000), None);
        l.set(MAX_QUEUES, -1);
        assert_eq!(l.reached(MAX_QUEUES, 1_000), None);
        l.set(MAX_QUEUES, 0);
        assert_eq!(l.reached(MAX_QUEUES, 0), Some(0));
        l.set(MAX_QUEUES, 2);
        assert_eq!(l.reached(MAX_QUEUES, 1), None);
        assert_eq!(l.reached(MAX_QUEUES, 2), Some(2));
        assert_eq!(l.reached(MAX_CONNECTIONS, 2), None);
    }
}
