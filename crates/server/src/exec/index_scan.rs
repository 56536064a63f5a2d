//! IXSCAN and FETCH: the entries of one secondary index within the
//! planner's bounds, their record ids deduplicated in a multikey index,
//! and their documents, counting what explain reports (keys and documents
//! examined, seeks, duplicates tested and dropped).
//!
//! The bounds become ranges of index keys (KeyString bytes): fields
//! pinned to points extend a prefix, one range per combination of points
//! (up to `RANGES_MAX`), the first field that is not a point closes the
//! range. Every key read is still checked against every field's
//! intervals, so a range only narrows what is read.
//!
//! Invariant: each range is read in chunks, each chunk in its own
//! snapshot (as a collection scan is), resuming after the last key read.

use crate::exec::access::Records;
use bson::Bson;
use doc::catalog::{Collection, DocError};
use doc::index::keys::KeyField;
use doc::index::keys::KeyValues;
use doc::index::Index;
use query::bounds::Interval;
use query::plan::{IndexScan, KeyRange};
use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The most key ranges one scan is split into; past it, the last field
/// that multiplied them closes one wider range instead.
const RANGES_MAX: usize = 1024;

/// Index entries read per storage call.
const CHUNK_KEYS: usize = 256;

/// What one index scan did (explain's IXSCAN and FETCH counters).
#[derive(Debug, Default)]
pub(crate) struct ScanStats {
    pub keys_examined: AtomicU64,
    pub docs_examined: AtomicU64,
    pub seeks: AtomicU64,
    pub dups_tested: AtomicU64,
    pub dups_dropped: AtomicU64,
}

impl ScanStats {
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A key range `[start, end)` of KeyString bytes.
type Range = (Vec<u8>, Vec<u8>);

/// The key ranges of `bounds` over an index whose fields are descending
/// where `descending` says, in index order.
pub(crate) fn key_ranges(bounds: &[Vec<Interval>], descending: &[bool]) -> Vec<Range> {
    let mut out = Vec::new();
    extend(&mut Vec::new(), bounds, descending, &mut out);
    out
}

/// Above every byte that can follow a complete value's encoding.
const PAST: u8 = 0xff;

fn extend(prefix: &mut Vec<u8>, bounds: &[Vec<Interval>], descending: &[bool], out: &mut Vec<Range>) {
    let Some((intervals, rest)) = bounds.split_first() else {
        let mut end = prefix.clone();
        end.push(PAST);
        out.push((prefix.clone(), end));
        return;
    };
    let desc = descending[0];
    let ordered: Vec<&Interval> = if desc { intervals.iter().rev().collect() } else { intervals.iter().collect() };
    let points = ordered.iter().all(|i| i.is_point()) && !rest.is_empty();
    for i in ordered {
        let at = prefix.len();
        if points && out.len() + intervals.len() <= RANGES_MAX {
            append(prefix, &i.low, desc);
            extend(prefix, rest, &descending[1..], out);
            prefix.truncate(at);
            continue;
        }
        // In index order: the low end is the interval's high end on a
        // descending field.
        let (lo, lo_in, hi, hi_in) = if desc {
            (&i.high, i.high_inclusive, &i.low, i.low_inclusive)
        } else {
            (&i.low, i.low_inclusive, &i.high, i.high_inclusive)
        };
        let mut start = prefix.clone();
        append(&mut start, lo, desc);
        if !lo_in {
            start.push(PAST);
        }
        let mut end = prefix.clone();
        append(&mut end, hi, desc);
        if hi_in {
            end.push(PAST);
        }
        out.push((start, end));
    }
}

/// The key range from a `min()` key (included; none: the first key) to a
/// `max()` key (excluded; none: past the last).
fn min_max_range((min, max): &KeyRange, fields: &[KeyField]) -> Range {
    let key = |values: &[Bson]| {
        let values: Vec<Option<Bson>> = values.iter().cloned().map(Some).collect();
        doc::index::keys::key_string(&values, fields)
    };
    let start = min.as_deref().map(key).unwrap_or_default();
    let end = max.as_deref().map(key).unwrap_or_else(|| vec![PAST; 1]);
    (start, end)
}

fn append(out: &mut Vec<u8>, v: &Bson, descending: bool) {
    let at = out.len();
    doc::keystring::append(out, v);
    if descending {
        out[at..].iter_mut().for_each(|b| *b = !*b);
    }
}

/// Whether every field's value (a missing one as null) lies in its
/// intervals.
fn in_bounds(values: &[Option<Bson>], bounds: &[Vec<Interval>]) -> bool {
    values.iter().zip(bounds).all(|(v, field)| field.iter().any(|i| i.contains(v.as_ref().unwrap_or(&Bson::Null))))
}

/// The documents of `ix`'s entries within the scan's bounds (or its
/// `min()`/`max()` keys), in index order, each once; when covered,
/// documents of the indexed fields made from the keys, none fetched.
pub(crate) fn records(
    engine: storage::Engine,
    coll: Arc<Collection>,
    ix: Arc<Index>,
    plan: &IndexScan,
    stats: Arc<ScanStats>,
) -> Records {
    let (bounds, covered) = (plan.bounds.clone(), plan.covered);
    let descending: Vec<bool> = ix.spec.fields.iter().map(|f| f.descending).collect();
    let ranges = match &plan.key_range {
        Some(range) => vec![min_max_range(range, &ix.spec.fields)],
        None => key_ranges(&bounds, &descending),
    };
    // Over the keys as stored (a long key cut, with a digest).
    let ranges: VecDeque<Range> = ranges.into_iter().map(|(s, e)| doc::keystring::scan_bounds(s, e)).collect();
    let multikey = ix.is_multikey();
    // A `min()`/`max()` scan checks each key against them whole: its
    // range was widened where they are longer than a stored key.
    let min_max = plan.key_range.as_ref().map(|r| {
        let (lo, hi) = min_max_range(r, &ix.spec.fields);
        (lo, r.1.as_ref().map(|_| hi))
    });
    let mut scan = Scan {
        min_max,
        engine,
        coll,
        ix,
        bounds,
        stats,
        ranges,
        after: None,
        pending: VecDeque::new(),
        seen: HashSet::new(),
        multikey,
        covered,
        failed: false,
    };
    Box::new(std::iter::from_fn(move || scan.next_record()))
}

struct Scan {
    engine: storage::Engine,
    coll: Arc<Collection>,
    ix: Arc<Index>,
    bounds: Vec<Vec<Interval>>,
    stats: Arc<ScanStats>,
    ranges: VecDeque<Range>,
    /// The last key read in the current range.
    after: Option<Vec<u8>>,
    /// Record ids to return, with their key's values.
    pending: VecDeque<(u64, KeyValues)>,
    seen: HashSet<u64>,
    multikey: bool,
    /// Answer from the keys alone: a document of the indexed fields.
    covered: bool,
    /// `min()`'s key (included) and `max()`'s (excluded), whole.
    min_max: Option<(Vec<u8>, Option<Vec<u8>>)>,
    failed: bool,
}

impl Scan {
    fn next_record(&mut self) -> Option<Result<(u64, bson::Document), DocError>> {
        loop {
            if self.failed {
                return None;
            }
            while self.pending.is_empty() {
                match self.refill() {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(e) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                }
            }
            let (rid, values) = self.pending.pop_front().expect("refilled");
            // Covered while its fields hold no arrays; an index that turns
            // multikey during the scan is read through its documents.
            if self.covered && !self.ix.is_multikey() {
                return Some(Ok((rid, self.key_document(values))));
            }
            self.stats.docs_examined.fetch_add(1, Ordering::Relaxed);
            match self.coll.get(&self.engine, rid) {
                Ok(Some(doc)) => return Some(Ok((rid, doc))),
                // Deleted since its key was read, as if just before.
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }

    /// A covered read's document: each indexed field set to its key value
    /// (dotted paths as nested documents).
    fn key_document(&self, values: KeyValues) -> bson::Document {
        let mut d = bson::Document::new();
        for (field, v) in self.ix.spec.fields.iter().zip(values) {
            if let Some(v) = v {
                set_path(&mut d, &field.path, v);
            }
        }
        d
    }

    /// Whether a key lies between `min()` and `max()` (true without them).
    fn within_min_max(&self, values: &[Option<Bson>]) -> bool {
        let Some((lo, hi)) = &self.min_max else { return true };
        let key = doc::index::keys::key_string(values, &self.ix.spec.fields);
        key >= *lo && hi.as_ref().is_none_or(|hi| key < *hi)
    }

    /// Read the next chunk of keys; false once every range is done.
    fn refill(&mut self) -> Result<bool, DocError> {
        let Some((start, end)) = self.ranges.front().cloned() else { return Ok(false) };
        let lower = match self.after.take() {
            Some(k) => Bound::Excluded(k),
            None => {
                self.stats.seeks.fetch_add(1, Ordering::Relaxed);
                Bound::Included(start)
            }
        };
        // An index may turn multikey while it is read.
        self.multikey = self.multikey || self.ix.is_multikey();
        let mut c = self.engine.cursor(self.ix.table())?;
        c.set_bounds(lower, Bound::Excluded(end));
        let mut e = c.first()?;
        let mut n = 0;
        while let Some((k, v)) = e {
            self.stats.keys_examined.fetch_add(1, Ordering::Relaxed);
            let (rid, values) = self.ix.decode_entry(&k, &v)?;
            if in_bounds(&values, &self.bounds) && self.within_min_max(&values) {
                // Each record once: a multikey index holds several keys
                // of it, and a write during the scan may move its key
                // ahead of the scan (counted as explain counts: only in
                // a multikey index).
                let first = self.seen.insert(rid);
                if self.multikey {
                    self.stats.dups_tested.fetch_add(1, Ordering::Relaxed);
                    if !first {
                        self.stats.dups_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if first {
                    self.pending.push_back((rid, values));
                }
            }
            n += 1;
            if n == CHUNK_KEYS {
                self.after = Some(k.to_vec());
                return Ok(true);
            }
            e = c.next()?;
        }
        self.ranges.pop_front();
        Ok(true)
    }
}

/// Set `path` in `d` to `v`, making the documents on the way.
fn set_path(d: &mut bson::Document, path: &[String], v: Bson) {
    match path {
        [] => {}
        [last] => {
            d.insert(last.clone(), v);
        }
        [first, rest @ ..] => {
            if !matches!(d.get(first), Some(Bson::Document(_))) {
                d.insert(first.clone(), bson::Document::new());
            }
            if let Some(Bson::Document(inner)) = d.get_mut(first) {
                set_path(inner, rest, v);
            }
        }
    }
}
