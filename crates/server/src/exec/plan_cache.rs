//! The plan cache: per collection and query shape, the plan the last race
//! chose (an index scan or an OR of scans), so a query of a known shape
//! skips the trial runs. An intersection that wins is not cached: its
//! scans can read on without returning a record, where the watch of a
//! cached plan's trial (below) would not see it degrade. An entry
//! holds only while the collection's ready indexes are the ones it was
//! chosen among (any index built, dropped or hidden since makes it miss),
//! and `planCacheClear` empties a collection's entries. `$planCacheStats`
//! lists them; explain shows a read's `queryHash` and `planCacheKey`.
//!
//! A `find` that reads by a cached plan is watched through its trial, as
//! mongod's cached plan stage does (`access::watch_trial`): if the plan
//! works more than `replan_budget` of its entry's trial works before it
//! has matched a trial's worth of documents, the read drops the entry,
//! races the candidates again and reads by the new winner (nothing is
//! returned before that).

use bson::{doc, Document};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Entries kept before the cache starts over.
const ENTRIES_MAX: usize = 5000;

/// How many times its trial's works a cached plan may do before it is
/// replanned (mongod's `internalQueryCacheEvictionRatio`).
const EVICTION_RATIO: f64 = 10.0;

/// Works below which a cached plan is never judged degraded.
const EVICTION_WORKS_MIN: u64 = 1000;

/// A cached plan: its kind and the index scans it reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedPlan {
    pub kind: PlanKind,
    pub scans: Vec<CachedScan>,
}

/// A scan as the cache tells it from another contender of the same
/// shape: its index, the key pattern it reads by, and how it reads (in
/// the sort's order, backwards, the whole index).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedScan {
    pub name: String,
    pub key: Document,
    pub sorted: bool,
    pub reverse: bool,
    pub whole: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PlanKind {
    /// FETCH over one IXSCAN.
    Scan,
    /// FETCH over OR over the scans.
    Or,
}

impl CachedPlan {
    /// As `$planCacheStats` shows it (`cachedPlan`).
    fn shown(&self) -> Document {
        let ixscan =
            |s: &CachedScan| doc! { "stage": "IXSCAN", "keyPattern": s.key.clone(), "indexName": s.name.clone() };
        let input = match self.kind {
            PlanKind::Scan => self.scans.first().map(ixscan).unwrap_or_default(),
            PlanKind::Or => {
                let inputs: Vec<Document> = self.scans.iter().map(ixscan).collect();
                doc! { "stage": "OR", "inputStages": inputs }
            }
        };
        doc! { "stage": "FETCH", "inputStage": input }
    }
}

/// One cached choice.
#[derive(Clone)]
pub(crate) struct Entry {
    /// The indexes it was chosen among.
    among: String,
    pub plan: CachedPlan,
    /// `{query, sort, projection}` of the read it was chosen for.
    pub created_from: Document,
    /// The winner's work in its trial.
    pub works: u64,
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
    /// The cached winner for `shape` on `ns` among `indexes`, and its
    /// trial's works.
    pub(crate) fn get(&self, ns: &str, shape: &str, indexes: &str) -> Option<(CachedPlan, u64)> {
        let entries = self.entries.lock();
        let entry = entries.get(&(ns.to_string(), shape.to_string()))?;
        (entry.among == indexes).then(|| (entry.plan.clone(), entry.works))
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
    pub(crate) fn entry(plan: CachedPlan, created_from: Document, works: u64) -> Entry {
        Entry { among: String::new(), plan, created_from, works, created: bson::DateTime::now() }
    }

    /// The work a read by a cached plan whose trial did `works` may do
    /// before it has matched a trial's worth of documents: more, and it
    /// is planned again (mongod's `internalQueryCacheEvictionRatio`).
    pub(crate) fn replan_budget(works: u64) -> u64 {
        ((works as f64 * EVICTION_RATIO) as u64).max(EVICTION_WORKS_MIN)
    }

    /// Forget the entry of `shape` on `ns` (its plan degraded).
    pub(crate) fn remove(&self, ns: &str, shape: &str) {
        self.entries.lock().remove(&(ns.to_string(), shape.to_string()));
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
                    "cachedPlan": e.plan.shown(),
                    "host": host,
                }
            })
            .collect();
        out.sort_by(|a, b| a.get_str("queryHash").ok().cmp(&b.get_str("queryHash").ok()));
        out
    }
}
