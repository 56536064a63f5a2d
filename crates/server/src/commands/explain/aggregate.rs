//! `explain` of an `aggregate` (and of a `find` on a view, which is one):
//! a pipeline the query layer answers whole explains as the `find` it is;
//! any other shows its read as the first stage, `$cursor`, then the
//! stages after it in mongod's explain form (`$sort` as `sortKey`, with
//! the `$limit` it absorbs; `$match` as its parsed query; counts as
//! 64-bit integers). At `executionStats` the whole pipeline runs over the
//! read, as mongod runs it, and each stage shows what it returned
//! (`nReturned`) and the time it and the stages before it took
//! (`executionTimeMillisEstimate`).
//!
//! Other stages are shown as written: their expressions in mongod's
//! explain form (`{$const: ...}`) belong to the aggregation issue.

use super::{explain_read, Read, Then, Verbosity};
use crate::args::{count_option, document_option, namespace, CommandResult};
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::scan::collation_of;
use bson::{doc, Bson, Document};
use query::pipeline::StageCounts;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A `find` on a view as the aggregate mongod makes of it: the view's
/// pipeline (added by `explain_aggregate`), then the find's filter,
/// sort, skip, limit and projection as stages.
pub(super) fn find_as_aggregate(cmd: &Document) -> Result<Document, CommandError> {
    // Options an aggregate has no stage for, refused as mongod refuses them.
    for option in ["min", "max", "returnKey", "showRecordId", "tailable"] {
        let given = match cmd.get(option) {
            None | Some(Bson::Null) | Some(Bson::Boolean(false)) => false,
            Some(Bson::Document(d)) => !d.is_empty(),
            Some(_) => true,
        };
        if given {
            return Err(CommandError::with_code(168, format!("Option {option} not supported in aggregation.")));
        }
    }
    if document_option(cmd, "sort")?.is_some_and(|s| s.contains_key("$natural")) {
        return Err(CommandError::with_code(168, "Sort option $natural not supported in aggregation."));
    }
    let mut pipeline: Vec<Bson> = Vec::new();
    if let Some(filter) = document_option(cmd, "filter")?.filter(|f| !f.is_empty()) {
        pipeline.push(Bson::Document(doc! { "$match": filter }));
    }
    if let Some(sort) = document_option(cmd, "sort")?.filter(|s| !s.is_empty()) {
        pipeline.push(Bson::Document(doc! { "$sort": sort }));
    }
    if let Some(skip) = count_option(cmd, "skip")?.filter(|s| *s > 0) {
        pipeline.push(Bson::Document(doc! { "$skip": skip }));
    }
    if let Some(limit) = count_option(cmd, "limit")?.filter(|l| *l > 0) {
        pipeline.push(Bson::Document(doc! { "$limit": limit }));
    }
    if let Some(projection) = document_option(cmd, "projection")?.filter(|p| !p.is_empty()) {
        pipeline.push(Bson::Document(doc! { "$project": projection }));
    }
    Ok(as_aggregate(cmd, "find", pipeline))
}

/// A `count` on a view as the aggregate mongod makes of it: its query,
/// skip and limit as stages, then `$count`.
pub(super) fn count_as_aggregate(cmd: &Document) -> Result<Document, CommandError> {
    let mut pipeline: Vec<Bson> = Vec::new();
    if let Some(query) = document_option(cmd, "query")?.filter(|q| !q.is_empty()) {
        pipeline.push(Bson::Document(doc! { "$match": query }));
    }
    if let Some(skip) = count_option(cmd, "skip")?.filter(|s| *s > 0) {
        pipeline.push(Bson::Document(doc! { "$skip": skip }));
    }
    // A negative limit counts as its absolute value.
    if let Some(limit) = count_option(cmd, "limit")?.filter(|l| *l != 0) {
        pipeline.push(Bson::Document(doc! { "$limit": limit.unsigned_abs() as i64 }));
    }
    pipeline.push(Bson::Document(doc! { "$count": "count" }));
    Ok(as_aggregate(cmd, "count", pipeline))
}

/// A `distinct` on a view as the aggregate mongod (before 8.0) makes of
/// it: its query, an `$unwind` keeping empties at each prefix of the key
/// (distinct looks into arrays along the path), and a `$group` of the
/// values. (8.0 unwinds through an internal expression instead.)
pub(super) fn distinct_as_aggregate(cmd: &Document, key: &str) -> Result<Document, CommandError> {
    let mut pipeline: Vec<Bson> = Vec::new();
    if let Some(query) = document_option(cmd, "query")?.filter(|q| !q.is_empty()) {
        pipeline.push(Bson::Document(doc! { "$match": query }));
    }
    let parts: Vec<&str> = key.split('.').collect();
    for end in 1..=parts.len() {
        let path = format!("${}", parts[..end].join("."));
        pipeline.push(Bson::Document(doc! { "$unwind": { "path": path, "preserveNullAndEmptyArrays": true } }));
    }
    let group = doc! { "_id": Bson::Null, "distinct": { "$addToSet": format!("${key}") } };
    pipeline.push(Bson::Document(doc! { "$group": group }));
    Ok(as_aggregate(cmd, "distinct", pipeline))
}

/// The aggregate on the namespace `cmd` names under `name`, running
/// `pipeline`, with the options that carry over.
fn as_aggregate(cmd: &Document, name: &str, pipeline: Vec<Bson>) -> Document {
    let mut agg = doc! { "aggregate": cmd.get(name).cloned().unwrap_or(Bson::Null), "pipeline": pipeline };
    for field in ["hint", "collation", "let", "$db"] {
        if let Some(v) = cmd.get(field) {
            agg.insert(field, v.clone());
        }
    }
    agg
}

/// `aggregate`: a pipeline the query layer answers whole (`$match`,
/// `$sort`, `$skip`, `$limit`, `$project`, in that order) explains as the
/// `find` it is; any other shows its read as the first stage, `$cursor`
/// (the leading `$match` and `$sort`, a `$limit` right after the sort),
/// and the stages after it as written.
pub(crate) fn explain_aggregate(shared: &Ctx<'_>, cmd: &Document, verbosity: Verbosity) -> CommandResult {
    if !matches!(cmd.get("aggregate"), Some(Bson::String(_))) {
        return Err(CommandError::not_implemented("explain of an aggregate on a database is not supported yet"));
    }
    let ns = namespace(cmd, "aggregate")?;
    // On a view: the view's pipeline, then the command's, on the
    // collection under it (as mongod resolves a view).
    if let Some((base, mut stages)) = crate::exec::views::resolve_view(shared, &ns)? {
        stages.extend(
            cmd.get_array("pipeline")
                .map_err(|_| CommandError::type_mismatch("'pipeline' option must be specified as an array"))?
                .iter()
                .cloned(),
        );
        // The view's collation (another given is refused, 167), not the
        // collection's under it.
        let collation = collation_of(shared, &ns, cmd)?;
        let mut resolved = cmd.clone();
        resolved.insert("aggregate", base.coll.clone());
        resolved.insert("pipeline", stages);
        resolved.insert("collation", collation.map_or_else(|| doc! { "locale": "simple" }, |c| c.full_spec()));
        return explain_aggregate(shared, &resolved, verbosity);
    }
    let scope = crate::args::scope_of(cmd)?;
    let stages = cmd
        .get_array("pipeline")
        .map_err(|_| CommandError::type_mismatch("'pipeline' option must be specified as an array"))?;
    // Consecutive `$match` stages as one, as the read is planned.
    let stages = &query::pipeline::coalesce_matches(stages);
    let first = stages.first().and_then(Bson::as_document).and_then(|d| d.keys().next().cloned());
    if let Some(name @ ("$collStats" | "$indexStats" | "$planCacheStats" | "$documents")) = first.as_deref() {
        return Err(CommandError::not_implemented(format!("explain of {name} is not supported yet")));
    }
    // Checked whole, as the command would (its `$out` or `$merge` apart).
    let (checked, _) = crate::exec::agg_write::split(stages, &ns.db)?;
    query::Pipeline::parse_in(&checked, &scope)?;
    let stage = |i: usize, name: &str| {
        stages.get(i).and_then(Bson::as_document).filter(|d| d.len() == 1).and_then(|d| d.get(name)).cloned()
    };
    let mut at = 0;
    let take = |at: &mut usize, name: &str| {
        let found = stage(*at, name);
        *at += usize::from(found.is_some());
        found
    };
    let filter_doc = take(&mut at, "$match").and_then(|m| m.as_document().cloned()).unwrap_or_default();
    let sort = take(&mut at, "$sort").and_then(|s| s.as_document().cloned());
    // Already checked by the pipeline's parse.
    let number = |v: Option<Bson>| v.as_ref().and_then(count_of).map(|n| n.max(0) as usize);
    let (mut skip, mut limit, mut projection) = (0, None, None);
    let pushed = at;
    if let Some(n) = number(take(&mut at, "$skip")) {
        skip = n;
    }
    limit = number(take(&mut at, "$limit")).or(limit);
    if let Some(Bson::Document(p)) = take(&mut at, "$project") {
        projection = Some(p);
    }
    let whole = at == stages.len();
    let filter = query::Filter::parse_in(&filter_doc, &scope)?;
    let hint = cmd.get("hint");
    if whole {
        let read = Read { ns, filter_doc, filter, projection, sort, skip, limit, hint, collation_of: cmd };
        return explain_read(shared, cmd, read, None, None, verbosity);
    }
    // The read below the other stages: the `$match`, the `$sort` and a
    // `$limit` right after it.
    let limit = if sort.is_some() { number(stage(pushed, "$limit")) } else { None };
    let rest_from = pushed + usize::from(limit.is_some());
    let rest = &stages[rest_from..];
    // The stages run: all but a final `$out` or `$merge`, which writes
    // nothing here and returns nothing.
    let runs = &checked[rest_from.min(checked.len())..];
    let after = query::Pipeline::parse_in(runs, &scope)?.with_collation(collation_of(shared, &ns, cmd)?);
    let after = crate::exec::views::held_to_limits(shared, cmd, after)?;
    let counts: Arc<[StageCounts]> = rest.iter().map(|_| StageCounts::default()).collect();
    let cursor_counts: Arc<[StageCounts]> = Arc::new([StageCounts::default()]);
    let then = Then { pipeline: &after, counts: counts.clone(), cursor: cursor_counts.clone() };
    let db = ns.db.clone();
    let read = Read { ns, filter_doc, filter, projection: None, sort, skip: 0, limit, hint, collation_of: cmd };
    let mut inner = explain_read(shared, cmd, read, None, Some(then), verbosity)?;
    let mut cursor = doc! {};
    for key in ["queryPlanner", "executionStats"] {
        if let Some(v) = inner.remove(key) {
            cursor.insert(key, v);
        }
    }
    if let Some(write) = counts.get(runs.len()) {
        // Its time is its input's.
        let before = runs.len().checked_sub(1).map_or(&cursor_counts[0], |i| &counts[i]);
        write.nanos.store(before.nanos.load(Relaxed), Relaxed);
    }
    let run = verbosity != Verbosity::QueryPlanner;
    let mut shown = vec![Bson::Document(with_counts(doc! { "$cursor": cursor }, run.then_some(&cursor_counts[0])))];
    shown.extend(shown_stages(rest, &db, run.then_some(&counts[..])));
    let mut reply = doc! { "explainVersion": "1", "stages": shown };
    for key in ["command", "serverInfo", "ok"] {
        if let Some(v) = inner.remove(key) {
            reply.insert(key, v);
        }
    }
    Ok(reply)
}

/// A stage as explain shows it, with its figures once run.
fn with_counts(mut stage: Document, counts: Option<&StageCounts>) -> Document {
    if let Some(c) = counts {
        stage.insert("nReturned", c.returned.load(Relaxed) as i64);
        stage.insert("executionTimeMillisEstimate", c.millis() as i64);
    }
    stage
}

/// `stages` (already parsed, so well formed) in mongod's explain form,
/// with `counts[i]` for stage `i` once run: a `$sort` followed by a
/// `$limit` absorbs it (shown as the sort's `limit`, with its figures);
/// `$unwind` and `$out` in their long forms (`$out`'s `db`: the
/// command's by default); `$count` as the `$group` and `$project` it
/// stands for.
fn shown_stages(stages: &[Bson], db: &str, counts: Option<&[StageCounts]>) -> Vec<Bson> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < stages.len() {
        let given = stages[i].as_document().cloned().unwrap_or_default();
        let (name, arg) = given.iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap_or_default();
        let mut taken = 1;
        let shown = match (name.as_str(), &arg) {
            ("$sort", Bson::Document(key)) => {
                let mut spec = doc! { "sortKey": key.clone() };
                if let Some(n) = limit_at(stages, i + 1) {
                    spec.insert("limit", n);
                    taken = 2;
                }
                doc! { "$sort": spec }
            }
            ("$match", Bson::Document(filter)) => doc! { "$match": query::plan::parsed_query(filter) },
            ("$skip" | "$limit", n) => match count_of(n) {
                Some(n) => doc! { name: n },
                None => given,
            },
            ("$unwind", Bson::String(path)) => doc! { "$unwind": { "path": path } },
            // An alias mongod expands when it parses the pipeline; both
            // stages return what the count does.
            ("$count", Bson::String(field)) => {
                let group = doc! { "_id": { "$const": Bson::Null }, field.as_str(): { "$sum": { "$const": 1 } } };
                let stage_counts = counts.map(|c| &c[i]);
                out.push(Bson::Document(with_counts(doc! { "$group": group }, stage_counts)));
                doc! { "$project": { field.as_str(): true, "_id": false } }
            }
            ("$out", Bson::String(coll)) => doc! { "$out": { "coll": coll, "db": db } },
            ("$out", Bson::Document(target)) => {
                let db = target.get_str("db").unwrap_or(db);
                doc! { "$out": { "coll": target.get("coll").cloned().unwrap_or(Bson::Null), "db": db } }
            }
            _ => given,
        };
        // The figures of the last stage it stands for.
        out.push(Bson::Document(with_counts(shown, counts.map(|c| &c[i + taken - 1]))));
        i += taken;
    }
    out
}

/// The count a `$limit` at `at` gives, if the stage there is one.
fn limit_at(stages: &[Bson], at: usize) -> Option<i64> {
    let d = stages.get(at)?.as_document()?;
    (d.len() == 1).then(|| d.get("$limit")).flatten().and_then(count_of)
}

/// A `$skip` or `$limit` argument (parsed already) as a 64-bit count.
fn count_of(v: &Bson) -> Option<i64> {
    match doc::compare::number(v)? {
        doc::compare::Number::Int(n) => Some(n),
        doc::compare::Number::Float(f) => Some(f as i64),
    }
}
