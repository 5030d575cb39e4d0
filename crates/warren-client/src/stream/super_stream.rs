//! Super streams: a name (on the broker, a direct exchange) over
//! partition streams, each bound under a binding key. Producers route
//! each message to a partition (by the hash of a key drawn from it, or by
//! the key itself); consumers read every partition. This file manages
//! them (RabbitMQ 3.13's CreateSuperStream and DeleteSuperStream,
//! 3.11's Partitions and Route) and names the routing strategies.

use warren_stream::command::key;
use warren_stream::wire::{put_pairs, put_string};

use super::commands;
use super::environment::{Environment, StreamOptions};
use super::error::Error;

/// A super stream's partitions and their binding keys.
///
/// ```
/// use warren_client::stream::SuperStreamSpec;
///
/// let by_number = SuperStreamSpec::partitions(3);
/// assert_eq!(by_number.streams("invoices"), ["invoices-0", "invoices-1", "invoices-2"]);
/// let by_key = SuperStreamSpec::binding_keys(["amer", "emea", "apac"]);
/// assert_eq!(by_key.streams("invoices")[1], "invoices-emea");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperStreamSpec {
    keys: Vec<String>,
}

impl SuperStreamSpec {
    /// `n` partitions, `<name>-0` to `<name>-<n-1>`, bound under `0` to
    /// `<n-1>` (for hash routing).
    pub fn partitions(n: u16) -> SuperStreamSpec {
        SuperStreamSpec {
            keys: (0..n).map(|i| i.to_string()).collect(),
        }
    }

    /// A partition `<name>-<key>` for each key, bound under it (for key
    /// routing).
    pub fn binding_keys<I, S>(keys: I) -> SuperStreamSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SuperStreamSpec {
            keys: keys.into_iter().map(Into::into).collect(),
        }
    }

    /// The partition streams of super stream `name`, in order.
    pub fn streams(&self, name: &str) -> Vec<String> {
        self.keys.iter().map(|k| format!("{name}-{k}")).collect()
    }
}

/// How a super stream producer picks a message's partition from the
/// routing key it draws from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RoutingStrategy {
    /// The partition at the key's murmur3 hash (x86, 32 bits, the Java
    /// client's seed) modulo the number of partitions, as every RabbitMQ
    /// stream client does it: the same key always lands on the same
    /// partition whichever client wrote it.
    #[default]
    Hash,
    /// The partitions bound under the key itself (the broker's Route
    /// command, asked once per key).
    Key,
}

/// The Java client's seed for the partition hash.
const HASH_SEED: u32 = 104_729;

/// The index of the partition `key` hashes to among `partitions`.
pub(crate) fn hash_partition(key: &str, partitions: usize) -> usize {
    let h =
        murmur3::murmur3_32(&mut std::io::Cursor::new(key.as_bytes()), HASH_SEED).expect("reading memory");
    (h as usize) % partitions.max(1)
}

impl Environment {
    /// Create a super stream and its partitions (each with `options`).
    /// RabbitMQ 3.13 and later (and Warren).
    ///
    /// ```no_run
    /// use warren_client::stream::{StreamOptions, SuperStreamSpec};
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// env.create_super_stream("invoices", &SuperStreamSpec::partitions(3), &StreamOptions::default()).await?;
    /// assert_eq!(env.partitions("invoices").await?.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn create_super_stream(
        &self,
        name: &str,
        spec: &SuperStreamSpec,
        options: &StreamOptions,
    ) -> Result<(), Error> {
        let partitions = spec.streams(name);
        let arguments = options.arguments();
        self.locator()
            .await?
            .request("create super stream", key::CREATE_SUPER_STREAM, |out| {
                put_string(out, name);
                commands::put_strings(out, &partitions);
                commands::put_strings(out, &spec.keys);
                put_pairs(out, &arguments);
            })
            .await
            .map(|_| ())
    }

    /// Delete a super stream and its partitions.
    pub async fn delete_super_stream(&self, name: &str) -> Result<(), Error> {
        self.locator()
            .await?
            .request("delete super stream", key::DELETE_SUPER_STREAM, |out| {
                put_string(out, name)
            })
            .await
            .map(|_| ())
    }

    /// A super stream's partition streams, in partition order.
    pub async fn partitions(&self, super_stream: &str) -> Result<Vec<String>, Error> {
        let r = self
            .locator()
            .await?
            .request("partitions", key::PARTITIONS, |out| put_string(out, super_stream))
            .await?;
        commands::strings(r.rest)
    }

    /// The partitions of `super_stream` bound under `routing_key`.
    pub async fn route(&self, routing_key: &str, super_stream: &str) -> Result<Vec<String>, Error> {
        let r = self
            .locator()
            .await?
            .request("route", key::ROUTE, |out| {
                put_string(out, routing_key);
                put_string(out, super_stream);
            })
            .await?;
        commands::strings(r.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_murmur3_x86_32() {
        // Reference values of MurmurHash3_x86_32.
        let h = |s: &str, seed| murmur3::murmur3_32(&mut std::io::Cursor::new(s.as_bytes()), seed).unwrap();
        assert_eq!(h("", 0), 0);
        assert_eq!(h("The quick brown fox jumps over the lazy dog", 0), 0x2e4f_f723);
        // Keys spread over the partitions, and always to the same one.
        let mut seen = [0usize; 3];
        for i in 0..300 {
            let p = hash_partition(&format!("order-{i}"), 3);
            assert_eq!(p, hash_partition(&format!("order-{i}"), 3));
            seen[p] += 1;
        }
        assert!(seen.iter().all(|&n| n > 60), "{seen:?}");
    }
}
