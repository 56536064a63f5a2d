//! Collections and documents: `create`, `drop`, `dropDatabase`,
//! `listCollections`, `listDatabases`, `insert`, `delete`, `find`,
//! `getMore`, `killCursors`, `count`.
//!
//! Find cursors keep their position (the last record id returned), not a
//! snapshot: a `getMore` sees later commits, as a MongoDB cursor with read
//! concern "local" may. Idle cursors are dropped after 10 minutes.

use crate::error::CommandError;
use crate::limits::*;
use crate::server::Shared;
use crate::wire::OpMsg;
use bson::{doc, Bson, Document};
use doc::catalog::{check_db_name, DocError, Namespace};
use query::Filter;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

type CommandResult = Result<Document, CommandError>;

/// Default size of a find's first batch (MongoDB's).
const FIRST_BATCH_DEFAULT: usize = 101;

/// A find cursor between batches.
struct CursorState {
    ns: Namespace,
    filter: Filter,
    /// Record id of the last document examined.
    after: u64,
    /// Documents still allowed by `limit` (`None`: no limit).
    remaining: Option<usize>,
    last_used: Instant,
}

#[derive(Default)]
pub struct Cursors {
    open: Mutex<HashMap<i64, CursorState>>,
}

impl Cursors {
    fn reap(open: &mut HashMap<i64, CursorState>) {
        open.retain(|_, c| c.last_used.elapsed() < Duration::from_secs(cursor_idle_timeout_secs));
    }
}

impl From<DocError> for CommandError {
    fn from(e: DocError) -> CommandError {
        match e {
            DocError::DuplicateKey { ref key, .. } => {
                let msg = e.to_string();
                let mut err = CommandError::duplicate_key(msg);
                err.extra = Some(Box::new(doc! { "keyPattern": { "_id": 1 }, "keyValue": { "_id": (**key).clone() } }));
                err
            }
            DocError::NamespaceExists(_) => CommandError::namespace_exists(e.to_string()),
            DocError::InvalidNamespace(m) => CommandError::invalid_namespace(m),
            DocError::Key(k) => CommandError::bad_value(k.to_string()),
            DocError::Corrupt(_) | DocError::Storage(_) => CommandError::internal_error(e.to_string()),
        }
    }
}

fn db_of(cmd: &Document) -> Result<&str, CommandError> {
    let db = cmd.get_str("$db").map_err(|_| CommandError::failed_to_parse("the command needs a $db string"))?;
    check_db_name(db).map_err(CommandError::from)?;
    Ok(db)
}

/// The namespace a command's first field names (`{find: "coll", $db}`).
fn namespace(cmd: &Document, name: &str) -> Result<Namespace, CommandError> {
    let db = db_of(cmd)?;
    match cmd.get(name) {
        Some(Bson::String(coll)) => Namespace::new(db, coll).map_err(CommandError::from),
        _ => Err(CommandError::invalid_namespace(format!(
            "collection name has invalid type {}",
            cmd.get(name).map(type_name).unwrap_or("missing")
        ))),
    }
}

fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        _ => "other",
    }
}

/// A non-negative integer option (int, long or integral double).
fn count_option(cmd: &Document, name: &str) -> Result<Option<i64>, CommandError> {
    match cmd.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(i)) => Ok(Some((*i).into())),
        Some(Bson::Int64(i)) => Ok(Some(*i)),
        Some(Bson::Double(d)) if d.fract() == 0.0 => Ok(Some(*d as i64)),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{name}' is the wrong type '{}', expected types '[long, int, decimal, double']",
            type_name(other)
        ))),
    }
}

fn filter_of(cmd: &Document, name: &str) -> Result<(Document, Filter), CommandError> {
    let f = match cmd.get(name) {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{name}' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
    };
    let parsed = Filter::parse(&f).map_err(|e| CommandError::bad_value(e.message))?;
    Ok((f, parsed))
}

pub fn create(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "create")?;
    let options: Document = cmd
        .iter()
        .skip(1)
        .filter(|(k, _)| {
            !k.starts_with('$') && !matches!(k.as_str(), "lsid" | "txnNumber" | "writeConcern" | "comment")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(k) =
        options.keys().find(|k| !matches!(k.as_str(), "validator" | "validationLevel" | "validationAction"))
    {
        return Err(CommandError::invalid_options(format!("collection option {k} is not supported yet")));
    }
    shared.catalog.create(&ns, options)?;
    Ok(doc! { "ok": 1.0 })
}

pub fn drop(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "drop")?;
    // Since MongoDB 7.0, dropping a missing collection succeeds.
    if shared.catalog.drop(&ns)? {
        Ok(doc! { "nIndexesWas": 1, "ns": ns.to_string(), "ok": 1.0 })
    } else {
        Ok(doc! { "ok": 1.0 })
    }
}

pub fn drop_database(shared: &Shared, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    for c in shared.catalog.list(db) {
        shared.catalog.drop(&c.ns)?;
    }
    Ok(doc! { "dropped": db, "ok": 1.0 })
}

pub fn list_collections(shared: &Shared, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    let (_, filter) = filter_of(cmd, "filter")?;
    let name_only = cmd.get_bool("nameOnly").unwrap_or(false);
    let mut batch = Vec::new();
    for c in shared.catalog.list(db) {
        let entry = doc! {
            "name": &c.ns.coll,
            "type": "collection",
            "options": c.options.clone(),
            "info": { "readOnly": false },
            "idIndex": { "v": 2, "key": { "_id": 1 }, "name": "_id_" },
        };
        if filter.matches(&entry) {
            batch.push(Bson::Document(if name_only {
                doc! { "name": &c.ns.coll, "type": "collection" }
            } else {
                entry
            }));
        }
    }
    Ok(doc! { "cursor": { "id": 0i64, "ns": format!("{db}.$cmd.listCollections"), "firstBatch": batch }, "ok": 1.0 })
}

pub fn list_databases(shared: &Shared, cmd: &Document) -> CommandResult {
    let (_, filter) = filter_of(cmd, "filter")?;
    let name_only = cmd.get_bool("nameOnly").unwrap_or(false);
    let mut dbs = Vec::new();
    let mut total = 0i64;
    for db in shared.catalog.databases() {
        let mut size = 0i64;
        for c in shared.catalog.list(&db) {
            size += c.count_and_size(shared.catalog.engine())?.1 as i64;
        }
        total += size;
        let entry = if name_only {
            doc! { "name": &db }
        } else {
            doc! { "name": &db, "sizeOnDisk": size, "empty": false }
        };
        if filter.matches(&entry) {
            dbs.push(Bson::Document(entry));
        }
    }
    let mut reply = doc! { "databases": dbs };
    if !name_only {
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total >> 20);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn insert(shared: &Shared, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
    let ns = namespace(cmd, "insert")?;
    let docs = statements(msg, "insert", "documents")?;
    let ordered = cmd.get_bool("ordered").unwrap_or(true);
    let coll = shared.catalog.get_or_create(&ns)?;
    let engine = shared.catalog.engine();
    Ok(write_reply(&docs, ordered, |d| {
        match d.get("_id") {
            Some(Bson::Array(_)) => return Err(CommandError::bad_value("can't use an array for _id")),
            Some(Bson::RegularExpression(_)) => return Err(CommandError::bad_value("can't use a regex for _id")),
            _ => {}
        }
        coll.insert(engine, d)?;
        shared.opcounters.insert.fetch_add(1, Ordering::Relaxed);
        Ok(1)
    }))
}

/// Run each statement of a write command, adding up what each did (`n`)
/// and reporting failures as `writeErrors` by index; an ordered command
/// stops at its first failure.
fn write_reply<T>(items: &[T], ordered: bool, mut run: impl FnMut(&T) -> Result<i64, CommandError>) -> Document {
    let mut n = 0i64;
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match run(item) {
            Ok(k) => n += k,
            Err(e) => {
                let mut we = doc! { "index": i as i32, "code": e.code, "errmsg": &e.errmsg };
                if let Some(extra) = &e.extra {
                    we.extend((**extra).clone());
                }
                errors.push(Bson::Document(we));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! { "n": n };
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    reply.insert("ok", 1.0);
    reply
}

/// The statements of a write command: the body's array or the document
/// sequence of the same name.
fn statements(msg: &OpMsg, cmd_name: &str, field: &str) -> Result<Vec<Document>, CommandError> {
    let cmd = &msg.body;
    let docs: Vec<Document> = match (cmd.get(field), msg.sequences.iter().find(|(id, _)| id == field)) {
        (Some(Bson::Array(items)), None) => items
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(CommandError::type_mismatch(format!(
                    "BSON field '{cmd_name}.{field}.{i}' is the wrong type '{}', expected type 'object'",
                    type_name(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        (None, Some((_, seq))) => seq.clone(),
        (Some(_), Some(_)) => {
            return Err(CommandError::bad_value(format!("{field} given both in the body and as a sequence")))
        }
        (Some(other), None) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{cmd_name}.{field}' is the wrong type '{}', expected type 'array'",
                type_name(other)
            )))
        }
        (None, None) => {
            return Err(CommandError::failed_to_parse(format!(
                "BSON field '{cmd_name}.{field}' is missing but a required field"
            )))
        }
    };
    if docs.is_empty() || docs.len() > write_batch_size_max {
        return Err(CommandError::invalid_length(format!(
            "Write batch sizes must be between 1 and {write_batch_size_max}. Got {} operations.",
            docs.len()
        )));
    }
    Ok(docs)
}

pub fn delete(shared: &Shared, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
    let ns = namespace(cmd, "delete")?;
    let specs = statements(msg, "delete", "deletes")?;
    // The shape of every statement is checked before any runs, as
    // MongoDB's command parser does; query errors are per statement.
    for spec in &specs {
        if !spec.contains_key("q") {
            return Err(CommandError::failed_to_parse("BSON field 'delete.deletes.q' is missing but a required field"));
        }
        let limit = count_option(spec, "limit")?.unwrap_or(0);
        if limit != 0 && limit != 1 {
            return Err(CommandError::failed_to_parse(format!(
                "The limit field in delete objects must be 0 or 1. Got {limit}"
            )));
        }
    }
    let ordered = cmd.get_bool("ordered").unwrap_or(true);
    Ok(write_reply(&specs, ordered, |spec| {
        shared.opcounters.delete.fetch_add(1, Ordering::Relaxed);
        delete_one_spec(shared, &ns, spec)
    }))
}

/// One `{q, limit}` statement: delete the first match (limit 1) or all.
fn delete_one_spec(shared: &Shared, ns: &Namespace, spec: &Document) -> Result<i64, CommandError> {
    let (filter_doc, filter) = filter_of(spec, "q")?;
    let limit = count_option(spec, "limit")?.unwrap_or(0);
    let Some(coll) = shared.catalog.get(ns) else { return Ok(0) };
    let engine = shared.catalog.engine();
    if let Some(id) = Filter::id_equality(&filter_doc) {
        return Ok(match coll.find_rid_by_id(engine, id)? {
            Some((rid, d)) => i64::from(coll.delete(engine, rid, &d)?),
            None => 0,
        });
    }
    let mut deleted = 0;
    let mut after = 0;
    loop {
        let chunk = coll.scan(engine, after, 256)?;
        if chunk.is_empty() {
            return Ok(deleted);
        }
        for (rid, d) in chunk {
            after = rid;
            if filter.matches(&d) && coll.delete(engine, rid, &d)? {
                deleted += 1;
                if limit == 1 {
                    return Ok(deleted);
                }
            }
        }
    }
}

/// Scan `ns` from `cursor.after`, returning up to `batch` matches.
fn fill(shared: &Shared, c: &mut CursorState, batch: usize) -> Result<(Vec<Bson>, bool), CommandError> {
    let engine = shared.catalog.engine();
    let mut out = Vec::new();
    let Some(coll) = shared.catalog.get(&c.ns) else { return Ok((out, true)) };
    let want = match c.remaining {
        Some(r) => batch.min(r),
        None => batch,
    };
    let mut bytes = 0usize;
    loop {
        let chunk = coll.scan(engine, c.after, 256)?;
        if chunk.is_empty() {
            return Ok((out, true));
        }
        for (rid, d) in chunk {
            c.after = rid;
            if c.filter.matches(&d) {
                bytes += encoded_len(&d);
                out.push(Bson::Document(d));
                if let Some(r) = &mut c.remaining {
                    *r -= 1;
                    if *r == 0 {
                        return Ok((out, true));
                    }
                }
                // A batch stays under the 16 MiB reply limit.
                if out.len() >= want || bytes >= bson_object_size_max_bytes / 2 {
                    return Ok((out, false));
                }
            }
        }
    }
}

pub fn find(shared: &Shared, cmd: &Document) -> CommandResult {
    shared.opcounters.query.fetch_add(1, Ordering::Relaxed);
    let ns = namespace(cmd, "find")?;
    let (filter_doc, filter) = filter_of(cmd, "filter")?;
    for unsupported in ["sort", "projection", "min", "max", "collation"] {
        if cmd.get_document(unsupported).is_ok_and(|d| !d.is_empty()) {
            return Err(CommandError::not_implemented(format!("find with {unsupported} is not supported yet")));
        }
    }
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
    let single = cmd.get_bool("singleBatch").unwrap_or(false);
    let mut state = CursorState {
        ns: ns.clone(),
        filter,
        after: 0,
        remaining: (limit > 0).then_some(limit as usize),
        last_used: Instant::now(),
    };
    // A point lookup when the filter is exactly {_id: value}.
    if let (Some(id), Some(coll)) = (Filter::id_equality(&filter_doc), shared.catalog.get(&ns)) {
        let found = coll.find_by_id(shared.catalog.engine(), id)?;
        let batch: Vec<Bson> = found.into_iter().skip(skip as usize).map(Bson::Document).collect();
        return Ok(cursor_reply(&ns, 0, "firstBatch", batch));
    }
    // Skip by matching and discarding.
    let mut to_skip = skip as usize;
    while to_skip > 0 {
        let saved = state.remaining.take();
        let (skipped, done) = fill(shared, &mut state, to_skip.min(10_000))?;
        state.remaining = saved;
        to_skip -= skipped.len();
        if done {
            return Ok(cursor_reply(&ns, 0, "firstBatch", Vec::new()));
        }
    }
    let first = batch_size.map(|b| b as usize).unwrap_or(FIRST_BATCH_DEFAULT);
    let (batch, done) =
        if first == 0 && !single { (Vec::new(), false) } else { fill(shared, &mut state, first.max(1))? };
    let id = if done || single { 0 } else { register(shared, state) };
    Ok(cursor_reply(&ns, id, "firstBatch", batch))
}

/// A document's BSON size.
fn encoded_len(d: &Document) -> usize {
    bson::to_vec(d).map(|v| v.len()).unwrap_or(0)
}

fn register(shared: &Shared, state: CursorState) -> i64 {
    let mut open = shared.cursors.open.lock().unwrap();
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
    let ns = namespace(cmd, "collection")?;
    let batch_size = count_option(cmd, "batchSize")?.filter(|b| *b > 0).map(|b| b as usize).unwrap_or(usize::MAX);
    let mut state = {
        let mut open = shared.cursors.open.lock().unwrap();
        Cursors::reap(&mut open);
        match open.remove(&id) {
            Some(s) if s.ns == ns => s,
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
    let (batch, done) = fill(shared, &mut state, batch_size)?;
    let id = if done {
        0
    } else {
        state.last_used = Instant::now();
        shared.cursors.open.lock().unwrap().insert(id, state);
        id
    };
    Ok(cursor_reply(&ns, id, "nextBatch", batch))
}

pub fn kill_cursors(shared: &Shared, cmd: &Document) -> CommandResult {
    namespace(cmd, "killCursors")?;
    let ids =
        cmd.get_array("cursors").map_err(|_| CommandError::failed_to_parse("killCursors needs a cursors array"))?;
    let (mut killed, mut not_found) = (Vec::new(), Vec::new());
    let mut open = shared.cursors.open.lock().unwrap();
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(CommandError::type_mismatch("cursor ids must be longs"));
        };
        if open.remove(id).is_some() {
            killed.push(*id);
        } else {
            not_found.push(*id);
        }
    }
    Ok(doc! {
        "cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [], "cursorsUnknown": [], "ok": 1.0,
    })
}

pub fn aggregate(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = match cmd.get("aggregate") {
        Some(Bson::String(_)) => namespace(cmd, "aggregate")?,
        _ => return Err(CommandError::not_implemented("aggregate without a collection is not supported yet")),
    };
    let stages = cmd
        .get_array("pipeline")
        .map_err(|_| CommandError::type_mismatch("'pipeline' option must be specified as an array"))?;
    if cmd.get_document("cursor").is_err() {
        return Err(CommandError::failed_to_parse(
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }
    let pipeline = query::Pipeline::parse(stages)
        .map_err(|e| CommandError { code: e.code, ..CommandError::bad_value(e.message) })?;
    let mut input = Vec::new();
    if let Some(coll) = shared.catalog.get(&ns) {
        input = coll.scan(shared.catalog.engine(), 0, 0)?.into_iter().map(|(_, d)| d).collect();
    }
    let out: Vec<Bson> = pipeline.run(input.into_iter()).into_iter().map(Bson::Document).collect();
    let bytes: usize = out.iter().map(|d| d.as_document().map_or(0, encoded_len)).sum();
    if bytes > bson_object_size_max_bytes {
        return Err(CommandError::not_implemented("aggregate results over 16 MiB need cursors, not built yet"));
    }
    Ok(cursor_reply(&ns, 0, "firstBatch", out))
}

pub fn count(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "count")?;
    let (_, filter) = filter_of(cmd, "query")?;
    let skip = count_option(cmd, "skip")?.unwrap_or(0).max(0) as usize;
    let limit = count_option(cmd, "limit")?.unwrap_or(0).unsigned_abs() as usize;
    let mut state = CursorState { ns, filter, after: 0, remaining: None, last_used: Instant::now() };
    let mut n = 0usize;
    loop {
        let (batch, done) = fill(shared, &mut state, 10_000)?;
        n += batch.len();
        if done {
            break;
        }
    }
    let mut n = n.saturating_sub(skip);
    if limit > 0 {
        n = n.min(limit);
    }
    Ok(doc! { "n": n as i64, "ok": 1.0 })
}
