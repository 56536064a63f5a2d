//! `aggregate`, with the stages the server itself answers
//! (`$collStats`, `$listLocalSessions`, `$documents`, `$out`, `$merge`).

use crate::args::count_option;
use crate::args::db_of;
use crate::args::namespace;
use crate::args::ReplyResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::cursors::buffered_cursor;
use crate::exec::cursors::first_batch;
use crate::exec::cursors::stream_of;
use crate::exec::cursors::CursorState;
use crate::exec::cursors::Source;
use crate::exec::deadline::Deadline;
use crate::exec::scan::check_hint;
use crate::exec::scan::collation_of;
use crate::exec::views::resolve_view;
use crate::exec::views::stream_over;
use bson::{doc, Bson, Document};
use doc::catalog::Namespace;

/// The stage that lists the local session cache (`{aggregate: 1}` only).
pub(crate) const LOCAL_SESSIONS: &str = "$listLocalSessions";
const CURRENT_OP: &str = "$currentOp";

pub fn aggregate(shared: &Ctx<'_>, call: &Call, cmd: &Document) -> ReplyResult {
    let deadline = Deadline::of(cmd)?.killable(shared);
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
    let (stages, write) = crate::exec::agg_write::split(stages, &ns.db)?;
    if let Some(w) = &write {
        let stage = match w {
            crate::exec::agg_write::WriteStage::Out(_) => "$out",
            crate::exec::agg_write::WriteStage::Merge { .. } => "$merge",
        };
        if shared.txn().is_some() {
            return Err(CommandError::operation_not_supported_in_transaction(format!(
                "{stage} cannot be used in a transaction"
            )));
        }
        if shared.snapshot().is_some() {
            return Err(CommandError::invalid_options(format!(
                "{stage} cannot be used with a 'snapshot' read concern level"
            )));
        }
    }
    let stages = &stages;
    let scope = crate::args::scope_of(cmd)?;
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
                return Err(crate::exec::views::not_on_view(&ns));
            }
            (Some(vec![coll_stats_stage(shared, &ns, d)?]), &stages[1..])
        }
        Some(Bson::Document(d)) if d.len() == 1 && d.contains_key("$planCacheStats") => {
            if view.is_some() {
                return Err(crate::exec::views::not_on_view(&ns));
            }
            match d.get("$planCacheStats") {
                Some(Bson::Document(o)) if o.iter().all(|(k, v)| k == "allHosts" && v.as_bool().is_some()) => {}
                _ => return Err(CommandError::failed_to_parse("$planCacheStats value must be an object")),
            }
            let host = crate::server::hostname();
            let entries = match shared.collection(&ns) {
                Some(coll) if !collectionless => {
                    let among = crate::exec::access::among(&coll, &crate::exec::access::planned_among(&coll, None));
                    shared.plan_cache.stats(&ns.to_string(), &among, &host)
                }
                _ => Vec::new(),
            };
            (Some(entries), &stages[1..])
        }
        Some(Bson::Document(d)) if d.len() == 1 && d.contains_key(CURRENT_OP) => {
            if !collectionless || ns.db != "admin" {
                return Err(CommandError::invalid_namespace(format!(
                    "{CURRENT_OP} must be run against the 'admin' database with {{aggregate: 1}}"
                )));
            }
            let options = match d.get(CURRENT_OP) {
                Some(Bson::Document(o)) => o,
                _ => return Err(CommandError::failed_to_parse(format!("{CURRENT_OP} options must be an object"))),
            };
            let idle_sessions = crate::args::bool_option(options, "idleSessions", CURRENT_OP, true)?;
            (Some(crate::exec::ops::current_ops(shared, idle_sessions)), &stages[1..])
        }
        Some(Bson::Document(d)) if d.len() == 1 && d.contains_key("$indexStats") => {
            if view.is_some() {
                return Err(crate::exec::views::not_on_view(&ns));
            }
            (Some(index_stats_stage(shared, &ns, d)?), &stages[1..])
        }
        Some(Bson::Document(d)) if collectionless && d.contains_key("$documents") => {
            let arg = d.get("$documents").expect("checked");
            (Some(crate::exec::agg_write::documents(arg, &scope)?), &stages[1..])
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
    let pipeline = query::Pipeline::parse_in(&stages, &scope)?.with_collation(collation);
    let pipeline = crate::exec::views::held_to_limits(shared, cmd, pipeline)?;
    let read_deadline = crate::exec::deadline::SharedDeadline::new(&deadline);
    let (docs, scanning) = match source {
        Some(docs) => (pipeline.stream(docs.into_iter().map(Ok))?, None),
        None => stream_over(shared, &base, &pipeline, cmd.get("hint"), (&call.op, &read_deadline))?,
    };
    deadline.check()?;
    if let Some(write) = write {
        // The results went to a collection; the cursor is empty.
        let out = docs.collect::<Result<Vec<_>, _>>()?;
        deadline.check()?;
        crate::exec::agg_write::write(shared, cmd, &write, out)?;
        return buffered_cursor(shared, ns, Vec::new(), None);
    }
    let mut state = CursorState::of(ns, Source::Stream { docs: stream_of(docs), scanning, filter: None, exact: None });
    state.read_deadline = Some(read_deadline);
    first_batch(shared, state, batch_size.map(|b| b as usize), false, &deadline)
}

/// `$indexStats`: per ready index, the `_id` index first, the reads it
/// served since it was loaded (`accesses.ops`, `accesses.since`); a
/// clustered collection's `_id` is its records' order, not listed.
fn index_stats_stage(shared: &Ctx<'_>, ns: &Namespace, stage: &Document) -> Result<Vec<Document>, CommandError> {
    match stage.get("$indexStats") {
        Some(Bson::Document(d)) if d.is_empty() => {}
        _ => return Err(CommandError::with_code(28803, "The $indexStats stage specification must be an empty object")),
    }
    let Some(coll) = shared.collection(ns) else { return Ok(Vec::new()) };
    let host = format!("{}:{}", crate::server::hostname(), shared.options.port);
    let stats = |ix: &doc::index::Index, spec: Document| {
        let (ops, since) = ix.accesses();
        doc! {
            "name": ix.spec.name.clone(),
            "key": ix.spec.key.clone(),
            "host": host.clone(),
            "accesses": { "ops": ops as i64, "since": since },
            "spec": spec,
        }
    };
    let id = coll.id_index_view().map(|ix| stats(ix, crate::exec::id_index::id_index_spec(&coll)));
    let secondary = coll.indexes().into_iter().filter(|ix| ix.is_ready()).map(|ix| stats(&ix, ix.shown()));
    Ok(id.into_iter().chain(secondary).collect())
}

/// The one document `$collStats` produces (`storageStats` and `count`).
pub(crate) fn coll_stats_stage(shared: &Ctx<'_>, ns: &Namespace, stage: &Document) -> Result<Document, CommandError> {
    if shared.snapshot().is_some() {
        // It reads the collection as it is now, not at a snapshot.
        return Err(CommandError::invalid_options(
            "Aggregation stage $collStats cannot run with a readConcern other than 'local', or in a multi-document \
             transaction. Current readConcern: { level: \"snapshot\" }",
        ));
    }
    let Ok(spec) = stage.get_document("$collStats") else {
        return Err(CommandError::failed_to_parse("$collStats must take a nested object but found: $collStats"));
    };
    let mut out = doc! {
        "ns": ns.to_string(),
        "host": crate::server::hostname(),
        "localTime": bson::DateTime::now(),
    };
    for (k, v) in spec {
        match k.as_str() {
            "storageStats" => {
                let scale = match v {
                    Bson::Document(o) => count_option(o, "scale")?.unwrap_or(1).max(1),
                    _ => 1,
                };
                out.insert("storageStats", crate::exec::storage_stats::storage_stats(shared, ns, scale)?);
            }
            "count" => {
                let n = match shared.collection(ns) {
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
