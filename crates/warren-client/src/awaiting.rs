//! A call's entry among those awaiting an answer (a response by
//! correlation id, an RPC reply by message id), removed however the call
//! ends: answered (the entry is gone already), failed, timed out, or
//! dropped by its caller while it waited. Without it each dropped call
//! would leave its entry behind for good.

use std::collections::HashMap;
use std::hash::Hash;

use parking_lot::Mutex;

/// Removes its key from the map when dropped.
pub(crate) struct Awaiting<'a, K: Hash + Eq, V> {
    map: &'a Mutex<HashMap<K, V>>,
    key: K,
}

impl<'a, K: Hash + Eq + Clone, V> Awaiting<'a, K, V> {
    /// Put `value` in `map` under `key` until this is dropped.
    pub(crate) fn insert(map: &'a Mutex<HashMap<K, V>>, key: K, value: V) -> Awaiting<'a, K, V> {
        map.lock().insert(key.clone(), value);
        Awaiting { map, key }
    }
}

impl<K: Hash + Eq, V> Drop for Awaiting<'_, K, V> {
    fn drop(&mut self) {
        self.map.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_goes_when_the_call_does() {
        let map = Mutex::new(HashMap::new());
        let a = Awaiting::insert(&map, 1u32, "one");
        let _b = Awaiting::insert(&map, 2u32, "two");
        assert_eq!(map.lock().len(), 2);
        drop(a);
        assert_eq!(map.lock().keys().collect::<Vec<_>>(), vec![&2]);
    }
}
