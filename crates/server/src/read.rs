//! Reads: `find`, `getMore`, `killCursors`, `count`, `distinct`,
//! `aggregate`.
//!
//! An unsorted find cursor keeps its position (after the last record it
//! examined: a record id, or an `_id` key in a clustered collection), not
//! a snapshot: a `getMore` sees later commits, as a MongoDB cursor with
//! read concern "local" may. An aggregate (or a find on a view) keeps its
//! pipeline, producing documents as they are read; a sorted find holds
//! its results or its spilled runs. A cursor keeps what is left of its
//! `maxTimeMS` for its `getMore`s. Idle cursors are dropped after 10
//! minutes.

use crate::crud::{bool_option, check_fields, count_option, db_of, filter_of, namespace, type_name, CommandResult};
use crate::error::CommandError;
use crate::limits::*;
use crate::server::Shared;
use bson::{doc, Bson, Document};
use doc::catalog::{Collection, DocError, Namespace, ScanFrom};
use doc::compare::compare;
use parking_lot::Mutex;
use query::{Collation, Filter, Projection, Sort};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default size of a first batch (MongoDB's).
const FIRST_BATCH_DEFAULT: usize = 101;

/// Memory a blocking sort may use by default (MongoDB's
/// `internalQueryMaxBlockingSortMemoryUsageBytes`, a server parameter).
pub(crate) const SORT_MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;
/// `internalDocumentSourceGroupMaxMemoryBytes`' default, as mongod's.
pub(crate) const GROUP_MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;

/// Documents read per storage scan call.
const SCAN_CHUNK: usize = 256;

/// A matching document: its record id, and the array position the filter
/// matched at (for positional projections).
pub(crate) struct Hit {
    pub rid: u64,
    pub doc: Document,
    pub pos: Option<usize>,
}

enum Source {
    /// Scanning the collection in natural order (`Collection::natural`),
    /// or in reverse; `after` is where the last record examined was.
    Scan { filter: Filter, after: ScanFrom, pending: VecDeque<(ScanFrom, u64, Document)>, reverse: bool },
    /// Results computed up front (a sort, a point lookup, a pipeline).
    Buffer(std::vec::IntoIter<Hit>),
    /// A sort that spilled to disk, merged as it is read.
    Merge(Box<crate::spill::Spilled>),
    /// An aggregation's output, produced as it is read; `scanning`: the
    /// collection its first stage reads (if it is dropped or replaced,
    /// the cursor dies).
    /// A `find` on a view filters the view's output (`filter`).
    Stream {
        docs: std::iter::Peekable<query::pipeline::DocStream<'static>>,
        scanning: Scanning,
        filter: Option<Filter>,
    },
}

/// A cursor between batches.
pub(crate) struct CursorState {
    ns: Namespace,
    source: Source,
    projection: Option<Projection>,
    /// `showRecordId`: whether and how `$recordId` is added.
    record_id: RecordIds,
    /// Documents still allowed by `limit` (`None`: no limit).
    remaining: Option<usize>,
    last_used: Instant,
    /// A tailable cursor (capped collections): its end is not its last
    /// batch; with `await_data`, a `getMore` at the end waits for inserts.
    tailable: bool,
    await_data: bool,
    /// A tailable cursor's collection: if it is dropped (or renamed, or
    /// replaced), the cursor dies.
    tailing: Option<std::sync::Weak<Collection>>,
    /// The session that opened the cursor: killing the session kills it.
    lsid: Option<doc::sessions::SessionId>,
    /// What is left of the opening command's `maxTimeMS`: it bounds the
    /// cursor's work across its `getMore`s, as mongod's (not for an
    /// awaitData cursor, whose `getMore` brings its own wait).
    time_left: Option<Duration>,
}

/// `showRecordId`'s `$recordId`.
enum RecordIds {
    Hidden,
    /// The record id, a long.
    Long,
    /// A clustered collection's: BinData (subtype 0) holding its `_id`
    /// index key, as mongod's record id there is the KeyString of `_id`
    /// (an opaque value to clients; ours is our KeyString's bytes).
    Key(Arc<Collection>),
}

impl CursorState {
    /// A cursor over `source` as it is: no projection, limit or tailing.
    fn of(ns: Namespace, source: Source) -> CursorState {
        CursorState {
            ns,
            source,
            projection: None,
            record_id: RecordIds::Hidden,
            remaining: None,
            last_used: Instant::now(),
            tailable: false,
            await_data: false,
            tailing: None,
            lsid: None,
            time_left: None,
        }
    }
}

#[derive(Default)]
pub struct Cursors {
    open: Mutex<HashMap<i64, CursorState>>,
    /// Cursors a `getMore` has out of `open` while it fills a batch, with
    /// their session and whether a kill came meanwhile (then the cursor
    /// is not put back, and the `getMore` fails with CursorKilled).
    busy: Mutex<HashMap<i64, (Option<doc::sessions::SessionId>, bool)>>,
}

/// A cursor out for a `getMore`: leaves `Cursors::busy` when dropped.
struct Busy<'a>(&'a Cursors, i64);

impl Busy<'_> {
    /// Whether the cursor was killed while out.
    fn killed(&self) -> bool {
        self.0.busy.lock().get(&self.1).is_some_and(|b| b.1)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.lock().remove(&self.1);
    }
}

impl Cursors {
    /// Tie an open cursor to the session whose command opened it.
    pub fn bind_session(&self, id: i64, lsid: doc::sessions::SessionId) {
        if let Some(c) = self.open.lock().get_mut(&id) {
            c.lsid = Some(lsid);
        }
    }

    /// Close the cursors of killed sessions (`None`: of every session),
    /// those out for a `getMore` included.
    pub fn kill_sessions(&self, ids: Option<&[doc::sessions::SessionId]>) {
        let killed = |lsid: Option<doc::sessions::SessionId>| match (lsid, ids) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(lsid), Some(ids)) => ids.contains(&lsid),
        };
        self.open.lock().retain(|_, c| !killed(c.lsid));
        for (lsid, dead) in self.busy.lock().values_mut() {
            *dead |= killed(*lsid);
        }
    }

    fn reap(open: &mut HashMap<i64, CursorState>) {
        open.retain(|_, c| c.last_used.elapsed() < Duration::from_secs(cursor_idle_timeout_secs));
    }
}

/// A command's `maxTimeMS` deadline.
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    pub fn of(cmd: &Document) -> Result<Deadline, CommandError> {
        let ms = match cmd.get("maxTimeMS") {
            None | Some(Bson::Null) => return Ok(Deadline(None)),
            Some(Bson::Int32(i)) => i64::from(*i),
            Some(Bson::Int64(i)) => *i,
            Some(Bson::Double(d)) if d.fract() == 0.0 => *d as i64,
            Some(other) => {
                return Err(CommandError::bad_value(format!("maxTimeMS must be a number, not {}", type_name(other))))
            }
        };
        if !(0..=i64::from(i32::MAX)).contains(&ms) {
            return Err(CommandError::bad_value(format!("{ms} value for maxTimeMS is out of range [0, 2147483647]")));
        }
        Ok(Deadline((ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64))))
    }

    /// Time left before the deadline, if there is one.
    pub fn left(&self) -> Option<Duration> {
        self.0.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// No deadline.
    pub fn none() -> Deadline {
        Deadline(None)
    }

    pub fn check(&self) -> Result<(), CommandError> {
        match self.0 {
            Some(t) if Instant::now() >= t => Err(CommandError::max_time_ms_expired("operation exceeded time limit")),
            _ => Ok(()),
        }
    }
}

/// The collection's documents in record-id order, read in chunks; a
/// storage error ends the iteration and is kept in `error`. Owns what it
/// reads with, so a cursor may keep it between batches.
pub(crate) struct ScanIter {
    engine: storage::Engine,
    coll: Option<Arc<Collection>>,
    after: ScanFrom,
    pending: VecDeque<(ScanFrom, u64, Document)>,
    pub error: Option<DocError>,
}

impl ScanIter {
    pub fn new(shared: &Shared, ns: &Namespace) -> ScanIter {
        let engine = shared.catalog.engine().clone();
        ScanIter { engine, coll: shared.catalog.get(ns), after: ScanFrom::Start, pending: VecDeque::new(), error: None }
    }

    /// The records, a storage error as the last item.
    pub fn results(mut self) -> impl Iterator<Item = Result<(u64, Document), DocError>> + Send {
        std::iter::from_fn(move || match self.next() {
            Some(record) => Some(Ok(record)),
            None => self.error.take().map(Err),
        })
    }

    /// The documents, a storage error as the last item (as a pipeline
    /// takes them).
    /// A collection dropped under the scan ends it with QueryPlanKilled
    /// (175), as mongod's.
    pub fn fallible(self) -> impl Iterator<Item = Result<Document, query::FilterError>> + Send {
        self.results().map(|r| {
            r.map(|(_, d)| d).map_err(|e| match e {
                DocError::Storage(storage::StorageError::TableNotFound(_)) => query::FilterError {
                    code: 175,
                    message: "PlanExecutor error during aggregation :: caused by :: collection dropped".into(),
                },
                e => {
                    let e = CommandError::from(e);
                    query::FilterError { code: e.code, message: e.errmsg }
                }
            })
        })
    }
}

impl Iterator for ScanIter {
    type Item = (u64, Document);

    fn next(&mut self) -> Option<(u64, Document)> {
        if self.pending.is_empty() {
            let coll = self.coll.as_ref()?;
            match coll.natural(&self.engine, &self.after, false, SCAN_CHUNK) {
                Ok(chunk) => self.pending.extend(chunk),
                Err(e) => {
                    self.error = Some(e);
                    self.coll = None;
                    return None;
                }
            }
        }
        let (at, rid, d) = self.pending.pop_front()?;
        self.after = at;
        Some((rid, d))
    }
}

/// The next match of a cursor's source.
fn next_hit(shared: &Shared, c: &mut CursorState) -> Result<Option<Hit>, CommandError> {
    match &mut c.source {
        Source::Buffer(items) => Ok(items.next()),
        Source::Merge(runs) => runs.next(),
        Source::Stream { docs, filter, .. } => loop {
            let Some(doc) = docs.next().transpose()? else { return Ok(None) };
            let pos = match filter {
                None => None,
                Some(f) => match f.try_matches_at(&doc)? {
                    (true, pos) => pos,
                    (false, _) => continue,
                },
            };
            return Ok(Some(Hit { rid: 0, doc, pos }));
        },
        Source::Scan { filter, after, pending, reverse } => loop {
            if pending.is_empty() {
                let Some(coll) = shared.catalog.get(&c.ns) else { return Ok(None) };
                let engine = shared.catalog.engine();
                pending.extend(coll.natural(engine, after, *reverse, SCAN_CHUNK)?);
                if pending.is_empty() {
                    return Ok(None);
                }
            }
            let (at, rid, d) = pending.pop_front().expect("refilled above");
            *after = at;
            let (ok, pos) = filter.try_matches_at(&d)?;
            if ok {
                return Ok(Some(Hit { rid, doc: d, pos }));
            }
        },
    }
}

/// Pass over the first `skip` hits of a cursor's source.
fn skip_hits(shared: &Shared, c: &mut CursorState, skip: usize, deadline: &Deadline) -> Result<(), CommandError> {
    for _ in 0..skip {
        deadline.check()?;
        if next_hit(shared, c)?.is_none() {
            break;
        }
    }
    Ok(())
}

/// The direction of `{$natural: n}` (the only key): -1 for a negative n.
fn natural_direction(d: &Document) -> Option<i32> {
    match (d.len(), d.iter().next()) {
        (1, Some((k, v))) if k == "$natural" => {
            let negative = match v {
                Bson::Int32(i) => *i < 0,
                Bson::Int64(i) => *i < 0,
                Bson::Double(f) => *f < 0.0,
                _ => false,
            };
            Some(if negative { -1 } else { 1 })
        }
        _ => None,
    }
}

/// A tailable cursor resumes after the last document it returned; if a
/// capped insert has deleted that document since, documents in between
/// may be gone too, so the cursor dies as MongoDB's does.
/// Documents read ahead are dropped: the next batch reads what is there
/// now.
fn check_tail_position(shared: &Shared, c: &mut CursorState) -> Result<(), CommandError> {
    let current = shared.catalog.get(&c.ns);
    let same = match (&c.tailing, &current) {
        (Some(weak), Some(now)) => weak.upgrade().is_some_and(|then| Arc::ptr_eq(&then, now)),
        _ => false,
    };
    if !same {
        return Err(CommandError::query_plan_killed(format!("collection dropped or renamed: {}", c.ns)));
    }
    let Source::Scan { after, pending, .. } = &mut c.source else { return Ok(()) };
    pending.clear();
    // Capped collections are never clustered: positions are record ids.
    let ScanFrom::Record(after) = after else { return Ok(()) };
    let Some(coll) = shared.catalog.get(&c.ns) else { return Ok(()) };
    if coll.get(shared.catalog.engine(), *after)?.is_some() {
        return Ok(());
    }
    Err(CommandError::capped_position_lost(format!(
        "CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId({after})"
    )))
}

impl Cursors {
    /// How long a `getMore` on cursor `id` may wait for inserts at its
    /// end: `maxTimeMS` (default 1 s) for an awaitData cursor.
    pub fn await_data(&self, id: i64, cmd: &Document) -> Option<Duration> {
        let open = self.open.lock();
        open.get(&id).filter(|c| c.await_data)?;
        Some(Deadline::of(cmd).ok().and_then(|d| d.left()).unwrap_or(Duration::from_secs(1)))
    }
}

/// A hit as the client sees it: projected, with `$recordId` if asked.
fn render(c: &CursorState, hit: Hit) -> Result<Document, CommandError> {
    let record_id = match &c.record_id {
        RecordIds::Hidden => None,
        RecordIds::Long => Some(Bson::Int64(hit.rid as i64)),
        RecordIds::Key(coll) => hit.doc.get("_id").map(|id| {
            Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: coll.id_key(id) })
        }),
    };
    let mut d = match &c.projection {
        Some(p) => p.apply(&hit.doc, hit.pos)?,
        None => hit.doc,
    };
    if let Some(record_id) = record_id {
        d.insert("$recordId", record_id);
    }
    Ok(d)
}

/// Up to `batch` documents from the cursor; `true` when it is exhausted.
fn fill(
    shared: &Shared,
    c: &mut CursorState,
    batch: usize,
    deadline: &Deadline,
) -> Result<(Vec<Bson>, bool), CommandError> {
    let want = match c.remaining {
        Some(r) => batch.min(r),
        None => batch,
    };
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while out.len() < want {
        deadline.check()?;
        let Some(hit) = next_hit(shared, c)? else { return Ok((out, !c.tailable)) };
        let d = render(c, hit)?;
        bytes += encoded_len(&d);
        out.push(Bson::Document(d));
        if let Some(r) = &mut c.remaining {
            *r -= 1;
            if *r == 0 {
                return Ok((out, true));
            }
        }
        // A batch stays well under the 48 MB message limit.
        if bytes >= bson_object_size_max_bytes {
            break;
        }
    }
    let exhausted = match &mut c.source {
        Source::Buffer(items) => items.len() == 0,
        Source::Merge(runs) => runs.is_done(),
        Source::Stream { docs, .. } => docs.peek().is_none(),
        Source::Scan { .. } => false,
    };
    Ok((out, exhausted))
}

/// A document's BSON size.
pub(crate) use doc::bson_bytes::encoded_len;

fn register(shared: &Shared, state: CursorState) -> i64 {
    let mut open = shared.cursors.open.lock();
    Cursors::reap(&mut open);
    loop {
        let id = (rand_u64() >> 1) as i64;
        if id != 0 && !open.contains_key(&id) {
            open.insert(id, state);
            return id;
        }
    }
}

/// A random number: each `RandomState` is keyed afresh.
fn rand_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

fn cursor_reply(ns: &Namespace, id: i64, key: &str, batch: Vec<Bson>) -> Document {
    doc! { "cursor": { key: batch, "id": id, "ns": ns.to_string() }, "ok": 1.0 }
}

/// Reply with a first batch, keeping a cursor open for the rest.
fn first_batch(
    shared: &Shared,
    mut state: CursorState,
    batch_size: Option<usize>,
    single: bool,
    deadline: &Deadline,
) -> CommandResult {
    let ns = state.ns.clone();
    let first = batch_size.unwrap_or(FIRST_BATCH_DEFAULT);
    let (batch, done) =
        if first == 0 && !single { (Vec::new(), false) } else { fill(shared, &mut state, first.max(1), deadline)? };
    // A tailable cursor whose query finds nothing dies at once, as
    // MongoDB's does.
    let dead = state.tailable && first > 0 && batch.is_empty();
    state.time_left = deadline.left();
    let id = if done || single || dead { 0 } else { register(shared, state) };
    Ok(cursor_reply(&ns, id, "firstBatch", batch))
}

/// A sort's matches, sorted, with `skip` and `limit` applied. Keeps only
/// the best `skip + limit` while scanning when there is a limit. Past the
/// sort memory limit it spills sorted runs to disk (`spill.rs`) when
/// `allow_disk_use`, and fails with 292 otherwise.
fn sorted_hits(
    shared: &Shared,
    hits: &mut dyn Iterator<Item = Result<Hit, CommandError>>,
    sort: &Sort,
    (skip, limit): (usize, Option<usize>),
    allow_disk_use: bool,
    deadline: &Deadline,
) -> Result<Source, CommandError> {
    let memory_limit = shared.parameters.sort_memory_limit.load(Ordering::Relaxed);
    let keep = limit.map(|l| l.saturating_add(skip));
    let mut buf: Vec<Hit> = Vec::new();
    let mut bytes = 0usize;
    let mut spilled: Option<crate::spill::Spilled> = None;
    let by_sort = |a: &Hit, b: &Hit| sort.compare(&a.doc, &b.doc);
    for hit in hits {
        deadline.check()?;
        let hit = hit?;
        bytes += encoded_len(&hit.doc);
        buf.push(hit);
        if let Some(k) = keep {
            if buf.len() >= 2 * k.max(512) {
                buf.sort_by(by_sort);
                buf.truncate(k);
                bytes = buf.iter().map(|h| encoded_len(&h.doc)).sum();
            }
        }
        if bytes > memory_limit {
            if !allow_disk_use {
                return Err(CommandError::query_exceeded_memory_limit(format!(
                    "Executor error during find command :: caused by :: Sort exceeded memory limit of {memory_limit} bytes, but did not opt in to external sorting."
                )));
            }
            let runs = spilled.get_or_insert_with(|| crate::spill::Spilled::new(&spill_dir(shared), sort.clone()));
            runs.spill(&mut buf, keep)?;
            shared.opcounters.spills.sort_spills.fetch_add(1, Ordering::Relaxed);
            bytes = 0;
        }
    }
    if let Some(mut runs) = spilled {
        runs.finish(buf, skip)?;
        return Ok(Source::Merge(Box::new(runs)));
    }
    buf.sort_by(by_sort);
    let mut out: Vec<Hit> = buf.into_iter().skip(skip).collect();
    if let Some(l) = limit {
        out.truncate(l);
    }
    Ok(Source::Buffer(out.into_iter()))
}

/// Where blocking sorts and groups spill to (`allowDiskUse`).
pub(crate) fn spill_dir(shared: &Shared) -> std::path::PathBuf {
    shared.options.dbpath.join("_tmp")
}

/// How many views may stack (MongoDB's limit).
const VIEW_DEPTH_MAX: usize = 20;

/// For a view: the collection it finally reads and the stages its
/// documents go through (the innermost view's first). `None` for a
/// collection or a missing namespace.
pub(crate) fn resolve_view(shared: &Shared, ns: &Namespace) -> Result<Option<(Namespace, Vec<Bson>)>, CommandError> {
    let mut current = ns.clone();
    let mut stages: Vec<Bson> = Vec::new();
    let mut depth = 0;
    while let Some(c) = shared.catalog.get(&current) {
        let Some((on, pipeline)) = c.view_on() else { break };
        depth += 1;
        if depth > VIEW_DEPTH_MAX {
            return Err(CommandError::view_depth_limit_exceeded(format!(
                "View depth too deep or view cycle detected. Maximum depth is {VIEW_DEPTH_MAX}"
            )));
        }
        stages.splice(0..0, pipeline.iter().cloned());
        current = Namespace::new(&current.db, on)?;
    }
    Ok((depth > 0).then_some((current, stages)))
}

/// `pipeline` over the collection `base`, produced as it is read, with
/// the collection it scans (for a cursor to check it is still there).
type Scanning = Option<(Namespace, Arc<Collection>)>;
fn stream_over(
    shared: &Shared,
    base: &Namespace,
    pipeline: &query::Pipeline,
) -> Result<(query::pipeline::DocStream<'static>, Scanning), CommandError> {
    let scan = ScanIter::new(shared, base);
    let scanning = scan.coll.clone().map(|c| (base.clone(), c));
    Ok((pipeline.stream(scan.fallible())?, scanning))
}

/// The hits of `filter` over a whole collection, or over a view's
/// documents.
fn scan_hits<'a>(
    shared: &'a Shared,
    ns: &Namespace,
    filter: &'a Filter,
) -> Box<dyn Iterator<Item = Result<Hit, CommandError>> + 'a> {
    match resolve_view(shared, ns) {
        Err(e) => return Box::new(std::iter::once(Err(e))),
        Ok(Some((base, stages))) => {
            // The view's documents as its pipeline produces them.
            let pipeline = query::Pipeline::parse(&stages).map(|p| p.with_collation(filter.collation().cloned()));
            return match pipeline.map_err(CommandError::from).and_then(|p| stream_over(shared, &base, &p)) {
                Err(e) => Box::new(std::iter::once(Err(e))),
                Ok((docs, _)) => Box::new(docs.filter_map(move |doc| {
                    let doc = match doc {
                        Ok(doc) => doc,
                        Err(e) => return Some(Err(e.into())),
                    };
                    match filter.try_matches_at(&doc) {
                        Ok((ok, pos)) => ok.then_some(Ok(Hit { rid: 0, doc, pos })),
                        Err(e) => Some(Err(e.into())),
                    }
                })),
            };
        }
        Ok(None) => {}
    }
    let mut scan = ScanIter::new(shared, ns);
    let mut failed = false;
    Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        for (rid, d) in scan.by_ref() {
            match filter.try_matches_at(&d) {
                Ok((true, pos)) => return Some(Ok(Hit { rid, doc: d, pos })),
                Ok((false, _)) => {}
                Err(e) => {
                    failed = true;
                    return Some(Err(e.into()));
                }
            }
        }
        failed = true;
        scan.error.take().map(|e| e.into()).map(Err)
    }))
}

fn document_option(cmd: &Document, name: &str) -> Result<Option<Document>, CommandError> {
    match cmd.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d.clone())),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field 'find.{name}' is the wrong type '{}', expected type 'object'",
            type_name(other)
        ))),
    }
}

/// `hint`: only the `_id` index (by its name, `_id_` or a clustered
/// index's own, or by `{_id: 1}`) and `$natural` exist until secondary
/// indexes are built. On a view, the index is the base collection's.
pub(crate) fn check_hint(shared: &Shared, ns: &Namespace, cmd: &Document) -> Result<(), CommandError> {
    let ok = match cmd.get("hint") {
        None | Some(Bson::Null) => true,
        // A view's reads go to the collection under it, hint and all.
        Some(Bson::String(name)) => match resolve_view(shared, ns)?
            .map_or_else(|| shared.catalog.get(ns), |(base, _)| shared.catalog.get(&base))
        {
            Some(coll) => *name == crate::indexes::id_index_name(&coll),
            None => name == "_id_",
        },
        Some(Bson::Document(d)) => {
            d.is_empty() || crate::indexes::is_id_key(d) || d.keys().next().is_some_and(|k| k == "$natural")
        }
        Some(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(CommandError::bad_value(
            "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index",
        ))
    }
}

/// The collation a command (or statement) on `ns` uses: its own
/// `collation`, else the collection's or view's default; `None` for the
/// simple one. A view's default cannot be overridden (167), as in mongod.
pub(crate) fn collation_of(
    shared: &Shared,
    ns: &Namespace,
    cmd: &Document,
) -> Result<Option<Arc<Collation>>, CommandError> {
    let entry = shared.catalog.get(ns);
    let default = || entry.as_ref().and_then(|c| Collation::parse(c.options.get("collation")).ok().flatten());
    let given = match cmd.get("collation") {
        // An empty collation is no collation given, as in mongod.
        None | Some(Bson::Null) => return Ok(default()),
        Some(Bson::Document(d)) if d.is_empty() => return Ok(default()),
        given => Collation::parse(given)?,
    };
    if entry.as_ref().is_some_and(|c| c.view_on().is_some()) && !same_collation(given.as_ref(), default().as_ref()) {
        return Err(CommandError::option_not_supported_on_view("Cannot override a view's default collation"));
    }
    Ok(given)
}

/// Whether two collations compare alike (`None`: the simple one).
pub(crate) fn same_collation(a: Option<&Arc<Collation>>, b: Option<&Arc<Collation>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.full_spec() == b.full_spec(),
        _ => false,
    }
}

/// The `_id` a filter pins when `coll`'s `_id` index can find it: not
/// when the operation's collation compares a string in it otherwise than
/// the index's collation does.
pub(crate) fn point_id<'a>(
    query: &'a Document,
    collation: Option<&Arc<Collation>>,
    coll: &Collection,
) -> Option<&'a Bson> {
    fn holds_string(v: &Bson) -> bool {
        match v {
            Bson::String(_) | Bson::Symbol(_) => true,
            Bson::Document(d) => d.values().any(holds_string),
            Bson::Array(items) => items.iter().any(holds_string),
            _ => false,
        }
    }
    let same = match (collation, coll.id_collation()) {
        (None, None) => true,
        (Some(a), Some(b)) => a.full_spec() == b.full_spec(),
        _ => false,
    };
    Filter::id_equality(query).filter(|id| same || !holds_string(id))
}

pub fn find(shared: &Shared, cmd: &Document) -> CommandResult {
    shared.opcounters.query.fetch_add(1, Ordering::Relaxed);
    let deadline = Deadline::of(cmd)?;
    let ns = namespace(cmd, "find")?;
    check_fields(
        cmd,
        "find",
        &[
            "filter",
            "sort",
            "projection",
            "hint",
            "skip",
            "limit",
            "batchSize",
            "singleBatch",
            "max",
            "min",
            "returnKey",
            "showRecordId",
            "tailable",
            "oplogReplay",
            "noCursorTimeout",
            "awaitData",
            "allowPartialResults",
            "collation",
            "allowDiskUse",
            "readOnce",
            "term",
        ],
        false,
    )?;
    let scope = crate::crud::scope_of(cmd)?;
    let (filter_doc, filter) = filter_of(cmd, "filter", &scope)?;
    let sort_doc = document_option(cmd, "sort")?.unwrap_or_default();
    // `{$natural: ±1}`, as the sort or (without one) as the hint: the
    // collection's order, forwards or backwards.
    let hint_natural = cmd.get_document("hint").ok().and_then(natural_direction);
    let (sort, natural) = match natural_direction(&sort_doc) {
        Some(n) => (Sort::default(), n),
        None if sort_doc.is_empty() => (Sort::default(), hint_natural.unwrap_or(1)),
        None => (Sort::parse(&sort_doc)?, 1),
    };
    let projection = match document_option(cmd, "projection")? {
        Some(p) if !p.is_empty() => Some(Projection::parse_in(&p, &scope)?),
        _ => None,
    };
    for unsupported in ["min", "max"] {
        if cmd.get_document(unsupported).is_ok_and(|d| !d.is_empty()) {
            return Err(CommandError::not_implemented(format!(
                "find with {unsupported} needs secondary indexes, not built yet"
            )));
        }
    }
    if bool_option(cmd, "returnKey", "find", false)? {
        return Err(CommandError::not_implemented("returnKey needs secondary indexes, not built yet"));
    }
    let tailable = bool_option(cmd, "tailable", "find", false)?;
    let await_data = bool_option(cmd, "awaitData", "find", false)?;
    if await_data && !tailable {
        return Err(CommandError::failed_to_parse("Cannot set 'awaitData' without also setting 'tailable'"));
    }
    // The collection (or view) read, looked up once.
    let coll = shared.catalog.get(&ns);
    if tailable {
        if coll.as_ref().is_some_and(|c| c.capped.is_none()) {
            return Err(CommandError::bad_value(format!(
                "error processing query: ns={ns} tailable cursor requested on non capped collection"
            )));
        }
        if !sort.is_empty() || natural < 0 {
            return Err(CommandError::bad_value("cannot use tailable option with a sort other than {$natural: 1}"));
        }
    }
    check_hint(shared, &ns, cmd)?;
    let collation = collation_of(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation.clone());
    let sort = sort.with_collation(collation.clone());
    let skip = count_option(cmd, "skip")?.unwrap_or(0);
    let limit = count_option(cmd, "limit")?.unwrap_or(0);
    let batch_size = count_option(cmd, "batchSize")?;
    if skip < 0 {
        return Err(CommandError::bad_value("skip value must be non-negative"));
    }
    if limit < 0 {
        return Err(CommandError::bad_value("limit value must be non-negative"));
    }
    if batch_size.is_some_and(|b| b < 0) {
        return Err(CommandError::bad_value("batchSize value must be non-negative"));
    }
    let (skip, limit) = (skip as usize, (limit > 0).then_some(limit as usize));
    let single = bool_option(cmd, "singleBatch", "find", false)?;
    let allow_disk_use =
        bool_option(cmd, "allowDiskUse", "find", shared.parameters.allow_disk_use_by_default.load(Ordering::Relaxed))?;
    let record_id = match (bool_option(cmd, "showRecordId", "find", false)?, &coll) {
        (false, _) => RecordIds::Hidden,
        (true, Some(c)) if c.is_clustered() => RecordIds::Key(c.clone()),
        (true, _) => RecordIds::Long,
    };
    let mut state = CursorState {
        ns: ns.clone(),
        source: Source::Buffer(Vec::new().into_iter()),
        projection,
        record_id,
        remaining: None,
        last_used: Instant::now(),
        tailable,
        await_data,
        tailing: None,
        lsid: None,
        time_left: None,
    };
    if tailable {
        state.tailing = coll.as_ref().map(Arc::downgrade);
    }
    let is_view = coll.as_ref().is_some_and(|c| c.view_on().is_some());
    if is_view && tailable {
        return Err(crate::crud::not_on_view(&ns));
    }
    // A point lookup when the filter is exactly {_id: value}.
    let point = coll
        .as_ref()
        .filter(|_| !is_view && !tailable)
        .and_then(|c| Some((point_id(&filter_doc, collation.as_ref(), c)?, c)));
    if let Some((id, coll)) = point {
        let found = coll.find_rid_by_id(shared.catalog.engine(), id)?;
        let hits: Vec<Hit> = found.into_iter().skip(skip).map(|(rid, doc)| Hit { rid, doc, pos: None }).collect();
        state.source = Source::Buffer(hits.into_iter());
        state.remaining = limit;
    } else if !sort.is_empty() {
        let hits = &mut scan_hits(shared, &ns, &filter);
        state.source = sorted_hits(shared, hits, &sort, (skip, limit), allow_disk_use, &deadline)?;
        // A spilled sort applied the skip but not the limit.
        state.remaining = limit.filter(|_| matches!(state.source, Source::Merge(_)));
    } else if is_view {
        // A view's documents come from its pipeline as the cursor is read,
        // in the pipeline's order, filtered; no blocking sort.
        // Dropped since it was looked up: as any missing namespace, empty.
        if let Some((base, stages)) = resolve_view(shared, &ns)? {
            let pipeline = query::Pipeline::parse(&stages)?.with_collation(filter.collation().cloned());
            let (docs, scanning) = stream_over(shared, &base, &pipeline)?;
            state.source = Source::Stream { docs: docs.peekable(), scanning, filter: Some(filter) };
            skip_hits(shared, &mut state, skip, &deadline)?;
            state.remaining = limit;
        }
    } else {
        state.source = Source::Scan { filter, after: ScanFrom::Start, pending: VecDeque::new(), reverse: natural < 0 };
        skip_hits(shared, &mut state, skip, &deadline)?;
        state.remaining = limit;
    }
    first_batch(shared, state, batch_size.map(|b| b as usize), single, &deadline)
}

pub fn get_more(shared: &Shared, cmd: &Document) -> CommandResult {
    shared.opcounters.getmore.fetch_add(1, Ordering::Relaxed);
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(i)) => *i,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                type_name(other)
            )))
        }
        None => return Err(CommandError::failed_to_parse("getMore needs a cursor id")),
    };
    // Command cursors (`bulkWrite`'s results, `listIndexes`) live on
    // `$cmd.` namespaces, which no collection may have.
    let ns = match (cmd.get_str("collection"), db_of(cmd)) {
        (Ok(coll), Ok(db)) if coll.starts_with("$cmd.") => Namespace { db: db.into(), coll: coll.into() },
        _ => namespace(cmd, "collection")?,
    };
    let batch_size = count_option(cmd, "batchSize")?.filter(|b| *b > 0).map(|b| b as usize).unwrap_or(usize::MAX);
    let mut state = {
        let mut open = shared.cursors.open.lock();
        Cursors::reap(&mut open);
        match open.remove(&id) {
            Some(s) if s.ns == ns => {
                shared.cursors.busy.lock().insert(id, (s.lsid, false));
                s
            }
            Some(s) => {
                let msg = format!(
                    "Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}",
                    s.ns
                );
                open.insert(id, s);
                return Err(CommandError::unauthorized(msg));
            }
            None => return Err(CommandError::cursor_not_found(format!("cursor id {id} not found"))),
        }
    };
    let busy = Busy(&shared.cursors, id);
    if state.tailable {
        check_tail_position(shared, &mut state)?;
    }
    // The same collection (a collMod makes a new `Collection` over the
    // same tables); a drop, rename or re-creation kills the cursor.
    if let Source::Stream { scanning: Some((base, coll)), .. } = &state.source {
        if shared.catalog.get(base).is_none_or(|now| now.records_table() != coll.records_table()) {
            return Err(CommandError::query_plan_killed(format!(
                "PlanExecutor error during aggregation :: caused by :: collection dropped or renamed: {base}"
            )));
        }
    }
    let deadline = match state.await_data {
        true => Deadline::none(),
        false => Deadline(state.time_left.map(|left| Instant::now() + left)),
    };
    // Past the time limit the cursor is gone (not put back), as mongod's.
    let (batch, done) = fill(shared, &mut state, batch_size, &deadline)?;
    state.time_left = deadline.left();
    // Put back under the lock `killCursors` takes, unless killed meanwhile.
    let id = {
        let mut open = shared.cursors.open.lock();
        if busy.killed() {
            return Err(CommandError::with_code(237, format!("cursor id {id} was killed")));
        }
        if done {
            0
        } else {
            state.last_used = Instant::now();
            open.insert(id, state);
            id
        }
    };
    drop(busy);
    Ok(cursor_reply(&ns, id, "nextBatch", batch))
}

pub fn kill_cursors(shared: &Shared, cmd: &Document) -> CommandResult {
    namespace(cmd, "killCursors")?;
    let ids =
        cmd.get_array("cursors").map_err(|_| CommandError::failed_to_parse("killCursors needs a cursors array"))?;
    let (mut killed, mut not_found) = (Vec::new(), Vec::new());
    let mut open = shared.cursors.open.lock();
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(CommandError::type_mismatch("cursor ids must be longs"));
        };
        let out = shared.cursors.busy.lock().get_mut(id).map(|b| b.1 = true).is_some();
        if open.remove(id).is_some() || out {
            killed.push(*id);
        } else {
            not_found.push(*id);
        }
    }
    Ok(doc! {
        "cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [], "cursorsUnknown": [], "ok": 1.0,
    })
}

/// The stage that lists the local session cache (`{aggregate: 1}` only).
const LOCAL_SESSIONS: &str = "$listLocalSessions";

pub fn aggregate(shared: &Shared, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?;
    // `{aggregate: 1}`: a database-level pipeline, starting from `$documents`.
    let collectionless = match cmd.get("aggregate") {
        Some(Bson::String(_)) => false,
        Some(Bson::Int32(1) | Bson::Int64(1)) => true,
        Some(Bson::Double(d)) if *d == 1.0 => true,
        _ => {
            return Err(CommandError::failed_to_parse(
                "Invalid command format: the 'aggregate' field must specify a collection name or 1",
            ))
        }
    };
    let ns = match collectionless {
        true => Namespace { db: db_of(cmd)?.to_string(), coll: "$cmd.aggregate".into() },
        false => namespace(cmd, "aggregate")?,
    };
    let stages = cmd
        .get_array("pipeline")
        .map_err(|_| CommandError::type_mismatch("'pipeline' option must be specified as an array"))?;
    let (stages, write) = crate::agg_write::split(stages, &ns.db)?;
    let stages = &stages;
    let scope = crate::crud::scope_of(cmd)?;
    let Ok(cursor) = cmd.get_document("cursor") else {
        return Err(CommandError::failed_to_parse(
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    };
    let batch_size = count_option(cursor, "batchSize")?;
    if batch_size.is_some_and(|b| b < 0) {
        return Err(CommandError::bad_value("batchSize value must be non-negative"));
    }
    check_hint(shared, &ns, cmd)?;
    let collation = collation_of(shared, &ns, cmd)?;
    let view = resolve_view(shared, &ns)?;
    if stages.iter().skip(1).any(|s| s.as_document().is_some_and(|d| d.contains_key(LOCAL_SESSIONS))) {
        return Err(CommandError::with_code(
            40602,
            format!("{LOCAL_SESSIONS} is only valid as the first stage in a pipeline"),
        ));
    }
    let (source, stages) = match stages.first() {
        Some(Bson::Document(d)) if d.len() == 1 && d.contains_key(LOCAL_SESSIONS) => {
            if !collectionless {
                return Err(CommandError::invalid_namespace(format!(
                    "{LOCAL_SESSIONS} must be run against the database with {{aggregate: 1}}, not a collection"
                )));
            }
            let spec = d.get(LOCAL_SESSIONS).expect("checked");
            (Some(crate::session::list_local_sessions(shared, spec)?), &stages[1..])
        }
        Some(Bson::Document(d)) if d.contains_key("$collStats") => {
            if view.is_some() {
                return Err(crate::crud::not_on_view(&ns));
            }
            (Some(vec![coll_stats_stage(shared, &ns, d)?]), &stages[1..])
        }
        Some(Bson::Document(d)) if collectionless && d.contains_key("$documents") => {
            let arg = d.get("$documents").expect("checked");
            (Some(crate::agg_write::documents(arg, &scope)?), &stages[1..])
        }
        first if collectionless => {
            let name = first.and_then(Bson::as_document).and_then(|d| d.keys().next().cloned()).unwrap_or_default();
            return Err(CommandError::invalid_namespace(format!(
                "{{aggregate: 1}} is not valid for '{name}'; a collection is required."
            )));
        }
        _ => (None, &stages[..]),
    };
    // On a view, the view's stages come first, over its base collection.
    let (base, stages) = match view {
        Some((base, mut prefix)) => {
            prefix.extend(stages.iter().cloned());
            (base, prefix)
        }
        None => (ns.clone(), stages.to_vec()),
    };
    // Past mongod's memory limits $sort and $group fail, or spill with
    // allowDiskUse.
    let allow_disk_use = bool_option(
        cmd,
        "allowDiskUse",
        "aggregate",
        shared.parameters.allow_disk_use_by_default.load(Ordering::Relaxed),
    )?;
    let limits = query::MemoryLimits {
        sort: shared.parameters.sort_memory_limit.load(Ordering::Relaxed),
        group: shared.parameters.group_memory_limit.load(Ordering::Relaxed),
    };
    let spill = allow_disk_use
        .then(|| query::pipeline::SpillTo { dir: spill_dir(shared), counters: shared.opcounters.spills.clone() });
    let pipeline = query::Pipeline::parse_in(&stages, &scope)?
        .with_collation(collation)
        .with_memory_limits(Some(limits))
        .with_spill(spill);
    let (docs, scanning) = match source {
        Some(docs) => (pipeline.stream(docs.into_iter().map(Ok))?, None),
        None => stream_over(shared, &base, &pipeline)?,
    };
    deadline.check()?;
    if let Some(write) = write {
        // The results went to a collection; the cursor is empty.
        let out = docs.collect::<Result<Vec<_>, _>>()?;
        deadline.check()?;
        crate::agg_write::write(shared, cmd, &write, out)?;
        return buffered_cursor(shared, ns, Vec::new(), None);
    }
    let state = CursorState::of(ns, Source::Stream { docs: docs.peekable(), scanning, filter: None });
    first_batch(shared, state, batch_size.map(|b| b as usize), false, &deadline)
}

/// Reply with the first batch of documents computed up front, keeping a
/// cursor on `ns` open for the rest (`batch_size` 101 by default).
pub(crate) fn buffered_cursor(
    shared: &Shared,
    ns: Namespace,
    docs: Vec<Document>,
    batch_size: Option<usize>,
) -> CommandResult {
    let hits: Vec<Hit> = docs.into_iter().map(|doc| Hit { rid: 0, doc, pos: None }).collect();
    let state = CursorState::of(ns, Source::Buffer(hits.into_iter()));
    first_batch(shared, state, batch_size, false, &Deadline::none())
}

/// The one document `$collStats` produces (`storageStats` and `count`).
fn coll_stats_stage(shared: &Shared, ns: &Namespace, stage: &Document) -> Result<Document, CommandError> {
    let Ok(spec) = stage.get_document("$collStats") else {
        return Err(CommandError::failed_to_parse("$collStats must take a nested object but found: $collStats"));
    };
    let mut out = doc! {
        "ns": ns.to_string(),
        "host": crate::commands::hostname(),
        "localTime": bson::DateTime::now(),
    };
    for (k, v) in spec {
        match k.as_str() {
            "storageStats" => {
                let scale = match v {
                    Bson::Document(o) => count_option(o, "scale")?.unwrap_or(1).max(1),
                    _ => 1,
                };
                out.insert("storageStats", crate::crud::storage_stats(shared, ns, scale)?);
            }
            "count" => {
                let n = match shared.catalog.get(ns) {
                    Some(c) => c.count_and_size(shared.catalog.engine())?.0 as i64,
                    None => 0,
                };
                out.insert("count", n);
            }
            "latencyStats" | "queryExecStats" => {
                return Err(CommandError::not_implemented(format!("$collStats {k} is not supported yet")))
            }
            other => {
                return Err(CommandError::with_code(
                    40415,
                    format!("BSON field '$collStats.{other}' is an unknown field."),
                ))
            }
        }
    }
    Ok(out)
}

pub fn count(shared: &Shared, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?;
    let ns = namespace(cmd, "count")?;
    let (_, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    check_hint(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation_of(shared, &ns, cmd)?);
    let skip = count_option(cmd, "skip")?.unwrap_or(0);
    if skip < 0 {
        return Err(CommandError::bad_value("skip value is negative in count query"));
    }
    let limit = count_option(cmd, "limit")?.unwrap_or(0).unsigned_abs() as usize;
    let mut n = 0usize;
    for hit in scan_hits(shared, &ns, &filter) {
        hit?;
        deadline.check()?;
        n += 1;
    }
    let mut n = n.saturating_sub(skip as usize);
    if limit > 0 {
        n = n.min(limit);
    }
    Ok(doc! { "n": n as i64, "ok": 1.0 })
}

pub fn distinct(shared: &Shared, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?;
    let ns = namespace(cmd, "distinct")?;
    let key = match cmd.get("key") {
        Some(Bson::String(k)) => k.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'distinct.key' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )))
        }
        None => return Err(CommandError::failed_to_parse("BSON field 'distinct.key' is missing but a required field")),
    };
    if key.is_empty() {
        return Err(CommandError::invalid_distinct_key("FieldPath cannot be constructed with empty string"));
    }
    if key.split('.').any(str::is_empty) {
        return Err(CommandError::with_code(15998, "FieldPath field names may not be empty strings."));
    }
    if key.starts_with('$') {
        return Err(CommandError::with_code(16410, "FieldPath field names may not start with '$'."));
    }
    let (_, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    check_hint(shared, &ns, cmd)?;
    let collation = collation_of(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation.clone());
    // Values equal by MongoDB's comparison (1 and 1.0; under a collation,
    // "a" and "A" at strength 2) count once, the first one met.
    let mut values: BTreeSet<Ordered> = BTreeSet::new();
    for hit in scan_hits(shared, &ns, &filter) {
        let hit = hit?;
        deadline.check()?;
        query::matcher::values_at(&hit.doc, &key, &mut |v| {
            let value = Ordered(v.clone(), collation.clone());
            if !values.contains(&value) {
                values.insert(value);
            }
        });
    }
    let values: Vec<Bson> = values.into_iter().map(|o| o.0).collect();
    let reply = doc! { "values": values, "ok": 1.0 };
    if encoded_len(&reply) > bson_object_size_max_bytes {
        return Err(CommandError::with_code(17217, "distinct too big, 16mb cap"));
    }
    Ok(reply)
}

/// A value ordered by MongoDB's comparison, strings through its collation.
struct Ordered(Bson, Option<Arc<Collation>>);

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match &self.1 {
            Some(c) => c.compare(&self.0, &other.0),
            None => compare(&self.0, &other.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_from_max_time_ms() {
        let of = |v: Bson| Deadline::of(&bson::doc! { "find": "c", "maxTimeMS": v });
        let left = of(Bson::Int32(5000)).unwrap().left().unwrap();
        assert!(left <= Duration::from_millis(5000) && left > Duration::from_millis(4000));
        assert_eq!(of(Bson::Int64(0)).unwrap().left(), None, "0 means no limit");
        assert_eq!(of(Bson::Double(7.0)).unwrap().left().map(|d| d <= Duration::from_millis(7)), Some(true));
        assert_eq!(of(Bson::String("x".into())).err().map(|e| e.code), Some(2));
        assert_eq!(of(Bson::Int64(-1)).err().map(|e| e.code), Some(2));
        assert_eq!(Deadline::of(&bson::doc! { "find": "c" }).unwrap().left(), None);
    }

    /// A command that panics while it holds the registry (the panic is
    /// caught and answered as InternalError) leaves it usable by the next.
    #[test]
    fn the_cursor_registry_survives_a_panic_while_locked() {
        let cursors = Arc::new(Cursors::default());
        let held = Arc::clone(&cursors);
        let panicked = std::thread::spawn(move || {
            let _guard = held.open.lock();
            panic!("a command fails while it holds the registry");
        })
        .join();
        assert!(panicked.is_err());
        assert!(cursors.open.lock().is_empty(), "the registry is still usable");
        assert!(cursors.busy.lock().is_empty());
    }
}
