//! IXSCAN and FETCH: the entries of one secondary index within the
//! planner's bounds, their record ids deduplicated in a multikey index,
//! and their documents, counting what explain reports (keys and documents
//! examined, seeks, duplicates tested and dropped).
//!
//! The bounds become ranges of index keys (KeyString bytes): fields
//! pinned to points extend a prefix, one range per combination of points
//! (up to `RANGES_MAX`), the first field that is not a point closes the
//! range. When the ranges are exact (each closes on a field after which
//! every field is unbounded, and no range end is cut to the stored key
//! length) every key inside them lies in the bounds; otherwise every key
//! read is checked against every field's intervals, so a range only
//! narrows what is read. A key stored cut is always checked.
//!
//! A backward scan (for a sort the index gives in reverse) reads the
//! ranges last to first, each from its end.
//!
//! Invariant: each range is read in chunks, each chunk in its own
//! snapshot (as a collection scan is), resuming after (backward: before)
//! the last key read.

use crate::exec::access::Records;
use bson::Bson;
use doc::catalog::{Collection, DocError};
use doc::index::keys::KeyField;
use doc::index::keys::KeyValues;
use doc::index::Index;
use doc::stored::Stored;
use query::bounds::Interval;
use query::plan::{IndexScan, KeyRange};
use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use storage::Read;

/// The most key ranges one scan is split into; past it, the last field
/// that multiplied them closes one wider range instead.
const RANGES_MAX: usize = 1024;

/// Index entries read per storage call.
const CHUNK_KEYS: usize = 256;

/// What one index scan did (explain's IXSCAN and FETCH counters); for
/// an OR, its own (documents fetched, duplicates) and its branches'.
#[derive(Debug, Default)]
pub(crate) struct ScanStats {
    pub keys_examined: AtomicU64,
    pub docs_examined: AtomicU64,
    pub seeks: AtomicU64,
    pub dups_tested: AtomicU64,
    pub dups_dropped: AtomicU64,
    /// Records an OR's or an intersection's branch gave it.
    pub advanced: AtomicU64,
    /// An intersection's branch: its records no other branch held
    /// (explain's `failedAnd_<i>`).
    pub failed_and: AtomicU64,
    /// An OR's branch scans, in order.
    pub branches: parking_lot::Mutex<Vec<Arc<ScanStats>>>,
}

impl ScanStats {
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// A counter summed over this scan and its branches.
    pub(crate) fn total(&self, pick: fn(&ScanStats) -> &AtomicU64) -> u64 {
        Self::get(pick(self)) + self.branches.lock().iter().map(|b| b.total(pick)).sum::<u64>()
    }
}

/// A key range `[start, end)` of KeyString bytes.
type Range = (Vec<u8>, Vec<u8>);

/// The key ranges of `bounds` over an index whose fields are descending
/// where `descending` says, in index order, and whether they are exact:
/// every key inside them lies in the bounds (each range closes on a field
/// after which every field is unbounded), so a scan need not check its
/// keys' values.
fn key_ranges_exact(bounds: &[Vec<Interval>], descending: &[bool]) -> (Vec<Range>, bool) {
    let (mut out, mut exact) = (Vec::new(), true);
    extend(&mut Vec::new(), bounds, descending, &mut out, &mut exact);
    (out, exact)
}

/// Above every byte that can follow a complete value's encoding.
const PAST: u8 = 0xff;

fn extend(prefix: &mut Vec<u8>, bounds: &[Vec<Interval>], descending: &[bool], out: &mut Vec<Range>, exact: &mut bool) {
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
            extend(prefix, rest, &descending[1..], out, exact);
            prefix.truncate(at);
            continue;
        }
        // The range bounds this field alone.
        *exact &= rest.iter().all(|f| matches!(f.as_slice(), [i] if i.is_all()));
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

/// The whole-key ranges `plan` reads of `ix`, and whether they are exact
/// (see the module): never for a `min()`/`max()` scan or a wildcard index,
/// nor where a range end is longer than a stored key (`scan_bounds` cuts
/// it, widening the range).
fn scan_ranges(ix: &Index, plan: &IndexScan) -> (Vec<Range>, bool) {
    if let Some(range) = &plan.key_range {
        return (vec![min_max_range(range, &ix.spec.fields)], false);
    }
    let descending: Vec<bool> = ix.spec.fields.iter().map(|f| f.descending).collect();
    let (ranges, exact) = key_ranges_exact(&plan.bounds, &descending);
    let inline = |key: &Vec<u8>| key.len() <= doc::limits::key_inline_max_bytes;
    let exact = exact && ix.spec.wildcard.is_none() && ranges.iter().all(|(s, e)| inline(s) && inline(e));
    (ranges, exact)
}

/// Whether reading `plan` of `ix` examines only keys within its bounds,
/// each of a different document (exact ranges on an index that is not
/// multikey): so a read that stops after n documents has read about n
/// keys.
pub(crate) fn reads_only_matches(ix: &Index, plan: &IndexScan) -> bool {
    !ix.is_multikey() && scan_ranges(ix, plan).1
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
    values.iter().zip(bounds).all(|(v, field)| query::bounds::any_contains(field, v.as_ref().unwrap_or(&Bson::Null)))
}

/// The documents of `ix`'s entries within the scan's bounds (or its
/// `min()`/`max()` keys), in index order, each once; when covered,
/// documents of the indexed fields made from the keys, none fetched.
pub(crate) fn records(
    reader: storage::Reader,
    coll: Arc<Collection>,
    ix: Arc<Index>,
    plan: &IndexScan,
    stats: Arc<ScanStats>,
) -> Records {
    let mut scan = Scan::new(reader, coll, ix, plan, stats);
    Box::new(std::iter::from_fn(move || scan.next_record()))
}

/// The scans of an OR's or an intersection's branches, reading record ids
/// only, each counting into its own stats under `stats`.
fn branch_scans(
    reader: &storage::Reader,
    coll: &Arc<Collection>,
    branches: Vec<(Arc<Index>, IndexScan)>,
    stats: &ScanStats,
) -> Vec<Scan> {
    branches
        .into_iter()
        .map(|(ix, plan)| {
            let child = Arc::new(ScanStats::default());
            stats.branches.lock().push(child.clone());
            let mut scan = Scan::new(reader.clone(), coll.clone(), ix, &plan, child);
            scan.ids_only = true;
            scan
        })
        .collect()
}

/// The record ids of an OR's branches, each once, and their documents:
/// the branches' scans read keys only, the union fetches (mongod's FETCH
/// over OR), counting in `stats` what it fetched and the duplicates it
/// dropped.
pub(crate) fn union(
    reader: storage::Reader,
    coll: Arc<Collection>,
    branches: Vec<(Arc<Index>, IndexScan)>,
    stats: Arc<ScanStats>,
) -> Records {
    let mut scans: VecDeque<Scan> = branch_scans(&reader, &coll, branches, &stats).into();
    let mut seen = HashSet::new();
    Box::new(std::iter::from_fn(move || loop {
        let scan = scans.front_mut()?;
        let rid = match scan.next_record() {
            None => {
                scans.pop_front();
                continue;
            }
            Some(Err(e)) => {
                scans.clear();
                return Some(Err(e));
            }
            Some(Ok((rid, _))) => {
                scan.stats.advanced.fetch_add(1, Ordering::Relaxed);
                rid
            }
        };
        stats.dups_tested.fetch_add(1, Ordering::Relaxed);
        if !seen.insert(rid) {
            stats.dups_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        stats.docs_examined.fetch_add(1, Ordering::Relaxed);
        match coll.get_stored(&reader, rid) {
            Ok(Some(doc)) => return Some(Ok((rid, doc))),
            // Deleted since its key was read, as if just before.
            Ok(None) => {}
            Err(e) => {
                scans.clear();
                return Some(Err(e));
            }
        }
    }))
}

/// The records every branch holds, fetched (mongod's FETCH over
/// AND_SORTED): each branch is a scan over one point per field, so it
/// returns its record ids in increasing order, and the branches are
/// merged by them. A branch that returns a smaller id than before would
/// make the merge miss records: that ends the read with an error.
pub(crate) fn intersection(
    reader: storage::Reader,
    coll: Arc<Collection>,
    branches: Vec<(Arc<Index>, IndexScan)>,
    stats: Arc<ScanStats>,
) -> Records {
    debug_assert!(branches.iter().all(|(_, p)| p.bounds.iter().all(|f| f.len() == 1 && f[0].is_point())));
    let mut scans = branch_scans(&reader, &coll, branches, &stats);
    // Each branch's current record id (`None`: read the next), and the
    // last it returned.
    let mut heads: Vec<Option<u64>> = vec![None; scans.len()];
    let mut last: Vec<Option<u64>> = vec![None; scans.len()];
    let mut done = scans.is_empty();
    Box::new(std::iter::from_fn(move || loop {
        if done {
            return None;
        }
        for (i, scan) in scans.iter_mut().enumerate() {
            if heads[i].is_some() {
                continue;
            }
            match scan.next_record() {
                None => {
                    done = true;
                    return None;
                }
                Some(Err(e)) => {
                    done = true;
                    return Some(Err(e));
                }
                Some(Ok((rid, _))) => {
                    if last[i].is_some_and(|l| rid <= l) {
                        done = true;
                        return Some(Err(DocError::Corrupt(format!(
                            "an intersection's scan of index {} returned record {rid} after {}",
                            scan.ix.spec.name,
                            last[i].unwrap_or_default()
                        ))));
                    }
                    scan.stats.advanced.fetch_add(1, Ordering::Relaxed);
                    (heads[i], last[i]) = (Some(rid), Some(rid));
                }
            }
        }
        let target = heads.iter().flatten().copied().max().expect("every branch has a head");
        if heads.iter().all(|h| *h == Some(target)) {
            heads.fill(None);
            stats.docs_examined.fetch_add(1, Ordering::Relaxed);
            match coll.get_stored(&reader, target) {
                Ok(Some(doc)) => return Some(Ok((target, doc))),
                // Deleted since its keys were read, as if just before.
                Ok(None) => continue,
                Err(e) => {
                    done = true;
                    return Some(Err(e));
                }
            }
        }
        // The branches behind the largest id pass their current one.
        for (i, scan) in scans.iter().enumerate() {
            if heads[i].is_some_and(|h| h < target) {
                scan.stats.failed_and.fetch_add(1, Ordering::Relaxed);
                heads[i] = None;
            }
        }
    }))
}

impl Scan {
    fn new(
        reader: storage::Reader,
        coll: Arc<Collection>,
        ix: Arc<Index>,
        plan: &IndexScan,
        stats: Arc<ScanStats>,
    ) -> Scan {
        let (bounds, covered) = (plan.bounds.clone(), plan.covered);
        let (ranges, exact) = scan_ranges(&ix, plan);
        // Over the keys as stored (a long key cut, with a digest).
        let mut ranges: VecDeque<Range> = ranges.into_iter().map(|(s, e)| doc::keystring::scan_bounds(s, e)).collect();
        if plan.reverse {
            ranges = ranges.into_iter().rev().collect();
        }
        // A wildcard index holds a document under several paths too.
        let multikey = ix.is_multikey() || ix.spec.wildcard.is_some();
        // A `min()`/`max()` scan checks each key against them whole: its
        // range was widened where they are longer than a stored key.
        let min_max = plan.key_range.as_ref().map(|r| {
            let (lo, hi) = min_max_range(r, &ix.spec.fields);
            (lo, r.1.as_ref().map(|_| hi))
        });
        Scan {
            exact,
            min_max,
            reader,
            coll,
            ix,
            bounds,
            stats,
            ranges,
            after: None,
            pending: VecDeque::new(),
            unreported: 0,
            seen: HashSet::new(),
            multikey,
            covered,
            reverse: plan.reverse,
            sorted: plan.sorted,
            ids_only: false,
            run: None,
            held: Vec::new(),
            failed: false,
        }
    }
}

struct Scan {
    reader: storage::Reader,
    coll: Arc<Collection>,
    ix: Arc<Index>,
    bounds: Vec<Vec<Interval>>,
    stats: Arc<ScanStats>,
    ranges: VecDeque<Range>,
    /// The last key read in the current range.
    after: Option<Vec<u8>>,
    /// Record ids to return, with their key's values and the keys read
    /// up to theirs (counted as examined when it is returned, so a read
    /// that stops early counts only what it used).
    pending: VecDeque<(u64, KeyValues, u64)>,
    /// Keys read since the last one put in `pending`.
    unreported: u64,
    seen: HashSet<u64>,
    multikey: bool,
    /// Answer from the keys alone: a document of the indexed fields.
    covered: bool,
    /// Every key within the ranges lies in the bounds (`key_ranges_exact`)
    /// unless stored cut (`Index::cut_prefix`): its values need no check.
    exact: bool,
    /// `min()`'s key (included) and `max()`'s (excluded), whole.
    min_max: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// Read each range from its end, the ranges last to first.
    reverse: bool,
    /// The read relies on the index order (an index-provided sort).
    sorted: bool,
    /// Return record ids alone (an OR's branch): no document fetched or
    /// made from the key.
    ids_only: bool,
    /// A sorted read's current run of long keys (`track_run`): their
    /// stored inline bytes, and the matching entries read so far.
    run: Option<Vec<u8>>,
    held: Vec<(u64, KeyValues, u64)>,
    failed: bool,
}

impl Scan {
    fn next_record(&mut self) -> Option<Result<(u64, Stored), DocError>> {
        loop {
            if self.failed {
                return None;
            }
            while self.pending.is_empty() {
                let more = self.refill();
                // Keys read with none to return (yet) are examined now.
                if self.pending.is_empty() {
                    self.stats.keys_examined.fetch_add(std::mem::take(&mut self.unreported), Ordering::Relaxed);
                }
                match more {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(e) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                }
            }
            let (rid, values, keys) = self.pending.pop_front().expect("refilled");
            self.stats.keys_examined.fetch_add(keys, Ordering::Relaxed);
            if self.ids_only {
                return Some(Ok((rid, Stored::owned(bson::Document::new()))));
            }
            // Covered while its fields hold no arrays; an index that turns
            // multikey during the scan is read through its documents.
            if self.covered && !self.ix.is_multikey() {
                return Some(Ok((rid, Stored::owned(self.key_document(values)))));
            }
            self.stats.docs_examined.fetch_add(1, Ordering::Relaxed);
            match self.coll.get_stored(&self.reader, rid) {
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

    /// Follow runs of long keys sharing their stored inline bytes (in
    /// digest order in the index) in a sorted read: `cut` is the inline
    /// bytes of the key just read, if it was stored cut. A run's entries
    /// are held until it ends, then released in key order, as the scan's
    /// direction reads them: by whole KeyString, then record id.
    fn track_run(&mut self, cut: Option<Vec<u8>>) {
        if self.run.is_some() && self.run != cut {
            let fields = &self.ix.spec.fields;
            let mut run = std::mem::take(&mut self.held);
            run.sort_by_cached_key(|(rid, values, _)| (doc::index::keys::key_string(values, fields), *rid));
            if self.reverse {
                run.reverse();
            }
            run.into_iter().for_each(|entry| self.admit(entry));
            self.run = None;
        }
        if self.run.is_none() {
            self.run = cut;
        }
    }

    /// Queue an entry to return unless its record was queued before: a
    /// multikey index holds several keys of it, and a write during the
    /// scan may move its key ahead of the scan (counted as explain counts:
    /// only in a multikey index). A dropped entry's keys are examined now.
    fn admit(&mut self, entry: (u64, KeyValues, u64)) {
        let first = self.seen.insert(entry.0);
        if self.multikey {
            self.stats.dups_tested.fetch_add(1, Ordering::Relaxed);
            if !first {
                self.stats.dups_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        match first {
            true => self.pending.push_back(entry),
            false => self.unreported += entry.2,
        }
    }

    /// Whether a key lies between `min()` and `max()` (true without them).
    fn within_min_max(&self, values: &[Option<Bson>]) -> bool {
        let Some((lo, hi)) = &self.min_max else { return true };
        let key = doc::index::keys::key_string(values, &self.ix.spec.fields);
        key >= *lo && hi.as_ref().is_none_or(|hi| key < *hi)
    }

    /// An entry's record id and key values. The `_id` index's entries
    /// hold none: its value comes from the record, as its key holds it
    /// (under the index's collation); `None` when the record was deleted
    /// since the key was read (the entry is passed over, as if deleted
    /// just before).
    fn decode_entry(&self, key: &[u8], value: &[u8]) -> Result<Option<(u64, KeyValues)>, DocError> {
        if self.ix.holds_values() {
            return self.ix.decode_entry(key, value).map(Some);
        }
        let rid = self.ix.entry_record(key, value)?;
        let Some(doc) = self.coll.get_stored(&self.reader, rid)? else { return Ok(None) };
        let id = doc.fields(&["_id".to_string()]).map_err(DocError::from)?.get("_id").cloned();
        let id = id.map(|v| match self.ix.collation() {
            Some(c) => c.key_of(&v),
            None => v,
        });
        Ok(Some((rid, vec![id])))
    }

    /// Read the next chunk of keys; false once every range is done.
    fn refill(&mut self) -> Result<bool, DocError> {
        let Some((start, end)) = self.ranges.front().cloned() else { return Ok(false) };
        let resume = self.after.take();
        if resume.is_none() {
            self.stats.seeks.fetch_add(1, Ordering::Relaxed);
        }
        // An index may turn multikey while it is read.
        self.multikey = self.multikey || self.ix.is_multikey() || self.ix.spec.wildcard.is_some();
        // The cursor borrows its reader while the scan records what it reads.
        let reader = self.reader.clone();
        let mut c = reader.cursor(self.ix.table())?;
        let mut e = if self.reverse {
            c.set_bounds(Bound::Included(start), resume.map_or(Bound::Excluded(end), Bound::Excluded));
            c.last()?
        } else {
            c.set_bounds(resume.map_or(Bound::Included(start), Bound::Excluded), Bound::Excluded(end));
            c.first()?
        };
        let mut n = 0;
        while let Some((k, v)) = e {
            self.unreported += 1;
            let cut = self.ix.cut_prefix(&k);
            // A key inside exact ranges lies in the bounds: its values are
            // decoded only when the read returns them (covered).
            let checked = !self.exact || cut.is_some();
            let entry = match checked || self.covered {
                true => self.decode_entry(&k, &v)?,
                false => Some((self.ix.entry_record(&k, &v)?, Vec::new())),
            };
            debug_assert!(
                checked || self.decode_entry(&k, &v)?.is_none_or(|(_, values)| in_bounds(&values, &self.bounds))
            );
            if self.sorted {
                self.track_run(cut.map(<[u8]>::to_vec));
            }
            let Some((rid, values)) = entry else {
                e = if self.reverse { c.prev()? } else { c.next()? };
                continue;
            };
            if !checked || (in_bounds(&values, &self.bounds) && self.within_min_max(&values)) {
                // Each record once (`admit`); a held run of long keys is
                // deduplicated when released, in key order (so a document
                // comes at its lowest key).
                let entry = (rid, values, std::mem::take(&mut self.unreported));
                match &self.run {
                    Some(_) => self.held.push(entry),
                    None => self.admit(entry),
                }
            }
            n += 1;
            if n == CHUNK_KEYS {
                self.after = Some(k.to_vec());
                return Ok(true);
            }
            e = if self.reverse { c.prev()? } else { c.next()? };
        }
        self.track_run(None);
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
