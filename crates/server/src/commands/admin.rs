//! Handshake and administration: `hello`, `buildInfo`, parameters,
//! `serverStatus`, `hostInfo`, `listCommands`.

use crate::args::CommandResult;
use crate::commands::COMMANDS;
use crate::commands::SET_NAME;
use crate::commands::VERSION;
use crate::commands::{app_name_of, cluster_time, hello_await};
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::limits::*;
use crate::server::hostname;
use crate::server::{Conn, Shared};
use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use query::type_name;
use std::sync::atomic::Ordering;

pub(crate) fn hello(shared: &Shared, conn: &Conn, name: &str, cmd: &Document) -> CommandResult {
    hello_await(shared, name, cmd)?;
    // The client's application name, kept from its first hello (a fail
    // point may be for one application only).
    if let Some(app_name) = app_name_of(cmd) {
        let _ = conn.app_name.set(app_name);
    }
    let legacy = name != "hello";
    let me = conn.local.to_string();
    let ts = cluster_time(shared);
    let now = DateTime::now();
    let mut d = doc! {
        "topologyVersion": crate::commands::topology_version(shared),
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
pub(crate) fn with_compression(mut reply: Document, cmd: &Document) -> Document {
    if let Ok(asked) = cmd.get_array("compression") {
        let names: Vec<String> = asked.iter().filter_map(|b| b.as_str().map(str::to_string)).collect();
        let ok = reply.remove("ok");
        reply.insert("compression", crate::net::compression::negotiate(&names));
        if let Some(ok) = ok {
            reply.insert("ok", ok);
        }
    }
    reply
}

/// `profile`: sets the database's profiling level (1 and 2 write
/// `system.profile`, `profiler.rs`) and changes `slowms` (how long a
/// command runs before it is logged as slow) and `sampleRate` whatever the
/// level, as mongod; a level outside 0-2 only reads. Replies with the
/// settings as they were.
pub(crate) fn profile(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    crate::args::check_fields(cmd, "profile", &["slowms", "sampleRate", "filter", "comment"], false)?;
    let level = match cmd.get("profile").and_then(query::update::integral) {
        Some(n) => n,
        None => return Err(CommandError::type_mismatch("profile must be a number")),
    };
    let slow_ms = match cmd.get("slowms") {
        None => None,
        Some(v) => match query::update::integral(v) {
            Some(n) => Some(n),
            None => return Err(CommandError::type_mismatch(format!("slowms must be a number, not {}", type_name(v)))),
        },
    };
    let sample_rate = match cmd.get("sampleRate").map(doc::compare::number) {
        None => None,
        Some(Some(doc::compare::Number::Float(f))) if (0.0..=1.0).contains(&f) => Some(f),
        Some(Some(doc::compare::Number::Int(n @ (0 | 1)))) => Some(n as f64),
        Some(_) => return Err(CommandError::bad_value("'sampleRate' must be between 0.0 and 1.0 inclusive")),
    };
    if cmd.contains_key("filter") {
        return Err(CommandError::not_implemented("a profiling filter is not supported yet"));
    }
    let p = &shared.parameters;
    let was = p.slow_ms.load(Ordering::Relaxed);
    let rate_was = f64::from_bits(p.sample_rate_bits.load(Ordering::Relaxed));
    if let Some(ms) = slow_ms {
        p.slow_ms.store(ms, Ordering::Relaxed);
    }
    if let Some(rate) = sample_rate {
        p.sample_rate_bits.store(rate.to_bits(), Ordering::Relaxed);
    }
    let db = crate::args::db_of(cmd)?;
    // Another level only reads, as mongod's.
    let level_was = match level {
        0..=2 => shared.profiler.set_level(db, level as i32),
        _ => shared.profiler.level(db),
    };
    Ok(doc! { "was": level_was, "slowms": i32::try_from(was).unwrap_or(i32::MAX), "sampleRate": rate_was, "ok": 1.0 })
}

/// Parameters `getParameter` knows, with their values.
pub(crate) fn parameters(shared: &Ctx<'_>) -> Document {
    let p = &shared.parameters;
    doc! {
        "featureCompatibilityVersion": { "version": "8.0" },
        "maxBSONDepth": bson_depth_max as i32,
        "logicalSessionTimeoutMinutes": session_timeout_minutes,
        "transactionLifetimeLimitSeconds": shared.transactions.lifetime_secs.load(Ordering::Relaxed) as i32,
        "minSnapshotHistoryWindowInSeconds": shared.snapshots.window_secs.load(Ordering::Relaxed) as i32,
        "defaultTransactionIsolation": match shared.transactions.serializable_default.load(Ordering::Relaxed) {
            true => "serializable",
            false => "snapshot",
        },
        "internalQueryMaxBlockingSortMemoryUsageBytes": p.sort_memory_limit.load(Ordering::Relaxed) as i32,
        "internalDocumentSourceGroupMaxMemoryBytes": p.group_memory_limit.load(Ordering::Relaxed) as i64,
        "allowDiskUseByDefault": p.allow_disk_use_by_default.load(Ordering::Relaxed),
        "internalQueryPlannerEnableIndexIntersection": p.index_intersection.load(Ordering::Relaxed),
        "internalQueryForceIntersectionPlans": p.force_intersection.load(Ordering::Relaxed),
        "enableTestCommands": shared.options.test_commands,
        "ttlMonitorEnabled": shared.ttl.enabled.load(Ordering::Relaxed),
        "ttlMonitorSleepSecs": shared.ttl.sleep_secs.load(Ordering::Relaxed) as i32,
    }
}

pub(crate) fn get_parameter(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    let all = parameters(shared);
    let want = cmd.get("getParameter").cloned().unwrap_or(Bson::Null);
    // {getParameter: "*"} or {getParameter: {allParameters: true}}: everything.
    let everything = want.as_str() == Some("*")
        || match want.as_document() {
            Some(d) => crate::args::bool_option(d, "allParameters", "getParameter", false)?,
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
pub(crate) fn set_parameter(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
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
            "allowDiskUseByDefault"
            | "ttlMonitorEnabled"
            | "internalQueryPlannerEnableIndexIntersection"
            | "internalQueryForceIntersectionPlans" => {
                let b = match value {
                    Bson::Boolean(b) => *b,
                    other => return Err(bad(&format!("a boolean is needed, not {}", type_name(other)))),
                };
                let flag = match name.as_str() {
                    "ttlMonitorEnabled" => &shared.ttl.enabled,
                    "internalQueryPlannerEnableIndexIntersection" => &p.index_intersection,
                    "internalQueryForceIntersectionPlans" => &p.force_intersection,
                    _ => &p.allow_disk_use_by_default,
                };
                changes.push(Box::new(move || Bson::Boolean(flag.swap(b, Ordering::Relaxed))));
            }
            "transactionLifetimeLimitSeconds" => {
                let n = query::update::integral(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n > 0 && n <= i32::MAX as u64)
                    .ok_or_else(|| bad("it must be a whole number of seconds, at least 1"))?;
                let limit = &shared.transactions.lifetime_secs;
                changes.push(Box::new(move || Bson::Int32(limit.swap(n, Ordering::Relaxed) as i32)));
            }
            "minSnapshotHistoryWindowInSeconds" => {
                let n = query::update::integral(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n <= i32::MAX as u64)
                    .ok_or_else(|| bad("it must be a whole number of seconds, at least 0"))?;
                let window = &shared.snapshots.window_secs;
                changes.push(Box::new(move || Bson::Int32(window.swap(n, Ordering::Relaxed) as i32)));
            }
            "defaultTransactionIsolation" => {
                let serializable = match value.as_str() {
                    Some("serializable") => true,
                    Some("snapshot") => false,
                    _ => return Err(bad("it must be \"snapshot\" or \"serializable\"")),
                };
                let flag = &shared.transactions.serializable_default;
                changes.push(Box::new(move || {
                    Bson::from(if flag.swap(serializable, Ordering::Relaxed) { "serializable" } else { "snapshot" })
                }));
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

pub(crate) fn server_status(shared: &Ctx<'_>) -> Document {
    let s = shared.catalog.engine().stats();
    let c = &shared.opcounters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as i64;
    let mut ours = stats_document(&s);
    ours.insert("pointReadsFastPath", load(&c.point_reads));
    ours.insert("io", io_document(shared.catalog.engine(), &s));
    ours.insert("directIO", shared.catalog.engine().direct_io());
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

pub(crate) fn network(shared: &Ctx<'_>) -> Document {
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

/// `fsync`: a checkpoint, as mongod's on WiredTiger. Acknowledged writes
/// are durable in the journal already; this also puts them in the data
/// files. `lock: true` (writes blocked for a file-copy backup) is refused:
/// a copy of a live data directory is not a supported backup here.
pub(crate) fn fsync(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    if cmd.get_str("$db") != Ok("admin") {
        return Err(CommandError::unauthorized("fsync may only be run against the admin database."));
    }
    if crate::args::bool_option(cmd, "lock", "fsync", false)? {
        return Err(CommandError::command_not_supported("fsync with lock: true is not supported by ArborDB"));
    }
    shared
        .catalog
        .engine()
        .checkpoint()
        .map_err(|e| CommandError::internal_error(format!("checkpoint failed: {e}")))?;
    Ok(doc! { "numFiles": 1, "ok": 1.0 })
}

/// Bytes written since start-up by file kind (collections' and indexes'
/// table files, metadata, journal) and by page kind, with the files of
/// each kind (names in the data directory), for `serverStatus.arbordb.io`.
/// File kinds count the tables that exist now (a dropped table's bytes
/// leave them); page kinds count every block ever written.
fn io_document(engine: &storage::Engine, s: &storage::Stats) -> Document {
    use doc::catalog::TableKind;
    let (mut collection, mut index) = (0u64, 0u64);
    let mut metadata = engine.metadata_io().total_bytes() + s.root_file_bytes_written;
    let mut files: [Vec<Bson>; 3] = Default::default();
    files[2].extend([storage::engine::METADATA_FILE, storage::engine::ROOT_FILE].map(Bson::from));
    for t in engine.table_io() {
        let (sum, list) = match TableKind::of(&t.name) {
            TableKind::Collection => (&mut collection, &mut files[0]),
            TableKind::Index => (&mut index, &mut files[1]),
            TableKind::Metadata => (&mut metadata, &mut files[2]),
        };
        *sum += t.io.total_bytes();
        list.push(Bson::String(t.file));
    }
    let n = |v: u64| Bson::Int64(v as i64);
    let [collection_files, index_files, metadata_files] = files;
    doc! {
        "bytesWrittenByFileKind": {
            "collection": n(collection), "index": n(index), "metadata": n(metadata),
            "journal": n(s.journal_bytes_written),
        },
        "bytesWrittenByPageKind": {
            "leaf": n(s.leaf_block_bytes_written), "internal": n(s.internal_block_bytes_written),
            "overflow": n(s.overflow_block_bytes_written), "extentList": n(s.extent_list_bytes_written),
            "rootFile": n(s.root_file_bytes_written), "journal": n(s.journal_bytes_written),
        },
        "files": {
            "collection": collection_files, "index": index_files, "metadata": metadata_files,
            "journal": [storage::engine::JOURNAL_DIR],
        },
    }
}

/// Every engine counter, by its name.
pub(crate) fn stats_document(s: &storage::Stats) -> Document {
    s.fields().into_iter().map(|(k, v)| (k.to_string(), Bson::Int64(v as i64))).collect()
}

pub(crate) fn host_info() -> Document {
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

pub(crate) fn list_commands() -> Document {
    let mut cmds = Document::new();
    for (name, help) in COMMANDS {
        cmds.insert(*name, doc! { "help": *help, "adminOnly": false });
    }
    doc! { "commands": cmds, "ok": 1.0 }
}

/// `currentOp`: the operations under way that the server lists (index
/// builds, with their progress), those matching the command's filter
/// (its fields other than the options).
pub(crate) fn current_op(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    if cmd.get_str("$db") != Ok("admin") {
        return Err(CommandError::unauthorized("currentOp may only be run against the admin database."));
    }
    const OPTIONS: &[&str] = &[
        "currentOp",
        "$all",
        "$ownOps",
        "$truncateOps",
        "$db",
        "lsid",
        "$clusterTime",
        "$readPreference",
        "comment",
        "maxTimeMS",
        "apiVersion",
        "apiStrict",
        "apiDeprecationErrors",
    ];
    let filter: Document =
        cmd.iter().filter(|(k, _)| !OPTIONS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    let filter = query::Filter::parse(&filter)?;
    let mut ops = Vec::new();
    for op in crate::exec::ops::current_ops(shared, true) {
        if filter.try_matches_at(&op)?.0 {
            ops.push(Bson::Document(op));
        }
    }
    Ok(doc! { "inprog": ops, "ok": 1.0 })
}

/// `killOp`: end operation `op`: a running command stops at its next
/// wait on a conflict (Interrupted, 11601), an open transaction aborts.
pub(crate) fn kill_op(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    if cmd.get_str("$db") != Ok("admin") {
        return Err(CommandError::unauthorized("killOp may only be run against the admin database."));
    }
    crate::args::check_fields(cmd, "killOp", &["op", "comment"], false)?;
    let opid = match cmd.get("op").and_then(query::update::integral) {
        Some(n) => u32::try_from(n).map_err(|_| CommandError::bad_value(format!("invalid op : {n}")))?,
        None => return Err(CommandError::failed_to_parse("BSON field 'killOp.op' is missing but a required field")),
    };
    if !shared.ops.kill(opid) {
        if let Some(txn) = shared.transactions.kill(opid) {
            crate::transactions::discard(shared, txn);
        }
    }
    Ok(doc! { "info": "attempting to kill op", "ok": 1.0 })
}
