//! `listIndexes`, `createIndexes` and `dropIndexes`.

use crate::args::check_fields;
use crate::args::namespace;
use crate::args::{CommandResult, ReplyResult};
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::id_index::id_index_name;
use crate::exec::id_index::id_index_spec;
use crate::exec::id_index::is_id_key;
use crate::exec::index_builds::Build;
use crate::exec::index_spec::{self, INDEXES_PER_COLLECTION_MAX};
use crate::exec::views::check_not_view;
use crate::exec::views::existing;
use bson::{doc, Bson, Document};
use doc::catalog::{Collection, Namespace};
use doc::index::IndexSpec;

pub fn list_indexes(shared: &Ctx<'_>, cmd: &Document) -> ReplyResult {
    check_fields(cmd, "listIndexes", &["cursor", "includeBuildUUIDs", "includeIndexBuildInfo"], false)?;
    let (ns, coll) = existing(shared, cmd, "listIndexes")?;
    let batch_size = match cmd.get("cursor") {
        None => None,
        Some(Bson::Document(c)) => crate::args::count_option(c, "batchSize")?.map(|n| n.max(0) as usize),
        Some(other) => return Err(crate::args::wrong_type("listIndexes.cursor", other, "object")),
    };
    let cursor_ns = Namespace { db: ns.db.clone(), coll: format!("$cmd.listIndexes.{}", ns.coll) };
    crate::exec::cursors::buffered_cursor(shared, cursor_ns, shown_indexes(&coll), batch_size)
}

/// The indexes of `coll` as `listIndexes` shows them: `_id` first, then
/// the ready secondary ones in the order they were built.
fn shown_indexes(coll: &Collection) -> Vec<Document> {
    let ready = coll.indexes().into_iter().filter(|ix| ix.is_ready()).map(|ix| ix.shown());
    std::iter::once(id_index_spec(coll)).chain(ready).collect()
}

pub fn create_indexes(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    check_fields(cmd, "createIndexes", &["indexes", "commitQuorum", "isTimeseriesNamespace"], false)?;
    let ns = namespace(cmd, "createIndexes")?;
    if shared.in_transaction().is_some() && ns.coll.starts_with("system.") {
        return Err(CommandError::operation_not_supported_in_transaction(format!(
            "Cannot write to system collection {ns} within a transaction."
        )));
    }
    let specs = match cmd.get("indexes") {
        Some(Bson::Array(specs)) if !specs.is_empty() => specs,
        Some(Bson::Array(_)) => return Err(CommandError::bad_value("Must specify at least one index to create")),
        Some(other) => return Err(crate::args::wrong_type("createIndexes.indexes", other, "array")),
        None => {
            return Err(CommandError::missing_required_field(
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
    // Every spec is checked before anything is created.
    let existing = shared.collection(&ns);
    let clustered = existing.as_ref().is_some_and(|c| c.is_clustered());
    let default_collation = existing.as_ref().and_then(|c| c.options.get_document("collation").ok());
    let mut asked = Vec::new();
    for spec in specs {
        if let Some(key) = spec.as_document().and_then(|s| s.get_document("key").ok()).filter(|k| is_id_key(k)) {
            check_id_spec(spec.as_document().expect("a document"), key, clustered, default_collation)?;
            continue;
        }
        asked.push(index_spec::parse(spec, default_collation)?);
    }
    check_not_view(shared, &ns)?;
    let created = shared.collection(&ns).is_none();
    let coll = shared.collection_or_create(&ns)?;
    if coll.capped.is_some() && asked.iter().any(|s| s.shown.contains_key("expireAfterSeconds")) {
        return Err(CommandError::with_code(67, "Cannot create TTL index on a capped collection"));
    }
    let before = shown_indexes(&coll);
    let mut to_build: Vec<IndexSpec> = Vec::new();
    for spec in asked {
        let mut same = false;
        let earlier = to_build.iter().map(|s| &s.shown);
        for existing in before.iter().skip(1).chain(earlier) {
            match index_spec::versus(&spec, existing) {
                index_spec::Versus::Other => {}
                index_spec::Versus::Same => same = true,
                index_spec::Versus::Conflict(e) => return Err(e),
            }
        }
        if !same {
            to_build.push(spec);
        }
    }
    if let Some(over) = to_build.get(INDEXES_PER_COLLECTION_MAX.saturating_sub(before.len())) {
        return Err(CommandError::with_code(
            67,
            format!(
                "add index fails, too many indexes for {ns} key:{}",
                doc::format::spaced(&Bson::Document(over.key.clone()))
            ),
        ));
    }
    let mut reply =
        doc! { "numIndexesBefore": before.len() as i32, "numIndexesAfter": (before.len() + to_build.len()) as i32 };
    if created {
        reply.insert("createdCollectionAutomatically", true);
    }
    if to_build.is_empty() {
        reply.insert("note", "all indexes already exist");
    }
    if let Some(t) = shared.in_transaction() {
        return add_in_transaction(shared, t, (&ns, &coll), to_build, reply);
    }
    for spec in to_build {
        let mut command = doc! { "createIndexes": ns.coll.clone(), "indexes": [spec.shown.clone()] };
        command.insert("$db", ns.db.clone());
        let listed = shared.index_builds.start(&ns.to_string(), command);
        build(shared, &ns, spec, &listed.build)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// Inside a transaction, as mongod 8.0: indexes are added only to a
/// collection the transaction created (by this command or earlier) and
/// that is still empty; they commit or vanish with the transaction.
fn add_in_transaction(
    shared: &Ctx<'_>,
    t: &crate::transactions::InTxn,
    (ns, coll): (&Namespace, &Collection),
    to_build: Vec<IndexSpec>,
    mut reply: Document,
) -> CommandResult {
    if !to_build.is_empty() {
        if !t.created_here(ns) {
            return Err(CommandError::operation_not_supported_in_transaction(format!(
                "Cannot create new indexes on existing collection {ns} in a multi-document transaction."
            )));
        }
        reply.insert("createdCollectionAutomatically", true);
    }
    for spec in to_build {
        shared.catalog.add_index_in(&t.txn, coll, spec)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// Build one index, its progress logged and shown by `currentOp`.
fn build(shared: &Ctx<'_>, ns: &Namespace, spec: IndexSpec, listed: &Build) -> Result<(), CommandError> {
    let name = spec.name.clone();
    tracing::info!(ns = %ns, index = %name, "index build: started");
    let logged = std::sync::atomic::AtomicU64::new(0);
    let held = std::sync::atomic::AtomicBool::new(false);
    let progress = |done: u64, total: u64| {
        listed.progress(done, total);
        // The fail point holds the build once, after its first chunk,
        // until it is turned off or the server shuts down.
        if done > 0
            && done < total
            && shared.fail_points.hangs_index_builds()
            && !held.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            while shared.fail_points.hangs_index_builds() && !*shared.shutdown.borrow() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        // About every tenth of the way.
        let step = (total / 10).max(1);
        if done == total || done >= logged.load(std::sync::atomic::Ordering::Relaxed) + step {
            logged.store(done, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(ns = %ns, index = %name, done, total, "index build: progress");
        }
    };
    loop {
        match shared.catalog.build_index(ns, spec.clone(), &progress) {
            Ok(()) => break,
            // Another client is building one of this name: as mongod, wait
            // for its outcome when it is the same index.
            Err(doc::catalog::DocError::IndexExists(_)) => {
                if wait_for_build(shared, ns, &spec)? {
                    break;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(ns = %ns, index = %name, "index build: done");
    Ok(())
}

/// Wait while another build of an index named as `spec` runs; true once
/// the same index is ready, false if the build went away (to try again).
fn wait_for_build(shared: &Ctx<'_>, ns: &Namespace, spec: &IndexSpec) -> Result<bool, CommandError> {
    loop {
        let found = shared.collection(ns).and_then(|c| c.indexes().into_iter().find(|ix| ix.spec.name == spec.name));
        let Some(ix) = found else { return Ok(false) };
        if let index_spec::Versus::Conflict(e) = index_spec::versus(spec, &ix.shown()) {
            return Err(e);
        }
        if ix.is_ready() {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `{_id: 1}` under any name (drivers name it `_id_1`) is the index that
/// is already there (a clustered collection's spec, as listIndexes shows
/// it, too); other options on it are not supported.
fn check_id_spec(
    spec: &Document,
    key: &Document,
    clustered: bool,
    default_collation: Option<&Document>,
) -> Result<(), CommandError> {
    // A `collation` (as `listIndexes` shows a collated collection's `_id`
    // index, which a restore sends back) must be the collection's own.
    if let Some(given) = spec.get("collation") {
        let full = |c: Option<std::sync::Arc<query::Collation>>| c.map(|c| c.full_spec());
        let default = default_collation.map(|d| Bson::Document(d.clone()));
        if full(query::Collation::parse(Some(given))?) != full(query::Collation::parse(default.as_ref())?) {
            return Err(CommandError::with_code(67, "_id index must have the collection default collation"));
        }
    }
    let plain = spec.keys().all(|k| match k.as_str() {
        "key" | "name" | "v" | "collation" => true,
        "unique" | "clustered" => clustered && matches!(spec.get(k), Some(Bson::Boolean(true))),
        _ => false,
    });
    if is_id_key(key) && plain {
        return Ok(());
    }
    Err(CommandError::not_implemented(format!("options on the _id index are not supported (asked for {spec})")))
}

pub fn drop_indexes(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    check_fields(cmd, "dropIndexes", &["index"], false)?;
    let (ns, coll) = existing(shared, cmd, "dropIndexes")?;
    let id_name = id_index_name(&coll);
    let ready: Vec<(String, Document, Document)> = coll
        .indexes()
        .iter()
        .filter(|ix| ix.is_ready())
        .map(|ix| (ix.spec.name.clone(), ix.spec.key.clone(), ix.shown()))
        .collect();
    let was = 1 + ready.len() as i32;
    let names: Vec<String> = match cmd.get("index") {
        Some(Bson::String(name)) if name == "*" => ready.iter().map(|(n, _, _)| n.clone()).collect(),
        Some(Bson::String(name)) => vec![name.clone()],
        Some(Bson::Array(names)) => {
            let mut out = Vec::new();
            for n in names {
                match n {
                    Bson::String(n) => out.push(n.clone()),
                    other => return Err(crate::args::wrong_type("dropIndexes.index", other, "string")),
                }
            }
            out
        }
        Some(Bson::Document(key)) if is_id_key(key) => vec![id_name.clone()],
        Some(Bson::Document(key)) => {
            let found: Vec<(&String, &Document)> =
                ready.iter().filter(|(_, k, _)| index_spec::same_pattern(k, key)).map(|(n, _, d)| (n, d)).collect();
            match found.as_slice() {
                [(one, _)] => vec![(*one).clone()],
                [] => {
                    return Err(CommandError::with_code(
                        27,
                        format!("can't find index with key: {}", doc::format::spaced(&Bson::Document(key.clone()))),
                    ))
                }
                many => {
                    // AmbiguousIndexKeyPattern, naming the first two.
                    let shown = |d: &Document| doc::format::spaced(&Bson::Document(d.clone()));
                    return Err(CommandError::with_code(
                        181,
                        format!(
                            "{} indexes found for key: {}, identify by name instead. Conflicting indexes: {}, {}",
                            many.len(),
                            shown(key),
                            shown(many[0].1),
                            shown(many[1].1)
                        ),
                    ));
                }
            }
        }
        // This one message puts the quote after the bracket.
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'dropIndexes.index' is the wrong type '{}', expected types '[string, object, array]'",
                crate::args::type_name(other)
            )))
        }
        None => {
            return Err(CommandError::missing_required_field(
                "BSON field 'dropIndexes.index' is missing but a required field",
            ))
        }
    };
    // Every name is checked before any index goes.
    for name in &names {
        match name.as_str() {
            n if n == id_name && coll.is_clustered() => {
                return Err(CommandError::with_code(5979800, "It is illegal to drop the clusteredIndex"))
            }
            n if n == id_name => return Err(CommandError::invalid_options("cannot drop _id index")),
            "*" => return Err(CommandError::bad_value("'*' cannot be combined with other index names")),
            n if ready.iter().any(|(r, _, _)| r == n) => {}
            other => return Err(CommandError::with_code(27, format!("index not found with name [{other}]"))),
        }
    }
    for name in &names {
        shared.catalog.drop_index(&ns, name)?;
    }
    Ok(doc! { "nIndexesWas": was, "ok": 1.0 })
}

/// `planCacheClear`: forget the plan cache's choices for a collection.
pub fn plan_cache_clear(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    check_fields(cmd, "planCacheClear", &["query", "sort", "projection", "collation"], false)?;
    let (ns, _) = existing(shared, cmd, "planCacheClear")?;
    shared.plan_cache.clear(&ns.to_string());
    Ok(doc! { "ok": 1.0 })
}
