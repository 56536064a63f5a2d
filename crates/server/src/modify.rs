//! Updates: the `update` command (multi, upsert, replacement, arrayFilters)
//! and `findAndModify`.
//!
//! A document is updated by compare-and-swap on its stored bytes
//! ([`Collection::replace`]): if another writer changed it between the
//! read and the write, it is read again, matched again and the update
//! applied again, so no concurrent update is lost. Record ids do not change
//! on update, so a multi-update scan never meets a document twice.

use crate::crud::{
    ack_of, acknowledge, bool_option, check_fields, check_not_view, filter_of, namespace, scope_of, statements,
    type_name, validator_of, write_reply, CommandResult, Outcome, Validator, STATEMENT_ACK,
};
use crate::error::CommandError;
use crate::limits::*;
use crate::read::{check_hint, collation_of, encoded_len, point_id, Deadline, ScanIter};
use crate::server::Shared;
use crate::session::{Retry, StmtLog};
use crate::wire::OpMsg;
use bson::{doc, Bson, Document};
use doc::catalog::{with_id_first, Ack, Collection, DocError, Namespace};
use doc::sessions::Stamp;
use query::expr::Scope;
use query::{Collation, Filter, Projection, Sort, Update};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One parsed update statement.
#[derive(Clone)]
pub(crate) struct Statement {
    query: Document,
    filter: Filter,
    update: Update,
    multi: bool,
    upsert: bool,
    /// Which document a single update picks (MongoDB 8.0's `sort`).
    sort: Sort,
    /// The statement's collation (`None`: simple).
    collation: Option<Arc<Collation>>,
    /// Already retried after losing an upsert race.
    retried: bool,
}

fn parse_update_field(
    v: Option<&Bson>,
    array_filters: &[Document],
    cmd: &str,
    scope: &Scope,
) -> Result<Update, CommandError> {
    match v {
        Some(Bson::Document(u)) => Ok(Update::parse(u, array_filters)?),
        Some(Bson::Array(stages)) => Ok(Update::parse_pipeline(stages, array_filters, scope)?),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "Update argument must be either an object or an array, not {}",
            type_name(other)
        ))),
        None => Err(CommandError::failed_to_parse(format!("BSON field '{cmd}' is missing but a required field"))),
    }
}

fn array_filters(spec: &Document) -> Result<Vec<Document>, CommandError> {
    match spec.get("arrayFilters") {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(items)) => items
            .iter()
            .map(|f| match f {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(CommandError::type_mismatch(format!(
                    "Each array filter must be an object, not {}",
                    type_name(other)
                ))),
            })
            .collect(),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field 'arrayFilters' is the wrong type '{}', expected type 'array'",
            type_name(other)
        ))),
    }
}

/// One `update` statement on `ns` (its collation defaults to the
/// collection's).
pub(crate) fn parse_statement(
    shared: &Shared,
    ns: &Namespace,
    spec: &Document,
    scope: &Scope,
) -> Result<Statement, CommandError> {
    let (query, filter) = filter_of(spec, "q", scope)?;
    // A statement's constants (`c`) are variables of its pipeline.
    let constants = match spec.get("c") {
        None | Some(Bson::Null) => None,
        Some(_) if !matches!(spec.get("u"), Some(Bson::Array(_))) => {
            return Err(CommandError::with_code(51198, "Constant values may only be specified for pipeline updates"))
        }
        Some(Bson::Document(c)) => Some(scope.with_constants(c)?),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'update.updates.c' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
    };
    let update = parse_update_field(
        spec.get("u"),
        &array_filters(spec)?,
        "update.updates.u",
        constants.as_ref().unwrap_or(scope),
    )?;
    let multi = bool_option(spec, "multi", "update.updates", false)?;
    if multi && update.is_replacement() {
        return Err(CommandError::failed_to_parse("multi update is not supported for replacement-style update"));
    }
    check_hint(shared, ns, spec)?;
    let collation = collation_of(shared, ns, spec)?;
    let filter = filter.with_collation(collation.clone());
    let sort = match spec.get("sort") {
        None | Some(Bson::Null) => Sort::default(),
        Some(Bson::Document(s)) if multi && !s.is_empty() => {
            return Err(CommandError::failed_to_parse("Cannot specify sort with multi=true"))
        }
        Some(Bson::Document(s)) => Sort::parse(s)?.with_collation(collation.clone()),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'update.updates.sort' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
    };
    let upsert = bool_option(spec, "upsert", "update.updates", false)?;
    let update = update.with_collation(collation.clone());
    Ok(Statement { query, filter, update, multi, upsert, sort, collation, retried: false })
}

/// The update result must still be a storable document.
fn check_size(d: &Document) -> Result<(), CommandError> {
    if encoded_len(d) > bson_object_size_max_bytes {
        return Err(CommandError::document_too_large_after_update(format!(
            "Resulting document after update is larger than {bson_object_size_max_bytes}"
        )));
    }
    Ok(())
}

/// What a statement answers once it wrote, given the document before
/// (`None`: an upsert inserted it), after, and the matched array position.
type Answer<'a> = &'a dyn Fn(Option<&Document>, &Document, Option<usize>) -> Result<Document, CommandError>;

/// What an update does: to documents matching `filter`, apply `update`,
/// acknowledged as `ack` asks.
#[derive(Clone, Copy)]
struct Change<'a> {
    filter: &'a Filter,
    update: &'a Update,
    ack: Ack,
    /// The collection's validator and the command's bypass flag.
    validator: Option<&'a (Validator, bool)>,
    /// A retryable statement: its record, written with its write, holds
    /// its answer.
    log: Option<(&'a StmtLog<'a>, Answer<'a>)>,
}

impl Change<'_> {
    fn validate(&self, new: &Document, old: Option<&Document>) -> Result<(), CommandError> {
        match self.validator {
            Some((v, bypass)) => v.check(new, old, *bypass),
            None => Ok(()),
        }
    }

    /// The statement record to write with this change, if retryable.
    fn record(
        &self,
        old: Option<&Document>,
        new: &Document,
        pos: Option<usize>,
    ) -> Result<Option<doc::sessions::Record<'_>>, CommandError> {
        self.log.map(|(log, answer)| log.record(answer(old, new, pos)?)).transpose()
    }
}

/// An update statement's answer: `n`, `nModified` and an upsert's `_id`.
fn update_answer(old: Option<&Document>, new: &Document, _pos: Option<usize>) -> Result<Document, CommandError> {
    Ok(match old {
        Some(_) => doc! { "n": 1i64, "nModified": 1i64 },
        None => doc! { "n": 1i64, "nModified": 0i64, "upserted": new.get("_id").cloned().unwrap_or(Bson::Null) },
    })
}

/// Update the document at `rid` (last seen as `doc`, matched at `pos`):
/// returns the document before and after, or `None` if it no longer
/// exists or matches.
fn update_document(
    shared: &Shared,
    coll: &Collection,
    rid: u64,
    (mut doc, mut pos): (Document, Option<usize>),
    change: &Change,
) -> Result<Option<(Document, Document, bool)>, CommandError> {
    let Change { filter, update, ack, .. } = *change;
    let engine = shared.catalog.engine();
    loop {
        let new = update.apply(&doc, pos, false)?;
        check_size(&new)?;
        if doc::bson_bytes::encode(&new).ok() == doc::bson_bytes::encode(&doc).ok() {
            return Ok(Some((doc, new, false)));
        }
        change.validate(&new, Some(&doc))?;
        let record = change.record(Some(&doc), &new, pos)?;
        if coll.replace(engine, rid, &doc, &new, ack, record.as_ref().map(|r| r as &dyn Stamp))? {
            return Ok(Some((doc, new, true)));
        }
        // Someone else changed it: read it again and match again.
        let Some(current) = coll.get(engine, rid)? else { return Ok(None) };
        let (ok, p) = filter.try_matches_at(&current)?;
        if !ok {
            return Ok(None);
        }
        doc = current;
        pos = p;
    }
}

/// Insert an upsert's document; returns it (with its `_id`).
fn upsert(shared: &Shared, ns: &Namespace, query: &Document, change: &Change) -> Result<Document, CommandError> {
    let (update, ack) = (change.update, change.ack);
    let new = update.upsert_document(query)?;
    // Insert rules for the new document's names, before its validator.
    if let Some(id) = new.get("_id") {
        query::field_names::check_id_for_insert(id, query::field_names::IdFor::Upsert)?;
    }
    change.validate(&new, None)?;
    check_size(&new)?;
    let new = with_id_first(&new);
    let record = change.record(None, &new, None)?;
    let coll = shared.catalog.get_or_create(ns)?;
    let stored = coll.insert(shared.catalog.engine(), &new, ack, record.as_ref().map(|r| r as &dyn Stamp))?;
    if coll.capped.is_some() {
        shared.capped_inserts.send_modify(|n| *n += 1);
    }
    Ok(stored)
}

pub(crate) fn run_statement(
    shared: &Shared,
    ns: &Namespace,
    cmd: &Document,
    st: &Statement,
    ack: Ack,
    log: Option<&StmtLog>,
) -> Result<Outcome, CommandError> {
    let mut out = Outcome::default();
    let validator = validator_of(shared, ns, cmd)?;
    let change = Change {
        filter: &st.filter,
        update: &st.update,
        ack,
        validator: validator.as_ref(),
        log: log.map(|l| (l, &update_answer as Answer)),
    };
    if let Some(coll) = shared.catalog.get(ns).filter(|_| !st.sort.is_empty()) {
        // A sorted single update: the first match in sort order.
        let none = Deadline::none();
        let (query, filter) = (&st.query, &st.filter);
        while let Some((rid, d, pos)) =
            first_match(shared, &coll, ns, (query, filter, st.collation.as_ref()), &st.sort, &none)?
        {
            if let Some((_, _, changed)) = update_document(shared, &coll, rid, (d, pos), &change)? {
                out.n = 1;
                out.modified = i64::from(changed);
                break;
            }
        }
    } else if let Some(coll) = shared.catalog.get(ns) {
        let candidates: Box<dyn Iterator<Item = Result<(u64, Document), DocError>>> =
            match point_id(&st.query, st.collation.as_ref(), &coll) {
                Some(id) => Box::new(coll.find_rid_by_id(shared.catalog.engine(), id)?.into_iter().map(Ok)),
                None => Box::new(ScanIter::new(shared, ns).results()),
            };
        for candidate in candidates {
            let (rid, d) = candidate?;
            let (ok, pos) = st.filter.try_matches_at(&d)?;
            if !ok {
                continue;
            }
            if let Some((_, _, changed)) = update_document(shared, &coll, rid, (d, pos), &change)? {
                out.n += 1;
                out.modified += i64::from(changed);
                if !st.multi {
                    break;
                }
            }
        }
    }
    if out.n == 0 && st.upsert {
        match upsert(shared, ns, &st.query, &change) {
            Ok(new) => {
                out.n = 1;
                out.upserted = new.get("_id").cloned();
            }
            // A concurrent upsert inserted the same `_id` first: the
            // statement now matches it, so update it (as mongod retries).
            Err(e) if e.code == 11000 && Filter::id_equality(&st.query).is_some() && !st.retried => {
                return run_statement(shared, ns, cmd, &Statement { retried: true, ..st.clone() }, ack, log);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

pub fn update(shared: &Shared, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
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
    let ordered = bool_option(cmd, "ordered", "update", true)?;
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
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
        run_statement(shared, &ns, cmd, &st, STATEMENT_ACK, log.as_ref())
    });
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, ack, reply)
}

/// The first match of `query` (parsed as `filter`, under `collation`) in
/// sort order (or record order without a sort).
fn first_match(
    shared: &Shared,
    coll: &Arc<Collection>,
    ns: &Namespace,
    (query, filter, collation): (&Document, &Filter, Option<&Arc<Collation>>),
    sort: &Sort,
    deadline: &Deadline,
) -> Result<Option<(u64, Document, Option<usize>)>, CommandError> {
    if let Some(id) = point_id(query, collation, coll) {
        return Ok(coll.find_rid_by_id(shared.catalog.engine(), id)?.map(|(rid, d)| (rid, d, None)));
    }
    let mut best: Option<(u64, Document, Option<usize>)> = None;
    let mut scan = ScanIter::new(shared, ns);
    for (rid, d) in scan.by_ref() {
        deadline.check()?;
        let (ok, pos) = filter.try_matches_at(&d)?;
        if !ok {
            continue;
        }
        if sort.is_empty() {
            return Ok(Some((rid, d, pos)));
        }
        if best.as_ref().is_none_or(|(_, b, _)| sort.compare(&d, b).is_lt()) {
            best = Some((rid, d, pos));
        }
    }
    if let Some(e) = scan.error {
        return Err(e.into());
    }
    Ok(best)
}

pub fn find_and_modify(shared: &Shared, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?;
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
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'findAndModify.sort' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
    })?;
    let fields = match cmd.get("fields") {
        Some(Bson::Document(f)) if !f.is_empty() => Some(Projection::parse_in(f, &scope)?),
        None | Some(Bson::Null) | Some(Bson::Document(_)) => None,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'findAndModify.fields' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
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
            return acknowledge(shared, ack, answer);
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
    let engine = shared.catalog.engine();
    if let Some(coll) = shared.catalog.get(&ns) {
        // Retried when the chosen document changes before it is written.
        while let Some((rid, d, pos)) =
            first_match(shared, &coll, &ns, (&query, &filter, collation.as_ref()), &sort, &deadline)?
        {
            match &update {
                None => {
                    shared.opcounters.delete.fetch_add(1, Ordering::Relaxed);
                    let reply = doc! { "lastErrorObject": { "n": 1 }, "value": project(&d, pos)? };
                    let record = log.as_ref().map(|l| l.record(reply.clone())).transpose()?;
                    if coll.delete(engine, rid, &d, ack, record.as_ref().map(|r| r as &dyn Stamp))? {
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
