//! The index builds under way, as `currentOp` shows them: each with its
//! namespace, the `createIndexes` it runs for, when it started, and its
//! progress (documents scanned of the collection's count when it began).
//!
//! Invariant: a build is listed from just before its scan starts until
//! its command returns (the guard `start` hands out unlists it on drop).

use bson::{doc, Document};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Default)]
pub struct IndexBuilds {
    next_opid: AtomicU64,
    active: Mutex<BTreeMap<u64, Arc<Build>>>,
}

/// One build under way.
pub struct Build {
    opid: u64,
    ns: String,
    command: Document,
    started: Instant,
    started_at: bson::DateTime,
    done: AtomicU64,
    total: AtomicU64,
}

impl Build {
    /// Documents scanned so far, of `total`.
    pub fn progress(&self, done: u64, total: u64) {
        self.done.store(done, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }
}

/// Unlists its build when dropped.
pub struct Listed<'a> {
    builds: &'a IndexBuilds,
    pub build: Arc<Build>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.builds.active.lock().remove(&self.build.opid);
    }
}

impl IndexBuilds {
    /// List a build of `ns` for `command` until the guard is dropped.
    pub fn start(&self, ns: &str, command: Document) -> Listed<'_> {
        let opid = self.next_opid.fetch_add(1, Ordering::Relaxed) + 1;
        let build = Arc::new(Build {
            opid,
            ns: ns.to_string(),
            command,
            started: Instant::now(),
            started_at: bson::DateTime::now(),
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
        });
        self.active.lock().insert(opid, build.clone());
        Listed { builds: self, build }
    }

    /// Each build as a `currentOp` entry, in mongod's shape.
    pub fn current_ops(&self, host: &str) -> Vec<Document> {
        let active: Vec<Arc<Build>> = self.active.lock().values().cloned().collect();
        active
            .iter()
            .map(|b| {
                let (done, total) = (b.done.load(Ordering::Relaxed), b.total.load(Ordering::Relaxed));
                let running = b.started.elapsed();
                let percent = (done * 100).checked_div(total).unwrap_or(0);
                let msg = format!(
                    "Index Build: scanning collection Index Build: scanning collection: {done}/{total} {percent}%"
                );
                doc! {
                    "type": "op",
                    "host": host,
                    "desc": format!("IndexBuildsCoordinatorMongod-{}", b.opid),
                    "active": true,
                    "currentOpTime": b.started_at.try_to_rfc3339_string().unwrap_or_default(),
                    "opid": b.opid as i64,
                    "secs_running": running.as_secs() as i64,
                    "microsecs_running": running.as_micros() as i64,
                    "op": "command",
                    "ns": b.ns.clone(),
                    "command": b.command.clone(),
                    "msg": msg,
                    "progress": { "done": done as i64, "total": total as i64 },
                    "numYields": 0_i64,
                    "locks": {},
                    "waitingForLock": false,
                    "lockStats": {},
                }
            })
            .collect()
    }
}
