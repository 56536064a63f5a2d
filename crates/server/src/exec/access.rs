//! Carries out the access path `query::plan` chose: the one place a read
//! turns an [`AccessPath`] into documents (or, for `find`, into its
//! cursor's source). What the planner cannot know about the collection
//! (its ready indexes, whether the read's collation is the `_id` index's,
//! which index a hint names) is stated here.

use crate::error::CommandError;
use crate::exec::call::Place;
use crate::exec::ctx::Ctx;
use crate::exec::index_scan::{self, ScanStats};
use crate::exec::plan_cache::{CachedPlan, CachedScan, PlanKind};
use crate::exec::scan::{matches_stored, ScanIter};
use bson::{Bson, Document};
use doc::catalog::{Collection, DocError, Namespace};
use doc::index::Index;
use doc::stored::Stored;
use query::plan::{self, AccessPath, Hint, IndexInfo, IndexScan, KeyRange, ReadShape};
use query::Collation;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// A planned read: the path, and the indexes its positions refer to.
pub(crate) struct Planned<'a> {
    pub path: AccessPath<'a>,
    pub indexes: Vec<Arc<Index>>,
    /// What the planner saw of them (for explain).
    pub infos: Vec<IndexInfo>,
    /// The other paths the planner considered: index scans,
    /// intersections, an `$or` by its branches (explain's
    /// `rejectedPlans`; raced by `race`).
    pub rejected: Vec<AccessPath<'a>>,
    /// The read's shape (`query::plan::shape`), the plan cache's key.
    pub shape: String,
    /// The collection's tables and ready indexes the choice is made
    /// among (a cached choice holds only among the same).
    pub among: String,
    /// `{query, sort, projection}` as the plan cache shows the read.
    pub created_from: Document,
    /// The choice came from the plan cache (explain's `isCached`): the
    /// works of the trial that chose it.
    pub cached: Option<u64>,
}

impl<'a> Planned<'a> {
    /// `path` over `indexes` alone: nothing the planner saw, no shape or
    /// plan-cache key (a point read, a trial run).
    fn bare(path: AccessPath<'a>, indexes: Vec<Arc<Index>>) -> Planned<'a> {
        Planned {
            path,
            indexes,
            infos: Vec::new(),
            rejected: Vec::new(),
            shape: String::new(),
            among: String::new(),
            created_from: Document::new(),
            cached: None,
        }
    }
}

/// A read's plan as a slow-operation log line names it: cheap to note
/// (the indexes shared, nothing formatted) for every read.
pub(crate) enum PlanNote {
    CollScan,
    IdHack,
    /// One index scan (the wildcard path it reads, if any).
    Scan(Arc<Index>, Option<String>),
    /// An OR's (or, when the flag says so, an intersection's) index scans.
    Scans(Vec<(Arc<Index>, Option<String>)>, bool),
}

impl PlanNote {
    pub(crate) fn of(planned: &Planned<'_>) -> PlanNote {
        let scan = |s: &IndexScan| (planned.indexes[s.index].clone(), s.wildcard_path.clone());
        match &planned.path {
            AccessPath::CollScan { .. } => PlanNote::CollScan,
            AccessPath::IdPoint(_) => PlanNote::IdHack,
            AccessPath::IndexScan(s) => PlanNote::Scan(planned.indexes[s.index].clone(), s.wildcard_path.clone()),
            AccessPath::Or(scans) => PlanNote::Scans(scans.iter().map(scan).collect(), false),
            AccessPath::AndSorted { scans, .. } => PlanNote::Scans(scans.iter().map(scan).collect(), true),
        }
    }

    /// mongod's `planSummary`: `COLLSCAN`, `EXPRESS_IDHACK`, or each
    /// index scan as `IXSCAN { a: 1, b: -1 }`, joined by `, `.
    pub(crate) fn summary(&self) -> String {
        match self {
            PlanNote::CollScan => "COLLSCAN".into(),
            PlanNote::IdHack => "EXPRESS_IDHACK".into(),
            PlanNote::Scan(ix, path) => ixscan_summary(ix, path.as_deref()),
            PlanNote::Scans(scans, _) => {
                scans.iter().map(|(ix, path)| ixscan_summary(ix, path.as_deref())).collect::<Vec<_>>().join(", ")
            }
        }
    }
}

impl PlanNote {
    /// The plan's stages as a profile entry's `execStats` shows them:
    /// the read (COLLSCAN, EXPRESS_IDHACK, or FETCH over IXSCAN or over an
    /// OR of them) with the keys and documents `tally` says it examined
    /// and the documents the operation `returned` (per-stage counters as
    /// explain's are not kept for every read).
    pub(crate) fn exec_stats(&self, tally: doc::catalog::Counts, returned: i64) -> Document {
        let (keys, docs) = (tally.keys_examined as i64, tally.docs_examined as i64);
        let ixscan = |ix: &Arc<Index>, path: &Option<String>| {
            bson::doc! {
                "stage": "IXSCAN",
                "keyPattern": key_pattern_of(ix, path.as_deref()),
                "indexName": ix.spec.name.clone(),
            }
        };
        let fetch = |input: Document| {
            bson::doc! { "stage": "FETCH", "nReturned": returned, "docsExamined": docs, "inputStage": input }
        };
        match self {
            PlanNote::CollScan => bson::doc! { "stage": "COLLSCAN", "nReturned": returned, "docsExamined": docs },
            PlanNote::IdHack => bson::doc! {
                "stage": "EXPRESS_IDHACK", "nReturned": returned, "keysExamined": keys, "docsExamined": docs,
            },
            PlanNote::Scan(ix, path) => {
                let mut input = ixscan(ix, path);
                input.insert("keysExamined", keys);
                fetch(input)
            }
            PlanNote::Scans(scans, and) => {
                let branches: Vec<Bson> = scans.iter().map(|(ix, path)| Bson::Document(ixscan(ix, path))).collect();
                let stage = if *and { "AND_SORTED" } else { "OR" };
                fetch(bson::doc! { "stage": stage, "inputStages": branches })
            }
        }
    }
}

/// `IXSCAN { a: 1, b: -1 }`: a scan as `planSummary` names it.
fn ixscan_summary(ix: &Index, path: Option<&str>) -> String {
    let key = key_pattern_of(ix, path);
    let fields: Vec<String> = key.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("IXSCAN {{ {} }}", fields.join(", "))
}

/// The ready secondary indexes of `coll` that a read at `read_ts` sees
/// whole (`Ctx::read_ts`; `None`: the newest data).
pub(crate) fn ready(coll: &Collection, read_ts: Option<u64>) -> Vec<Arc<Index>> {
    coll.indexes().into_iter().filter(|ix| ix.readable_at(read_ts)).collect()
}

/// The indexes a read of `coll` at `read_ts` is planned among: the ready
/// secondary indexes, then the `_id` index read as one (ranges and `$in`
/// of `_id`, its order).
pub(crate) fn planned_among(coll: &Collection, read_ts: Option<u64>) -> Vec<Arc<Index>> {
    let mut ready = ready(coll, read_ts);
    ready.extend(coll.id_index_view().cloned());
    ready
}

/// The indexes the planner chooses among for a read of `coll` under
/// `collation` (`None`: binary), with what it knows of each.
pub(crate) fn ready_indexes(
    coll: &Collection,
    collation: Option<&Arc<Collation>>,
    read_ts: Option<u64>,
) -> (Vec<Arc<Index>>, Vec<IndexInfo>) {
    let ready = planned_among(coll, read_ts);
    let read_spec = collation.map(|c| c.full_spec());
    let infos = ready
        .iter()
        .map(|ix| IndexInfo {
            name: ix.spec.name.clone(),
            fields: ix.spec.fields.iter().map(|f| (f.path.join("."), f.descending)).collect(),
            multikey: ix.multikey_paths(),
            sparse: ix.spec.sparse,
            hidden: is_hidden(ix),
            partial: ix.spec.shown.get_document("partialFilterExpression").ok().cloned(),
            hashed: ix.spec.fields.iter().position(|f| f.hashed),
            collation: ix.collation().map(|c| plan::IndexCollation(c.clone())),
            collation_matches: ix.collation().map(|c| c.full_spec()) == read_spec,
            wildcard: ix
                .spec
                .wildcard
                .clone()
                .map(|paths| plan::WildcardInfo { paths, multikey: ix.wildcard_multikey_paths() }),
        })
        .collect();
    (ready, infos)
}

/// The tables and ready indexes a plan is chosen among: a cached choice
/// holds only while they are the same.
pub(crate) fn among(coll: &Collection, ready: &[Arc<Index>]) -> String {
    let names: Vec<&str> = ready.iter().map(|ix| ix.spec.name.as_str()).collect();
    format!("{}:{}", coll.records_table(), names.join(","))
}

/// A hidden index is maintained but neither planned nor hinted.
pub(crate) fn is_hidden(ix: &Index) -> bool {
    ix.is_hidden()
}

/// The access path of a read of `coll` with `filter` under `collation`
/// (`None`: binary), for a tailable cursor or not, with the command's
/// `hint` (already checked by `check_hint`).
pub(crate) fn plan_read<'a>(
    coll: &Collection,
    filter: &'a Document,
    collation: Option<&Arc<Collation>>,
    (tailable, read_ts): (bool, Option<u64>),
    hint: Option<&Bson>,
) -> Planned<'a> {
    plan_projected(coll, filter, collation, How { tailable, hint, read_ts, ..How::default() })
}

/// How a read asks (beyond its filter and collation).
#[derive(Default, Clone, Copy)]
pub(crate) struct How<'x> {
    pub tailable: bool,
    pub hint: Option<&'x Bson>,
    /// The fields a projection needs, which an index may cover
    /// (`query::plan::projection_fields`).
    pub projection: Option<&'x [String]>,
    /// `min()` and `max()` key values.
    pub min_max: Option<&'x KeyRange>,
    /// The requested order, which an index may give.
    pub sort: Option<&'x [(String, bool)]>,
    /// The snapshot the read is at (`Ctx::read_ts`): an index whose build
    /// it does not hold whole is not planned.
    pub read_ts: Option<u64>,
    /// Explain describes the plan: its shape, the indexes it was chosen
    /// among and what the planner saw of them, even for a point read.
    pub describe: bool,
}

/// `plan_read` for a read that needs only `projection`'s fields
/// (`query::plan::projection_fields`), which an index may cover.
pub(crate) fn plan_projected<'a>(
    coll: &Collection,
    filter: &'a Document,
    collation: Option<&Arc<Collation>>,
    how: How<'_>,
) -> Planned<'a> {
    let How { tailable, hint, projection, min_max, sort, read_ts, describe } = how;
    let id_index_collation_matches = match (collation, coll.id_collation()) {
        (None, None) => true,
        (Some(a), Some(b)) => a.full_spec() == b.full_spec(),
        _ => false,
    };
    // A point read is one whatever the indexes are: nothing else to
    // gather (the hot path of reads and writes by `_id`).
    let unhinted = hint.is_none_or(|h| matches!(h, Bson::Null));
    if unhinted && min_max.is_none() && !tailable && !describe {
        if let Some(id) = plan::id_point(filter, id_index_collation_matches) {
            return Planned::bare(AccessPath::IdPoint(id), Vec::new());
        }
    }
    let (indexes, infos) = ready_indexes(coll, collation, read_ts);
    let shape = ReadShape {
        filter,
        id_index_collation_matches,
        tailable,
        indexes: &infos,
        hint: resolve_hint(hint, &indexes),
        projection,
        min_max,
        sort,
    };
    let (path, rejected) = plan::plan_among(&shape);
    let mut shape = plan::shape(filter, projection, sort);
    // The collation is part of the shape: it decides which indexes serve.
    if let Some(c) = collation {
        shape.push_str(&format!("collation:{};", c.full_spec()));
    }
    let among = among(coll, &indexes);
    let spec = |fields: &mut dyn Iterator<Item = (String, i32)>| {
        fields.map(|(k, v)| (k, Bson::Int32(v))).collect::<Document>()
    };
    let created_from = bson::doc! {
        "query": plan::parsed_query(filter),
        "sort": spec(&mut sort.unwrap_or_default().iter().map(|(p, d)| (p.clone(), if *d { -1 } else { 1 }))),
        "projection": spec(&mut projection.unwrap_or_default().iter().map(|p| (p.clone(), 1))),
    };
    Planned { path, indexes, infos, rejected, shape, among, created_from, cached: None }
}

/// A command's `min` and `max` (`find`'s `min()`/`max()`), checked as
/// mongod checks them against the index its `hint` names: each a value
/// per field of its key pattern, in order, the min before the max.
///
/// Under another collation than the index's, a bound holding a string,
/// document or array is refused (mongod's 51174).
pub(crate) fn min_max_of(
    coll: Option<&Collection>,
    cmd: &Document,
    collation: Option<&Arc<Collation>>,
) -> Result<Option<KeyRange>, CommandError> {
    let given = |field: &str| cmd.get_document(field).ok().filter(|d| !d.is_empty());
    let (min, max) = (given("min"), given("max"));
    if min.is_none() && max.is_none() {
        return Ok(None);
    }
    let hint = cmd.get("hint").filter(|h| !matches!(h, Bson::Null));
    let Some(hint) = hint else {
        return Err(CommandError::with_code(
            51173,
            "When using min()/max() a hint of which index to use must be provided",
        ));
    };
    // The hint is checked against every ready index; the plan itself
    // takes only those the read's snapshot holds whole.
    let indexes = coll.map(|c| ready(c, None)).unwrap_or_default();
    let Hint::Index(i) = resolve_hint(Some(hint), &indexes) else {
        return Err(CommandError::not_implemented("min()/max() on the _id index or $natural is not supported yet"));
    };
    if indexes[i].spec.wildcard.is_some() {
        return Err(CommandError::with_code(51174, "The index chosen is not compatible with min/max"));
    }
    let pattern = &indexes[i].spec.key;
    let matches = indexes[i].collation().map(|c| c.full_spec()) == collation.map(|c| c.full_spec());
    let values = |bound: Option<&Document>| -> Result<Option<Vec<Bson>>, CommandError> {
        let Some(bound) = bound else { return Ok(None) };
        if !matches && bound.values().any(query::bounds::collatable) {
            return Err(CommandError::with_code(51174, "The index chosen is not compatible with min/max"));
        }
        if !bound.keys().eq(pattern.keys()) {
            return Err(CommandError::with_code(
                51174,
                format!(
                    "The index chosen is not consistent with the min/max key: {bound}, index key pattern: {pattern}"
                ),
            ));
        }
        // A collated index holds strings by their sort keys.
        let collated = |v: &Bson| match indexes[i].collation() {
            Some(c) => c.key_of(v),
            None => v.clone(),
        };
        Ok(Some(bound.values().map(collated).collect()))
    };
    let range = (values(min)?, values(max)?);
    if let (Some(lo), Some(hi)) = &range {
        let fields = &indexes[i].spec.fields;
        let key = |v: &[Bson]| doc::index::keys::key_string(&v.iter().cloned().map(Some).collect::<Vec<_>>(), fields);
        if key(lo) >= key(hi) {
            return Err(CommandError::with_code(
                51175,
                "The value provided for min() does not come before the value provided for max() in the hinted index",
            ));
        }
    }
    Ok(Some(range))
}

/// Work a trial run of one plan may do before it is judged.
const TRIAL_WORKS_MAX: u64 = 10_000;

/// Results a trial run stops at.
const TRIAL_RESULTS: u64 = 101;

/// Race the planned index scan against the rejected ones, as mongod's
/// multi-planner does: each runs until it has `TRIAL_RESULTS` matches,
/// reaches the end, or has worked `TRIAL_WORKS_MAX` times; the most
/// productive (matches per unit of work) wins, a covered plan breaking
/// ties. Under a sort, a plan that needs a blocking SORT produces
/// nothing until its input ends, so its matches count only if it ended
/// within the trial.
pub(crate) fn race<'a>(
    shared: &Ctx<'_>,
    place: Place,
    ns: &Namespace,
    coll: &Arc<Collection>,
    mut planned: Planned<'a>,
    filter: &query::Filter,
) -> Result<Planned<'a>, CommandError> {
    drop_switched_off(shared, &mut planned);
    if !matches!(planned.path, AccessPath::IndexScan(_)) || planned.rejected.is_empty() {
        return Ok(planned);
    }
    let mut contenders = vec![planned.path.clone()];
    contenders.append(&mut planned.rejected);
    let sorting = contenders.iter().any(path_sorted);
    let ns_key = ns.to_string();
    if let Some((cached, works)) = shared.plan_cache.get(&ns_key, &planned.shape, &planned.among) {
        let same = |c: &AccessPath<'_>| is_cached_plan(&cached, &planned.indexes, c);
        if let Some(at) = contenders.iter().position(same) {
            planned.path = contenders.remove(at);
            planned.rejected = contenders;
            planned.cached = Some(works);
            return Ok(planned);
        }
    }
    // Trial runs may read thousands of entries: off a network thread.
    let trials = place.long(|| trial_runs(shared, ns, coll, &planned.indexes, &contenders, sorting, filter))?;
    let forced = shared.parameters.force_intersection.load(Relaxed);
    // mongod's test switch: an intersection outscores any other plan.
    let score = |i: usize| match (forced, &contenders[i]) {
        (true, AccessPath::AndSorted { .. }) => trials[i].score + 3.0,
        _ => trials[i].score,
    };
    let best = (0..contenders.len()).fold(0, |b, i| if score(i) > score(b) { i } else { b });
    let winner = contenders.remove(best);
    if let Some(plan) = cached_plan(&planned.indexes, &winner) {
        let entry = crate::exec::plan_cache::PlanCache::entry(plan, planned.created_from.clone(), trials[best].works);
        shared.plan_cache.put(&ns_key, &planned.shape, &planned.among, entry);
    }
    planned.path = winner;
    planned.rejected = contenders;
    Ok(planned)
}

/// `path` as the plan cache holds it (none for a path no race chooses).
/// (An intersection is not cached: `plan_cache.rs`.)
fn cached_plan(indexes: &[Arc<Index>], path: &AccessPath<'_>) -> Option<CachedPlan> {
    let scan = |s: &IndexScan| {
        let ix = &indexes[s.index];
        let whole = is_whole(s);
        CachedScan {
            name: ix.spec.name.clone(),
            key: scan_key_pattern(ix, s),
            sorted: s.sorted,
            reverse: s.reverse,
            whole,
        }
    };
    let (kind, scans) = match path {
        AccessPath::IndexScan(s) => (PlanKind::Scan, vec![scan(s)]),
        AccessPath::Or(scans) => (PlanKind::Or, scans.iter().map(scan).collect()),
        AccessPath::AndSorted { .. } | AccessPath::IdPoint(_) | AccessPath::CollScan { .. } => return None,
    };
    Some(CachedPlan { kind, scans })
}

/// Whether contender `path` is the `cached` plan (compared in place: a
/// cache hit builds nothing).
fn is_cached_plan(cached: &CachedPlan, indexes: &[Arc<Index>], path: &AccessPath<'_>) -> bool {
    let same_scan = |c: &CachedScan, s: &IndexScan| {
        let ix = &indexes[s.index];
        let key_same = match &s.wildcard_path {
            None => ix.spec.key == c.key,
            Some(_) => scan_key_pattern(ix, s) == c.key,
        };
        ix.spec.name == c.name && key_same && (s.sorted, s.reverse, is_whole(s)) == (c.sorted, c.reverse, c.whole)
    };
    let scans: &[IndexScan] = match (cached.kind, path) {
        (PlanKind::Scan, AccessPath::IndexScan(s)) => std::slice::from_ref(s),
        (PlanKind::Or, AccessPath::Or(scans)) => scans,
        _ => return false,
    };
    scans.len() == cached.scans.len() && cached.scans.iter().zip(scans).all(|(c, s)| same_scan(c, s))
}

/// Whether a scan reads its whole index (every field unbounded).
fn is_whole(s: &IndexScan) -> bool {
    s.bounds.iter().all(|f| f.iter().all(query::bounds::Interval::is_all))
}

/// Leave out the plans the server's parameters switch off
/// (`internalQueryPlannerEnableIndexIntersection`).
pub(crate) fn drop_switched_off(shared: &Ctx<'_>, planned: &mut Planned<'_>) {
    if !shared.parameters.index_intersection.load(Relaxed) {
        planned.rejected.retain(|p| !matches!(p, AccessPath::AndSorted { .. }));
    }
}

/// Whether `path` returns its documents in the read's sort order.
fn path_sorted(path: &AccessPath<'_>) -> bool {
    matches!(path, AccessPath::IndexScan(s) if s.sorted)
}

/// What one contender's trial run did.
struct Trial {
    /// Higher wins.
    score: f64,
    works: u64,
}

/// Run each contender for a trial, in order.
fn trial_runs(
    shared: &Ctx<'_>,
    ns: &Namespace,
    coll: &Arc<Collection>,
    indexes: &[Arc<Index>],
    contenders: &[AccessPath<'_>],
    sorting: bool,
    filter: &query::Filter,
) -> Result<Vec<Trial>, CommandError> {
    let mut trials = Vec::with_capacity(contenders.len());
    for path in contenders {
        let stats = Arc::new(ScanStats::default());
        let trial = Planned::bare(path.clone(), indexes.to_vec());
        let mut matched = 0u64;
        let mut ended = true;
        for record in records(shared, ns, coll, &trial, stats.clone())? {
            let (_, d) = record?;
            if matches_stored(filter, &d)?.0 {
                matched += 1;
            }
            if matched >= TRIAL_RESULTS || stats.total(|s| &s.keys_examined) >= TRIAL_WORKS_MAX {
                ended = false;
                break;
            }
        }
        if sorting && !path_sorted(path) && !ended {
            matched = 0;
        }
        let works = stats.total(|s| &s.keys_examined) + stats.total(|s| &s.docs_examined) + 1;
        // mongod's tie-breakers: no fetch, no intersection.
        let covered = matches!(path, AccessPath::IndexScan(s) if s.covered);
        let bonus =
            if covered { 1e-4 } else { 0.0 } + if matches!(path, AccessPath::AndSorted { .. }) { 0.0 } else { 1e-4 };
        trials.push(Trial { score: 1.0 + matched as f64 / works as f64 + bonus, works });
    }
    Ok(trials)
}

/// Whether a read by a cached plan degraded during its trial
/// (`watch_trial`). Only its first batch is watched: once that is
/// answered (`end`), nothing the client has seen can be read again, so
/// the read goes on by its plan.
pub(crate) struct TrialWatch {
    /// Some records are watched (`watch_trial`): a streamed read, whose
    /// index access is counted once it is kept.
    watching: AtomicBool,
    degraded: AtomicBool,
    ended: AtomicBool,
}

impl TrialWatch {
    pub(crate) fn new() -> TrialWatch {
        TrialWatch { watching: false.into(), degraded: false.into(), ended: false.into() }
    }

    pub(crate) fn watching(&self) -> bool {
        self.watching.load(Relaxed)
    }

    pub(crate) fn degraded(&self) -> bool {
        self.degraded.load(Relaxed)
    }

    /// The first batch is answered: stop watching.
    pub(crate) fn end(&self) {
        self.ended.store(true, Relaxed);
    }
}

/// Whether `planned` is one index scan whose every key read is of a
/// document the read returns (no FETCH filter, `reads_only_matches`): a
/// read of n documents then does about 2n works. Such a read stays on
/// its network thread (`find`), and from the cache it cannot degrade in
/// its trial, so it is not watched.
pub(crate) fn every_key_matches(planned: &Planned<'_>) -> bool {
    match &planned.path {
        AccessPath::IndexScan(s) => {
            s.fetch_filter.is_none() && index_scan::reads_only_matches(&planned.indexes[s.index], s)
        }
        AccessPath::IdPoint(_) | AccessPath::CollScan { .. } | AccessPath::Or(_) | AccessPath::AndSorted { .. } => {
            false
        }
    }
}

/// `records` of a plan from the cache, watched as mongod's cached plan
/// stage watches it: until `filter` has matched `TRIAL_RESULTS` of them
/// (or the first batch is answered), work (`stats`) past `budget` ends
/// the records and marks `watch` degraded, so the read is planned again.
fn watch_trial(
    mut records: Records,
    stats: Arc<ScanStats>,
    filter: query::Filter,
    budget: u64,
    watch: Arc<TrialWatch>,
) -> Records {
    watch.watching.store(true, Relaxed);
    let mut matched = 0u64;
    Box::new(std::iter::from_fn(move || {
        // Once degraded, ended for good.
        if watch.degraded() {
            return None;
        }
        let record = records.next()?;
        if matched < TRIAL_RESULTS && !watch.ended.load(Relaxed) {
            // An error is the read's to report (as a match here).
            if record.as_ref().map_or(true, |(_, d)| matches_stored(&filter, d).map_or(true, |m| m.0)) {
                matched += 1;
            }
            // (An OR's or an intersection's branches count too.)
            let works = stats.total(|s| &s.keys_examined) + stats.total(|s| &s.docs_examined);
            if matched < TRIAL_RESULTS && works > budget {
                watch.degraded.store(true, Relaxed);
                return None;
            }
        }
        Some(record)
    }))
}

/// The key pattern `scan` reads `ix` by: a wildcard index's is
/// `{$_path: 1, <path>: ±1}` (as explain shows it).
pub(crate) fn scan_key_pattern(ix: &Index, scan: &IndexScan) -> Document {
    key_pattern_of(ix, scan.wildcard_path.as_deref())
}

/// The key pattern a scan of `ix` reading the wildcard path `path` (if
/// any) reads by.
fn key_pattern_of(ix: &Index, path: Option<&str>) -> Document {
    match path {
        Some(path) => {
            let mut key = bson::doc! { "$_path": 1 };
            key.insert(path, ix.spec.key.values().next().cloned().unwrap_or(Bson::Int32(1)));
            key
        }
        None => ix.spec.key.clone(),
    }
}

/// A hint as the planner takes it: `$natural`, a secondary index by name
/// or key pattern, or none (the `_id` index, which a point read uses
/// anyway, and a hint `check_hint` refused).
fn resolve_hint(hint: Option<&Bson>, indexes: &[Arc<Index>]) -> Hint {
    match hint {
        Some(Bson::String(name)) => {
            indexes.iter().position(|ix| ix.spec.name == *name && !is_hidden(ix)).map_or(Hint::None, Hint::Index)
        }
        Some(Bson::Document(d)) => match d.iter().next() {
            Some((k, v)) if k == "$natural" => {
                Hint::Natural { reverse: doc::compare::compare(v, &Bson::Int32(0)).is_lt() }
            }
            _ => indexes
                .iter()
                .position(|ix| crate::exec::index_spec::same_pattern(&ix.spec.key, d) && !is_hidden(ix))
                .map_or(Hint::None, Hint::Index),
        },
        _ => Hint::None,
    }
}

/// Records `(record id, document)` as a path yields them; a storage error
/// is an item.
pub(crate) type Records = Box<dyn Iterator<Item = Result<(u64, Stored), DocError>> + Send>;

/// The candidate records of a read, `(record id, document)` in the path's
/// order; the caller still applies the filter (a path only narrows what
/// is looked at). `stats` counts an index scan's work.
pub(crate) fn candidates(
    shared: &Ctx<'_>,
    ns: &Namespace,
    coll: &Arc<Collection>,
    planned: &Planned<'_>,
    stats: Arc<ScanStats>,
) -> Result<Records, CommandError> {
    note_access(planned);
    if let AccessPath::IdPoint(_) = planned.path {
        note_point_access(coll);
    }
    let records = records(shared, ns, coll, planned, stats.clone())?;
    Ok(tallied(shared, &planned.path, records, stats))
}

/// `candidates`, or for a plan from the cache watched by `watch`, its
/// records watched through its trial (`watch_trial`, `filter` telling
/// the matches; its index access is counted once it is kept).
pub(crate) fn watched_candidates(
    shared: &Ctx<'_>,
    (ns, coll): (&Namespace, &Arc<Collection>),
    planned: &Planned<'_>,
    stats: Arc<ScanStats>,
    watch: Option<(&Arc<TrialWatch>, &query::Filter)>,
) -> Result<Records, CommandError> {
    match (watch, planned.cached) {
        (Some((watch, filter)), Some(works)) => {
            let budget = crate::exec::plan_cache::PlanCache::replan_budget(works);
            let records = records(shared, ns, coll, planned, stats.clone())?;
            let records = watch_trial(records, stats.clone(), filter.clone(), budget, watch.clone());
            Ok(tallied(shared, &planned.path, records, stats))
        }
        _ => candidates(shared, ns, coll, planned, stats),
    }
}

/// `records` read by `path`, counted in the command's tally as they are
/// read (its profiler entry's `keysExamined` and `docsExamined`): an
/// index scan's keys and documents as `stats` counts them, a collection
/// scan's every record, an `_id` point's key and record.
fn tallied(shared: &Ctx<'_>, path: &AccessPath<'_>, mut records: Records, stats: Arc<ScanStats>) -> Records {
    let tally = shared.conflicts.tally.clone();
    let per_record = match path {
        AccessPath::IdPoint(_) => Some((1, 1)),
        AccessPath::CollScan { .. } => Some((0, 1)),
        AccessPath::IndexScan(_) | AccessPath::Or(_) | AccessPath::AndSorted { .. } => None,
    };
    let mut seen = (0, 0);
    Box::new(std::iter::from_fn(move || {
        let record = records.next();
        match per_record {
            Some((keys, docs)) => {
                if record.as_ref().is_some_and(Result::is_ok) {
                    tally.examined(keys, docs);
                }
            }
            None => {
                let now = (stats.total(|s| &s.keys_examined), stats.total(|s| &s.docs_examined));
                tally.examined(now.0 - seen.0, now.1 - seen.1);
                seen = now;
            }
        }
        record
    }))
}

/// Count a point read of `coll`'s `_id` index for `$indexStats`.
pub(crate) fn note_point_access(coll: &Collection) {
    if let Some(id) = coll.id_index_view() {
        id.note_access();
    }
}

/// Count a read of `planned`'s indexes for `$indexStats` (the reads an
/// index serves, not trial runs).
pub(crate) fn note_access(planned: &Planned<'_>) {
    match &planned.path {
        AccessPath::IndexScan(scan) => planned.indexes[scan.index].note_access(),
        AccessPath::Or(scans) | AccessPath::AndSorted { scans, .. } => {
            scans.iter().for_each(|s| planned.indexes[s.index].note_access())
        }
        AccessPath::IdPoint(_) | AccessPath::CollScan { .. } => {}
    }
}

/// `candidates` without counting an index access (a trial run, or a
/// cached plan's read until its trial is over).
fn records(
    shared: &Ctx<'_>,
    ns: &Namespace,
    coll: &Arc<Collection>,
    planned: &Planned<'_>,
    stats: Arc<ScanStats>,
) -> Result<Records, CommandError> {
    Ok(match &planned.path {
        AccessPath::IdPoint(id) => {
            let found = coll.find_raw_by_id(&shared.reader(), id)?;
            Box::new(found.into_iter().map(|(rid, bytes)| Ok((rid, Stored::read(bytes)))))
        }
        // Forwards: `find` reads `$natural: -1` through its cursor's own
        // scan; for the other reads the order is not observable beyond
        // which documents a limited write meets first.
        AccessPath::CollScan { .. } => Box::new(ScanIter::new(shared, ns).results()),
        AccessPath::IndexScan(scan) => {
            index_scan::records(shared.reader(), coll.clone(), planned.indexes[scan.index].clone(), scan, stats)
        }
        AccessPath::Or(scans) => index_scan::union(
            shared.reader(),
            coll.clone(),
            scans.iter().map(|s| (planned.indexes[s.index].clone(), s.clone())).collect(),
            stats,
        ),
        AccessPath::AndSorted { scans, .. } => index_scan::intersection(
            shared.reader(),
            coll.clone(),
            scans.iter().map(|s| (planned.indexes[s.index].clone(), s.clone())).collect(),
            stats,
        ),
    })
}

/// The access path of a write's read (update, delete, findAndModify):
/// natural order, never a tailable cursor.
pub(crate) fn plan_write<'a>(
    coll: &Collection,
    filter: &'a Document,
    collation: Option<&Arc<Collation>>,
    read_ts: Option<u64>,
    hint: Option<&Bson>,
) -> Planned<'a> {
    plan_read(coll, filter, collation, (false, read_ts), hint)
}

/// The one `_id` a point read looks up, if the path is one.
pub(crate) fn point<'a>(path: &AccessPath<'a>) -> Option<&'a Bson> {
    match path {
        AccessPath::IdPoint(id) => Some(id),
        AccessPath::CollScan { .. } | AccessPath::IndexScan(_) | AccessPath::Or(_) | AccessPath::AndSorted { .. } => {
            None
        }
    }
}
