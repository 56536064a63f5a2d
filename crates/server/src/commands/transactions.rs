//! `commitTransaction` and `abortTransaction` (the session's transaction
//! itself is kept in `transactions.rs`).

use crate::args::ack_of;
use crate::args::check_fields;
use crate::args::CommandResult;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::write::acknowledge;
use crate::transactions::{commit, discard};
use bson::{doc, Document};
use doc::sessions::SessionId;

/// Commit the session's transaction `number`, its commit record in the
/// same storage transaction; a retried commit of a committed transaction
/// answers ok again (once it is durable).
pub fn commit_transaction(
    shared: &Ctx<'_>,
    call: &Call,
    cmd: &Document,
    (lsid, number): (SessionId, i64),
) -> CommandResult {
    check_fields(cmd, "commitTransaction", &[], false)?;
    let ack = ack_of(cmd)?;
    let txn = match shared.transactions.take_for_commit(shared, lsid, number)? {
        Ok(txn) => txn,
        Err(committed_at) => {
            if let Some(ts) = committed_at {
                call.op.note_operation_ts(ts);
            }
            return acknowledge(shared, Some(call), ack, doc! { "ok": 1.0 });
        }
    };
    // A commit runs where its connection does (call.rs invariant 1): a
    // large write set is applied, collections made are published or
    // dropped, and a commit to a write-optimized index may wait for its
    // merges (the write stall), after handing a network thread off.
    let quick = txn.txn.write_count() <= crate::limits::quick_commit_writes_max
        && !txn.created_any()
        && !txn.wrote_write_optimized();
    let ts = call.place.run(quick, || commit(shared, txn, &shared.sessions.commit_stamp(lsid, number)))?;
    call.op.note_operation_ts(ts);
    shared.transactions.committed(lsid, number, ts);
    acknowledge(shared, Some(call), ack, doc! { "ok": 1.0 })
}

/// Abort the session's transaction `number`: nothing it wrote is kept.
pub fn abort_transaction(shared: &Ctx<'_>, cmd: &Document, (lsid, number): (SessionId, i64)) -> CommandResult {
    check_fields(cmd, "abortTransaction", &[], false)?;
    if let Some(txn) = shared.transactions.abort(lsid, number)? {
        discard(shared, txn);
    }
    Ok(doc! { "ok": 1.0 })
}
