//! `update` and `findAndModify`.

use crate::args::ack_of;
use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::filter_of;
use crate::args::namespace;
use crate::args::scope_of;
use crate::args::statements;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::deadline::Deadline;
use crate::exec::modify::array_filters;
use crate::exec::modify::first_match;
use crate::exec::modify::parse_statement;
use crate::exec::modify::parse_update_field;
use crate::exec::modify::run_statement;
use crate::exec::modify::update_document;
use crate::exec::modify::upsert;
use crate::exec::modify::Answer;
use crate::exec::modify::Change;
use crate::exec::scan::check_hint;
use crate::exec::scan::collation_of;
use crate::exec::views::check_not_view;
use crate::exec::write::acknowledge;
use crate::exec::write::delete_doc;
use crate::exec::write::validator_of;
use crate::exec::write::write_reply;
use crate::exec::write::Outcome;
use crate::exec::write::STATEMENT_ACK;
use crate::net::wire::OpMsg;
use crate::session::{Retry, StmtLog};
use bson::{doc, Bson, Document};
use doc::sessions::Stamp;
use query::{Projection, Sort};
use std::sync::atomic::Ordering;

pub fn update(shared: &Ctx<'_>, call: &Call, msg: &OpMsg) -> CommandResult {
    let cmd: &Document = &msg.body;
    let ns = namespace(cmd, "update")?;
    let specs = statements(msg, "update", "updates")?;
    check_fields(cmd, "update", &["updates", "ordered"], false)?;
    for spec in &specs {
        check_fields(
            spec,
            "update.updates",
            &["q", "u", "c", "upsert", "multi", "arrayFilters", "collation", "hint", "sort", "upsertSupplied"],
            true,
        )?;
        for field in ["q", "u"] {
            if !spec.contains_key(field) {
                return Err(CommandError::failed_to_parse(format!(
                    "BSON field 'update.updates.{field}' is missing but a required field"
                )));
            }
        }
        // Option types fail the whole command, as mongod's parser does.
        for field in ["multi", "upsert"] {
            bool_option(spec, field, "update.updates", false)?;
        }
    }
    // In a transaction the first failure ends the command, as mongod's.
    let ordered = bool_option(cmd, "ordered", "update", true)? || shared.txn().is_some();
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
    crate::exec::write::check_writable(&ns)?;
    let scope = scope_of(cmd)?;
    let mut retry = Retry::begin(shared, cmd)?;
    let mut reply = write_reply(&specs, ordered, true, |index, spec| {
        shared.opcounters.update.fetch_add(1, Ordering::Relaxed);
        let st = parse_statement(shared, &ns, spec, &scope)?;
        let log = match retry.as_mut() {
            None => None,
            Some(_) if st.multi => {
                return Err(CommandError::invalid_options("Cannot use (or request) retryable writes with multi=true"))
            }
            Some(r) => match r.answered(index) {
                Some(a) => {
                    return Ok(Outcome {
                        n: a.get_i64("n").unwrap_or(1),
                        modified: a.get_i64("nModified").unwrap_or(0),
                        upserted: a.get("upserted").cloned(),
                    })
                }
                None => Some(StmtLog::new(r, index)),
            },
        };
        run_statement(shared, &ns, cmd, &st, STATEMENT_ACK, log.as_ref(), &call.op)
    })?;
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, Some(call), ack, reply)
}

pub fn find_and_modify(shared: &Ctx<'_>, call: &Call, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?.killable(shared);
    let name = cmd.keys().next().cloned().unwrap_or_default();
    let ns = namespace(cmd, &name)?;
    check_fields(
        cmd,
        "findAndModify",
        &["query", "sort", "remove", "update", "new", "fields", "upsert", "arrayFilters", "collation", "hint"],
        false,
    )?;
    let scope = scope_of(cmd)?;
    let (query, filter) = filter_of(cmd, "query", &scope)?;
    let sort = Sort::parse(&match cmd.get("sort") {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(crate::args::wrong_type("findAndModify.sort", other, "object")),
    })?;
    let fields = match cmd.get("fields") {
        Some(Bson::Document(f)) if !f.is_empty() => Some(Projection::parse_in(f, &scope)?),
        None | Some(Bson::Null) | Some(Bson::Document(_)) => None,
        Some(other) => return Err(crate::args::wrong_type("findAndModify.fields", other, "object")),
    };
    let remove = bool_option(cmd, "remove", "findAndModify", false)?;
    let return_new = bool_option(cmd, "new", "findAndModify", false)?;
    let upsert_wanted = bool_option(cmd, "upsert", "findAndModify", false)?;
    let has_update = cmd.get("update").is_some_and(|u| !matches!(u, Bson::Null));
    if remove && has_update {
        return Err(CommandError::failed_to_parse("Cannot specify both an update and remove=true"));
    }
    if !remove && !has_update {
        return Err(CommandError::failed_to_parse("Either an update or remove=true must be specified"));
    }
    if remove && upsert_wanted {
        return Err(CommandError::failed_to_parse("Cannot specify both upsert=true and remove=true "));
    }
    if remove && return_new {
        return Err(CommandError::failed_to_parse(
            "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document",
        ));
    }
    let update = if has_update {
        Some(parse_update_field(cmd.get("update"), &array_filters(cmd)?, "findAndModify.update", &scope)?)
    } else {
        None
    };
    check_hint(shared, &ns, cmd)?;
    check_not_view(shared, &ns)?;
    crate::exec::write::check_writable(&ns)?;
    let collation = collation_of(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation.clone());
    let sort = sort.with_collation(collation.clone());
    let update = update.map(|u| u.with_collation(collation.clone()));
    let ack = ack_of(cmd)?;
    let mut retry = Retry::begin(shared, cmd)?;
    if let Some(r) = retry.as_mut() {
        if let Some(mut answer) = r.answered(0) {
            // Ran before under this txnNumber: the same answer, written
            // nothing again.
            answer.insert("retriedStmtId", r.stmt_id(0));
            answer.insert("ok", 1.0);
            return acknowledge(shared, Some(call), ack, answer);
        }
    }
    let log = retry.as_ref().map(|r| StmtLog::new(r, 0));
    let validator = validator_of(shared, &ns, cmd)?;
    let project = |d: &Document, pos: Option<usize>| -> Result<Bson, CommandError> {
        Ok(Bson::Document(match &fields {
            Some(p) => p.apply(d, pos)?,
            None => d.clone(),
        }))
    };
    // The reply (without `ok`) once the statement wrote.
    let answer = |old: Option<&Document>, new: &Document, pos: Option<usize>| -> Result<Document, CommandError> {
        Ok(match old {
            Some(old) => doc! {
                "lastErrorObject": { "n": 1, "updatedExisting": true },
                "value": if return_new { project(new, pos)? } else { project(old, pos)? },
            },
            None => doc! {
                "lastErrorObject": {
                    "n": 1,
                    "updatedExisting": false,
                    "upserted": new.get("_id").cloned().unwrap_or(Bson::Null),
                },
                "value": if return_new { project(new, None)? } else { Bson::Null },
            },
        })
    };
    let with_ok = |mut reply: Document| {
        reply.insert("ok", 1.0);
        Ok(reply)
    };
    let change = |u| Change {
        filter: &filter,
        update: u,
        ack,
        validator: validator.as_ref(),
        log: log.as_ref().map(|l| (l, &answer as Answer)),
    };
    if let Some(coll) = shared.collection(&ns) {
        // Retried when the chosen document changes before it is written.
        while let Some((rid, d, pos)) =
            first_match(shared, &coll, &ns, (&query, &filter, collation.as_ref()), &sort, (&deadline, &call.op))?
        {
            match &update {
                None => {
                    shared.opcounters.delete.fetch_add(1, Ordering::Relaxed);
                    let reply = doc! { "lastErrorObject": { "n": 1 }, "value": project(&d, pos)? };
                    let record = log.as_ref().map(|l| l.record(reply.clone())).transpose()?;
                    if delete_doc(shared, &coll, (rid, &d), ack, record.as_ref().map(|r| r as &dyn Stamp))? {
                        return with_ok(reply);
                    }
                }
                Some(u) => {
                    shared.opcounters.update.fetch_add(1, Ordering::Relaxed);
                    if let Some((old, new, _)) = update_document(shared, &coll, rid, (d, pos), &change(u))? {
                        return with_ok(answer(Some(&old), &new, pos)?);
                    }
                }
            }
        }
    }
    match &update {
        Some(u) if upsert_wanted => {
            shared.opcounters.update.fetch_add(1, Ordering::Relaxed);
            let new = upsert(shared, &ns, &query, &change(u))?;
            with_ok(answer(None, &new, None)?)
        }
        Some(_) => Ok(doc! { "lastErrorObject": { "n": 0, "updatedExisting": false }, "value": Bson::Null, "ok": 1.0 }),
        None => Ok(doc! { "lastErrorObject": { "n": 0 }, "value": Bson::Null, "ok": 1.0 }),
    }
}
