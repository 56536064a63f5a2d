//! What every write command shares: acknowledgement (write concern and
//! the deferred journal sync), validators, and the per-statement reply.

use crate::args::bool_option;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use bson::{doc, Bson, Document};
use doc::catalog::{Ack, Collection, DocError, Namespace};
use doc::sessions::Stamp;
use query::Filter;

/// The statements of a write command commit without waiting for the
/// journal fsync; the command then waits once, before it replies, for all
/// of them (with `j: true`, the default) — so a 1,000-document insert costs
/// one fsync, not 1,000, and nothing is acknowledged before it is durable.
pub(crate) const STATEMENT_ACK: Ack = Ack::Written;

/// Wait for the journal fsync a write command's acknowledgement needs,
/// or leave the wait to the connection when `call` defers it
/// ([`Call::owes_sync`]). `None`: no connection awaits (a write inside
/// an aggregate), so the journal is synced here.
pub(crate) fn acknowledge(shared: &Ctx<'_>, call: Option<&Call>, ack: Ack, reply: Document) -> CommandResult {
    if ack != Ack::Journaled || call.is_some_and(Call::defer_sync) {
        return Ok(reply);
    }
    shared
        .catalog
        .engine()
        .sync_journal()
        .map_err(|e| CommandError::internal_error(format!("the journal could not be made durable: {e}")))?;
    Ok(reply)
}

// Where a command's writes go (`ctx.rs`): into its multi-document
// transaction, or each into a storage transaction of its own, committed
// with its statement record `stamp` and acknowledged as `ack`. The one
// place that decides.

/// The command's transaction, if it runs in one, its write to `coll`
/// noted (`transactions.rs` invariant 5).
fn in_txn<'c>(shared: &'c Ctx<'_>, coll: &Collection) -> Result<Option<&'c storage::Txn>, DocError> {
    let Some(open) = shared.in_transaction() else { return Ok(None) };
    if !open.note_write(coll, coll.indexes()) {
        let table = coll.records_table().to_string();
        return Err(DocError::Storage(storage::StorageError::WriteConflict { table, key: Vec::new(), holder: 0 }));
    }
    Ok(Some(&open.txn))
}

/// Refuse a client's write to `system.profile` (only the profiler writes
/// there), as mongod does.
pub(crate) fn check_writable(ns: &Namespace) -> Result<(), CommandError> {
    match ns.coll == "system.profile" {
        true => Err(CommandError::invalid_namespace(format!("cannot write to '{ns}'"))),
        false => Ok(()),
    }
}

/// Insert `doc` (an `_id` added first if missing); returns it as stored.
pub(crate) fn insert_doc(
    shared: &Ctx<'_>,
    coll: &Collection,
    doc: &Document,
    ack: Ack,
    stamp: Option<&dyn Stamp>,
) -> Result<Document, DocError> {
    match in_txn(shared, coll)? {
        Some(txn) => coll.insert_in(txn, doc, &shared.conflicts.tally),
        None => coll.insert(shared.catalog.engine(), doc, (ack, &shared.conflicts), stamp),
    }
}

/// Insert the documents of one insert command: a result per document
/// tried, in order; `ordered` stops at the first failure.
pub(crate) fn insert_docs(
    shared: &Ctx<'_>,
    coll: &Collection,
    docs: &[&Document],
    ordered: bool,
    ack: Ack,
    stamp: Option<&dyn Stamp>,
) -> Vec<Result<(), DocError>> {
    let txn = match in_txn(shared, coll) {
        Ok(Some(txn)) => txn,
        Ok(None) => return coll.insert_many(shared.catalog.engine(), docs, ordered, (ack, &shared.conflicts), stamp),
        Err(e) => return vec![Err(e)],
    };
    // In a transaction the first failure ends the batch (as mongod), ordered or not.
    let mut results = Vec::with_capacity(docs.len());
    for d in docs {
        let result = coll.insert_in(txn, d, &shared.conflicts.tally).map(|_| ());
        let failed = result.is_err();
        results.push(result);
        if failed {
            break;
        }
    }
    results
}

/// Delete the document at `rid` if it is still `doc`; whether it did.
pub(crate) fn delete_doc(
    shared: &Ctx<'_>,
    coll: &Collection,
    (rid, doc): (u64, &Document),
    ack: Ack,
    stamp: Option<&dyn Stamp>,
) -> Result<bool, DocError> {
    match in_txn(shared, coll)? {
        Some(txn) => Ok(coll.delete_in(txn, rid, doc, &shared.conflicts.tally)?.is_some()),
        None => coll.delete(shared.catalog.engine(), rid, doc, (ack, &shared.conflicts), stamp),
    }
}

/// Replace the document at `rid` by `new` if it is still `old`; whether
/// it did.
pub(crate) fn replace_doc(
    shared: &Ctx<'_>,
    coll: &Collection,
    (rid, old, new): (u64, &Document, &Document),
    ack: Ack,
    stamp: Option<&dyn Stamp>,
) -> Result<bool, DocError> {
    match in_txn(shared, coll)? {
        Some(txn) => coll.replace_in(txn, rid, (old, new), &shared.conflicts.tally),
        None => coll.replace(shared.catalog.engine(), rid, old, new, (ack, &shared.conflicts), stamp),
    }
}

/// MaxTimeMSExpired: a statement interrupted by its command's time limit.
const INTERRUPTED_CODE: i32 = 50;

/// A collection's document validator (`validator`, `validationLevel`,
/// `validationAction`), checked on insert and update.
pub(crate) struct Validator {
    pub(crate) filter: Filter,
    /// The validator as written, which `errInfo.details` explains.
    pub(crate) spec: Document,
    /// `moderate`: updates of documents that did not pass are not checked.
    pub(crate) moderate: bool,
    /// `warn`: log instead of refusing.
    pub(crate) warn: bool,
}

impl Validator {
    /// The validator of collection `options`, if it has one in force.
    pub fn of(options: &Document) -> Result<Option<Validator>, CommandError> {
        let level = options.get_str("validationLevel").unwrap_or("strict");
        let action = options.get_str("validationAction").unwrap_or("error");
        if !matches!(level, "off" | "strict" | "moderate") {
            return Err(CommandError::bad_value(format!(
                "Enumeration value '{level}' for field 'validationLevel' is not a valid value."
            )));
        }
        if !matches!(action, "error" | "warn" | "errorAndLog") {
            return Err(CommandError::bad_value(format!(
                "Enumeration value '{action}' for field 'validationAction' is not a valid value."
            )));
        }
        let spec = match options.get("validator") {
            None => return Ok(None),
            Some(Bson::Document(v)) => v,
            Some(other) => return Err(crate::args::wrong_type("create.validator", other, "object")),
        };
        let filter = Filter::parse(spec)?;
        if spec.is_empty() || level == "off" {
            return Ok(None);
        }
        Ok(Some(Validator { filter, spec: spec.clone(), moderate: level == "moderate", warn: action == "warn" }))
    }

    /// Check `new` (replacing `old`, for an update); `bypass` is the
    /// command's `bypassDocumentValidation`.
    pub fn check(&self, new: &Document, old: Option<&Document>, bypass: bool) -> Result<(), CommandError> {
        if bypass || self.filter.matches(new) || (self.moderate && old.is_some_and(|o| !self.filter.matches(o))) {
            return Ok(());
        }
        let err_info = query::validation_error::err_info(&self.spec, new);
        if self.warn {
            tracing::warn!(id = 20294, errInfo = %err_info, "Document would fail validation");
            return Ok(());
        }
        let mut e = CommandError::document_validation_failure("Document failed validation");
        e.extra = Some(Box::new(doc! { "errInfo": err_info }));
        Err(e)
    }
}

/// The validator of the collection at `ns`, with the command's bypass flag.
pub(crate) fn validator_of(
    shared: &Ctx<'_>,
    ns: &Namespace,
    cmd: &Document,
) -> Result<Option<(Validator, bool)>, CommandError> {
    let Some(c) = shared.collection(ns) else { return Ok(None) };
    let name = cmd.keys().next().map_or("", String::as_str);
    let bypass = bool_option(cmd, "bypassDocumentValidation", name, false)?;
    Ok(Validator::of(&c.options)?.map(|v| (v, bypass)))
}

/// A document's own checks before it is inserted: its `_id`, and the
/// collection's validator (with the command's bypass flag).
pub(crate) fn check_insert(d: &Document, validator: Option<&(Validator, bool)>) -> Result<(), CommandError> {
    // A statement may be larger than a stored document may (the message
    // allows for the statement around one): its own error, as mongod's.
    let size = doc::bson_bytes::encoded_len(d);
    if size > crate::limits::bson_object_size_max_bytes {
        return Err(CommandError::bad_value(format!(
            "object to insert too large. size in bytes: {size}, max size: {}",
            crate::limits::bson_object_size_max_bytes
        )));
    }
    if let Some(id) = d.get("_id") {
        query::field_names::check_id_for_insert(id, query::field_names::IdFor::Insert)?;
    }
    match validator {
        Some((v, bypass)) => v.check(d, None, *bypass),
        None => Ok(()),
    }
}

/// What one write statement did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Documents matched (update), inserted or deleted, upserts included.
    pub n: i64,
    /// Documents changed by an update.
    pub modified: i64,
    /// The `_id` of a document an upsert inserted.
    pub upserted: Option<Bson>,
}

/// Run each statement of a write command, adding up what each did and
/// reporting failures as `writeErrors` by index; an ordered command stops
/// at its first failure. `updates` adds `nModified` and `upserted`. A
/// statement that runs out of time (`maxTimeMS`) fails the command.
pub(crate) fn write_reply<T>(
    items: &[T],
    ordered: bool,
    updates: bool,
    mut run: impl FnMut(usize, &T) -> Result<Outcome, CommandError>,
) -> Result<Document, CommandError> {
    let (mut n, mut modified) = (0i64, 0i64);
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    // Validation details stop once they take 8 MiB of the reply, so that
    // a batch of failing documents cannot build an unbounded reply.
    const DETAILS_BUDGET: usize = 8 << 20;
    let mut details_bytes = 0;
    for (i, item) in items.iter().enumerate() {
        match run(i, item) {
            Ok(o) => {
                n += o.n;
                modified += o.modified;
                if let Some(id) = o.upserted {
                    upserted.push(Bson::Document(doc! { "index": i as i32, "_id": id }));
                }
            }
            // An interruption (the time limit) ends the command, as mongod's.
            Err(e) if e.code == INTERRUPTED_CODE => return Err(e),
            Err(e) => {
                let mut we = doc! { "index": i as i32, "code": e.code, "errmsg": &e.errmsg };
                if let Some(extra) = e.extra {
                    let mut extra = *extra;
                    if let Ok(info) = extra.get_document_mut("errInfo") {
                        if info.contains_key("details") {
                            details_bytes += doc::bson_bytes::encoded_len(info);
                            if details_bytes > DETAILS_BUDGET {
                                info.remove("details");
                                info.insert("note", "detailed error was left out: the reply's details reached 8 MiB");
                            }
                        }
                    }
                    we.extend(extra);
                }
                errors.push(Bson::Document(we));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! { "n": n };
    if updates {
        reply.insert("nModified", modified);
        if !upserted.is_empty() {
            reply.insert("upserted", upserted);
        }
    }
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
