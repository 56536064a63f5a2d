//! `insert`.

use crate::args::ack_of;
use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::namespace;
use crate::args::statements;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::views::check_not_view;
use crate::exec::write::acknowledge;
use crate::exec::write::check_insert;
use crate::exec::write::insert_docs;
use crate::exec::write::validator_of;
use crate::exec::write::write_reply;
use crate::exec::write::Outcome;
use crate::exec::write::STATEMENT_ACK;
use crate::net::wire::OpMsg;
use crate::session::Retry;
use bson::Document;
use doc::sessions::Stamp;
use std::sync::atomic::Ordering;

pub fn insert(shared: &Ctx<'_>, call: &Call, msg: &OpMsg) -> CommandResult {
    let cmd: &Document = &msg.body;
    let ns = namespace(cmd, "insert")?;
    let docs = statements(msg, "insert", "documents")?;
    check_fields(cmd, "insert", &["documents", "ordered"], false)?;
    // In a transaction the first failure ends the command, as mongod's.
    let ordered = bool_option(cmd, "ordered", "insert", true)? || shared.txn().is_some();
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
    crate::exec::write::check_writable(&ns)?;
    let mut retry = Retry::begin(shared, cmd)?;
    let coll = shared.collection_or_create(&ns)?;
    let validator = validator_of(shared, &ns, cmd)?;
    // Each document's own checks first; then the documents an insert
    // reaches (for an ordered one, those before the first failed check)
    // go to the collection together, which commits them in chunks.
    let mut results: Vec<Result<(), CommandError>> = docs.iter().map(|d| check_insert(d, validator.as_ref())).collect();
    let reached = if ordered { results.iter().position(Result::is_err).unwrap_or(docs.len()) } else { docs.len() };
    // A retried insert answers the statements that ran from their records.
    let mut tried: Vec<usize> = (0..reached).filter(|&i| results[i].is_ok()).collect();
    if let Some(retry) = retry.as_mut() {
        tried.retain(|&i| retry.answered(i).is_none());
    }
    let to_insert: Vec<&Document> = tried.iter().map(|&i| &docs[i]).collect();
    let stmt_ids: Vec<i32> = retry.as_ref().map_or_else(Vec::new, |r| tried.iter().map(|&i| r.stmt_id(i)).collect());
    let record = retry.as_ref().map(|r| r.record(&stmt_ids, Document::new())).transpose()?;
    let stamp = record.as_ref().map(|r| r as &dyn Stamp);
    let inserted = insert_docs(shared, &coll, &to_insert, ordered, STATEMENT_ACK, stamp);
    let ran = inserted.len();
    for (&i, r) in tried.iter().zip(inserted) {
        results[i] = r.map_err(CommandError::from);
    }
    for &i in &tried[ran..] {
        // Only after a failure: an ordered insert stops there (and the
        // reply never reaches these); a storage error stops any insert.
        results[i] = Err(CommandError::internal_error("not inserted: the insert stopped at an earlier error"));
    }
    let n_ok = tried[..ran].iter().filter(|&&i| results[i].is_ok()).count();
    shared.opcounters.insert.fetch_add(n_ok as u64, Ordering::Relaxed);
    if coll.capped.is_some() && n_ok > 0 {
        shared.capped_inserts.send_modify(|n| *n += 1);
    }
    let mut reply = write_reply(&results, ordered, false, |_, r| match r {
        Ok(()) => Ok(Outcome { n: 1, ..Outcome::default() }),
        Err(e) => Err(e.clone()),
    })?;
    std::mem::drop(record);
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, Some(call), ack, reply)
}
