//! A command call as its connection runs it: the connection, the thread it
//! runs on ([`Place`]), and whether its journal wait is the connection's
//! to make. Passed to every command that needs one of them (no
//! thread-local carries it).
//!
//! Invariants:
//! 1. A command on a network thread never runs a part that may take long
//!    (a scan, a sort, a plan race) without first handing that thread's
//!    other connections to another thread ([`Place::long`]).
//! 2. A write acknowledged with `j: true` is durable before its reply is
//!    sent: either [`crate::exec::write::acknowledge`] syncs the journal,
//!    or the call records the wait ([`Call::owes_sync`]) and the
//!    connection awaits it before replying.

use crate::exec::access::{PlanNote, Planned};
use crate::server::Conn;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where a command runs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Place {
    /// A network thread of the multi-threaded runtime, whose other
    /// connections wait while it runs.
    Network,
    /// Where blocking delays nobody: the blocking pool, a thread already
    /// handed off, a current-thread runtime.
    Blocking,
}

impl Place {
    /// Run `f`, which may take long: on a network thread, after handing
    /// the thread's other connections to another thread
    /// (`tokio::task::block_in_place`, free when already handed off).
    pub fn long<R>(self, f: impl FnOnce() -> R) -> R {
        match self {
            Place::Network => tokio::task::block_in_place(f),
            Place::Blocking => f(),
        }
    }

    /// How to sleep here: on a network thread, after handing its other
    /// connections off.
    pub fn sleeper(self) -> fn(std::time::Duration) {
        match self {
            Place::Network => |d| Place::Network.long(|| std::thread::sleep(d)),
            Place::Blocking => std::thread::sleep,
        }
    }

    /// Run `f` here when `quick`, otherwise as [`Place::long`].
    pub fn run<R>(self, quick: bool, f: impl FnOnce() -> R) -> R {
        match quick {
            true => f(),
            false => self.long(f),
        }
    }
}

/// A command being run.
pub struct Call<'a> {
    pub conn: &'a Conn,
    pub place: Place,
    /// `Some(owed)` when the connection awaits the journal fsync itself:
    /// `owed` once a write needs it.
    deferred_sync: Option<Cell<bool>>,
    /// What the command did, for its slow-operation log line.
    pub op: OpDebug,
}

/// What an operation did, for its slow-operation log line (mongod's
/// `CurOp` debug): the plan its read took (the last planned: a read whose
/// cached plan degraded shows the plan it was read by), and whether it
/// was planned again.
#[derive(Default)]
pub struct OpDebug {
    plan: Mutex<Option<PlanNote>>,
    replanned: AtomicBool,
    /// The engine timestamp the operation happened at, when it is not the
    /// newest commit: a transaction's snapshot, a commit's timestamp
    /// (the reply's `operationTime`); 0: none.
    operation_ts: AtomicU64,
    /// What its reads and writes did (`keysExamined`, `docsExamined`,
    /// `keysInserted`, `keysDeleted`): the tally of every `Ctx` it runs in.
    pub tally: std::sync::Arc<doc::catalog::Tally>,
}

impl OpDebug {
    /// Note the plan a read takes.
    pub(crate) fn note_plan(&self, planned: &Planned<'_>) {
        *self.plan.lock() = Some(PlanNote::of(planned));
    }

    /// The read's cached plan degraded: it is planned again.
    pub(crate) fn note_replanned(&self) {
        self.replanned.store(true, Ordering::Relaxed);
    }

    pub fn replanned(&self) -> bool {
        self.replanned.load(Ordering::Relaxed)
    }

    /// The operation happened at engine timestamp `ts`.
    pub(crate) fn note_operation_ts(&self, ts: u64) {
        self.operation_ts.store(ts, Ordering::Relaxed);
    }

    pub fn operation_ts(&self) -> Option<u64> {
        Some(self.operation_ts.load(Ordering::Relaxed)).filter(|&ts| ts != 0)
    }

    /// mongod's `planSummary` of the noted plan (`IXSCAN { a: 1 }`).
    pub fn plan_summary(&self) -> Option<String> {
        self.plan.lock().as_ref().map(PlanNote::summary)
    }

    /// The noted plan's `planSummary` and its `execStats`: the plan's
    /// stages with what the operation's reads did (`tally`) and the
    /// documents it returned.
    pub(crate) fn plan_stats(&self, tally: doc::catalog::Counts, returned: i64) -> Option<(String, bson::Document)> {
        let plan = self.plan.lock();
        let plan = plan.as_ref()?;
        Some((plan.summary(), plan.exec_stats(tally, returned)))
    }
}

impl<'a> Call<'a> {
    /// A request whose journal waits, if `defer_sync`, are left to the
    /// connection ([`Call::owes_sync`]).
    pub fn new(conn: &'a Conn, place: Place, defer_sync: bool) -> Call<'a> {
        Call { conn, place, deferred_sync: defer_sync.then(|| Cell::new(false)), op: OpDebug::default() }
    }

    /// Record that the reply needs a durable journal; false when the
    /// caller must sync it itself (the wait is not deferred).
    pub(crate) fn defer_sync(&self) -> bool {
        match &self.deferred_sync {
            Some(owed) => {
                owed.set(true);
                true
            }
            None => false,
        }
    }

    /// Whether the connection must await the journal fsync before it
    /// sends the reply.
    pub fn owes_sync(&self) -> bool {
        self.deferred_sync.as_ref().is_some_and(Cell::get)
    }
}
