//! The operations under way, for `currentOp`/`$currentOp` and `killOp`:
//! each command registers itself while it runs (an [`OpGuard`] removes
//! it), with an opid, what it runs and a kill flag. `killOp` sets the
//! flag; a write waiting on a conflict sees it at its next pause and
//! ends with Interrupted (11601). Open transactions between statements
//! are listed too (as mongod's idle sessions), and `killOp` of one aborts
//! it.

use bson::{doc, Document};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// One running operation. What only `currentOp` shows is kept as it
/// came (the client's address, its connection's app name, the command
/// itself, shared) and shaped when listed: every command registers, few
/// are listed.
pub struct RunningOp {
    pub opid: u32,
    started: Instant,
    started_at: bson::DateTime,
    client: SocketAddr,
    app_name: Arc<OnceLock<String>>,
    op: &'static str,
    command: Arc<Document>,
    /// Set by `killOp`.
    pub killed: Arc<AtomicBool>,
}

#[derive(Default)]
pub struct Ops {
    next: AtomicU32,
    running: Mutex<HashMap<u32, Arc<RunningOp>>>,
}

/// Unregisters its operation when dropped.
pub struct OpGuard<'a> {
    ops: &'a Ops,
    pub op: Arc<RunningOp>,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        self.ops.running.lock().remove(&self.op.opid);
    }
}

/// mongod's `op` for a command.
pub fn op_name(name: &str) -> &'static str {
    match name {
        "find" => "query",
        "getMore" => "getmore",
        "insert" => "insert",
        "update" => "update",
        "delete" => "remove",
        _ => "command",
    }
}

/// The namespace a command names (`db.coll`, or `db.$cmd`).
pub fn ns_of(cmd: &Document) -> String {
    let db = cmd.get_str("$db").unwrap_or("admin");
    let coll = match cmd.iter().next() {
        Some((name, _)) if name == "getMore" => cmd.get_str("collection").ok(),
        Some((_, bson::Bson::String(c))) => Some(c.as_str()),
        _ => None,
    };
    format!("{db}.{}", coll.unwrap_or("$cmd"))
}

/// `cmd` as `currentOp` and the profiler show it: without the gossip
/// fields, and cut past `max_bytes` (mongod's `$truncated`) to the fields
/// that fit, so that a 16 MiB insert is not copied for its listing.
pub(crate) fn shown_command(cmd: &Document, max_bytes: usize) -> Document {
    let gossip = |k: &str| matches!(k, "$clusterTime" | "$readPreference");
    if doc::bson_bytes::encoded_len(cmd) <= max_bytes {
        return cmd.iter().filter(|(k, _)| !gossip(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    let mut shown = Document::new();
    let mut used = 0;
    for (k, v) in cmd.iter().filter(|(k, _)| !gossip(k)) {
        let size = doc::bson_bytes::encoded_len(&doc! { k: v.clone() });
        if used + size <= max_bytes {
            shown.insert(k.clone(), v.clone());
            used += size;
        }
    }
    shown.insert("$truncated", true);
    shown
}

/// `currentOp` shows a command up to this size (mongod's is about 1 KB).
const SHOWN_COMMAND_BYTES: usize = 1024;

impl Ops {
    /// A fresh opid (also for transactions, which `killOp` can end).
    pub fn next_opid(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Register `cmd`, run by `client` (whose connection's app name is
    /// `app_name`), until the guard drops.
    pub fn register(&self, cmd: &Arc<Document>, client: SocketAddr, app_name: Arc<OnceLock<String>>) -> OpGuard<'_> {
        let name = cmd.keys().next().map_or("", String::as_str);
        let op = Arc::new(RunningOp {
            opid: self.next_opid(),
            started: Instant::now(),
            started_at: bson::DateTime::now(),
            client,
            app_name,
            op: op_name(name),
            command: cmd.clone(),
            killed: Arc::default(),
        });
        self.running.lock().insert(op.opid, op.clone());
        OpGuard { ops: self, op }
    }

    /// Mark operation `opid` killed; whether it runs.
    pub fn kill(&self, opid: u32) -> bool {
        match self.running.lock().get(&opid) {
            Some(op) => {
                op.killed.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Each running operation as a `currentOp` entry, in mongod's shape.
    pub fn current_ops(&self, host: &str) -> Vec<Document> {
        let running: Vec<Arc<RunningOp>> = self.running.lock().values().cloned().collect();
        running
            .iter()
            .map(|op| {
                let took = op.started.elapsed();
                let command = shown_command(&op.command, SHOWN_COMMAND_BYTES);
                doc! {
                    "type": "op",
                    "host": host,
                    "desc": "conn",
                    "client": op.client.to_string(),
                    "appName": op.app_name.get().cloned().unwrap_or_default(),
                    "active": true,
                    "currentOpTime": op.started_at.try_to_rfc3339_string().unwrap_or_default(),
                    "opid": op.opid as i64,
                    "secs_running": took.as_secs() as i64,
                    "microsecs_running": took.as_micros() as i64,
                    "op": op.op,
                    "ns": ns_of(&op.command),
                    "command": command,
                    "killPending": op.killed.load(Ordering::Relaxed),
                    "numYields": 0_i64,
                    "locks": {},
                    "waitingForLock": false,
                    "lockStats": {},
                }
            })
            .collect()
    }
}

/// Every operation `currentOp` and `$currentOp` list: running commands,
/// index builds, and (with `idle_sessions`) open transactions between
/// statements.
pub(crate) fn current_ops(shared: &crate::server::Shared, idle_sessions: bool) -> Vec<Document> {
    let host = crate::server::hostname();
    let mut ops = shared.ops.current_ops(&host);
    ops.extend(shared.index_builds.current_ops(&host));
    if idle_sessions {
        ops.extend(shared.transactions.current_ops(shared, &host));
    }
    ops
}
