//! The plan cache: per collection and query shape, the index the last
//! race chose, so a query of a known shape skips the trial runs. An entry
//! holds only while the collection's ready indexes are the ones it was
//! chosen among (any index built, dropped or hidden since makes it miss),
//! and `planCacheClear` empties a collection's entries. `$planCacheStats`
//! lists them; explain shows a read's `queryHash` and `planCacheKey`.
//!
//! A `find` whose cached plan does more than ten times the work per
//! document its trial measured drops the entry, so the next read of the
//! shape races again (`check`; mongod replans within the same read,
//! here the read that notices finishes on its plan).

use bson::{doc, Document};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Entries kept before the cache starts over.
const ENTRIES_MAX: usize = 5000;

/// How many times its trial's work per document a cached plan may do
/// before it is replanned (mongod's `internalQueryCacheEvictionRatio`).
const EVICTION_RATIO: f64 = 10.0;

/// Work below which a cached plan is never judged degraded.
const EVICTION_WORKS_MIN: u64 = 1000;

/// One cached choice.
#[derive(Clone)]
pub(crate) struct Entry {
    /// The indexes it was chosen among.
    among: String,
    pub winner: String,
    /// The winner's key pattern.
    pub key_pattern: Document,
    /// `{query, sort, projection}` of the read it was chosen for.
    pub created_from: Document,
    /// The winner's work in its trial, and the documents it matched.
    pub works: u64,
    pub results: u64,
    pub created: bson::DateTime,
}

#[derive(Default)]
pub struct PlanCache {
    /// (namespace, query shape) -> the entry.
    entries: Mutex<HashMap<(String, String), Entry>>,
}

/// mongod's `queryHash`: eight hex digits of the query shape.
pub(crate) fn query_hash(shape: &str) -> String {
    format!("{:08X}", crc32c::crc32c(shape.as_bytes()))
}

/// mongod's `planCacheKey`: the shape with the indexes it may use.
pub(crate) fn plan_cache_key(shape: &str, among: &str) -> String {
    format!("{:08X}", crc32c::crc32c_append(crc32c::crc32c(shape.as_bytes()), among.as_bytes()))
}

impl PlanCache {
    /// The cached winner for `shape` on `ns` among `indexes`: its name and
    /// the key pattern it was read by.
    pub(crate) fn get(&self, ns: &str, shape: &str, indexes: &str) -> Option<(String, Document)> {
        let entries = self.entries.lock();
        let entry = entries.get(&(ns.to_string(), shape.to_string()))?;
        (entry.among == indexes).then(|| (entry.winner.clone(), entry.key_pattern.clone()))
    }

    /// Remember `winner` for `shape` on `ns` among `indexes`.
    pub(crate) fn put(&self, ns: &str, shape: &str, indexes: &str, winner: Entry) {
        let mut entries = self.entries.lock();
        if entries.len() >= ENTRIES_MAX {
            entries.clear();
        }
        entries.insert((ns.to_string(), shape.to_string()), Entry { among: indexes.to_string(), ..winner });
    }

    /// A new entry (`put` fills in the indexes it was chosen among).
    pub(crate) fn entry(winner: &str, key_pattern: Document, created_from: Document, trial: (u64, u64)) -> Entry {
        Entry {
            among: String::new(),
            winner: winner.to_string(),
            key_pattern,
            created_from,
            works: trial.0,
            results: trial.1,
            created: bson::DateTime::now(),
        }
    }

    /// A read of `shape` on `ns` that took its plan from the cache did
    /// `works` for `returned` documents: when that is more than
    /// `EVICTION_RATIO` times the work per document its trial measured
    /// (and more than `EVICTION_WORKS_MIN` in all), the entry goes, so
    /// the next read of the shape races its candidates again (mongod's
    /// replanning of a degraded cached plan). True when it went.
    pub(crate) fn check(&self, ns: &str, shape: &str, works: u64, returned: u64) -> bool {
        if works < EVICTION_WORKS_MIN {
            return false;
        }
        let mut entries = self.entries.lock();
        let key = (ns.to_string(), shape.to_string());
        let Some(e) = entries.get(&key) else { return false };
        // Per document returned (one more, so none returned still counts).
        let measured = e.works as f64 / (e.results + 1) as f64;
        let now = works as f64 / (returned + 1) as f64;
        let degraded = now > EVICTION_RATIO * measured;
        if degraded {
            entries.remove(&key);
        }
        degraded
    }

    /// Forget every entry of `ns`; returns how many there were.
    pub(crate) fn clear(&self, ns: &str) -> usize {
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|(n, _), _| n != ns);
        before - entries.len()
    }

    /// `$planCacheStats`: the entries of `ns` that still hold (chosen
    /// among the indexes it has now, `among`), in mongod's shape.
    pub(crate) fn stats(&self, ns: &str, among: &str, host: &str) -> Vec<Document> {
        let entries = self.entries.lock();
        let mut out: Vec<Document> = entries
            .iter()
            .filter(|((n, _), e)| n == ns && e.among == among)
            .map(|((_, shape), e)| {
                doc! {
                    "version": "1",
                    "queryHash": query_hash(shape),
                    "planCacheShapeHash": query_hash(shape),
                    "planCacheKey": plan_cache_key(shape, &e.among),
                    "isActive": true,
                    "works": e.works as i64,
                    "timeOfCreation": e.created,
                    "createdFromQuery": e.created_from.clone(),
                    "cachedPlan": {
                        "stage": "FETCH",
                        "inputStage": { "stage": "IXSCAN", "keyPattern": e.key_pattern.clone(), "indexName": e.winner.clone() },
                    },
                    "host": host,
                }
            })
            .collect();
        out.sort_by(|a, b| a.get_str("queryHash").ok().cmp(&b.get_str("queryHash").ok()));
        out
    }
}
