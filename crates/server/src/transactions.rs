//! Multi-document transactions (`autocommit: false`): each session's
//! transaction, from its first statement (`startTransaction: true`) to
//! `commitTransaction` or `abortTransaction`, as mongod's
//! `TransactionParticipant` keeps it.
//!
//! A transaction is one storage transaction ([`storage::Txn`]) begun at
//! its first statement: every statement reads its snapshot and its own
//! writes, and writes into it (`exec/ctx.rs`). Snapshot isolation by
//! default; serializable (the engine's SSI) with readConcern level
//! `"serializable"` or `defaultTransactionIsolation: "serializable"`.
//!
//! Invariants:
//! 1. A session runs one command at a time (its turn, `net/connection.rs`),
//!    so a transaction's statements never run concurrently; the reaper
//!    aborts only a transaction no statement holds.
//! 2. A commit writes the session's commit record in the storage
//!    transaction it commits (`SessionCatalog::commit_stamp`), so after a
//!    crash a retried `commitTransaction` answers as the first did: ok iff
//!    the transaction is durable.
//! 3. A statement that fails aborts its transaction (as mongod): what it
//!    wrote is never committed in part.
//! 4. A transaction older than `transactionLifetimeLimitSeconds` is
//!    aborted by the reaper, which frees what it held (claims, pinned
//!    versions) by dropping its storage transaction.
//! 5. A commit holds the index list of every collection the transaction
//!    wrote, and commits only if each is the collection and the list its
//!    writes maintained (`InTxn::written`): an index built or dropped, or
//!    a collection dropped, meanwhile aborts it with WriteConflict (a
//!    statement's own writes hold the list for their whole storage
//!    transaction instead, `doc` invariant).

use crate::error::CommandError;
use crate::read_concern::ReadConcern;
use crate::server::Shared;
use doc::catalog::{Catalog, Collection, DocError, Namespace, Pending};
use doc::index::Index;
use doc::sessions::{SessionId, Stamp};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{Txn, TxnOptions};

/// `transactionLifetimeLimitSeconds`' default (mongod's).
pub const LIFETIME_LIMIT_SECS_DEFAULT: u64 = 60;

/// Every session's newest multi-document transaction.
pub struct Transactions {
    slots: Mutex<HashMap<SessionId, Slot>>,
    /// `transactionLifetimeLimitSeconds`.
    pub lifetime_secs: AtomicU64,
    /// `defaultTransactionIsolation: "serializable"`.
    pub serializable_default: AtomicBool,
}

impl Default for Transactions {
    fn default() -> Transactions {
        Transactions {
            slots: Mutex::default(),
            lifetime_secs: AtomicU64::new(LIFETIME_LIMIT_SECS_DEFAULT),
            serializable_default: AtomicBool::new(false),
        }
    }
}

/// A session's newest transaction.
struct Slot {
    number: i64,
    state: State,
    /// When a statement last entered or left it.
    touched: Instant,
}

enum State {
    /// `running`: a statement of it runs now (the reaper leaves it).
    Open {
        txn: Arc<InTxn>,
        began: Instant,
        running: bool,
    },
    /// At this commit timestamp (0: known only from its record).
    Committed(u64),
    Aborted,
}

/// An open transaction as its statements see it: the storage transaction
/// they read and write through, and the collections they wrote.
pub struct InTxn {
    pub txn: Arc<Txn>,
    /// Per collection written: its namespace, its record table (a
    /// re-created collection has another) and the index list its first
    /// write maintained (invariant 5).
    written: parking_lot::Mutex<Vec<Written>>,
    /// Collections the transaction created (`create`, or an insert into a
    /// missing one): published by its commit, abandoned by its abort
    /// (whatever is left when it is dropped, on `engine`).
    created: parking_lot::Mutex<Vec<Pending>>,
    engine: storage::Engine,
    /// Its opid for `currentOp` and `killOp`, and when it began.
    opid: u32,
    began_at: bson::DateTime,
    /// The readConcern its first statement gave (`None`: none, or no
    /// level in it), as mongod's DDL in a transaction checks it.
    read_concern: Option<bson::Document>,
}

impl Drop for InTxn {
    fn drop(&mut self) {
        for pending in self.created.get_mut().drain(..) {
            pending.abandon_on(&self.engine);
        }
    }
}

impl InTxn {
    /// The collection `ns` as the transaction sees it: one it created,
    /// else the catalog's.
    pub(crate) fn collection(&self, catalog: &Catalog, ns: &Namespace) -> Option<Arc<Collection>> {
        let created = self.created.lock();
        let mine = created.iter().filter_map(Pending::collection).find(|c| c.ns == *ns);
        mine.cloned().or_else(|| catalog.get(ns))
    }

    /// mongod's rule for `create` and `createIndexes` in a transaction:
    /// refused (InvalidOptions) when its readConcern has a level other
    /// than `local`.
    pub(crate) fn check_ddl_read_concern(&self, command: &str) -> Result<(), CommandError> {
        let Some(rc) = &self.read_concern else { return Ok(()) };
        if rc.get_str("level") == Ok("local") {
            return Ok(());
        }
        let mut shown = rc.clone();
        shown.insert("provenance", "clientSupplied");
        Err(CommandError::invalid_options(format!(
            "Command {command} does not support this transaction's {{ readConcern: {} }} :: caused by :: read concern \
             not supported",
            doc::format::spaced(&bson::Bson::Document(shown))
        )))
    }

    /// Whether the transaction wrote a collection with a write-optimized
    /// index: its commit may wait for merges (the write stall).
    pub(crate) fn wrote_write_optimized(&self) -> bool {
        let written = self.written.lock();
        written.iter().flat_map(|(_, _, ixs)| ixs).any(|ix| ix.spec.format == storage::TableFormat::WriteOptimized)
    }

    /// Whether the transaction created any collection.
    pub(crate) fn created_any(&self) -> bool {
        !self.created.lock().is_empty()
    }

    /// Whether the transaction created the collection `ns`.
    pub(crate) fn created_here(&self, ns: &Namespace) -> bool {
        self.created.lock().iter().filter_map(Pending::collection).any(|c| c.ns == *ns)
    }

    /// Create the collection `ns` with `options` in the transaction.
    pub(crate) fn create(
        &self,
        catalog: &Catalog,
        ns: &Namespace,
        options: bson::Document,
    ) -> Result<Arc<Collection>, DocError> {
        if self.collection(catalog, ns).is_some() {
            return Err(DocError::NamespaceExists(ns.to_string()));
        }
        let pending = catalog.create_in(&self.txn, ns, options)?;
        let coll = pending.collection().expect("a create makes a collection").clone();
        self.created.lock().push(pending);
        Ok(coll)
    }

    /// Note a write to `coll` with the index list `indexes` it maintains;
    /// false if an earlier write maintained another list (the write must
    /// fail with a conflict).
    pub(crate) fn note_write(&self, coll: &Collection, indexes: Vec<Arc<Index>>) -> bool {
        // Only this transaction changes the indexes of one it created
        // (`createIndexes` on it once it is empty again).
        let created = self.created.lock();
        if created.iter().filter_map(Pending::collection).any(|c| c.records_table() == coll.records_table()) {
            return true;
        }
        drop(created);
        let mut written = self.written.lock();
        match written.iter().find(|(ns, table, _)| *ns == coll.ns && table == coll.records_table()) {
            Some((_, _, seen)) => same_indexes(seen, &indexes),
            None => {
                written.push((coll.ns.clone(), coll.records_table().to_string(), indexes));
                true
            }
        }
    }
}

/// A collection a transaction wrote: its namespace, record table and the
/// index list its writes maintained.
pub(crate) type Written = (Namespace, String, Vec<Arc<Index>>);

fn same_indexes(a: &[Arc<Index>], b: &[Arc<Index>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

fn catalog_changed(ns: &Namespace) -> CommandError {
    CommandError::write_conflict(format!(
        "The indexes of {ns} changed (an index was built or dropped, or the collection dropped) while the \
         transaction wrote to it. Please retry the transaction."
    ))
}

/// The transaction fields of a statement inside a transaction.
pub(crate) struct Statement<'c> {
    pub lsid: SessionId,
    pub number: i64,
    pub start: bool,
    pub name: &'c str,
}

/// What ending a transaction found.
enum Ending {
    Open(Arc<InTxn>),
    Committed(u64),
    /// No such transaction in memory; the session's active number.
    Unknown(Option<i64>),
}

fn too_old(number: i64, lsid: &SessionId, active: i64) -> CommandError {
    CommandError::transaction_too_old(format!(
        "Cannot start transaction {number} on session {} because a newer transaction {active} has already started.",
        crate::session::session_string(lsid)
    ))
}

fn committed(number: i64) -> CommandError {
    CommandError::transaction_committed(format!("Transaction with {{ txnNumber: {number} }} has been committed."))
}

fn aborted(number: i64) -> CommandError {
    CommandError::no_such_transaction(format!("Transaction with {{ txnNumber: {number} }} has been aborted."))
}

fn no_such(number: i64, active: Option<i64>) -> CommandError {
    CommandError::no_such_transaction(format!(
        "Given transaction number {number} does not match any in-progress transactions. The active transaction \
         number is {}",
        active.unwrap_or(-1)
    ))
}

/// The isolation a transaction's first statement asks for: readConcern
/// `{level: "serializable"}`, or the server's default.
fn isolation_of(shared: &Shared, rc: Option<&ReadConcern>) -> Result<TxnOptions, CommandError> {
    use crate::read_concern::Level;
    match rc.and_then(|rc| rc.level) {
        Some(Level::Serializable) => Ok(TxnOptions::serializable()),
        None | Some(Level::Local | Level::Majority | Level::Snapshot) => {
            Ok(match shared.transactions.serializable_default.load(Ordering::Relaxed) {
                true => TxnOptions::serializable(),
                false => TxnOptions::default(),
            })
        }
        Some(other) => Err(CommandError::invalid_options(format!(
            "The readConcern level must be either 'local' (default), 'majority', 'snapshot' or 'serializable' in \
             a transaction, not '{}'",
            format!("{other:?}").to_lowercase()
        ))),
    }
}

/// A transaction's `atClusterTime` must be the snapshot it began on: the
/// newest (transactions cannot begin on a kept older snapshot, which
/// writes could not commit on).
fn check_at_cluster_time(shared: &Shared, rc: Option<&ReadConcern>, txn: &storage::Txn) -> Result<(), CommandError> {
    let Some(at) = rc.and_then(|rc| rc.at_cluster_time) else { return Ok(()) };
    crate::read_concern::not_ahead(shared, "atClusterTime", at)?;
    match crate::read_concern::engine_ts_of(shared, at) {
        Some(ts) if ts == txn.read_ts() => Ok(()),
        _ => Err(crate::snapshots::too_old(at)),
    }
}

impl Transactions {
    /// The storage transaction statement `st` runs in: begun when it
    /// starts the transaction, the open one when it continues it.
    pub(crate) fn enter(
        &self,
        shared: &Shared,
        st: &Statement<'_>,
        cmd: &bson::Document,
    ) -> Result<Arc<InTxn>, CommandError> {
        let newest = shared.sessions.newest_txn_number(shared.catalog.engine(), st.lsid)?;
        let mut slots = self.slots.lock();
        let slot = slots.get(&st.lsid);
        let active = slot.map(|s| s.number).max(newest);
        if let Some(active) = active.filter(|&a| a > st.number) {
            return Err(too_old(st.number, &st.lsid, active));
        }
        if st.start {
            if active == Some(st.number) {
                return Err(CommandError::conflicting_operation_in_progress(format!(
                    "Cannot start a transaction at given transaction number {} a transaction with the same number \
                     is in state {}",
                    st.number,
                    match slot.map(|s| &s.state) {
                        Some(State::Open { .. }) => "TxnState::InProgress",
                        Some(State::Committed(_)) => "TxnState::Committed",
                        _ => "TxnState::Aborted",
                    }
                )));
            }
            let rc = crate::read_concern::parse(cmd)?;
            let opts = TxnOptions { skip_journal_sync: true, ..isolation_of(shared, rc.as_ref())? };
            let txn = Arc::new(shared.catalog.engine().begin(opts).map_err(doc::catalog::DocError::from)?);
            check_at_cluster_time(shared, rc.as_ref(), &txn)?;
            let engine = shared.catalog.engine().clone();
            let txn = Arc::new(InTxn {
                txn,
                written: Default::default(),
                created: Default::default(),
                engine,
                opid: shared.ops.next_opid(),
                began_at: bson::DateTime::now(),
                read_concern: match cmd.get("readConcern") {
                    Some(bson::Bson::Document(rc)) if rc.contains_key("level") => Some(rc.clone()),
                    _ => None,
                },
            });
            let state = State::Open { txn: txn.clone(), began: Instant::now(), running: true };
            let replaced = slots.insert(st.lsid, Slot { number: st.number, state, touched: Instant::now() });
            drop(slots);
            // A newer transaction replaces (and so aborts) an older open one.
            if let Some(Slot { state: State::Open { txn: old, .. }, .. }) = replaced {
                discard(shared, old);
            }
            shared.sessions.note_txn_number(st.lsid, st.number);
            return Ok(txn);
        }
        if cmd.contains_key("readConcern") {
            return Err(CommandError::invalid_options(
                "Only the first command in a transaction may specify a readConcern",
            ));
        }
        match slots.get_mut(&st.lsid) {
            Some(Slot { number, state, touched }) if *number == st.number => match state {
                State::Open { txn, running, .. } => {
                    *running = true;
                    *touched = Instant::now();
                    Ok(txn.clone())
                }
                State::Aborted => Err(aborted(st.number)),
                State::Committed(_) => Err(committed(st.number)),
            },
            _ => Err(no_such(st.number, active)),
        }
    }

    /// A statement of the session's transaction `number` ended; if it
    /// `failed`, the transaction aborts (invariant 3) and is returned, for
    /// its cursors to be closed.
    fn leave(&self, lsid: SessionId, number: i64, failed: bool) -> Option<Arc<InTxn>> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(&lsid).filter(|s| s.number == number)?;
        slot.touched = Instant::now();
        match &mut slot.state {
            State::Open { .. } if failed => match std::mem::replace(&mut slot.state, State::Aborted) {
                State::Open { txn, .. } => Some(txn),
                _ => None,
            },
            State::Open { running, .. } => {
                *running = false;
                None
            }
            _ => None,
        }
    }

    /// End the session's transaction `number` (for a commit or an
    /// abort): an open one is taken out of its slot, which says aborted
    /// until a commit succeeds.
    fn end(&self, lsid: SessionId, number: i64) -> Result<Ending, CommandError> {
        let mut slots = self.slots.lock();
        match slots.get_mut(&lsid) {
            Some(slot) if slot.number == number => match std::mem::replace(&mut slot.state, State::Aborted) {
                State::Open { txn, .. } => Ok(Ending::Open(txn)),
                State::Committed(ts) => {
                    slot.state = State::Committed(ts);
                    Ok(Ending::Committed(ts))
                }
                State::Aborted => Err(aborted(number)),
            },
            Some(slot) if slot.number > number => Err(too_old(number, &lsid, slot.number)),
            other => Ok(Ending::Unknown(other.map(|s| s.number))),
        }
    }

    /// Take the open transaction `number` out of its slot for a commit;
    /// `Err(ts)`: already committed, at `ts` if known (a retried commit
    /// answers ok).
    pub(crate) fn take_for_commit(
        &self,
        shared: &Shared,
        lsid: SessionId,
        number: i64,
    ) -> Result<Result<Arc<InTxn>, Option<u64>>, CommandError> {
        match self.end(lsid, number)? {
            Ending::Open(txn) => Ok(Ok(txn)),
            Ending::Committed(ts) => Ok(Err(Some(ts).filter(|&t| t != 0))),
            // After a restart: the commit record says whether it committed.
            Ending::Unknown(active) => match shared.sessions.committed(shared.catalog.engine(), lsid, number)? {
                true => Ok(Err(None)),
                false => Err(no_such(number, active)),
            },
        }
    }

    /// Record that the session's transaction `number` committed at `ts`.
    pub(crate) fn committed(&self, lsid: SessionId, number: i64, ts: u64) {
        if let Some(slot) = self.slots.lock().get_mut(&lsid).filter(|s| s.number == number) {
            slot.state = State::Committed(ts);
        }
    }

    /// `abortTransaction`: abort the open transaction `number`.
    pub(crate) fn abort(&self, lsid: SessionId, number: i64) -> Result<Option<Arc<InTxn>>, CommandError> {
        match self.end(lsid, number)? {
            Ending::Open(txn) => Ok(Some(txn)),
            Ending::Committed(_) => Err(committed(number)),
            Ending::Unknown(active) => Err(no_such(number, active)),
        }
    }

    /// The reaper's pass: abort every open transaction older than the
    /// lifetime limit that no statement is running in (invariant 4);
    /// returns the aborted transactions, for their cursors to be closed.
    pub(crate) fn reap_expired(&self) -> Vec<Arc<InTxn>> {
        let limit = Duration::from_secs(self.lifetime_secs.load(Ordering::Relaxed));
        let mut expired = Vec::new();
        let mut slots = self.slots.lock();
        // An ended transaction is kept (for a retried commit) as long as
        // its session would be.
        let keep = Duration::from_secs(crate::limits::session_timeout_minutes as u64 * 60);
        slots.retain(|_, s| matches!(s.state, State::Open { .. }) || s.touched.elapsed() < keep);
        for slot in slots.values_mut() {
            let State::Open { began, running, .. } = &slot.state else { continue };
            // A statement running in it: a later pass.
            if began.elapsed() >= limit && !running {
                if let State::Open { txn, .. } = std::mem::replace(&mut slot.state, State::Aborted) {
                    expired.push(txn);
                }
            }
        }
        expired
    }

    /// Abort the open transaction with opid `opid` (`killOp`), unless a
    /// statement of it runs (killing that statement aborts it).
    pub(crate) fn kill(&self, opid: u32) -> Option<Arc<InTxn>> {
        let mut slots = self.slots.lock();
        let slot = slots
            .values_mut()
            .find(|s| matches!(&s.state, State::Open { txn, running: false, .. } if txn.opid == opid))?;
        match std::mem::replace(&mut slot.state, State::Aborted) {
            State::Open { txn, .. } => Some(txn),
            _ => None,
        }
    }

    /// Each open transaction between statements as a `currentOp` entry
    /// (mongod's idle session with its transaction).
    pub(crate) fn current_ops(&self, shared: &Shared, host: &str) -> Vec<bson::Document> {
        let limit = self.lifetime_secs.load(Ordering::Relaxed);
        let slots = self.slots.lock();
        let idle = slots.iter().filter_map(|(lsid, s)| match &s.state {
            State::Open { txn, began, running: false } => Some((lsid, s.number, txn, began.elapsed())),
            _ => None,
        });
        idle.map(|(lsid, number, txn, open)| {
            let expiry = txn.began_at.timestamp_millis() + (limit as i64) * 1000;
            bson::doc! {
                "type": "idleSession",
                "host": host,
                "desc": "inactive transaction",
                "opid": txn.opid as i64,
                "active": false,
                "lsid": { "id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: lsid.to_vec() } },
                "transaction": {
                    "parameters": { "txnNumber": number, "autocommit": false },
                    "readTimestamp": crate::commands::cluster_time_of(shared, txn.txn.read_ts()),
                    "startWallClockTime": txn.began_at.try_to_rfc3339_string().unwrap_or_default(),
                    "timeOpenMicros": open.as_micros() as i64,
                    "expiryTime": bson::DateTime::from_millis(expiry).try_to_rfc3339_string().unwrap_or_default(),
                },
            }
        })
        .collect()
    }

    /// Forget the sessions `ids` (`endSessions`, `killSessions`): their
    /// open transactions abort.
    pub(crate) fn forget(&self, ids: Option<&[SessionId]>) -> Vec<Arc<InTxn>> {
        let mut slots = self.slots.lock();
        let gone: Vec<Slot> = match ids {
            None => slots.drain().map(|(_, s)| s).collect(),
            Some(ids) => ids.iter().filter_map(|id| slots.remove(id)).collect(),
        };
        gone.into_iter()
            .filter_map(|s| match s.state {
                State::Open { txn, .. } => Some(txn),
                _ => None,
            })
            .collect()
    }
}

/// How often the reaper looks for expired transactions.
const REAP_INTERVAL: Duration = Duration::from_millis(250);

/// The transaction reaper (invariant 4): aborts transactions past the
/// lifetime limit, and closes their cursors, until the server stops.
pub async fn reaper(shared: Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(REAP_INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        shared.snapshots.reap();
        for txn in shared.transactions.reap_expired() {
            tracing::info!(
                id = 20707,
                txn = txn.txn.id(),
                "Aborting transaction because it has been running for longer than \
                 'transactionLifetimeLimitSeconds'"
            );
            discard(&shared, txn);
        }
    }
}

/// Codes after which a commit's outcome is unknown to the driver, which
/// retries the commit (`UnknownTransactionCommitResult`): the retryable
/// writes' codes, a time limit, a write concern failure.
const UNKNOWN_COMMIT_CODES: &[i32] = &[6, 7, 50, 64, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436];

/// Codes a commit or abort is retried on by the driver (the retryable
/// writes specification's list): mongod labels them RetryableWriteError.
const RETRYABLE_CODES: &[i32] = &[6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436];

/// Which command of a transaction an error came from.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Part {
    Statement,
    Commit,
    Abort,
}

/// The labels mongod gives an error with `code` in a transaction's
/// `part`: TransientTransactionError when the whole transaction may be
/// retried (a conflict; a transaction that no longer exists, unless a
/// commit's or abort's write concern failed), for a commit
/// UnknownTransactionCommitResult when it may have committed, and for a
/// commit or abort RetryableWriteError on a retryable code.
pub(crate) fn labels_for(code: i32, part: Part, write_concern_failed: bool) -> Vec<&'static str> {
    let mut labels = Vec::new();
    let transient = code == 112 || (code == 251 && !(part != Part::Statement && write_concern_failed));
    if transient {
        labels.push("TransientTransactionError");
    }
    if part != Part::Statement && RETRYABLE_CODES.contains(&code) {
        labels.push("RetryableWriteError");
    }
    if part == Part::Commit && UNKNOWN_COMMIT_CODES.contains(&code) {
        labels.push("UnknownTransactionCommitResult");
    }
    labels
}

/// `e` with the labels of [`labels_for`] added.
pub(crate) fn labelled(mut e: CommandError, part: Part) -> CommandError {
    for label in labels_for(e.code, part, false) {
        if !e.labels.contains(&label) {
            e.labels.push(label);
        }
    }
    e
}

/// The first write error of a write reply inside a transaction that
/// ends the transaction as a whole: a conflict is the command's error
/// (mongod rethrows it), not one statement's.
pub(crate) fn transient_write_error(reply: &bson::Document) -> Option<CommandError> {
    let errors = reply.get_array("writeErrors").ok()?;
    errors.iter().filter_map(bson::Bson::as_document).find_map(|w| match w.get_i32("code") {
        Ok(112) => Some(CommandError::write_conflict(w.get_str("errmsg").unwrap_or("WriteConflict").to_string())),
        _ => None,
    })
}

/// Whether a write reply inside a transaction failed a statement (which
/// aborts the transaction, invariant 3).
pub(crate) fn has_write_errors(reply: &bson::Document) -> bool {
    reply.get_array("writeErrors").is_ok_and(|w| !w.is_empty())
}

/// Commit the transaction `txn` with its session's commit record
/// `stamp`: its cursors closed, the index lists of the collections it
/// wrote held and checked (invariant 5), the collections it created
/// published at its commit timestamp (or abandoned if it fails). Returns
/// the commit timestamp.
pub(crate) fn commit(shared: &Shared, txn: Arc<InTxn>, stamp: &dyn Stamp) -> Result<u64, CommandError> {
    shared.cursors.kill_txn(&txn.txn);
    let open = Arc::try_unwrap(txn)
        .map_err(|_| CommandError::internal_error("a statement of the transaction still runs; it was not committed"))?;
    let created = std::mem::take(&mut *open.created.lock());
    let mut written = std::mem::take(&mut *open.written.lock());
    let txn = open.txn.clone();
    drop(open);
    // Nobody else could change the collections it created.
    written.retain(|(ns, ..)| !created.iter().filter_map(Pending::collection).any(|c| c.ns == *ns));
    let mut txn = Some(txn);
    let committed = commit_holding(shared, &written, &mut || {
        let txn = sole(txn.take().expect("committed once"))?;
        let committed = stamp.write(&txn, &[0]).and_then(|()| txn.commit());
        committed.map_err(|e| CommandError::from(DocError::from(e)))
    });
    drop(txn);
    for pending in created {
        match committed {
            Ok(ts) => drop(shared.catalog.publish(pending, ts)),
            Err(_) => shared.catalog.abandon(pending),
        }
    }
    committed
}

/// Abort the transaction `txn` (ended by `abortTransaction`, a failed
/// statement, the reaper, its session's end): its cursors are closed; once
/// nothing holds it, its storage transaction rolls back and the
/// collections it created are dropped (`InTxn`'s drop).
pub(crate) fn discard(shared: &Shared, txn: Arc<InTxn>) {
    shared.cursors.kill_txn(&txn.txn);
}

/// The storage transaction out of its last holder: its cursors are
/// closed first, so only a `getMore` of another connection can still hold
/// it, for a moment.
fn sole(mut txn: Arc<Txn>) -> Result<Txn, CommandError> {
    for _ in 0..1000 {
        match Arc::try_unwrap(txn) {
            Ok(t) => return Ok(t),
            Err(shared) => txn = shared,
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(CommandError::internal_error("the transaction is still in use by a cursor; it was not committed"))
}

/// Run `commit` while holding the index lists of the collections written,
/// each checked to be the one the writes maintained (invariant 5).
fn commit_holding(
    shared: &Shared,
    written: &[Written],
    commit: &mut dyn FnMut() -> Result<u64, CommandError>,
) -> Result<u64, CommandError> {
    let Some(((ns, table, seen), rest)) = written.split_first() else { return commit() };
    let coll = shared.catalog.get(ns).filter(|c| c.records_table() == table).ok_or_else(|| catalog_changed(ns))?;
    coll.with_indexes_held(|now| match same_indexes(seen, now) {
        true => commit_holding(shared, rest, commit),
        false => Err(catalog_changed(ns)),
    })
}

/// A statement running in a transaction: dropping it leaves the
/// transaction (aborting it unless the statement succeeded), also when
/// the statement panicked, so that the reaper never skips it forever.
pub(crate) struct Running<'a> {
    shared: &'a Shared,
    lsid: SessionId,
    number: i64,
    pub failed: bool,
}

impl<'a> Running<'a> {
    pub(crate) fn new(shared: &'a Shared, st: &Statement<'_>) -> Running<'a> {
        Running { shared, lsid: st.lsid, number: st.number, failed: true }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(aborted) = self.shared.transactions.leave(self.lsid, self.number, self.failed) {
            discard(self.shared, aborted);
        }
    }
}
