//! `find`, `getMore` and `killCursors`.

use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::count_option;
use crate::args::db_of;
use crate::args::document_option;
use crate::args::filter_of;
use crate::args::namespace;
use crate::args::{CommandResult, ReplyResult};
use crate::error::CommandError;
use crate::exec::access;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::cursors::check_tail_position;
use crate::exec::cursors::cursor_reply;
use crate::exec::cursors::fill;
use crate::exec::cursors::first_batch;
use crate::exec::cursors::natural_direction;
use crate::exec::cursors::skip_hits;
use crate::exec::cursors::stream_of;
use crate::exec::cursors::Busy;
use crate::exec::cursors::CursorState;
use crate::exec::cursors::Cursors;
use crate::exec::cursors::Exact;
use crate::exec::cursors::RecordIds;
use crate::exec::cursors::Source;
use crate::exec::deadline::{Deadline, SharedDeadline};
use crate::exec::index_scan::ScanStats;
use crate::exec::scan::check_hint;
use crate::exec::scan::collation_of;
use crate::exec::scan::planned_hits;
use crate::exec::scan::scan_hits;
use crate::exec::scan::sorted_hits;
use crate::exec::scan::Hit;
use crate::exec::views::resolve_view;
use crate::exec::views::stream_over;
use crate::limits::quick_read_docs_max;
use bson::{doc, Bson, Document};
use doc::catalog::{Namespace, ScanFrom};
use doc::stored::Stored;
use query::plan::AccessPath;
use query::{Projection, Sort};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub fn find(shared: &Ctx<'_>, call: &Call, cmd: &Document) -> ReplyResult {
    let place = call.place;
    shared.opcounters.query.fetch_add(1, Ordering::Relaxed);
    let deadline = Deadline::of(cmd)?.killable(shared);
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
    let scope = crate::args::scope_of(cmd)?;
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
    let projection_doc = document_option(cmd, "projection")?;
    // The fields the read needs, which an index may cover.
    let needs = projection_doc.as_ref().and_then(query::plan::projection_fields);
    let projection = match projection_doc {
        Some(p) if !p.is_empty() => Some(Projection::parse_in(&p, &scope)?),
        _ => None,
    };
    if bool_option(cmd, "returnKey", "find", false)? {
        return Err(CommandError::not_implemented("returnKey needs secondary indexes, not built yet"));
    }
    let tailable = bool_option(cmd, "tailable", "find", false)?;
    if tailable && shared.snapshot().is_some() {
        // A snapshot never changes: a tailable cursor on it would wait forever.
        return Err(CommandError::invalid_options("A tailable cursor cannot read at readConcern level snapshot"));
    }
    let await_data = bool_option(cmd, "awaitData", "find", false)?;
    if await_data && !tailable {
        return Err(CommandError::failed_to_parse("Cannot set 'awaitData' without also setting 'tailable'"));
    }
    // The collection (or view) read, looked up once.
    let coll = shared.collection(&ns);
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
        txn: None,
        tally: shared.conflicts.tally.clone(),
        read_deadline: None,
    };
    if tailable {
        state.tailing = coll.as_ref().map(Arc::downgrade);
    }
    let is_view = coll.as_ref().is_some_and(|c| c.view_on().is_some());
    let min_max = access::min_max_of(coll.as_deref().filter(|_| !is_view), cmd, collation.as_ref())?;
    if min_max.is_some() && (!sort.is_empty() || tailable) {
        return Err(CommandError::not_implemented("min()/max() with a sort or a tailable cursor is not supported yet"));
    }
    if is_view && tailable {
        return Err(crate::exec::views::not_on_view(&ns));
    }
    // The planner's path (views read through their pipeline).
    let plan = |c: &Arc<doc::catalog::Collection>| {
        let how = access::How {
            tailable,
            hint: cmd.get("hint"),
            projection: needs.as_deref(),
            min_max: min_max.as_ref(),
            sort: (!sort.is_empty()).then(|| sort.fields()),
            read_ts: shared.read_ts(),
            describe: false,
        };
        let planned = access::plan_projected(c, &filter_doc, collation.as_ref(), how);
        access::race(shared, place, &ns, c, planned, &filter).inspect(|p| call.op.note_plan(p))
    };
    let planned = match coll.as_ref().filter(|_| !is_view) {
        Some(c) => Some((plan(c)?, c)),
        None => None,
    };
    // A read that fills its first batch from a bounded number of index
    // entries and documents runs on this thread; one that may scan further
    // hands this network thread's other connections to another first.
    let first = match (limit, batch_size) {
        (Some(l), Some(b)) if b > 0 => l.min(b as usize),
        (Some(l), _) => l,
        (None, Some(b)) if b > 0 => b as usize,
        (None, _) => crate::exec::cursors::FIRST_BATCH_DEFAULT,
    };
    let quick = skip.saturating_add(first) <= quick_read_docs_max
        && planned.as_ref().is_some_and(|(p, _)| bounded(p, filter_doc.is_empty(), sort.is_empty()));
    // Open the cursor's source by `planned` (none: a view, or a missing
    // collection) on `state`; a plan from the cache is watched through
    // its trial by `watch`.
    let open = |state: &mut CursorState,
                planned: Option<(&access::Planned, &Arc<doc::catalog::Collection>)>,
                watch: Option<Arc<access::TrialWatch>>| {
        let point = planned.and_then(|(p, c)| Some((access::point(&p.path)?, c)));
        let index_scan = planned.filter(|(p, _)| {
            matches!(p.path, AccessPath::IndexScan(_) | AccessPath::Or(_) | AccessPath::AndSorted { .. })
        });
        // An index scan that returns the documents in the sort's order
        // needs no blocking sort.
        let index_sorted = index_scan.is_some_and(|(p, _)| matches!(&p.path, AccessPath::IndexScan(s) if s.sorted));
        if let Some((id, coll)) = point {
            let found = coll.find_raw_by_id(&shared.reader(), id)?;
            access::note_point_access(coll);
            let n = u64::from(found.is_some());
            shared.conflicts.tally.examined(n, n);
            let hits: Vec<Hit> =
                found.into_iter().skip(skip).map(|(rid, b)| Hit { rid, doc: Stored::read(b), pos: None }).collect();
            state.source = Source::Buffer(hits.into_iter());
            state.remaining = limit;
            return Ok(());
        }
        if !sort.is_empty() && !index_sorted {
            // The planned (raced) read, or a view's documents.
            let hits = &mut match planned {
                Some((planned, coll)) => {
                    let watch = watch.as_ref().map(|w| (w, &filter));
                    planned_hits(shared, (&ns, coll), planned, (&filter, watch), &deadline)
                }
                None => scan_hits(shared, &ns, (&filter_doc, &filter), cmd.get("hint"), &deadline, &call.op),
            };
            state.source = sorted_hits(shared, hits, &sort, (skip, limit), allow_disk_use, &deadline)?;
            // A spilled sort applied the skip but not the limit.
            state.remaining = limit.filter(|_| matches!(state.source, Source::Merge(_)));
            return Ok(());
        }
        if is_view {
            // A view's documents come from its pipeline as the cursor is
            // read, in the pipeline's order, filtered; no blocking sort.
            // Dropped since it was looked up: as any missing namespace, empty.
            let Some((base, mut stages)) = resolve_view(shared, &ns)? else { return Ok(()) };
            // The filter goes at the pipeline's end, as mongod puts it,
            // where a view with no stages of its own reads it through an
            // index (and the cursor still filters, for positions).
            if !filter_doc.is_empty() {
                stages.push(Bson::Document(bson::doc! { "$match": filter_doc.clone() }));
            }
            let pipeline = query::Pipeline::parse_in(&stages, &scope)?.with_collation(filter.collation().cloned());
            let read_deadline = SharedDeadline::new(&deadline);
            let (docs, scanning) = stream_over(shared, &base, &pipeline, cmd.get("hint"), (&call.op, &read_deadline))?;
            state.read_deadline = Some(read_deadline);
            state.source =
                Source::Stream { docs: stream_of(docs), scanning, filter: Some(filter.clone()), exact: None };
        } else if let Some((planned, coll)) = index_scan {
            state.source = index_source(shared, (&ns, coll), planned, &filter, watch.as_ref())?;
        } else {
            let (filter, reverse) = (filter.clone(), natural < 0);
            state.source = Source::Scan {
                filter,
                after: ScanFrom::Start,
                pending: VecDeque::new(),
                reverse,
                reader: shared.reader(),
            };
        }
        skip_hits(shared, state, skip, &deadline)?;
        state.remaining = limit;
        Ok::<(), CommandError>(())
    };
    place.run(quick, || {
        let planned = planned.as_ref().map(|(p, c)| (p, *c));
        // A plan from the cache is watched through its trial (and, should
        // it degrade, the read starts over from a fresh cursor).
        let watched = planned.filter(|(p, _)| p.cached.is_some() && !access::every_key_matches(p));
        let watch = watched.map(|_| Arc::new(access::TrialWatch::new()));
        let fresh = watch.as_ref().map(|_| state.fresh());
        open(&mut state, planned, watch.clone())?;
        let degraded = || watch.as_ref().is_some_and(|w| w.degraded());
        // Degraded while skipping: no batch is read (nor a cursor kept).
        let reply = match degraded() {
            true => None,
            false => Some(first_batch(shared, state, batch_size.map(|b| b as usize), single, &deadline)?),
        };
        if let Some(w) = &watch {
            w.end();
        }
        // A plan from the cache that degraded in its trial ended its read
        // before answering anything (no cursor was kept): the shape is
        // planned again and read by the new winner.
        let (Some((planned, coll)), true) = (planned, degraded()) else {
            if let (Some((planned, _)), Some(true)) = (planned, watch.as_ref().map(|w| w.watching())) {
                access::note_access(planned);
            }
            return Ok(reply.expect("read unless degraded"));
        };
        tracing::info!(ns = %ns, shape = %planned.shape, "plan cache: a cached plan degraded in its trial; replanning");
        shared.plan_cache.remove(&ns.to_string(), &planned.shape);
        call.op.note_replanned();
        let replanned = plan(coll)?;
        let mut state = fresh.expect("kept for a watched read");
        open(&mut state, Some((&replanned, coll)), None)?;
        first_batch(shared, state, batch_size.map(|b| b as usize), single, &deadline)
    })
}

/// Whether reading `planned` up to a first batch is bounded by that batch:
/// an `_id` point, an index scan whose every key read is returned in the
/// sort's order, or an unfiltered unsorted collection scan.
fn bounded(planned: &access::Planned<'_>, unfiltered: bool, unsorted: bool) -> bool {
    match &planned.path {
        AccessPath::IdPoint(_) => true,
        AccessPath::IndexScan(s) => access::every_key_matches(planned) && (unsorted || s.sorted),
        AccessPath::CollScan { .. } => unfiltered && unsorted,
        AccessPath::Or(_) | AccessPath::AndSorted { .. } => false,
    }
}

/// A cursor's source reading `planned`'s index scans of `coll` (`ns`),
/// `filter` applied to what they fetch; a plan from the cache watched
/// through its trial by `watch`.
fn index_source(
    shared: &Ctx<'_>,
    (ns, coll): (&Namespace, &Arc<doc::catalog::Collection>),
    planned: &access::Planned<'_>,
    filter: &query::Filter,
    watch: Option<&Arc<access::TrialWatch>>,
) -> Result<Source, CommandError> {
    let stats = Arc::new(ScanStats::default());
    // Taken before the first key is read.
    let since = shared.catalog.engine().published_ts();
    let records = access::watched_candidates(shared, (ns, coll), planned, stats, watch.map(|w| (w, filter)))?;
    let scanning = Some((ns.clone(), Arc::clone(coll)));
    let docs = crate::exec::views::stored_input(records);
    let exact = match &planned.path {
        AccessPath::IndexScan(s) if access::every_key_matches(planned) => {
            Some(Exact { index: planned.indexes[s.index].clone(), since })
        }
        _ => None,
    };
    Ok(Source::Stream { docs, scanning, filter: Some(filter.clone()), exact })
}

pub fn get_more(shared: &Ctx<'_>, cmd: &Document) -> ReplyResult {
    shared.opcounters.getmore.fetch_add(1, Ordering::Relaxed);
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(i)) => *i,
        Some(other) => return Err(crate::args::wrong_type("getMore.getMore", other, "long")),
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
            Some(s) if s.ns == ns && !same_transaction(&s, shared) => {
                let msg = match &s.txn {
                    Some(_) => {
                        format!("Cannot run getMore on cursor {id}, which was created in a transaction, outside it")
                    }
                    None => format!(
                        "Cannot run getMore on cursor {id}, which was not created in a multi-document transaction, \
                         inside a transaction"
                    ),
                };
                open.insert(id, s);
                return Err(CommandError::getmore_outside_its_transaction(msg));
            }
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
        if shared.collection(base).is_none_or(|now| now.records_table() != coll.records_table()) {
            return Err(CommandError::query_plan_killed(format!(
                "PlanExecutor error during aggregation :: caused by :: collection dropped or renamed: {base}"
            )));
        }
    }
    let deadline = match state.await_data {
        true => Deadline::none(),
        false => Deadline::at(state.time_left.map(|left| Instant::now() + left)).killable(shared),
    };
    // Past the time limit the cursor is gone (not put back), as mongod's.
    // What the cursor's streams read now is this command's work.
    if let Some(read) = &state.read_deadline {
        read.set(&deadline);
    }
    let before = state.tally.counts();
    let filled = fill(shared, &mut state, batch_size, &deadline);
    shared.conflicts.tally.add(state.tally.counts() - before);
    let (batch, done) = filled?;
    state.time_left = deadline.left();
    // A batch BSON cannot hold fails the command, and the cursor is gone.
    let reply = cursor_reply(&ns, if done { 0 } else { id }, "nextBatch", batch)?;
    // Put back under the lock `killCursors` takes, unless killed meanwhile.
    {
        let mut open = shared.cursors.open.lock();
        if busy.killed() {
            return Err(CommandError::with_code(237, format!("cursor id {id} was killed")));
        }
        if !done {
            state.park();
            open.insert(id, state);
        }
    }
    drop(busy);
    Ok(reply)
}

pub fn kill_cursors(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
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

/// Whether a cursor is read in the transaction it was opened in (or both
/// outside any): a transaction's cursor is read under its session's turn.
fn same_transaction(c: &CursorState, shared: &Ctx<'_>) -> bool {
    match (&c.txn, shared.txn()) {
        (None, None) => true,
        (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
        _ => false,
    }
}
