//! `explain` of `find`, `count`, `distinct`, `update`, `delete` and
//! `findAndModify`: the plan the planner chose (`queryPlanner`) and, at
//! `executionStats` and `allPlansExecution` verbosity, that plan run to
//! the end with MongoDB's counters, in mongod's shape. Writes are planned
//! and their reads run, but nothing is written.

use crate::args::{check_fields, count_option, document_option, filter_of, namespace, CommandResult};
use crate::error::CommandError;
use crate::exec::access::{self, Planned};
use crate::exec::call::Place;
use crate::exec::ctx::Ctx;
use crate::exec::index_scan::ScanStats;
use crate::exec::scan::{check_hint, collation_of};
use bson::{doc, Bson, Document};
use doc::catalog::Namespace;
use doc::index::Index;
use query::plan::{AccessPath, IndexInfo, IndexScan};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod aggregate;
pub(crate) use aggregate::explain_aggregate;

/// How much `explain` runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

pub fn explain(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    check_fields(cmd, "explain", &["verbosity", "comment", "maxTimeMS"], false)?;
    let verbosity = match cmd.get("verbosity") {
        None => Verbosity::AllPlansExecution,
        Some(Bson::String(v)) => match v.as_str() {
            "queryPlanner" => Verbosity::QueryPlanner,
            "executionStats" => Verbosity::ExecutionStats,
            "allPlansExecution" => Verbosity::AllPlansExecution,
            other => {
                return Err(CommandError::bad_value(format!(
                    "verbosity string must be one of {{'queryPlanner', 'executionStats', 'allPlansExecution'}}, not {other}"
                )))
            }
        },
        Some(other) => return Err(crate::args::wrong_type("explain.verbosity", other, "string")),
    };
    let inner = match cmd.get("explain") {
        Some(Bson::Document(d)) => d,
        Some(other) => return Err(crate::args::wrong_type("explain.explain", other, "object")),
        None => return Err(CommandError::failed_to_parse("explain command requires a nested object")),
    };
    let mut inner = inner.clone();
    if let Ok(db) = cmd.get_str("$db") {
        inner.insert("$db", db);
    }
    match inner.keys().next().map(String::as_str) {
        Some("find") => explain_find(shared, &inner, verbosity),
        Some("count") => explain_count(shared, &inner, verbosity),
        Some("distinct") => explain_distinct(shared, &inner, verbosity),
        Some("update" | "delete" | "findAndModify" | "findandmodify") => explain_write(shared, &inner, verbosity),
        Some("aggregate") => explain_aggregate(shared, &inner, verbosity),
        Some(name) => Err(CommandError::not_implemented(format!("explain of {name} is not supported yet"))),
        None => Err(CommandError::failed_to_parse("explain command requires a nested object")),
    }
}

/// One read as explain sees it: what `find` (or the read inside another
/// command) asks for.
struct Read<'a> {
    ns: Namespace,
    filter_doc: Document,
    filter: query::Filter,
    projection: Option<Document>,
    sort: Option<Document>,
    skip: usize,
    limit: Option<usize>,
    hint: Option<&'a Bson>,
    /// The command's collation, when it gives one.
    collation_of: &'a Document,
}

/// The stages an aggregate runs over its read's documents (its
/// `$cursor`), counted into `counts`; the documents the read gives them
/// are counted into `cursor[0]`.
struct Then<'a> {
    pipeline: &'a query::Pipeline,
    counts: Arc<[query::pipeline::StageCounts]>,
    cursor: Arc<[query::pipeline::StageCounts]>,
}

/// The stage a command puts above its read (COUNT, UPDATE, DELETE), with
/// the figures it adds once run.
struct Top {
    stage: &'static str,
    /// Fields it shows once run, given the documents the read matched.
    counts: fn(u64) -> Document,
}

fn explain_find(shared: &Ctx<'_>, cmd: &Document, verbosity: Verbosity) -> CommandResult {
    let ns = namespace(cmd, "find")?;
    if crate::exec::views::resolve_view(shared, &ns)?.is_some() {
        return explain_aggregate(shared, &aggregate::find_as_aggregate(cmd)?, verbosity);
    }
    let scope = crate::args::scope_of(cmd)?;
    let (filter_doc, filter) = filter_of(cmd, "filter", &scope)?;
    let projection = document_option(cmd, "projection")?.filter(|p| !p.is_empty());
    if let Some(p) = &projection {
        query::Projection::parse_in(p, &scope)?;
    }
    let sort = document_option(cmd, "sort")?.filter(|s| !s.is_empty());
    let skip = count_option(cmd, "skip")?.unwrap_or(0).max(0) as usize;
    let limit = count_option(cmd, "limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let read = Read { ns, filter_doc, filter, projection, sort, skip, limit, hint: cmd.get("hint"), collation_of: cmd };
    explain_read(shared, cmd, read, None, None, verbosity)
}

/// `count`: COUNT over the read.
fn explain_count(shared: &Ctx<'_>, cmd: &Document, verbosity: Verbosity) -> CommandResult {
    let ns = namespace(cmd, "count")?;
    if crate::exec::views::resolve_view(shared, &ns)?.is_some() {
        return explain_aggregate(shared, &aggregate::count_as_aggregate(cmd)?, verbosity);
    }
    let (filter_doc, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    let skip = count_option(cmd, "skip")?.unwrap_or(0).max(0) as usize;
    let limit = count_option(cmd, "limit")?.filter(|l| *l != 0).map(|l| l.unsigned_abs() as usize);
    let read = Read {
        ns,
        filter_doc,
        filter,
        projection: None,
        sort: None,
        skip,
        limit,
        hint: cmd.get("hint"),
        collation_of: cmd,
    };
    let top = Top { stage: "COUNT", counts: |_| Document::new() };
    explain_read(shared, cmd, read, Some(top), None, verbosity)
}

/// `distinct`: the read (mongod shows a projection of the key above it).
fn explain_distinct(shared: &Ctx<'_>, cmd: &Document, verbosity: Verbosity) -> CommandResult {
    let ns = namespace(cmd, "distinct")?;
    let key = cmd.get_str("key").map_err(|_| CommandError::failed_to_parse("distinct needs a string 'key'"))?;
    if crate::exec::views::resolve_view(shared, &ns)?.is_some() {
        return explain_aggregate(shared, &aggregate::distinct_as_aggregate(cmd, key)?, verbosity);
    }
    let (filter_doc, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    let projection = Some(doc! { "_id": 0, key: 1 });
    let read = Read {
        ns,
        filter_doc,
        filter,
        projection,
        sort: None,
        skip: 0,
        limit: None,
        hint: cmd.get("hint"),
        collation_of: cmd,
    };
    explain_read(shared, cmd, read, None, None, verbosity)
}

/// `update`, `delete` and `findAndModify`: their first statement's read
/// under UPDATE or DELETE; nothing is written.
fn explain_write(shared: &Ctx<'_>, cmd: &Document, verbosity: Verbosity) -> CommandResult {
    let name = cmd.keys().next().map(String::as_str).unwrap_or_default();
    let ns = namespace(cmd, name)?;
    // As the write itself: a view is not written through.
    crate::exec::views::check_not_view(shared, &ns)?;
    let (statement, filter_field, deleting) = match name {
        "update" | "delete" => {
            let field = if name == "update" { "updates" } else { "deletes" };
            let first = cmd.get_array(field).ok().and_then(|a| a.first()).and_then(Bson::as_document);
            let Some(first) = first else {
                return Err(CommandError::failed_to_parse(format!(
                    "explain of {name} needs one statement in '{field}'"
                )));
            };
            (first.clone(), "q", name == "delete")
        }
        _ => (cmd.clone(), "query", cmd.get_bool("remove").unwrap_or(false)),
    };
    let (filter_doc, filter) = filter_of(&statement, filter_field, &query::expr::Scope::default())?;
    let multi = statement.get_bool("multi").unwrap_or(false)
        || statement.get("limit").is_some_and(|l| l.as_i32() == Some(0) || l.as_i64() == Some(0));
    let limit = (!multi).then_some(1);
    let sort = statement.get_document("sort").ok().filter(|s| !s.is_empty()).cloned();
    let hint = statement.get("hint");
    let read = Read { ns, filter_doc, filter, projection: None, sort, skip: 0, limit, hint, collation_of: &statement };
    let upsert = statement.get_bool("upsert").unwrap_or(false);
    let top = if deleting {
        Top { stage: "DELETE", counts: |n| doc! { "nWouldDelete": n as i64 } }
    } else if upsert {
        let counts =
            |n: u64| doc! { "nMatched": n as i64, "nWouldModify": n as i64, "nWouldUpsert": i64::from(n == 0) };
        Top { stage: "UPDATE", counts }
    } else {
        Top { stage: "UPDATE", counts: |n| doc! { "nMatched": n as i64, "nWouldModify": n as i64, "nWouldUpsert": 0 } }
    };
    explain_read(shared, cmd, read, Some(top), None, verbosity)
}

fn explain_read(
    shared: &Ctx<'_>,
    cmd: &Document,
    read: Read<'_>,
    top: Option<Top>,
    then: Option<Then<'_>>,
    verbosity: Verbosity,
) -> CommandResult {
    let Read { ns, filter_doc, filter, projection, sort, skip, limit, hint, collation_of: with_collation } = read;
    let projection = if top.is_some() { None } else { projection };
    // The hint checked as the command would check it (with its filter,
    // and `min`/`max`, which a wildcard hint answers first).
    if let Some(h) = hint {
        let mut asked = doc! { "hint": h.clone(), "filter": filter_doc.clone() };
        for bound in ["min", "max"] {
            if let Some(v) = with_collation.get(bound) {
                asked.insert(bound, v.clone());
            }
        }
        check_hint(shared, &ns, &asked)?;
    }
    let collation = collation_of(shared, &ns, with_collation)?;
    let filter = filter.with_collation(collation.clone());
    // mongod explains a read of a view as the aggregate it becomes (only
    // `find` and `aggregate` do so here).
    if shared.collection(&ns).is_some_and(|c| c.view_on().is_some()) {
        return Err(CommandError::not_implemented(format!(
            "explain of this read of the view {ns} is not supported yet"
        )));
    }
    let coll = shared.collection(&ns);
    let needs = projection.as_ref().and_then(query::plan::projection_fields);
    // As `find` plans: a write's read takes the planner's first choice,
    // a `find` is raced and may be covered or sorted by its index.
    let min_max =
        coll.as_ref().map(|c| access::min_max_of(Some(c), with_collation, collation.as_ref())).transpose()?.flatten();
    if sort.is_some() && min_max.is_some() {
        return Err(CommandError::not_implemented("min()/max() with a sort is not supported yet"));
    }
    let min_max = min_max.filter(|_| top.is_none());
    // The order a plain `find` asks for, which an index may give.
    let sort_fields = match (&sort, &top) {
        (Some(s), None) if !s.contains_key("$natural") => Some(query::Sort::parse(s)?.fields().to_vec()),
        _ => None,
    };
    let planned = match &coll {
        Some(c) if top.is_some() => {
            let how = access::How { hint, read_ts: shared.read_ts(), describe: true, ..access::How::default() };
            let mut planned = access::plan_projected(c, &filter_doc, collation.as_ref(), how);
            access::drop_switched_off(shared, &mut planned);
            Some(planned)
        }
        Some(c) => {
            let how = access::How {
                tailable: false,
                hint,
                projection: needs.as_deref(),
                min_max: min_max.as_ref(),
                sort: sort_fields.as_deref(),
                read_ts: shared.read_ts(),
                describe: true,
            };
            let planned = access::plan_projected(c, &filter_doc, collation.as_ref(), how);
            Some(access::race(shared, Place::Blocking, &ns, c, planned, &filter)?)
        }
        None => None,
    };
    let index_sorted = |path: &AccessPath<'_>| matches!(path, AccessPath::IndexScan(s) if s.sorted);
    let sorted = planned.as_ref().is_some_and(|p| index_sorted(&p.path));
    let parsed = query::plan::parsed_query(&filter_doc);

    let started = Instant::now();
    let stats = Arc::new(ScanStats::default());
    let (examined, matched) = (AtomicU64::new(0), AtomicU64::new(0));
    if verbosity != Verbosity::QueryPlanner {
        if let (Some(c), Some(p)) = (&coll, &planned) {
            let records = access::candidates(shared, &ns, c, p, stats.clone())?;
            let failed = Mutex::new(None);
            // The documents the filter matches, in the path's order, until
            // one fails (kept in `failed`).
            let matching = records.map_while(|record| {
                let matches = record.map_err(CommandError::from).and_then(|(_, d)| {
                    examined.fetch_add(1, Ordering::Relaxed);
                    Ok(crate::exec::scan::matches_stored(&filter, &d)?.0.then_some(d))
                });
                match matches {
                    Ok(d) => Some(d),
                    Err(e) => {
                        *failed.lock().expect("not poisoned") = Some(e);
                        None
                    }
                }
            });
            let matching = matching.flatten().inspect(|_| {
                matched.fetch_add(1, Ordering::Relaxed);
            });
            match &then {
                // Without a blocking sort the read stops at its limit.
                None => {
                    let enough = limit.filter(|_| top.is_none() && (sort.is_none() || sorted)).map(|l| l + skip);
                    matching.take(enough.unwrap_or(usize::MAX)).for_each(drop);
                }
                Some(then) => {
                    let order = sort.as_ref().filter(|_| !sorted);
                    run_then(then, matching, order, limit, &collation)?;
                }
            }
            if let Some(e) = failed.into_inner().expect("not poisoned") {
                return Err(e);
            }
        }
    }
    let (examined, matched) = (examined.into_inner(), matched.into_inner());
    let returned = matched.saturating_sub(skip as u64).min(limit.map_or(u64::MAX, |l| l as u64));
    let run = Run { stats: &stats, examined, matched, returned };
    let above = (sort.as_ref().filter(|_| !sorted), skip, limit, projection.as_ref());
    // The plan as chosen (queryPlanner) and as run (executionStages).
    let tree = |verbosity| {
        let read = match &planned {
            Some(p) => access_stage(p, &p.path, &parsed, &run, verbosity),
            None => doc! { "stage": "EOF" },
        };
        let below = wrap(read, above, &run, verbosity);
        match &top {
            None => below,
            Some(t) => {
                let mut d = doc! { "stage": t.stage };
                if verbosity != Verbosity::QueryPlanner {
                    counters(&mut d, 0, returned + 1);
                    d.extend((t.counts)(returned));
                }
                d.insert("inputStage", below);
                d
            }
        }
    };
    let mut planner = doc! {
        "namespace": ns.to_string(),
        "parsedQuery": parsed.clone(),
        "indexFilterSet": false,
        "maxIndexedOrSolutionsReached": false,
        "maxIndexedAndSolutionsReached": false,
        "maxScansToExplodeReached": false,
        "prunedSimilarIndexes": false,
    };
    // A read the planner chooses for (not a point read) has a cache key.
    if let Some(p) = planned.as_ref().filter(|p| !matches!(p.path, AccessPath::IdPoint(_))) {
        use crate::exec::plan_cache::{plan_cache_key, query_hash};
        planner.insert("queryHash", query_hash(&p.shape));
        planner.insert("planCacheShapeHash", query_hash(&p.shape));
        planner.insert("planCacheKey", plan_cache_key(&p.shape, &p.among));
    }
    let mut winning_plan = doc! { "isCached": planned.as_ref().is_some_and(|p| p.cached.is_some()) };
    winning_plan.extend(tree(Verbosity::QueryPlanner));
    planner.insert("winningPlan", winning_plan);
    let rejected: Vec<Bson> = planned
        .iter()
        .flat_map(|p| &p.rejected)
        .map(|path| {
            let read = access_stage(planned.as_ref().expect("planned"), path, &parsed, &run, Verbosity::QueryPlanner);
            let above = (sort.as_ref().filter(|_| !index_sorted(path)), skip, limit, projection.as_ref());
            Bson::Document(wrap(read, above, &run, Verbosity::QueryPlanner))
        })
        .collect();
    planner.insert("rejectedPlans", rejected);
    let mut reply = doc! { "explainVersion": "1", "queryPlanner": planner };
    if verbosity != Verbosity::QueryPlanner {
        let n_returned = if top.is_some() { 0 } else { run.returned };
        let mut exec = doc! {
            "executionSuccess": true,
            "nReturned": n_returned as i64,
            "executionTimeMillis": started.elapsed().as_millis() as i64,
            "totalKeysExamined": stats.total(|s| &s.keys_examined) as i64,
            "totalDocsExamined": run.docs_examined(&planned) as i64,
            "executionStages": tree(verbosity),
        };
        if verbosity == Verbosity::AllPlansExecution {
            exec.insert("allPlansExecution", Vec::<Bson>::new());
        }
        reply.insert("executionStats", exec);
    }
    let mut command = cmd.clone();
    command.remove("$db");
    reply.insert("command", command);
    reply.insert("serverInfo", doc! { "host": crate::server::hostname(), "port": 27017, "version": "8.0.0" });
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// Run `then` over the documents a read matched, sorted by `order` (a
/// blocking sort; `None` when the access path gives the order) and cut
/// to `limit`, as the read hands them to the pipeline.
fn run_then(
    then: &Then<'_>,
    matching: impl Iterator<Item = doc::stored::Stored> + Send,
    order: Option<&Document>,
    limit: Option<usize>,
    collation: &Option<Arc<query::collation::Collation>>,
) -> Result<(), CommandError> {
    let mut read: Vec<Bson> = Vec::new();
    if let Some(order) = order {
        read.push(Bson::Document(doc! { "$sort": order.clone() }));
    }
    if let Some(n) = limit {
        read.push(Bson::Document(doc! { "$limit": n as i64 }));
    }
    // Held to the aggregate's memory limits, as its own sort would be.
    let read = query::Pipeline::parse(&read)?.with_collation(collation.clone()).with_limits_of(then.pipeline);
    let input = matching.map(|d| d.into_document().map_err(|e| crate::exec::views::read_error(e.into())));
    let given = query::pipeline::counted(read.stream(input)?, then.cursor.clone(), 0);
    for d in then.pipeline.stream_counted(given, then.counts.clone())? {
        d?;
    }
    Ok(())
}

/// What running the plan counted.
struct Run<'a> {
    stats: &'a ScanStats,
    /// Records the access path produced.
    examined: u64,
    /// Of them, those the filter matched.
    matched: u64,
    /// After skip and limit.
    returned: u64,
}

impl Run<'_> {
    /// Documents read: by a collection scan, or fetched after an index.
    fn docs_examined(&self, planned: &Option<Planned<'_>>) -> u64 {
        match planned.as_ref().map(|p| &p.path) {
            Some(AccessPath::IndexScan(_) | AccessPath::Or(_) | AccessPath::AndSorted { .. }) => {
                self.stats.total(|s| &s.docs_examined)
            }
            Some(_) => self.examined,
            None => 0,
        }
    }
}

/// The stage that reads by `path` (the chosen one or a rejected one):
/// COLLSCAN, EXPRESS_IDHACK, FETCH over IXSCAN, over OR or over
/// AND_SORTED.
fn access_stage(
    p: &Planned<'_>,
    path: &AccessPath<'_>,
    parsed: &Document,
    run: &Run<'_>,
    verbosity: Verbosity,
) -> Document {
    let executed = verbosity != Verbosity::QueryPlanner;
    match path {
        AccessPath::CollScan { reverse } => {
            let mut d = doc! { "stage": "COLLSCAN" };
            if !parsed.is_empty() {
                d.insert("filter", parsed.clone());
            }
            d.insert("direction", if *reverse { "backward" } else { "forward" });
            if executed {
                counters(&mut d, run.matched, run.examined + 1);
                d.insert("docsExamined", run.examined as i64);
            }
            d
        }
        AccessPath::IdPoint(_) => {
            let mut d = doc! { "stage": "EXPRESS_IDHACK" };
            if executed {
                d.insert("keysExamined", run.examined as i64);
                d.insert("docsExamined", run.examined as i64);
                d.insert("nReturned", run.matched as i64);
            }
            d
        }
        AccessPath::IndexScan(scan) => index_scan_stage(p, scan, run, verbosity),
        AccessPath::Or(scans) => or_stage(p, scans, parsed, run, verbosity),
        AccessPath::AndSorted { scans, fetch_filter } => and_stage(p, scans, fetch_filter.as_ref(), run, verbosity),
    }
}

/// FETCH (with what no branch answers exactly) over AND_SORTED over each
/// branch's IXSCAN.
fn and_stage(
    p: &Planned<'_>,
    scans: &[IndexScan],
    fetch_filter: Option<&Document>,
    run: &Run<'_>,
    verbosity: Verbosity,
) -> Document {
    let executed = verbosity != Verbosity::QueryPlanner;
    let branches = run.stats.branches.lock().clone();
    let mut and = doc! { "stage": "AND_SORTED" };
    let s = run.stats;
    let fetched = ScanStats::get(&s.docs_examined);
    if executed {
        let advanced: u64 = branches.iter().map(|b| ScanStats::get(&b.advanced)).sum();
        counters(&mut and, fetched, advanced + 1);
        for (i, b) in branches.iter().enumerate() {
            and.insert(format!("failedAnd_{i}"), ScanStats::get(&b.failed_and) as i64);
        }
    }
    and.insert("inputStages", branch_stages(p, scans, &branches, executed));
    fetch_stage(fetch_filter, run, executed.then_some(fetched), and)
}

/// FETCH with `filter` over `input`; once run, `fetched` documents read.
fn fetch_stage(filter: Option<&Document>, run: &Run<'_>, fetched: Option<u64>, input: Document) -> Document {
    let mut fetch = doc! { "stage": "FETCH" };
    if let Some(f) = filter {
        fetch.insert("filter", f.clone());
    }
    if let Some(fetched) = fetched {
        counters(&mut fetch, run.matched, fetched + 1);
        fetch.insert("docsExamined", fetched as i64);
        fetch.insert("alreadyHasObj", 0);
    }
    fetch.insert("inputStage", input);
    fetch
}

/// The IXSCAN of each branch of an OR or an intersection, with its
/// counters (`branches`, in order) once run.
fn branch_stages(p: &Planned<'_>, scans: &[IndexScan], branches: &[Arc<ScanStats>], executed: bool) -> Vec<Bson> {
    scans
        .iter()
        .enumerate()
        .map(|(i, scan)| {
            let mut ixscan = ixscan_stage(&p.indexes[scan.index], &p.infos[scan.index], scan);
            if executed {
                let s = branches.get(i).cloned().unwrap_or_default();
                let keys = ScanStats::get(&s.keys_examined);
                counters(&mut ixscan, ScanStats::get(&s.advanced), keys + 1);
                ixscan.insert("keysExamined", keys as i64);
                ixscan.insert("seeks", ScanStats::get(&s.seeks) as i64);
                ixscan.insert("dupsTested", ScanStats::get(&s.dups_tested) as i64);
                ixscan.insert("dupsDropped", ScanStats::get(&s.dups_dropped) as i64);
            }
            Bson::Document(ixscan)
        })
        .collect()
}

/// FETCH over OR over each branch's IXSCAN (under SUBPLAN when the `$or`
/// is the whole filter, as mongod plans each branch on its own). FETCH
/// shows the filter when a branch's bounds do not answer it exactly or
/// more than the `$or` is there.
fn or_stage(p: &Planned<'_>, scans: &[IndexScan], parsed: &Document, run: &Run<'_>, verbosity: Verbosity) -> Document {
    let executed = verbosity != Verbosity::QueryPlanner;
    let branches = run.stats.branches.lock().clone();
    let inputs = branch_stages(p, scans, &branches, executed);
    let mut or = doc! { "stage": "OR" };
    let s = run.stats;
    if executed {
        let tested = ScanStats::get(&s.dups_tested);
        counters(&mut or, tested - ScanStats::get(&s.dups_dropped), tested + 1);
        or.insert("dupsTested", tested as i64);
        or.insert("dupsDropped", ScanStats::get(&s.dups_dropped) as i64);
    }
    or.insert("inputStages", inputs);
    let mut fetch = doc! { "stage": "FETCH" };
    let rooted = parsed.len() == 1 && parsed.contains_key("$or");
    // Branches their bounds answer exactly leave the rest of the filter.
    let filter = match scans.iter().any(|s| s.fetch_filter.is_some()) {
        true => Some(parsed.clone()),
        false => without_or(parsed),
    };
    if let Some(filter) = filter {
        fetch.insert("filter", filter);
    }
    if executed {
        let fetched = ScanStats::get(&s.docs_examined);
        counters(&mut fetch, run.matched, fetched + 1);
        fetch.insert("docsExamined", fetched as i64);
        fetch.insert("alreadyHasObj", 0);
    }
    fetch.insert("inputStage", or);
    if !rooted {
        return fetch;
    }
    let mut subplan = doc! { "stage": "SUBPLAN" };
    if executed {
        counters(&mut subplan, run.matched, run.matched + 1);
    }
    subplan.insert("inputStage", fetch);
    subplan
}

/// A parsed query without its (first) `$or` child, if anything is left.
fn without_or(parsed: &Document) -> Option<Document> {
    let mut children: Vec<Bson> = match parsed.get_array("$and") {
        Ok(children) if parsed.len() == 1 => children.clone(),
        _ => vec![Bson::Document(parsed.clone())],
    };
    let is_or = |c: &Bson| c.as_document().is_some_and(|d| d.len() == 1 && d.contains_key("$or"));
    if let Some(at) = children.iter().position(is_or) {
        children.remove(at);
    }
    match children.len() {
        0 => None,
        1 => children.pop().and_then(|c| c.as_document().cloned()),
        _ => Some(doc! { "$and": children }),
    }
}

/// IXSCAN, under FETCH unless the scan is covered.
fn index_scan_stage(p: &Planned<'_>, scan: &IndexScan, run: &Run<'_>, verbosity: Verbosity) -> Document {
    let executed = verbosity != Verbosity::QueryPlanner;
    let ix = &p.indexes[scan.index];
    let mut ixscan = ixscan_stage(ix, &p.infos[scan.index], scan);
    let s = run.stats;
    let keys = ScanStats::get(&s.keys_examined);
    let fetched = ScanStats::get(&s.docs_examined);
    if executed {
        let advanced = if scan.covered { run.examined } else { fetched };
        counters(&mut ixscan, advanced, keys + 1);
        ixscan.insert("keysExamined", keys as i64);
        ixscan.insert("seeks", ScanStats::get(&s.seeks) as i64);
        ixscan.insert("dupsTested", ScanStats::get(&s.dups_tested) as i64);
        ixscan.insert("dupsDropped", ScanStats::get(&s.dups_dropped) as i64);
    }
    if scan.covered {
        return ixscan;
    }
    fetch_stage(scan.fetch_filter.as_ref(), run, executed.then_some(fetched), ixscan)
}

/// IXSCAN as explain shows it: each field's intervals in the order the
/// scan meets them (a descending field or a backward scan high to low).
/// A wildcard index shows itself as the index of the path it reads,
/// `{$_path: 1, <path>: ±1}`.
fn ixscan_stage(ix: &Index, info: &IndexInfo, scan: &IndexScan) -> Document {
    let (bounds, reverse) = (&scan.bounds, scan.reverse);
    let (info, key) = match (&scan.wildcard_path, &info.wildcard) {
        (Some(path), Some(_)) => {
            (std::borrow::Cow::Owned(info.expanded(path)), crate::exec::access::scan_key_pattern(ix, scan))
        }
        _ => (std::borrow::Cow::Borrowed(info), ix.spec.key.clone()),
    };
    let mut paths = Document::new();
    let mut shown_bounds = Document::new();
    for (f, (path, descending)) in info.fields.iter().enumerate() {
        let parts: Vec<&str> = path.split('.').collect();
        let at: Vec<Bson> =
            info.multikey[f].iter().map(|&n| Bson::String(parts[..=n.min(parts.len() - 1)].join("."))).collect();
        paths.insert(path.clone(), at);
        let high_to_low = *descending != reverse;
        let mut intervals: Vec<Bson> = bounds[f].iter().map(|i| Bson::String(i.shown(high_to_low))).collect();
        if high_to_low {
            intervals.reverse();
        }
        shown_bounds.insert(path.clone(), intervals);
    }
    let mut stage = doc! { "stage": "IXSCAN", "keyPattern": key, "indexName": ix.spec.name.clone() };
    // A collated index shows its collation (mongod's stage does too).
    if let Some(c) = ix.collation() {
        stage.insert("collation", c.full_spec());
    }
    stage.extend(doc! {
        "isMultiKey": info.multikey.iter().any(|m| !m.is_empty()),
        "multiKeyPaths": paths,
        "isUnique": ix.spec.unique,
        "isSparse": ix.spec.sparse,
        "isPartial": ix.is_partial(),
        "indexVersion": 2,
        "direction": if reverse { "backward" } else { "forward" },
        "indexBounds": shown_bounds,
    });
    // Our extension: an index stored write-optimized says so (a B+tree,
    // the default, shows nothing, as mongod's stage).
    if ix.spec.format != storage::TableFormat::BTree {
        stage.insert("storageFormat", doc::index::format_name(ix.spec.format));
    }
    stage
}

/// The counters every executed stage shows.
fn counters(d: &mut Document, advanced: u64, works: u64) {
    d.insert("nReturned", advanced as i64);
    d.insert("executionTimeMillisEstimate", 0);
    d.insert("works", works as i64);
    d.insert("advanced", advanced as i64);
    d.insert("needTime", works.saturating_sub(advanced + 1) as i64);
    d.insert("needYield", 0);
    d.insert("saveState", 0);
    d.insert("restoreState", 0);
    d.insert("isEOF", true);
}

/// The stages above the read, as mongod's planner adds them: SORT, SKIP,
/// the projection (covered when the read is a bare IXSCAN), LIMIT.
fn wrap(
    mut stage: Document,
    (sort, skip, limit, projection): (Option<&Document>, usize, Option<usize>, Option<&Document>),
    run: &Run<'_>,
    verbosity: Verbosity,
) -> Document {
    let executed = verbosity != Verbosity::QueryPlanner;
    let covered = stage.get_str("stage") == Ok("IXSCAN");
    let mut flowing = run.matched;
    if let Some(s) = sort {
        let mut d = doc! { "stage": "SORT", "sortPattern": s.clone(), "memLimit": 104857600, "type": "simple" };
        if let Some(l) = limit {
            d.insert("limitAmount", (l + skip) as i64);
        }
        if executed {
            counters(&mut d, flowing, flowing + 1);
        }
        d.insert("inputStage", stage);
        stage = d;
    }
    if skip > 0 {
        let mut d = doc! { "stage": "SKIP", "skipAmount": skip as i64 };
        flowing = flowing.saturating_sub(skip as u64);
        if executed {
            counters(&mut d, flowing, run.matched + 1);
        }
        d.insert("inputStage", stage);
        stage = d;
    }
    if let Some(p) = projection {
        let simple = p.iter().all(|(k, v)| !k.contains('.') && !k.starts_with('$') && !matches!(v, Bson::Document(_)));
        // Straight over the index: nothing was fetched.
        let kind = if covered {
            "PROJECTION_COVERED"
        } else if simple {
            "PROJECTION_SIMPLE"
        } else {
            "PROJECTION_DEFAULT"
        };
        let mut d = doc! { "stage": kind, "transformBy": p.clone() };
        if executed {
            counters(&mut d, run.returned, run.returned + 1);
        }
        d.insert("inputStage", stage);
        stage = d;
    }
    if let Some(l) = limit.filter(|_| sort.is_none()) {
        let mut d = doc! { "stage": "LIMIT", "limitAmount": l as i64 };
        flowing = flowing.min(l as u64);
        if executed {
            counters(&mut d, flowing, flowing + 1);
        }
        d.insert("inputStage", stage);
        stage = d;
    }
    stage
}
