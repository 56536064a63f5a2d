//! Update and delete statements: parsing, matching, applying and
//! upserting one statement (shared by `update`, `delete`,
//! `findAndModify` and `bulkWrite`).

use crate::args::bool_option;
use crate::args::count_option;
use crate::args::filter_of;
use crate::error::CommandError;
use crate::exec::access;
use crate::exec::call::OpDebug;
use crate::exec::ctx::Ctx;
use crate::exec::deadline::Deadline;
use crate::exec::scan::check_hint;
use crate::exec::scan::collation_of;
use crate::exec::scan::matches_stored;
use crate::exec::write::validator_of;
use crate::exec::write::Outcome;
use crate::exec::write::Validator;
use crate::exec::write::STATEMENT_ACK;
use crate::exec::write::{delete_doc, insert_doc, replace_doc};
use crate::limits::*;
use crate::session::StmtLog;
use bson::{doc, Bson, Document};
use doc::bson_bytes::encoded_len;
use doc::catalog::{with_id_first, Collection, DocError};
use doc::catalog::{Ack, Namespace};
use doc::sessions::Stamp;
use query::expr::Scope;
pub(crate) use query::type_name;
use query::Filter;
use query::{Collation, Sort, Update};
use std::sync::Arc;

/// One `{q, limit}` statement: delete the first match (limit 1) or all,
/// its filter's `$expr`s seeing `scope`'s variables. A retryable one
/// (`log`; limit 1) records itself with its delete.
pub(crate) fn delete_one_spec(
    shared: &Ctx<'_>,
    ns: &Namespace,
    spec: &Document,
    scope: &Scope,
    log: Option<&StmtLog>,
    op: &OpDebug,
) -> Result<i64, CommandError> {
    let ack = STATEMENT_ACK;
    let (filter_doc, filter) = filter_of(spec, "q", scope)?;
    // A hint naming no index fails its statement only, as a planner error.
    crate::exec::scan::check_hint(shared, ns, spec)?;
    let collation = crate::exec::scan::collation_of(shared, ns, spec)?;
    let filter = filter.with_collation(collation.clone());
    let limit = count_option(spec, "limit")?.unwrap_or(0);
    let Some(coll) = shared.collection(ns) else { return Ok(0) };
    let record = log.map(|l| l.record(doc! { "n": 1i64 })).transpose()?;
    let stamp = record.as_ref().map(|r| r as &dyn Stamp);
    // In natural order: a single delete takes the first match.
    let planned = access::plan_write(&coll, &filter_doc, collation.as_ref(), shared.read_ts(), spec.get("hint"));
    op.note_plan(&planned);
    let mut deleted = 0;
    for record in access::candidates(shared, ns, &coll, &planned, Default::default())? {
        let (rid, d) = record?;
        if matches_stored(&filter, &d)?.0
            && delete_doc(shared, &coll, (rid, d.document().map_err(DocError::from)?), ack, stamp)?
        {
            deleted += 1;
            if limit == 1 {
                break;
            }
        }
    }
    Ok(deleted)
}

/// One parsed update statement.
#[derive(Clone)]
pub(crate) struct Statement {
    pub(crate) query: Document,
    pub(crate) filter: Filter,
    pub(crate) update: Update,
    pub(crate) multi: bool,
    pub(crate) upsert: bool,
    /// Which document a single update picks (MongoDB 8.0's `sort`).
    pub(crate) sort: Sort,
    /// The statement's collation (`None`: simple).
    pub(crate) collation: Option<Arc<Collation>>,
    /// Already retried after losing an upsert race.
    pub(crate) retried: bool,
    /// The statement's `hint` (checked).
    pub(crate) hint: Option<Bson>,
}

pub(crate) fn parse_update_field(
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

pub(crate) fn array_filters(spec: &Document) -> Result<Vec<Document>, CommandError> {
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
        Some(other) => Err(crate::args::wrong_type("arrayFilters", other, "array")),
    }
}

/// One `update` statement on `ns` (its collation defaults to the
/// collection's).
pub(crate) fn parse_statement(
    shared: &Ctx<'_>,
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
        Some(other) => return Err(crate::args::wrong_type("update.updates.c", other, "object")),
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
        Some(other) => return Err(crate::args::wrong_type("update.updates.sort", other, "object")),
    };
    let upsert = bool_option(spec, "upsert", "update.updates", false)?;
    let update = update.with_collation(collation.clone());
    let hint = spec.get("hint").cloned();
    Ok(Statement { query, filter, update, multi, upsert, sort, collation, retried: false, hint })
}

/// The update result must still be a storable document.
pub(crate) fn check_size(d: &Document) -> Result<(), CommandError> {
    if encoded_len(d) > bson_object_size_max_bytes {
        return Err(too_large_after_update());
    }
    Ok(())
}

fn too_large_after_update() -> CommandError {
    CommandError::document_too_large_after_update(format!(
        "Resulting document after update is larger than {bson_object_size_max_bytes}"
    ))
}

/// What a statement answers once it wrote, given the document before
/// (`None`: an upsert inserted it), after, and the matched array position.
pub(crate) type Answer<'a> = &'a dyn Fn(Option<&Document>, &Document, Option<usize>) -> Result<Document, CommandError>;

/// What an update does: to documents matching `filter`, apply `update`,
/// acknowledged as `ack` asks.
#[derive(Clone, Copy)]
pub(crate) struct Change<'a> {
    pub(crate) filter: &'a Filter,
    pub(crate) update: &'a Update,
    pub(crate) ack: Ack,
    /// The collection's validator and the command's bypass flag.
    pub(crate) validator: Option<&'a (Validator, bool)>,
    /// A retryable statement: its record, written with its write, holds
    /// its answer.
    pub(crate) log: Option<(&'a StmtLog<'a>, Answer<'a>)>,
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
pub(crate) fn update_answer(
    old: Option<&Document>,
    new: &Document,
    _pos: Option<usize>,
) -> Result<Document, CommandError> {
    Ok(match old {
        Some(_) => modified_answer(),
        None => doc! { "n": 1i64, "nModified": 0i64, "upserted": new.get("_id").cloned().unwrap_or(Bson::Null) },
    })
}

/// The answer of an update statement that modified a document.
fn modified_answer() -> Document {
    doc! { "n": 1i64, "nModified": 1i64 }
}

/// The fast path of an update that only `$set`s existing top-level fields
/// to scalar values (`Update::top_level_scalar_sets`; YCSB's update), in a
/// collection with no validator in force, no index but `_id` and no cap,
/// outside a transaction: the new record is built from the stored bytes
/// (`bson_bytes::set_top_level`) and swapped in if the record is still
/// those bytes, with no `Document` decoded, applied or encoded. Returns
/// whether it modified the document (`false`: the values were already
/// those), or `None` where the general path must run (this one does not
/// apply, or the record changed since it was read).
fn set_in_place(
    shared: &Ctx<'_>,
    coll: &Collection,
    (rid, stored): (u64, &doc::stored::Stored),
    change: &Change,
    log: Option<&StmtLog>,
) -> Result<Option<bool>, CommandError> {
    // A validator bypassed (`bypassDocumentValidation`) checks nothing.
    if !matches!(change.validator, None | Some((_, true))) || shared.in_transaction().is_some() {
        return Ok(None);
    }
    let (Some(old), true) = (stored.bytes(), coll.takes_raw_replace()) else { return Ok(None) };
    let Some(sets) = change.update.top_level_scalar_sets() else { return Ok(None) };
    let new = doc::bson_bytes::set_top_level(old, &sets, doc::limits::stored_depth_max).map_err(DocError::from)?;
    let Some(new) = new else { return Ok(None) };
    if new.len() > bson_object_size_max_bytes {
        return Err(too_large_after_update());
    }
    if new == old {
        return Ok(Some(false));
    }
    let record = log.map(|l| l.record(modified_answer())).transpose()?;
    let stamp = record.as_ref().map(|r| r as &dyn Stamp);
    let ack = (change.ack, &shared.conflicts);
    Ok(coll.replace_raw(shared.catalog.engine(), rid, (old, &new), ack, stamp)?.filter(|&replaced| replaced))
}

/// Update the document at `rid` (last seen as `doc`, matched at `pos`):
/// returns the document before and after, or `None` if it no longer
/// exists or matches.
pub(crate) fn update_document(
    shared: &Ctx<'_>,
    coll: &Collection,
    rid: u64,
    (mut doc, mut pos): (Document, Option<usize>),
    change: &Change,
) -> Result<Option<(Document, Document, bool)>, CommandError> {
    let Change { filter, update, ack, .. } = *change;
    loop {
        let new = update.apply(&doc, pos, false)?;
        check_size(&new)?;
        if doc::bson_bytes::encode(&new).ok() == doc::bson_bytes::encode(&doc).ok() {
            return Ok(Some((doc, new, false)));
        }
        change.validate(&new, Some(&doc))?;
        let record = change.record(Some(&doc), &new, pos)?;
        if replace_doc(shared, coll, (rid, &doc, &new), ack, record.as_ref().map(|r| r as &dyn Stamp))? {
            return Ok(Some((doc, new, true)));
        }
        // Someone else changed it: read it again and match again.
        let Some(current) = coll.get(&shared.reader(), rid)? else { return Ok(None) };
        let (ok, p) = filter.try_matches_at(&current)?;
        if !ok {
            return Ok(None);
        }
        doc = current;
        pos = p;
    }
}

/// Insert an upsert's document; returns it (with its `_id`).
pub(crate) fn upsert(
    shared: &Ctx<'_>,
    ns: &Namespace,
    query: &Document,
    change: &Change,
) -> Result<Document, CommandError> {
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
    let coll = shared.collection_or_create(ns)?;
    let stored = insert_doc(shared, &coll, &new, ack, record.as_ref().map(|r| r as &dyn Stamp))?;
    if coll.capped.is_some() {
        shared.capped_inserts.send_modify(|n| *n += 1);
    }
    Ok(stored)
}

pub(crate) fn run_statement(
    shared: &Ctx<'_>,
    ns: &Namespace,
    cmd: &Document,
    st: &Statement,
    ack: Ack,
    log: Option<&StmtLog>,
    op: &OpDebug,
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
    if let Some(coll) = shared.collection(ns).filter(|_| !st.sort.is_empty()) {
        // A sorted single update: the first match in sort order.
        let none = Deadline::none();
        let (query, filter) = (&st.query, &st.filter);
        while let Some((rid, d, pos)) =
            first_match(shared, &coll, ns, (query, filter, st.collation.as_ref()), &st.sort, (&none, op))?
        {
            if let Some((_, _, changed)) = update_document(shared, &coll, rid, (d, pos), &change)? {
                out.n = 1;
                out.modified = i64::from(changed);
                break;
            }
        }
    } else if let Some(coll) = shared.collection(ns) {
        let planned = access::plan_write(&coll, &st.query, st.collation.as_ref(), shared.read_ts(), st.hint.as_ref());
        op.note_plan(&planned);
        for candidate in access::candidates(shared, ns, &coll, &planned, Default::default())? {
            let (rid, d) = candidate?;
            let (ok, pos) = matches_stored(&st.filter, &d)?;
            if !ok {
                continue;
            }
            if let Some(changed) = set_in_place(shared, &coll, (rid, &d), &change, log)? {
                out.n += 1;
                out.modified += i64::from(changed);
                if !st.multi {
                    break;
                }
                continue;
            }
            let d = d.into_document().map_err(DocError::from)?;
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
                return run_statement(shared, ns, cmd, &Statement { retried: true, ..st.clone() }, ack, log, op);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The first match of `query` (parsed as `filter`, under `collation`) in
/// sort order (or record order without a sort).
pub(crate) fn first_match(
    shared: &Ctx<'_>,
    coll: &Arc<Collection>,
    ns: &Namespace,
    (query, filter, collation): (&Document, &Filter, Option<&Arc<Collation>>),
    sort: &Sort,
    (deadline, op): (&Deadline, &OpDebug),
) -> Result<Option<(u64, Document, Option<usize>)>, CommandError> {
    let planned = access::plan_write(coll, query, collation, shared.read_ts(), None);
    op.note_plan(&planned);
    let mut best: Option<(u64, Document, Option<usize>)> = None;
    let scanning = access::point(&planned.path).is_none();
    for record in access::candidates(shared, ns, coll, &planned, Default::default())? {
        let (rid, d) = record?;
        if scanning {
            deadline.check()?;
        }
        let (ok, pos) = matches_stored(filter, &d)?;
        if !ok {
            continue;
        }
        let d = d.into_document().map_err(DocError::from)?;
        if sort.is_empty() {
            return Ok(Some((rid, d, pos)));
        }
        if best.as_ref().is_none_or(|(_, b, _)| sort.compare(&d, b).is_lt()) {
            best = Some((rid, d, pos));
        }
    }
    Ok(best)
}
