//! Command dispatch, and the handshake and administration commands drivers
//! and mongosh send before any data: `hello` / `isMaster`, `ping`,
//! `buildInfo`, `getParameter`, `serverStatus`, `hostInfo`, ...
//!
//! `hello` answers as the primary of a one-member replica set, so drivers
//! turn on sessions, retryable writes and transactions; every host name it
//! gives is the address the client reached us at.

use crate::error::CommandError;
use crate::limits::*;
use crate::server::{Conn, Shared};
use crate::wire::OpMsg;
use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Document, Timestamp};
use query::type_name;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The replica set name `hello` reports.
pub const SET_NAME: &str = "arbordb";
/// The MongoDB version we answer as (drivers and mongosh gate features on it).
pub const VERSION: &str = "8.0.0";

type CommandResult = Result<Document, CommandError>;

/// Commands we answer, with a line of help each (for `listCommands`).
const COMMANDS: &[(&str, &str)] = &[
    ("hello", "the handshake: topology and limits"),
    ("isMaster", "the legacy handshake"),
    ("ping", "answers ok"),
    ("buildInfo", "version and build"),
    ("getParameter", "server parameters"),
    ("setParameter", "change a server parameter"),
    ("serverStatus", "counters and storage engine statistics"),
    ("hostInfo", "the machine"),
    ("whatsmyuri", "the client's address"),
    ("getCmdLineOpts", "the server's options"),
    ("connectionStatus", "authentication state"),
    ("listCommands", "this list"),
    ("endSessions", "ends sessions"),
    ("killAllSessions", "ends every session"),
    ("killSessions", "ends sessions and closes their cursors"),
    ("startSession", "starts a session"),
    ("shutdown", "checkpoint and stop the server"),
    ("insert", "insert documents"),
    ("delete", "delete documents"),
    ("bulkWrite", "inserts, updates and deletes across collections (run against admin)"),
    ("find", "query a collection"),
    ("getMore", "the next batch of a cursor"),
    ("killCursors", "close cursors"),
    ("count", "count matching documents"),
    ("distinct", "the distinct values of a field"),
    ("renameCollection", "rename a collection"),
    ("collStats", "a collection's sizes"),
    ("dbStats", "a database's sizes"),
    ("update", "update documents"),
    ("findAndModify", "update or remove one document and return it"),
    ("aggregate", "run a pipeline ($match, $skip, $limit, $count, $group, $sort, $project, $unset, $addFields, $set, $replaceRoot, $replaceWith, $out, $merge; $documents with aggregate: 1)"),
    ("create", "create a collection"),
    ("collMod", "change a collection's validator or a view's definition"),
    ("listIndexes", "a collection's indexes (its _id index)"),
    ("createIndexes", "the _id index (always there); secondary indexes are not supported yet"),
    ("dropIndexes", "drop indexes ('*': every index but _id_)"),
    ("drop", "drop a collection"),
    ("dropDatabase", "drop a database"),
    ("listCollections", "the collections of a database"),
    ("listDatabases", "the databases"),
];

/// Run the command in an OP_MSG body (its first key names it).
pub fn run(shared: &Shared, conn: &Conn, msg: &OpMsg) -> Document {
    shared.opcounters.command.fetch_add(1, Ordering::Relaxed);
    let result = match msg.body.keys().next() {
        None => Err(CommandError::failed_to_parse("Empty command object")),
        Some(name) => crate::session::session_fields(name, &msg.body).and_then(|f| match f.lsid {
            None => dispatch(shared, conn, name, msg),
            Some(lsid) => {
                shared.sessions.vivify(lsid)?;
                let reply = dispatch(shared, conn, name, msg)?;
                // The session that opens a cursor owns it (a getMore from
                // another session does not take it over).
                if name != "getMore" {
                    if let Some(id) = reply.get_document("cursor").ok().and_then(|c| c.get_i64("id").ok()) {
                        if id != 0 {
                            shared.cursors.bind_session(id, lsid);
                        }
                    }
                }
                Ok(reply)
            }
        }),
    };
    let mut reply = result.unwrap_or_else(|e| e.to_document());
    add_cluster_time(&mut reply);
    reply
}

/// Answer a legacy OP_QUERY: only the handshake is allowed, as in MongoDB 6+.
pub fn run_query(shared: &Shared, conn: &Conn, query: &Document) -> Document {
    // Drivers may wrap the command as {$query: {...}, $readPreference: ...}.
    let cmd = match query.get_document("$query") {
        Ok(inner) => inner,
        Err(_) => query,
    };
    let name = cmd.keys().next().map(String::as_str).unwrap_or("");
    let mut reply = match name {
        "hello" | "isMaster" | "ismaster" => hello(shared, conn, name, cmd).map(|d| with_compression(d, cmd)),
        _ => Err(CommandError::unsupported_op_query_command(format!(
            "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. For more details see \
             https://dochub.mongodb.org/core/legacy-opcode-removal"
        ))),
    }
    .unwrap_or_else(|e| e.to_document());
    add_cluster_time(&mut reply);
    reply
}

/// Write commands small enough to run on the connection's task, their
/// journal fsync awaited there (`durability.rs`); larger ones run on the
/// blocking pool, so that no network thread is busy for long.
pub fn is_small_write(name: &str, msg: &OpMsg) -> bool {
    const SMALL_WRITE_STATEMENTS: usize = 16;
    write_statements(name, msg).is_some_and(|st| st.count() <= SMALL_WRITE_STATEMENTS)
}

/// The statements of an `insert`, `update` or `delete` before they are
/// checked: the body's array (its documents) and the document sequences.
fn write_statements<'m>(name: &str, msg: &'m OpMsg) -> Option<impl Iterator<Item = &'m Document>> {
    let list = match name {
        "insert" => "documents",
        "update" => "updates",
        "delete" => "deletes",
        _ => return None,
    };
    let in_body = msg.body.get_array(list).map(|a| a.iter().filter_map(Bson::as_document));
    let in_sequences = msg.sequences.iter().flat_map(|(_, docs)| docs.iter());
    Some(in_body.into_iter().flatten().chain(in_sequences))
}

/// Whether a command the connection's task runs may take long: anything
/// but a `find` by one `_id` (under the collection's collation) or an
/// unfiltered, unsorted, unskipped `find` of a collection (which stops at
/// its first batch), and a small write whose statements each name one
/// `_id`. `server.rs` runs those under `block_in_place`, so that the other
/// connections of this network thread carry on meanwhile.
pub fn may_scan(shared: &Shared, name: &str, msg: &OpMsg) -> bool {
    let pinned = |q: Option<&Bson>| match q {
        Some(Bson::Document(f)) => query::Filter::id_equality(f).is_some(),
        _ => false,
    };
    let empty = |q: Option<&Bson>| match q {
        None | Some(Bson::Null) => true,
        Some(Bson::Document(f)) => f.is_empty(),
        _ => false,
    };
    let body = &msg.body;
    // A view computes its whole pipeline; a collation may keep a string
    // `_id` off the index.
    let plain_collection = || {
        !body.contains_key("collation")
            && match (body.get_str(name), body.get_str("$db")) {
                (Ok(coll), Ok(db)) => doc::catalog::Namespace::new(db, coll)
                    .ok()
                    .and_then(|ns| shared.catalog.get(&ns))
                    .is_none_or(|c| c.view_on().is_none()),
                _ => false,
            }
    };
    match name {
        "find" => {
            let skip = !matches!(body.get("skip"), None | Some(Bson::Int32(0) | Bson::Int64(0)));
            let first_batch = empty(body.get("filter")) && empty(body.get("sort")) && !skip;
            !((pinned(body.get("filter")) || first_batch) && plain_collection())
        }
        "update" | "delete" => {
            let scans = write_statements(name, msg)
                .is_some_and(|mut st| st.any(|st| !pinned(st.get("q")) || st.contains_key("collation")));
            scans || !plain_collection()
        }
        // count, distinct and getMore may scan whatever their filter.
        _ => matches!(name, "count" | "distinct" | "getMore"),
    }
}

/// Whether a write command targets a capped collection: its writes
/// serialize on the collection's lock, so it runs on the blocking pool,
/// never blocking a network thread.
pub fn writes_capped(shared: &Shared, name: &str, msg: &OpMsg) -> bool {
    let (Ok(coll), Ok(db)) = (msg.body.get_str(name), msg.body.get_str("$db")) else { return false };
    doc::catalog::Namespace::new(db, coll)
        .ok()
        .and_then(|ns| shared.catalog.get(&ns))
        .is_some_and(|c| c.capped.is_some())
}

/// Commands that never wait for a journal fsync or hold a lock for long,
/// so the connection's task runs them itself instead of on the blocking
/// pool.
pub fn runs_inline(name: &str) -> bool {
    matches!(
        name,
        "find"
            | "getMore"
            | "count"
            | "distinct"
            | "killCursors"
            | "hello"
            | "isMaster"
            | "ismaster"
            | "ping"
            | "buildInfo"
            | "buildinfo"
            | "listCollections"
            | "listIndexes"
            | "listDatabases"
            | "serverStatus"
            | "endSessions"
            | "startSession"
            | "killSessions"
            | "killAllSessions"
            | "whatsmyuri"
            | "connectionStatus"
            | "getParameter"
            | "listCommands"
            | "getCmdLineOpts"
    )
}

fn dispatch(shared: &Shared, conn: &Conn, name: &str, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
    match name {
        "hello" | "isMaster" | "ismaster" => hello(shared, conn, name, cmd).map(|d| with_compression(d, cmd)),
        "ping" => Ok(ok()),
        "buildInfo" | "buildinfo" => Ok(build_info()),
        "getParameter" => get_parameter(shared, cmd),
        "setParameter" => set_parameter(shared, cmd),
        "configureFailPoint" if shared.options.test_commands => {
            if cmd.get_str("$db") != Ok("admin") {
                return Err(CommandError::unauthorized(
                    "configureFailPoint may only be run against the admin database.",
                ));
            }
            shared.fail_points.configure(cmd)
        }
        "serverStatus" => Ok(server_status(shared)),
        "hostInfo" => Ok(host_info()),
        "whatsmyuri" => Ok(doc! { "you": conn.peer.to_string(), "ok": 1.0 }),
        "getCmdLineOpts" => {
            Ok(doc! { "argv": shared.options.argv.clone(), "parsed": shared.options.parsed.clone(), "ok": 1.0 })
        }
        "connectionStatus" => Ok(doc! {
            "authInfo": { "authenticatedUsers": [], "authenticatedUserRoles": [] },
            "ok": 1.0,
        }),
        "listCommands" => Ok(list_commands()),
        "startSession" => crate::session::start_session(shared),
        "endSessions" | "killAllSessions" | "killSessions" => crate::session::end_sessions(shared, name, cmd),
        "insert" => crate::crud::insert(shared, msg),
        "bulkWrite" => crate::bulk::bulk_write(shared, msg),
        "delete" => crate::crud::delete(shared, msg),
        "find" => crate::read::find(shared, cmd),
        "getMore" => crate::read::get_more(shared, cmd),
        "killCursors" => crate::read::kill_cursors(shared, cmd),
        "count" => crate::read::count(shared, cmd),
        "distinct" => crate::read::distinct(shared, cmd),
        "renameCollection" => crate::crud::rename_collection(shared, cmd),
        "collStats" => crate::crud::coll_stats(shared, cmd),
        "dbStats" | "dbstats" => crate::crud::db_stats(shared, cmd),
        "update" => crate::modify::update(shared, msg),
        "findAndModify" | "findandmodify" => crate::modify::find_and_modify(shared, cmd),
        "aggregate" => crate::read::aggregate(shared, cmd),
        "create" => crate::crud::create(shared, cmd),
        "collMod" => crate::crud::coll_mod(shared, cmd),
        "listIndexes" => crate::indexes::list_indexes(shared, cmd),
        "createIndexes" => crate::indexes::create_indexes(shared, cmd),
        "dropIndexes" | "deleteIndexes" => crate::indexes::drop_indexes(shared, cmd),
        "drop" => crate::crud::drop(shared, cmd),
        "dropDatabase" => crate::crud::drop_database(shared, cmd),
        "listCollections" => crate::crud::list_collections(shared, cmd),
        "listDatabases" => crate::crud::list_databases(shared, cmd),
        "shutdown" => {
            shared.request_shutdown();
            Ok(ok())
        }
        _ => Err(CommandError::command_not_found(format!("no such command: '{name}'"))),
    }
}

fn ok() -> Document {
    doc! { "ok": 1.0 }
}

/// The commit clock drivers gossip. Signed with a zero key, as an
/// unauthenticated mongod does.
fn cluster_time() -> Timestamp {
    let now = DateTime::now().timestamp_millis() / 1000;
    Timestamp { time: now as u32, increment: 1 }
}

pub(crate) fn add_cluster_time(reply: &mut Document) {
    for (key, value) in cluster_time_fields() {
        reply.insert(key, value);
    }
}

/// `$clusterTime` and `operationTime`, which every reply carries.
pub fn cluster_time_fields() -> [(&'static str, Bson); 2] {
    let ts = cluster_time();
    [
        (
            "$clusterTime",
            Bson::Document(doc! {
                "clusterTime": ts,
                "signature": { "hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0i64 },
            }),
        ),
        ("operationTime", Bson::Timestamp(ts)),
    ]
}

/// Whether `name` is the handshake command (or one of its aliases).
pub fn is_hello(name: &str) -> bool {
    matches!(name, "hello" | "isMaster" | "ismaster")
}

/// How long an awaitable `hello` waits before it answers, as a replica-set
/// primary does: a request with `topologyVersion` and `maxAwaitTimeMS`
/// whose topology version is the current one waits up to `maxAwaitTimeMS`
/// for a topology change (ours never changes while the process runs), so
/// a driver's monitor hears from us once per heartbeat, not in a busy loop.
/// `None` answers at once: no awaitable options, another process's (or an
/// older) topology version. Bad options are errors, as mongod reports them.
pub fn hello_await(shared: &Shared, name: &str, cmd: &Document) -> Result<Option<Duration>, CommandError> {
    let wrong_type = |field: &str, value: &Bson, expected: &str| {
        CommandError::type_mismatch(format!(
            "BSON field '{field}' is the wrong type '{}', expected type '{expected}'",
            crate::crud::type_name(value)
        ))
    };
    let topology = match cmd.get("topologyVersion") {
        None => None,
        Some(Bson::Document(tv)) => {
            let (mut process_id, mut counter) = (None, None);
            for (key, value) in tv {
                let path = format!("{name}.topologyVersion.{key}");
                match (key.as_str(), value) {
                    ("processId", Bson::ObjectId(id)) => process_id = Some(*id),
                    ("processId", other) => return Err(wrong_type(&path, other, "objectId")),
                    ("counter", Bson::Int64(n)) => counter = Some(*n),
                    ("counter", other) => return Err(wrong_type(&path, other, "long")),
                    _ => {
                        return Err(CommandError::unknown_parameter(format!(
                            "BSON field '{path}' is an unknown field."
                        )))
                    }
                }
            }
            let missing = |field: &str| {
                CommandError::missing_required_field(format!(
                    "BSON field '{name}.topologyVersion.{field}' is missing but a required field"
                ))
            };
            Some((process_id.ok_or_else(|| missing("processId"))?, counter.ok_or_else(|| missing("counter"))?))
        }
        Some(_) => {
            return Err(CommandError::with_code(10065, "invalid parameter: expected an object (topologyVersion)"))
        }
    };
    let max_await_ms = match cmd.get("maxAwaitTimeMS") {
        None => None,
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Double(d)) => Some(*d as i64),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
            "BSON field '{name}.maxAwaitTimeMS' is the wrong type '{}', expected types '[long, int, decimal, double']",
            crate::crud::type_name(other)
        )))
        }
    };
    let ((process_id, counter), max_await_ms) = match (topology, max_await_ms) {
        (None, None) => return Ok(None),
        (Some(tv), Some(ms)) => (tv, ms),
        (Some(_), None) => {
            return Err(CommandError::with_code(
                31368,
                "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'",
            ))
        }
        (None, Some(_)) => {
            return Err(CommandError::with_code(
                31368,
                "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'",
            ))
        }
    };
    if max_await_ms < 0 {
        return Err(CommandError::with_code(31373, "maxAwaitTimeMS must be a non-negative integer"));
    }
    if counter < 0 {
        return Err(CommandError::with_code(31372, "topologyVersion must have a non-negative counter"));
    }
    if process_id != shared.process_id || counter < TOPOLOGY_COUNTER {
        return Ok(None);
    }
    if counter > TOPOLOGY_COUNTER {
        return Err(CommandError::with_code(
            31382,
            format!(
                "Received a topology version with counter: {counter} which is greater than the server topology \
                 version counter: {TOPOLOGY_COUNTER}"
            ),
        ));
    }
    Ok(Some(Duration::from_millis(max_await_ms as u64)))
}

/// The counter of our topology version: a one-member set whose
/// configuration never changes while the process runs.
const TOPOLOGY_COUNTER: i64 = 0;

/// A hello's `client.application.name`.
pub(crate) fn app_name_of(cmd: &Document) -> Option<String> {
    let app = cmd.get_document("client").and_then(|c| c.get_document("application")).ok()?;
    app.get_str("name").ok().map(str::to_string)
}

fn hello(shared: &Shared, conn: &Conn, name: &str, cmd: &Document) -> CommandResult {
    hello_await(shared, name, cmd)?;
    // The client's application name, kept from its first hello (a fail
    // point may be for one application only).
    if let Some(app_name) = app_name_of(cmd) {
        let _ = conn.app_name.set(app_name);
    }
    let legacy = name != "hello";
    let me = conn.local.to_string();
    let ts = cluster_time();
    let now = DateTime::now();
    let mut d = doc! {
        "topologyVersion": { "processId": shared.process_id, "counter": TOPOLOGY_COUNTER },
        "hosts": [me.clone()],
        "setName": SET_NAME,
        "setVersion": 1,
    };
    d.insert(if legacy { "ismaster" } else { "isWritablePrimary" }, true);
    d.extend(doc! {
        "secondary": false,
        "primary": me.clone(),
        "me": me,
        "electionId": ObjectId::from_bytes([0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1]),
        "lastWrite": {
            "opTime": { "ts": ts, "t": 1i64 },
            "lastWriteDate": now,
            "majorityOpTime": { "ts": ts, "t": 1i64 },
            "majorityWriteDate": now,
        },
        "maxBsonObjectSize": bson_object_size_max_bytes as i32,
        "maxMessageSizeBytes": message_size_max_bytes as i32,
        "maxWriteBatchSize": write_batch_size_max as i32,
        "localTime": now,
        "logicalSessionTimeoutMinutes": session_timeout_minutes,
        "connectionId": conn.id as i32,
        "minWireVersion": 0,
        "maxWireVersion": wire_version_max,
        "readOnly": false,
        "ok": 1.0,
    });
    Ok(d)
}

/// Answer the client's `compression` list with the compressors we share.
fn with_compression(mut reply: Document, cmd: &Document) -> Document {
    if let Ok(asked) = cmd.get_array("compression") {
        let names: Vec<String> = asked.iter().filter_map(|b| b.as_str().map(str::to_string)).collect();
        let ok = reply.remove("ok");
        reply.insert("compression", crate::compression::negotiate(&names));
        if let Some(ok) = ok {
            reply.insert("ok", ok);
        }
    }
    reply
}

fn build_info() -> Document {
    doc! {
        "version": VERSION,
        "gitVersion": "arbordb",
        "versionArray": [8, 0, 0, 0],
        "arbordbVersion": env!("CARGO_PKG_VERSION"),
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": bson_object_size_max_bytes as i32,
        "storageEngines": ["arbordb"],
        "javascriptEngine": "none",
        "modules": [],
        "openssl": { "running": "disabled" },
        "ok": 1.0,
    }
}

/// Parameters `getParameter` knows, with their values.
fn parameters(shared: &Shared) -> Document {
    let p = &shared.parameters;
    doc! {
        "featureCompatibilityVersion": { "version": "8.0" },
        "maxBSONDepth": bson_depth_max as i32,
        "logicalSessionTimeoutMinutes": session_timeout_minutes,
        "transactionLifetimeLimitSeconds": 60,
        "internalQueryMaxBlockingSortMemoryUsageBytes": p.sort_memory_limit.load(Ordering::Relaxed) as i32,
        "internalDocumentSourceGroupMaxMemoryBytes": p.group_memory_limit.load(Ordering::Relaxed) as i64,
        "allowDiskUseByDefault": p.allow_disk_use_by_default.load(Ordering::Relaxed),
        "ttlMonitorEnabled": shared.ttl.enabled.load(Ordering::Relaxed),
        "ttlMonitorSleepSecs": shared.ttl.sleep_secs.load(Ordering::Relaxed) as i32,
    }
}

fn get_parameter(shared: &Shared, cmd: &Document) -> CommandResult {
    let all = parameters(shared);
    let want = cmd.get("getParameter").cloned().unwrap_or(Bson::Null);
    // {getParameter: "*"} or {getParameter: {allParameters: true}}: everything.
    let everything = want.as_str() == Some("*")
        || match want.as_document() {
            Some(d) => crate::crud::bool_option(d, "allParameters", "getParameter", false)?,
            None => false,
        };
    let mut out = Document::new();
    if everything {
        out.extend(all);
    } else {
        for (k, _) in cmd.iter().skip(1).filter(|(k, _)| !k.starts_with('$') && *k != "lsid" && *k != "comment") {
            match all.get(k) {
                Some(v) => {
                    out.insert(k, v.clone());
                }
                None => return Err(CommandError::invalid_options("no option found to get")),
            }
        }
        if out.is_empty() {
            return Err(CommandError::invalid_options("no option found to get"));
        }
    }
    out.insert("ok", 1.0);
    Ok(out)
}

/// `setParameter` for the parameters that change at run time; replies
/// with the last one's previous value (`was`), as mongod does.
fn set_parameter(shared: &Shared, cmd: &Document) -> CommandResult {
    let settings: Vec<(&String, &Bson)> =
        cmd.iter().skip(1).filter(|(k, _)| !k.starts_with('$') && !matches!(k.as_str(), "lsid" | "comment")).collect();
    if settings.is_empty() {
        return Err(CommandError::no_such_key("no option found to set, use help:true to see options "));
    }
    // Every value is checked before any is set.
    let mut changes: Vec<Box<dyn Fn() -> Bson>> = Vec::new();
    let p = &shared.parameters;
    for (name, value) in settings {
        let bad = |why: &str| CommandError::bad_value(format!("Invalid value for parameter {name}: {why}"));
        match name.as_str() {
            "internalQueryMaxBlockingSortMemoryUsageBytes" | "internalDocumentSourceGroupMaxMemoryBytes" => {
                let n = query::update::integral(value)
                    .ok_or_else(|| bad(&format!("a number is needed, not {}", type_name(value))))?;
                let n = usize::try_from(n).ok().filter(|&n| n > 0 && n <= i32::MAX as usize);
                let n = n.ok_or_else(|| bad("it must be greater than 0 and fit in an int"))?;
                changes.push(match name.as_str() {
                    "internalDocumentSourceGroupMaxMemoryBytes" => {
                        Box::new(move || Bson::Int64(p.group_memory_limit.swap(n, Ordering::Relaxed) as i64))
                    }
                    _ => Box::new(move || Bson::Int32(p.sort_memory_limit.swap(n, Ordering::Relaxed) as i32)),
                });
            }
            "allowDiskUseByDefault" | "ttlMonitorEnabled" => {
                let b = match value {
                    Bson::Boolean(b) => *b,
                    other => return Err(bad(&format!("a boolean is needed, not {}", type_name(other)))),
                };
                let flag = match name.as_str() {
                    "ttlMonitorEnabled" => &shared.ttl.enabled,
                    _ => &p.allow_disk_use_by_default,
                };
                changes.push(Box::new(move || Bson::Boolean(flag.swap(b, Ordering::Relaxed))));
            }
            "ttlMonitorSleepSecs" => {
                let n = query::update::integral(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n > 0 && n <= i32::MAX as u64)
                    .ok_or_else(|| bad("it must be a whole number of seconds, at least 1"))?;
                changes.push(Box::new(move || Bson::Int32(shared.ttl.sleep_secs.swap(n, Ordering::Relaxed) as i32)));
            }
            _ => {
                return Err(CommandError::unknown_parameter(format!(
                    "attempted to set unrecognized parameter [{name}]"
                )))
            }
        }
    }
    let mut was = Bson::Null;
    for change in changes {
        was = change();
    }
    Ok(doc! { "was": was, "ok": 1.0 })
}

fn server_status(shared: &Shared) -> Document {
    let s = shared.catalog.engine().stats();
    let c = &shared.opcounters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as i64;
    let mut ours = stats_document(&s);
    ours.insert("pointReadsFastPath", load(&c.point_reads));
    doc! {
        "host": hostname(),
        "version": VERSION,
        "process": "arbordb",
        "pid": std::process::id() as i64,
        "uptime": shared.started.elapsed().as_secs_f64().floor(),
        "uptimeMillis": shared.started.elapsed().as_millis() as i64,
        "localTime": DateTime::now(),
        "connections": {
            "current": load(&shared.connections_current) as i32,
            "available": 1_000_000 - load(&shared.connections_current) as i32,
            "totalCreated": load(&shared.connections_total),
        },
        "opcounters": {
            "insert": load(&c.insert), "query": load(&c.query), "update": load(&c.update),
            "delete": load(&c.delete), "getmore": load(&c.getmore), "command": load(&c.command),
        },
        "network": network(shared),
        "metrics": {
            "operation": { "writeConflicts": s.write_conflicts as i64 },
            "ttl": { "passes": load(&shared.ttl.passes), "deletedDocuments": load(&shared.ttl.deleted) },
            "query": {
                "sort": { "spillToDisk": load(&c.spills.sort_spills) },
                "group": {
                    "spills": load(&c.spills.group_spills),
                    "spilledRecords": load(&c.spills.group_records),
                    "spilledDataStorageSize": load(&c.spills.group_bytes),
                },
            },
        },
        "storageEngine": { "name": "arbordb", "supportsCommittedReads": true, "persistent": true },
        "arbordb": ours,
        "ok": 1.0,
    }
}

fn network(shared: &Shared) -> Document {
    let n = &shared.network;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as i64;
    let mut compression = Document::new();
    for (name, id) in [("snappy", 1), ("zlib", 2), ("zstd", 3)] {
        let c = &n.compression[id];
        compression.insert(
            name,
            doc! {
                "compressor": { "bytesIn": load(&c[2]), "bytesOut": load(&c[3]) },
                "decompressor": { "bytesIn": load(&c[0]), "bytesOut": load(&c[1]) },
            },
        );
    }
    doc! {
        "bytesIn": load(&n.bytes_in),
        "bytesOut": load(&n.bytes_out),
        "numRequests": load(&n.requests),
        "compression": compression,
    }
}

/// Every engine counter, by its name.
fn stats_document(s: &storage::Stats) -> Document {
    s.fields().into_iter().map(|(k, v)| (k.to_string(), Bson::Int64(v as i64))).collect()
}

/// The collections a replica-set member always has, written at start:
/// `admin.system.version` (the feature compatibility version) and the
/// capped `local.startup_log`, which gets one document per start (as
/// mongod's), so `show dbs` lists admin and local.
pub fn record_startup(
    catalog: &doc::catalog::Catalog,
    options: &crate::server::ServerOptions,
) -> Result<(), doc::catalog::DocError> {
    use doc::catalog::{Ack, Namespace};
    let engine = catalog.engine();
    // A `$out` cut short by a crash leaves its temporary collection.
    for db in catalog.databases() {
        for c in catalog.list(&db) {
            if c.ns.coll.starts_with(crate::agg_write::TMP_PREFIX) {
                catalog.drop(&c.ns)?;
            }
        }
    }
    let version = Namespace::new("admin", "system.version")?;
    if catalog.get(&version).is_none() {
        let c = catalog.get_or_create(&version)?;
        let fcv = doc! { "_id": "featureCompatibilityVersion", "version": "8.0" };
        match c.insert(engine, &fcv, Ack::Journaled, None) {
            Ok(_) | Err(doc::catalog::DocError::DuplicateKey { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // A replica-set primary keeps its sessions in `config.system.sessions`
    // (so `show dbs` lists config). Ours live in the `_sessions` table
    // (`doc::sessions`); the collection is there, empty, as the place
    // drivers and tools expect.
    let sessions = Namespace::new("config", "system.sessions")?;
    catalog.get_or_create(&sessions)?;
    let log = Namespace::new("local", "startup_log")?;
    let c = match catalog.get(&log) {
        Some(c) => c,
        None => match catalog.create(&log, doc! { "capped": true, "size": 10 * 1024 * 1024 }) {
            Err(doc::catalog::DocError::NamespaceExists(_)) => catalog.get(&log).expect("exists"),
            other => other?,
        },
    };
    let now = DateTime::now();
    let host = hostname();
    let entry = doc! {
        "_id": format!("{host}-{}", now.timestamp_millis()),
        "hostname": &host,
        "startTime": now,
        "startTimeLocal": now.try_to_rfc3339_string().unwrap_or_default(),
        "cmdLine": options.parsed.clone(),
        "pid": std::process::id() as i64,
        "buildinfo": build_info(),
    };
    c.insert(engine, &entry, Ack::Journaled, None)?;
    Ok(())
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn host_info() -> Document {
    let mem_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<i64>().ok()))
        .map(|kib| kib / 1024)
        .unwrap_or(0);
    let cores = std::thread::available_parallelism().map(|n| n.get() as i32).unwrap_or(1);
    doc! {
        "system": { "currentTime": DateTime::now(), "hostname": hostname(), "cpuAddrSize": 64, "memSizeMB": mem_mb, "numCores": cores, "cpuArch": std::env::consts::ARCH },
        "os": { "type": std::env::consts::OS },
        "extra": {},
        "ok": 1.0,
    }
}

fn list_commands() -> Document {
    let mut cmds = Document::new();
    for (name, help) in COMMANDS {
        cmds.insert(*name, doc! { "help": *help, "adminOnly": false });
    }
    doc! { "commands": cmds, "ok": 1.0 }
}
