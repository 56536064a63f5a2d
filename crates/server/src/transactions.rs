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

use crate::error::CommandError;
use crate::server::Shared;
use doc::sessions::SessionId;
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
}

enum State {
    /// `running`: a statement of it runs now (the reaper leaves it).
    Open {
        txn: Arc<Txn>,
        began: Instant,
        running: bool,
    },
    Committed,
    Aborted,
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
    Open(Arc<Txn>),
    Committed,
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
fn isolation_of(shared: &Shared, cmd: &bson::Document) -> Result<TxnOptions, CommandError> {
    let level = match cmd.get("readConcern") {
        Some(bson::Bson::Document(rc)) => rc.get_str("level").ok(),
        _ => None,
    };
    match level {
        Some("serializable") => Ok(TxnOptions::serializable()),
        None | Some("local" | "majority" | "snapshot") => {
            Ok(match shared.transactions.serializable_default.load(Ordering::Relaxed) {
                true => TxnOptions::serializable(),
                false => TxnOptions::default(),
            })
        }
        Some(other) => Err(CommandError::invalid_options(format!(
            "The readConcern level must be either 'local' (default), 'majority', 'snapshot' or 'serializable' in \
             a transaction, not '{other}'"
        ))),
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
    ) -> Result<Arc<Txn>, CommandError> {
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
                        Some(State::Committed) => "TxnState::Committed",
                        _ => "TxnState::Aborted",
                    }
                )));
            }
            let opts = TxnOptions { skip_journal_sync: true, ..isolation_of(shared, cmd)? };
            let txn = Arc::new(shared.catalog.engine().begin(opts).map_err(doc::catalog::DocError::from)?);
            // A newer transaction replaces (and so aborts) an older open one.
            let state = State::Open { txn: txn.clone(), began: Instant::now(), running: true };
            slots.insert(st.lsid, Slot { number: st.number, state });
            drop(slots);
            shared.sessions.note_txn_number(st.lsid, st.number);
            return Ok(txn);
        }
        if cmd.contains_key("readConcern") {
            return Err(CommandError::invalid_options(
                "Only the first command in a transaction may specify a readConcern",
            ));
        }
        match slots.get_mut(&st.lsid) {
            Some(Slot { number, state }) if *number == st.number => match state {
                State::Open { txn, running, .. } => {
                    *running = true;
                    Ok(txn.clone())
                }
                State::Aborted => Err(aborted(st.number)),
                State::Committed => Err(committed(st.number)),
            },
            _ => Err(no_such(st.number, active)),
        }
    }

    /// A statement of the session's transaction `number` ended; if it
    /// `failed`, the transaction aborts (invariant 3) and is returned, for
    /// its cursors to be closed.
    pub(crate) fn leave(&self, lsid: SessionId, number: i64, failed: bool) -> Option<Arc<Txn>> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(&lsid).filter(|s| s.number == number)?;
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
                State::Committed => {
                    slot.state = State::Committed;
                    Ok(Ending::Committed)
                }
                State::Aborted => Err(aborted(number)),
            },
            Some(slot) if slot.number > number => Err(too_old(number, &lsid, slot.number)),
            other => Ok(Ending::Unknown(other.map(|s| s.number))),
        }
    }

    /// Take the open transaction `number` out of its slot for a commit;
    /// `Ok(None)`: already committed (a retried commit answers ok).
    pub(crate) fn take_for_commit(
        &self,
        shared: &Shared,
        lsid: SessionId,
        number: i64,
    ) -> Result<Option<Arc<Txn>>, CommandError> {
        match self.end(lsid, number)? {
            Ending::Open(txn) => Ok(Some(txn)),
            Ending::Committed => Ok(None),
            // After a restart: the commit record says whether it committed.
            Ending::Unknown(active) => match shared.sessions.committed(shared.catalog.engine(), lsid, number)? {
                true => Ok(None),
                false => Err(no_such(number, active)),
            },
        }
    }

    /// Record that the session's transaction `number` committed.
    pub(crate) fn committed(&self, lsid: SessionId, number: i64) {
        if let Some(slot) = self.slots.lock().get_mut(&lsid).filter(|s| s.number == number) {
            slot.state = State::Committed;
        }
    }

    /// `abortTransaction`: abort the open transaction `number`.
    pub(crate) fn abort(&self, lsid: SessionId, number: i64) -> Result<Option<Arc<Txn>>, CommandError> {
        match self.end(lsid, number)? {
            Ending::Open(txn) => Ok(Some(txn)),
            Ending::Committed => Err(committed(number)),
            Ending::Unknown(active) => Err(no_such(number, active)),
        }
    }

    /// The reaper's pass: abort every open transaction older than the
    /// lifetime limit that no statement is running in (invariant 4);
    /// returns the aborted transactions, for their cursors to be closed.
    pub(crate) fn reap_expired(&self) -> Vec<Arc<Txn>> {
        let limit = Duration::from_secs(self.lifetime_secs.load(Ordering::Relaxed));
        let mut expired = Vec::new();
        for slot in self.slots.lock().values_mut() {
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

    /// Forget the sessions `ids` (`endSessions`, `killSessions`): their
    /// open transactions abort.
    pub(crate) fn forget(&self, ids: Option<&[SessionId]>) -> Vec<Arc<Txn>> {
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
        for txn in shared.transactions.reap_expired() {
            tracing::info!(
                id = 20707,
                txn = txn.id(),
                "Aborting transaction because it has been running for longer than \
                 'transactionLifetimeLimitSeconds'"
            );
            shared.cursors.kill_txn(&txn);
        }
    }
}

/// Codes after which a commit's outcome is unknown to the driver, which
/// retries the commit (`UnknownTransactionCommitResult`): the retryable
/// writes' codes, a time limit, a write concern failure.
const UNKNOWN_COMMIT_CODES: &[i32] = &[6, 7, 50, 64, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436];

/// The labels mongod gives an error inside a transaction
/// (`isTransientTransactionError`): TransientTransactionError when the
/// whole transaction may be retried (a conflict; a transaction that no
/// longer exists); for a commit, UnknownTransactionCommitResult when it may have
/// committed.
pub(crate) fn labelled(mut e: CommandError, commit_or_abort: bool) -> CommandError {
    let transient = matches!(e.code, 112 | 251);
    if transient && !e.labels.contains(&"TransientTransactionError") {
        e.labels.push("TransientTransactionError");
    }
    if commit_or_abort
        && UNKNOWN_COMMIT_CODES.contains(&e.code)
        && !e.labels.contains(&"UnknownTransactionCommitResult")
    {
        e.labels.push("UnknownTransactionCommitResult");
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

/// The storage transaction out of its last holder, for its commit: the
/// transaction's cursors are closed first, so only a `getMore` run
/// outside the session's turn can still hold it, for a moment.
pub(crate) fn sole(mut txn: Arc<Txn>) -> Result<Txn, CommandError> {
    for _ in 0..1000 {
        match Arc::try_unwrap(txn) {
            Ok(t) => return Ok(t),
            Err(shared) => txn = shared,
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(CommandError::internal_error("the transaction is still in use by a cursor; it was not committed"))
}
