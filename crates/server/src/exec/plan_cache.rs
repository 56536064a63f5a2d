//! The plan cache: per collection and query shape, the index the last
//! race chose, so a query of a known shape skips the trial runs. An entry
//! holds only while the collection's ready indexes are the ones it was
//! chosen among (any index built, dropped or hidden since makes it miss),
//! and `planCacheClear` empties a collection's entries.
//!
//! Unlike mongod's, an entry is not replanned when its plan later does
//! much more work than the race measured.

use parking_lot::Mutex;
use std::collections::HashMap;

/// Entries kept before the cache starts over.
const ENTRIES_MAX: usize = 5000;

#[derive(Default)]
pub struct PlanCache {
    /// (namespace, query shape) -> (the indexes it was chosen among, the
    /// winning index's name).
    entries: Mutex<HashMap<(String, String), (String, String)>>,
}

impl PlanCache {
    /// The cached winner for `shape` on `ns` among `indexes`.
    pub(crate) fn get(&self, ns: &str, shape: &str, indexes: &str) -> Option<String> {
        let entries = self.entries.lock();
        let (among, winner) = entries.get(&(ns.to_string(), shape.to_string()))?;
        (among == indexes).then(|| winner.clone())
    }

    pub(crate) fn put(&self, ns: &str, shape: &str, indexes: &str, winner: &str) {
        let mut entries = self.entries.lock();
        if entries.len() >= ENTRIES_MAX {
            entries.clear();
        }
        entries.insert((ns.to_string(), shape.to_string()), (indexes.to_string(), winner.to_string()));
    }

    /// Forget every entry of `ns`; returns how many there were.
    pub(crate) fn clear(&self, ns: &str) -> usize {
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|(n, _), _| n != ns);
        before - entries.len()
    }
}
