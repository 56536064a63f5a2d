//! The database profiler (`profile` levels 1 and 2) and the slow-query
//! log line: after each command, an entry in its database's
//! `system.profile`, a capped collection of 1 MiB made on first use, with
//! mongod's fields (op, ns, command, keysExamined, docsExamined,
//! nreturned, nMatched, nModified, ninserted, ndeleted, keysInserted,
//! keysDeleted, writeConflicts, numYield, millis, planSummary, execStats,
//! ts, client, appName, user). Level 2 records every operation, level 1
//! those at least `slowms` long (sampled by `sampleRate`), which are the
//! ones logged as "Slow query" with the same metrics.
//!
//! Invariant: writing an entry never fails or slows the command it
//! describes beyond the write itself (its errors are logged), and nothing
//! done on `system.profile` is profiled (no entry about an entry).

use crate::exec::call::Call;
use crate::reply::Reply;
use crate::server::Shared;
use bson::{doc, Bson, Document};
use doc::catalog::{Ack, ConflictWait, Namespace};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long writing an entry waits on a conflict at most.
const PROFILE_WAIT: Duration = Duration::from_millis(200);

/// An entry shows its command up to this size (mongod's is 50 KB).
const SHOWN_COMMAND_BYTES: usize = 50 * 1024;

/// `system.profile`'s size when the profiler makes it (mongod's).
const PROFILE_BYTES: i64 = 1024 * 1024;

/// Profiling levels by database (absent: 0).
#[derive(Default)]
pub struct Profiler {
    levels: Mutex<HashMap<String, i32>>,
    /// Some database is profiled: the point-read fast path (which writes
    /// no entry) stands aside.
    any: AtomicBool,
}

impl Profiler {
    pub fn level(&self, db: &str) -> i32 {
        if !self.any.load(Ordering::Relaxed) {
            return 0;
        }
        self.levels.lock().get(db).copied().unwrap_or(0)
    }

    /// Whether any database is profiled.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Set `db`'s level; returns the one before.
    pub fn set_level(&self, db: &str, level: i32) -> i32 {
        let mut levels = self.levels.lock();
        let was = match level {
            0 => levels.remove(db),
            n => levels.insert(db.to_string(), n),
        };
        self.any.store(!levels.is_empty(), Ordering::Relaxed);
        was.unwrap_or(0)
    }
}

/// What a command did, as its profile entry says it.
pub(crate) struct Done<'a> {
    pub msg: &'a crate::net::wire::OpMsg,
    pub cmd: &'a Document,
    pub result: &'a Result<Reply, crate::error::CommandError>,
    pub took: Duration,
    /// Write conflicts its writes met (each a yield of its snapshot).
    pub write_conflicts: u64,
}

/// After a command: its profile entry if its database's level asks, and
/// the "Slow query" log line if it took `slowms` or longer; both show the
/// metrics [`metrics`] gathers.
pub(crate) fn after(shared: &Shared, call: &Call, done: &Done<'_>) {
    let Some((name, _)) = done.cmd.iter().next() else { return };
    let slow = crate::commands::is_slow(shared, done.took);
    let profiled = profiled(shared, done, name, slow);
    if !slow && !profiled {
        return;
    }
    let metrics = metrics(call, done, name);
    if profiled {
        record(shared, call, done, name, &metrics);
    }
    if slow {
        log_slow(done.cmd, &metrics, done.took, done.result.as_ref().err().map(|e| e.code));
    }
}

/// Whether `done` gets a profile entry: level 2, or level 1 and `slow`
/// (sampled by `sampleRate`); never the `profile` command nor anything
/// done on `system.profile`.
fn profiled(shared: &Shared, done: &Done<'_>, name: &str, slow: bool) -> bool {
    let db = done.cmd.get_str("$db").unwrap_or("admin");
    let sampled = || {
        let rate = f64::from_bits(shared.parameters.sample_rate_bits.load(Ordering::Relaxed));
        rate >= 1.0 || (rate > 0.0 && (crate::exec::cursors::rand_u64() as f64 / u64::MAX as f64) < rate)
    };
    let wanted = match shared.profiler.level(db) {
        2 => true,
        1 => slow && sampled(),
        _ => false,
    };
    wanted && name != "profile" && crate::exec::ops::ns_of(done.cmd) != format!("{db}.system.profile")
}

/// The commands whose entries count the keys and documents their reads
/// examined (mongod's reads, updates and deletes; not inserts).
const READING: &[&str] = &["find", "getMore", "aggregate", "count", "distinct", "update", "delete", "findAndModify"];

/// What a command did, as its profile entry and slow-query line show it:
/// keys and documents examined (by a command that reads), the counts its
/// reply tells, index keys written, conflicts, the plan its read took
/// (`planSummary`) and that plan with what it did (`execStats`).
pub(crate) fn metrics(call: &Call, done: &Done<'_>, name: &str) -> Document {
    let tally = call.op.tally.counts();
    let mut m = Document::new();
    if READING.contains(&name) || name == "findandmodify" {
        m.insert("keysExamined", tally.keys_examined as i64);
        m.insert("docsExamined", tally.docs_examined as i64);
    }
    if let Ok(reply) = done.result {
        counts(name, reply, &mut m);
    }
    if tally.keys_inserted > 0 {
        m.insert("keysInserted", tally.keys_inserted as i64);
    }
    if tally.keys_deleted > 0 {
        m.insert("keysDeleted", tally.keys_deleted as i64);
    }
    m.insert("writeConflicts", done.write_conflicts as i64);
    m.insert("numYield", done.write_conflicts as i64);
    let returned = m.get_i64("nreturned").unwrap_or(0);
    if let Some((summary, stats)) = call.op.plan_stats(tally, returned) {
        m.insert("planSummary", summary);
        if call.op.replanned() {
            m.insert("replanned", true);
        }
        m.insert("execStats", stats);
    }
    m
}

/// mongod's "Slow query" line (log id 51803): the namespace, the command
/// (its session gossip left out), the `metrics` and how long it ran.
pub(crate) fn log_slow(cmd: &Document, m: &Document, took: Duration, failed: Option<i32>) {
    let millis = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    let ns = crate::exec::ops::ns_of(cmd);
    let mut shown = cmd.clone();
    for gossip in ["lsid", "$clusterTime", "$readPreference", "txnNumber"] {
        shown.remove(gossip);
    }
    let command = Bson::Document(shown).into_relaxed_extjson().to_string();
    let n = |field: &str| m.get_i64(field).ok();
    tracing::info!(
        id = 51803,
        r#type = "command",
        ns = %ns,
        command = %command,
        planSummary = m.get_str("planSummary").ok(),
        replanned = m.get_bool("replanned").unwrap_or(false),
        keysExamined = n("keysExamined"),
        docsExamined = n("docsExamined"),
        nreturned = n("nreturned"),
        nMatched = n("nMatched"),
        nModified = n("nModified"),
        ninserted = n("ninserted"),
        ndeleted = n("ndeleted"),
        keysInserted = n("keysInserted"),
        keysDeleted = n("keysDeleted"),
        writeConflicts = n("writeConflicts"),
        numYield = n("numYield"),
        ok = failed.is_none(),
        errCode = failed,
        durationMillis = millis,
        "Slow query"
    );
}

/// Record `done` in its database's `system.profile`.
fn record(shared: &Shared, call: &Call, done: &Done<'_>, name: &str, metrics: &Document) {
    let db = done.cmd.get_str("$db").unwrap_or("admin");
    let entry = entry(call, done, name, metrics);
    // A conflict (a transaction creating the collection) is waited on
    // briefly: the entry is dropped rather than the command held.
    let wait = ConflictWait::until(Some(std::time::Instant::now() + PROFILE_WAIT), call.place.sleeper());
    if let Err(e) = write(shared, db, entry, &wait) {
        tracing::warn!(db, error = %e, "the profile entry was not written");
    }
}

/// The command as an entry shows it: an update's or delete's single
/// statement alone (as mongod's entry per statement), else the body with
/// its document sequences.
fn shown_command(done: &Done<'_>, name: &str) -> Document {
    if let Some(mut statements) = crate::commands::write_statements(name, done.msg) {
        if let (Some(only), None, true) = (statements.next(), statements.next(), name != "insert") {
            return only.clone();
        }
    }
    let mut command = crate::exec::ops::shown_command(done.cmd, SHOWN_COMMAND_BYTES);
    let mut left = SHOWN_COMMAND_BYTES.saturating_sub(doc::bson_bytes::encoded_len(&command));
    for (field, docs) in &done.msg.sequences {
        let fits: Vec<Bson> = docs
            .iter()
            .take_while(|d| {
                let size = doc::bson_bytes::encoded_len(d);
                left = left.saturating_sub(size);
                left > 0
            })
            .cloned()
            .map(Bson::Document)
            .collect();
        if fits.len() < docs.len() {
            command.insert("$truncated", true);
        }
        command.insert(field.clone(), fits);
    }
    command
}

fn entry(call: &Call, done: &Done<'_>, name: &str, metrics: &Document) -> Document {
    let command = shown_command(done, name);
    let mut e = doc! {
        "op": crate::exec::ops::op_name(name),
        "ns": crate::exec::ops::ns_of(done.cmd),
        "command": command,
    };
    if let Err(err) = done.result {
        e.insert("ok", 0.0);
        e.insert("errMsg", err.errmsg.clone());
        e.insert("errName", err.code_name.to_string());
        e.insert("errCode", err.code);
    }
    let mut metrics = metrics.clone();
    let plan = ["planSummary", "replanned", "execStats"].map(|k| metrics.remove(k).map(|v| (k, v)));
    e.extend(metrics);
    e.insert("millis", i64::try_from(done.took.as_millis()).unwrap_or(i64::MAX));
    e.extend(plan.into_iter().flatten().map(|(k, v)| (k.to_string(), v)));
    e.extend(doc! {
        "ts": bson::DateTime::now(),
        "client": call.conn.peer.ip().to_string(),
        "appName": call.conn.app_name.get().cloned().unwrap_or_default(),
        "allUsers": [],
        "user": "",
    });
    e
}

/// The counts a reply tells: documents returned, matched, modified,
/// inserted, deleted.
fn counts(name: &str, reply: &Reply, e: &mut Document) {
    let reply = match reply {
        Reply::Doc(d) => std::borrow::Cow::Borrowed(d),
        Reply::Bytes(b) => match doc::bson_bytes::decode(b) {
            Ok(d) => std::borrow::Cow::Owned(d),
            Err(_) => return,
        },
    };
    let n = reply.get("n").and_then(Bson::as_i64).or_else(|| reply.get_i32("n").ok().map(i64::from));
    match name {
        "find" | "getMore" | "aggregate" => {
            let batch = reply.get_document("cursor").ok().and_then(|c| {
                c.get_array("firstBatch").or_else(|_| c.get_array("nextBatch")).ok().map(|b| b.len() as i64)
            });
            e.insert("nreturned", batch.unwrap_or(0));
        }
        "update" => {
            e.insert("nMatched", n.unwrap_or(0));
            e.insert("nModified", reply.get("nModified").and_then(Bson::as_i64).unwrap_or(0));
        }
        "insert" => {
            e.insert("ninserted", n.unwrap_or(0));
        }
        "delete" => {
            e.insert("ndeleted", n.unwrap_or(0));
        }
        _ => {}
    }
}

/// Append `entry` to `db.system.profile`, made capped if missing.
fn write(shared: &Shared, db: &str, entry: Document, wait: &ConflictWait) -> Result<(), doc::catalog::DocError> {
    let ns = Namespace::new(db, "system.profile")?;
    let coll = match shared.catalog.get(&ns) {
        Some(c) => c,
        None => match shared.catalog.create_waiting(&ns, doc! { "capped": true, "size": PROFILE_BYTES }, wait) {
            Ok(c) => c,
            Err(doc::catalog::DocError::NamespaceExists(_)) => {
                shared.catalog.get(&ns).ok_or_else(|| doc::catalog::DocError::NamespaceExists(ns.to_string()))?
            }
            Err(e) => return Err(e),
        },
    };
    coll.insert(shared.catalog.engine(), &entry, (Ack::Written, wait), None)?;
    Ok(())
}
