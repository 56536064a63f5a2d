//! Command dispatch: the table of commands, how each runs (inline, on
//! the blocking pool), and the cluster time every reply carries. One file
//! per command family beside this one; a command file never imports
//! another (checked by `tests/layout.rs`).

pub mod admin;
pub mod aggregate;
pub mod bulk_write;
pub mod count_distinct;
pub mod ddl;
pub mod delete;
pub mod explain;
pub mod find;
pub mod indexes;
pub mod insert;
pub mod sessions;
pub mod stats;
pub mod transactions;
pub mod update;
pub mod validate;

use crate::args::wrong_type;
use crate::args::{CommandResult, ReplyResult};
use crate::commands::admin::get_parameter;
use crate::commands::admin::hello;
use crate::commands::admin::host_info;
use crate::commands::admin::list_commands;
use crate::commands::admin::server_status;
use crate::commands::admin::set_parameter;
use crate::commands::admin::with_compression;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::net::wire::OpMsg;
use crate::reply::Reply;
use crate::server::build_info;
use crate::server::{Conn, Shared};
use crate::transactions::{has_write_errors, labelled, transient_write_error, Part, Running, Statement};
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document, Timestamp};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The replica set name `hello` reports.
pub const SET_NAME: &str = "arbordb";

/// The MongoDB version we answer as (drivers and mongosh gate features on it).
pub const VERSION: &str = "8.0.0";

/// Commands we answer, with a line of help each (for `listCommands`).
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    ("hello", "the handshake: topology and limits"),
    ("isMaster", "the legacy handshake"),
    ("ping", "answers ok"),
    ("buildInfo", "version and build"),
    ("getParameter", "server parameters"),
    ("setParameter", "change a server parameter"),
    ("profile", "the profiling level (system.profile) and the slow-operation threshold (`slowms`)"),
    ("serverStatus", "counters and storage engine statistics"),
    ("currentOp", "the operations under way: commands, index builds (with their progress), open transactions"),
    ("killOp", "ends an operation: a write waiting on a conflict, an open transaction"),
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
    ("fsync", "write everything to the data files now (a checkpoint); lock: true is refused"),
    ("insert", "insert documents"),
    ("delete", "delete documents"),
    ("bulkWrite", "inserts, updates and deletes across collections (run against admin)"),
    ("find", "query a collection"),
    ("explain", "the plan of a find (queryPlanner, executionStats, allPlansExecution)"),
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
    ("listIndexes", "a collection's indexes"),
    ("createIndexes", "build secondary indexes (ascending, descending, compound, unique, sparse, hidden)"),
    ("validate", "check every index of a collection against its documents"),
    ("planCacheClear", "forget the plan cache's choices for a collection"),
    ("dropIndexes", "drop indexes by name, key pattern, list, or '*' (every index but _id_)"),
    ("drop", "drop a collection"),
    ("dropDatabase", "drop a database"),
    ("listCollections", "the collections of a database"),
    ("listDatabases", "the databases"),
];

/// Run the command in an OP_MSG body (its first key names it).
pub fn run(shared: &Shared, call: &Call, msg: &OpMsg) -> Reply {
    let started = std::time::Instant::now();
    shared.opcounters.command.fetch_add(1, Ordering::Relaxed);
    let running = shared.ops.register(&msg.body, call.conn.peer, call.conn.app_name.clone());
    // Outside a transaction, the command's view; its writes count their conflicts there.
    let outside = outside_transactions(shared, call, msg, running.op.killed.clone());
    let result = match msg.body.keys().next() {
        None => Err(CommandError::failed_to_parse("Empty command object")),
        Some(_) if shared.fail_points.times_out(&msg.body) => {
            Err(CommandError::max_time_ms_expired("operation exceeded time limit"))
        }
        Some(name) => crate::session::session_fields(name, &msg.body).and_then(|f| match f.lsid {
            None => outside_transaction(&outside, call, name, msg),
            Some(lsid) => {
                shared.sessions.vivify(lsid)?;
                let reply = match (f.autocommit, f.txn_number) {
                    (Some(false), Some(number)) => {
                        let start = f.start_transaction == Some(true);
                        let killed = outside.conflicts.killed.clone();
                        in_transaction(shared, call, msg, Statement { lsid, number, start, name }, killed)?
                    }
                    _ => outside_transaction(&outside, call, name, msg)?,
                };
                // The session that opens a cursor owns it (a getMore from
                // another session does not take it over).
                if name != "getMore" {
                    if let Some((id, _)) = reply.cursor().filter(|(id, _)| *id != 0) {
                        shared.cursors.bind_session(id, lsid);
                    }
                }
                Ok(reply)
            }
        }),
    };
    let result = result.map(|mut reply| {
        if let Some(wce) = crate::args::unsatisfiable_write_concern(&msg.body).filter(|_| {
            crate::args::WRITE_CONCERN_COMMANDS.contains(&msg.body.keys().next().map_or("", String::as_str))
        }) {
            reply.append("writeConcernError", Bson::Document(wce));
        }
        reply
    });
    let took = started.elapsed();
    let write_conflicts = outside.conflicts.conflicts();
    let done = crate::profiler::Done { msg, cmd: &msg.body, result: &result, took, write_conflicts };
    crate::profiler::after(shared, call, &done);
    let mut reply = result.unwrap_or_else(|e| Reply::Doc(e.to_document()));
    let op_time = call.op.operation_ts().map(|ts| cluster_time_of(shared, ts));
    for (key, value) in cluster_time_fields(cluster_time(shared), op_time) {
        reply.append(key, value);
    }
    reply
}

/// A command outside any transaction: its writes wait on conflicts until
/// its `maxTimeMS` at most.
fn outside_transactions<'a>(
    shared: &'a Shared,
    call: &Call,
    msg: &OpMsg,
    killed: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Ctx<'a> {
    let mut ctx =
        Ctx::until(shared, crate::exec::deadline::Deadline::of(&msg.body).ok().and_then(|d| d.0), call.place, killed);
    ctx.conflicts.tally = call.op.tally.clone();
    ctx
}

/// Run a command outside any transaction: at the newest committed data,
/// or at a snapshot its readConcern names (`read_concern.rs`), whose time
/// the reply gives as `atClusterTime` (in its cursor, if it has one).
fn outside_transaction(ctx: &Ctx<'_>, call: &Call, name: &str, msg: &OpMsg) -> ReplyResult {
    let rc = crate::read_concern::parse(&msg.body)?;
    match crate::read_concern::outside_transaction(ctx, name, rc.as_ref())? {
        crate::read_concern::Outside::Latest => dispatch(ctx, call, name, msg),
        crate::read_concern::Outside::Snapshot(at) => {
            let snapshot = ctx.snapshots.read_at(ctx.catalog.engine(), at)?;
            let ts = snapshot.read_ts();
            call.op.note_operation_ts(ts);
            let mut at_snapshot = Ctx::new(ctx.shared()).at_snapshot(snapshot.clone());
            at_snapshot.conflicts.killed = ctx.conflicts.killed.clone();
            at_snapshot.conflicts.tally = ctx.conflicts.tally.clone();
            let reply = dispatch(&at_snapshot, call, name, msg)?;
            ctx.snapshots.keep(snapshot);
            let mut reply = reply.into_document();
            let at = Bson::Timestamp(cluster_time_of(ctx, ts));
            match reply.get_document_mut("cursor") {
                Ok(cursor) => cursor.insert("atClusterTime", at),
                Err(_) => reply.insert("atClusterTime", at),
            };
            Ok(Reply::Doc(reply))
        }
    }
}

/// Run a statement of a multi-document transaction (`transactions.rs`):
/// in its storage transaction, begun by its first statement; a failed
/// statement aborts it. Errors carry the labels drivers retry by.
fn in_transaction(
    shared: &Shared,
    call: &Call,
    msg: &OpMsg,
    st: Statement<'_>,
    killed: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> ReplyResult {
    let cmd: &Document = &msg.body;
    let ended = (st.lsid, st.number);
    match st.name {
        "commitTransaction" => {
            let r = crate::commands::transactions::commit_transaction(&Ctx::new(shared), call, cmd, ended);
            return r.map(Reply::Doc).map_err(|e| labelled(e, Part::Commit));
        }
        "abortTransaction" => {
            let r = crate::commands::transactions::abort_transaction(&Ctx::new(shared), cmd, ended);
            return r.map(Reply::Doc).map_err(|e| labelled(e, Part::Abort));
        }
        _ if cmd.contains_key("writeConcern") => {
            return Err(CommandError::invalid_options("Cannot set write concern after starting a transaction."))
        }
        _ => {}
    }
    let txn = shared.transactions.enter(shared, &st, cmd).map_err(|e| labelled(e, Part::Statement))?;
    call.op.note_operation_ts(txn.txn.read_ts());
    // From here on, leaving the statement (even by a panic) leaves the transaction.
    let mut running = Running::new(shared, &st);
    // Its reads stop when the statement is killed (which aborts the transaction).
    let mut ctx = Ctx::in_txn(shared, txn);
    ctx.conflicts.killed = killed;
    ctx.conflicts.tally = call.op.tally.clone();
    let ddl_checked = match st.name {
        "create" | "createIndexes" => ctx.in_transaction().expect("in a transaction").check_ddl_read_concern(st.name),
        _ => Ok(()),
    };
    let result = ddl_checked.and_then(|()| dispatch(&ctx, call, st.name, msg)).and_then(|reply| match reply {
        Reply::Doc(d) => match transient_write_error(&d) {
            Some(e) => Err(e),
            None => Ok(Reply::Doc(d)),
        },
        bytes => Ok(bytes),
    });
    running.failed = match &result {
        Ok(Reply::Doc(d)) => has_write_errors(d),
        Ok(Reply::Bytes(_)) => false,
        Err(_) => true,
    };
    drop(running);
    result.map_err(|e| labelled(e, Part::Statement))
}

/// Whether a command that took `took` is slow: as long as `slowms` or
/// longer (0 or less: every command is).
pub(crate) fn is_slow(shared: &Shared, took: std::time::Duration) -> bool {
    i64::try_from(took.as_millis()).unwrap_or(i64::MAX) >= shared.parameters.slow_ms.load(Ordering::Relaxed)
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
    add_cluster_time(shared, &mut reply);
    reply
}

/// Write commands small enough to run on the connection's task, their
/// journal fsync awaited there (`durability.rs`), and `commitTransaction`;
/// larger writes run on the blocking pool, so that no network thread is
/// busy for long (an abort, which may drop the tables of collections the
/// transaction made, runs there too).
pub fn is_small_write(name: &str, msg: &OpMsg) -> bool {
    const SMALL_WRITE_STATEMENTS: usize = 16;
    // A commit: its statements did the work; it checks, applies its write
    // set (handing the thread off first when it is large or made
    // collections, whose abandon drops tables) and awaits its fsync.
    if name == "commitTransaction" {
        return true;
    }
    write_statements(name, msg).is_some_and(|st| st.count() <= SMALL_WRITE_STATEMENTS)
}

/// The statements of an `insert`, `update` or `delete` before they are
/// checked: the body's array (its documents) and the document sequences.
pub(crate) fn write_statements<'m>(name: &str, msg: &'m OpMsg) -> Option<impl Iterator<Item = &'m Document>> {
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
/// but a `find` (which decides once it knows its plan) and a small write
/// whose statements each name one `_id` (and whose collection has no
/// write-optimized index, whose merges a write may wait for). The connection runs those
/// through [`crate::exec::call::Place::long`], so that the other
/// connections of its network thread carry on meanwhile.
pub fn may_scan(shared: &Shared, name: &str, msg: &OpMsg) -> bool {
    let pinned = |q: Option<&Bson>| match q {
        Some(Bson::Document(f)) => query::Filter::id_equality(f).is_some(),
        _ => false,
    };
    let body = &msg.body;
    // The command's collection, if it names one (`Some(None)`: missing, or
    // a name the command will refuse).
    let collection = || match (body.get_str(name), body.get_str("$db")) {
        (Ok(coll), Ok(db)) => Some(doc::catalog::Namespace::new(db, coll).ok().and_then(|ns| shared.catalog.get(&ns))),
        _ => None,
    };
    // A write to a collection with a write-optimized index may wait for
    // its merges (the storage engine's write stall): off the async workers.
    let write_optimized = |c: &Option<std::sync::Arc<doc::catalog::Collection>>| {
        c.as_ref().is_some_and(|c| c.has_write_optimized_index())
    };
    match name {
        // `find` hands its thread off itself once it knows its plan.
        "find" => false,
        "update" | "delete" => {
            let scans = write_statements(name, msg)
                .is_some_and(|mut st| st.any(|st| !pinned(st.get("q")) || st.contains_key("collation")));
            // A view computes its whole pipeline; a collation may keep a
            // string `_id` off the index.
            scans
                || body.contains_key("collation")
                || collection().is_none_or(|c| c.as_ref().is_some_and(|c| c.view_on().is_some()) || write_optimized(&c))
        }
        "insert" | "findAndModify" | "findandmodify" => collection().is_some_and(|c| write_optimized(&c)),
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

/// Run the command `name`: those that answer with a cursor of stored
/// documents write their reply as BSON (`Reply::Bytes`), the rest answer
/// a document.
pub(crate) fn dispatch(shared: &Ctx<'_>, call: &Call, name: &str, msg: &OpMsg) -> ReplyResult {
    let cmd: &Document = &msg.body;
    match name {
        "find" => crate::commands::find::find(shared, call, cmd),
        "getMore" => crate::commands::find::get_more(shared, cmd),
        "aggregate" if !matches!(cmd.get("explain"), Some(Bson::Boolean(true))) => {
            crate::commands::aggregate::aggregate(shared, call, cmd)
        }
        "listIndexes" => crate::commands::indexes::list_indexes(shared, cmd),
        _ => answer_document(shared, call, name, msg).map(Reply::Doc),
    }
}

/// The commands that answer a document.
fn answer_document(shared: &Ctx<'_>, call: &Call, name: &str, msg: &OpMsg) -> CommandResult {
    let (cmd, conn): (&Document, _) = (&msg.body, call.conn);
    match name {
        "hello" | "isMaster" | "ismaster" => hello(shared, conn, name, cmd).map(|d| with_compression(d, cmd)),
        "ping" => Ok(ok()),
        "buildInfo" | "buildinfo" => Ok(build_info()),
        "getParameter" => get_parameter(shared, cmd),
        "setParameter" => set_parameter(shared, cmd),
        "profile" => crate::commands::admin::profile(shared, cmd),
        "configureFailPoint" if shared.options.test_commands => {
            if cmd.get_str("$db") != Ok("admin") {
                return Err(CommandError::unauthorized(
                    "configureFailPoint may only be run against the admin database.",
                ));
            }
            shared.fail_points.configure(cmd)
        }
        "serverStatus" => Ok(server_status(shared)),
        "currentOp" => crate::commands::admin::current_op(shared, cmd),
        "killOp" => crate::commands::admin::kill_op(shared, cmd),
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
        "startSession" => crate::commands::sessions::start_session(shared),
        "endSessions" | "killAllSessions" | "killSessions" => {
            crate::commands::sessions::end_sessions(shared, name, cmd)
        }
        "insert" => crate::commands::insert::insert(shared, call, msg),
        "bulkWrite" => crate::commands::bulk_write::bulk_write(shared, call, msg),
        "delete" => crate::commands::delete::delete(shared, call, msg),
        "explain" => crate::commands::explain::explain(shared, cmd),
        "killCursors" => crate::commands::find::kill_cursors(shared, cmd),
        "count" => crate::commands::count_distinct::count(shared, call, cmd),
        "distinct" => crate::commands::count_distinct::distinct(shared, call, cmd),
        "renameCollection" => crate::commands::ddl::rename_collection(shared, cmd),
        "collStats" => crate::commands::stats::coll_stats(shared, cmd),
        "dbStats" | "dbstats" => crate::commands::stats::db_stats(shared, cmd),
        "update" => crate::commands::update::update(shared, call, msg),
        "findAndModify" | "findandmodify" => crate::commands::update::find_and_modify(shared, call, cmd),
        // `explain: true`: the plan at queryPlanner verbosity, nothing run.
        "aggregate" => {
            let mut inner = cmd.clone();
            inner.remove("explain");
            crate::commands::explain::explain_aggregate(
                shared,
                &inner,
                crate::commands::explain::Verbosity::QueryPlanner,
            )
        }
        "create" => crate::commands::ddl::create(shared, cmd),
        "collMod" => crate::commands::ddl::coll_mod(shared, cmd),
        "validate" => crate::commands::validate::validate(shared, cmd),
        "planCacheClear" => crate::commands::indexes::plan_cache_clear(shared, cmd),
        "createIndexes" => crate::commands::indexes::create_indexes(shared, cmd),
        "dropIndexes" | "deleteIndexes" => crate::commands::indexes::drop_indexes(shared, cmd),
        "drop" => crate::commands::ddl::drop(shared, cmd),
        "dropDatabase" => crate::commands::ddl::drop_database(shared, cmd),
        "listCollections" => crate::commands::ddl::list_collections(shared, cmd),
        "listDatabases" => crate::commands::ddl::list_databases(shared, cmd),
        "fsync" => crate::commands::admin::fsync(shared, cmd),
        "shutdown" => {
            shared.request_shutdown();
            Ok(ok())
        }
        _ => Err(CommandError::command_not_found(format!("no such command: '{name}'"))),
    }
}

pub(crate) fn ok() -> Document {
    doc! { "ok": 1.0 }
}

/// The commit clock drivers gossip. Signed with a zero key, as an
/// unauthenticated mongod does.
/// The cluster time of the engine's commit timestamp `ts`: the second
/// this process started, then `ts` (its high bits added to the seconds),
/// so cluster times grow with commits, also across restarts (the journal's
/// sequence numbers carry on). A commit's `operationTime` is its commit
/// timestamp, a transaction's statement's its snapshot.
pub fn cluster_time_of(shared: &Shared, ts: u64) -> Timestamp {
    Timestamp { time: shared.cluster_epoch.saturating_add((ts >> 32) as u32), increment: ts as u32 }
}

/// The cluster time now: that of the newest commit published.
pub(crate) fn cluster_time(shared: &Shared) -> Timestamp {
    cluster_time_of(shared, shared.catalog.engine().published_ts())
}

pub(crate) fn add_cluster_time(shared: &Shared, reply: &mut Document) {
    for (key, value) in cluster_time_fields(cluster_time(shared), None) {
        reply.insert(key, value);
    }
}

/// `$clusterTime` (`ts`) and `operationTime` (`op`, else `ts`), which
/// every reply carries.
pub fn cluster_time_fields(ts: Timestamp, op: Option<Timestamp>) -> [(&'static str, Bson); 2] {
    [
        (
            "$clusterTime",
            Bson::Document(doc! {
                "clusterTime": ts,
                "signature": { "hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0i64 },
            }),
        ),
        ("operationTime", Bson::Timestamp(op.unwrap_or(ts))),
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
            return Err(wrong_type(&format!("{name}.maxAwaitTimeMS"), other, "[long, int, decimal, double]"))
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
pub(crate) const TOPOLOGY_COUNTER: i64 = 0;

/// The `topologyVersion` hello reports (and state change errors carry).
pub fn topology_version(shared: &Shared) -> Document {
    doc! { "processId": shared.process_id, "counter": TOPOLOGY_COUNTER }
}

/// A hello's `client.application.name`.
pub(crate) fn app_name_of(cmd: &Document) -> Option<String> {
    let app = cmd.get_document("client").and_then(|c| c.get_document("application")).ok()?;
    app.get_str("name").ok().map(str::to_string)
}
