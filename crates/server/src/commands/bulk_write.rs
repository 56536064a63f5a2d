//! The `bulkWrite` command (MongoDB 8.0, `MongoClient.bulkWrite` in the
//! drivers): inserts, updates and deletes across namespaces in one
//! command, run against `admin`, answered by a cursor of per-operation
//! results (`admin.$cmd.bulkWrite`) and summary counts.
//!
//! Each operation runs as the `insert`, `update` or `delete` statement it
//! corresponds to (the same code, the same errors), with its own result
//! or error in the cursor; an ordered command stops at its first error.
//! A retryable `bulkWrite` records each operation under its index's
//! statement id, as the other write commands do.
//!
//! Invariants:
//! 1. The whole command is checked (fields, types, namespace indexes)
//!    before the first operation runs: a malformed command changes nothing.
//! 2. An operation's failure is its own `{ok: 0, idx, code, ...}` entry,
//!    never the command's.

use crate::args::ack_of;
use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::count_option;
use crate::args::db_of;
use crate::args::scope_of;
use crate::args::statements;
use crate::args::wrong_type;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::{Call, OpDebug};
use crate::exec::ctx::Ctx;
use crate::exec::modify::delete_one_spec;
use crate::exec::modify::parse_statement;
use crate::exec::modify::run_statement;
use crate::exec::views::check_not_view;
use crate::exec::write::acknowledge;
use crate::exec::write::check_insert;
use crate::exec::write::insert_doc;
use crate::exec::write::validator_of;
use crate::exec::write::Outcome;
use crate::exec::write::STATEMENT_ACK;
use crate::net::wire::OpMsg;
use crate::session::{Retry, StmtLog};
use bson::{doc, Bson, Document};
use doc::catalog::Namespace;
use doc::sessions::Stamp;
use query::expr::Scope;
use std::sync::atomic::Ordering;

/// The namespace of the results cursor.
pub(crate) const CURSOR_COLLECTION: &str = "$cmd.bulkWrite";

/// One operation of the command, checked.
enum Op {
    Insert {
        ns: usize,
        document: Document,
    },
    /// As an `update` command's statement (`q`, `u`, `multi`, ...).
    Update {
        ns: usize,
        statement: Document,
    },
    /// As a `delete` command's statement (`q`, `limit`, ...).
    Delete {
        ns: usize,
        statement: Document,
    },
}

impl Op {
    fn ns(&self) -> usize {
        match self {
            Op::Insert { ns, .. } | Op::Update { ns, .. } | Op::Delete { ns, .. } => *ns,
        }
    }

    fn multi(&self) -> bool {
        match self {
            Op::Insert { .. } => false,
            Op::Update { statement, .. } => statement.get_bool("multi").unwrap_or(false),
            Op::Delete { statement, .. } => statement.get_i64("limit") == Ok(0),
        }
    }
}

fn missing(field: &str) -> CommandError {
    CommandError::missing_required_field(format!("BSON field 'bulkWrite.{field}' is missing but a required field"))
}

/// Read one `ops` entry: `{insert|update|delete: <nsInfo index>, ...}`.
fn parse_op(op: &Document, namespaces: usize) -> Result<Op, CommandError> {
    let Some((kind, index)) = op.iter().next() else {
        return Err(CommandError::failed_to_parse("Unrecognized bulkWrite operation: {}"));
    };
    let known: &[&str] = match kind.as_str() {
        "insert" => &["insert", "document"],
        "update" => &[
            "update",
            "filter",
            "updateMods",
            "multi",
            "upsert",
            "arrayFilters",
            "hint",
            "collation",
            "sort",
            "constants",
            "upsertSupplied",
        ],
        "delete" => &["delete", "filter", "multi", "hint", "collation"],
        other => return Err(CommandError::failed_to_parse(format!("Unrecognized bulkWrite operation: {other}"))),
    };
    check_fields(op, "bulkWrite.ops", known, true)?;
    let ns = match index {
        Bson::Int32(i) => *i,
        other => return Err(wrong_type(&format!("bulkWrite.ops.{kind}"), other, "int")),
    };
    if ns < 0 || ns as usize >= namespaces {
        return Err(CommandError::bad_value(format!(
            "BulkWrite ops entry {kind} has an invalid nsInfo index {ns}: nsInfo has {namespaces} entries"
        )));
    }
    let ns = ns as usize;
    let document = |field: &str| match op.get(field) {
        Some(Bson::Document(d)) => Ok(d.clone()),
        Some(other) => Err(wrong_type(&format!("bulkWrite.ops.{field}"), other, "object")),
        None => Err(missing(&format!("ops.{field}"))),
    };
    // The typed fields fail the whole command, before anything runs, as
    // mongod's parser does; what they mean fails only their operation.
    let typed = |field: &str, ok: fn(&Bson) -> bool, expected: &str| match op.get(field) {
        Some(v) if !ok(v) => Err(wrong_type(&format!("bulkWrite.ops.{field}"), v, expected)),
        _ => Ok(()),
    };
    typed("updateMods", |v| matches!(v, Bson::Document(_) | Bson::Array(_)), "object or array")?;
    typed("hint", |v| matches!(v, Bson::Document(_) | Bson::String(_)), "object or string")?;
    typed("sort", |v| matches!(v, Bson::Document(_)), "object")?;
    typed("arrayFilters", |v| matches!(v, Bson::Array(_)), "array")?;
    typed("constants", |v| matches!(v, Bson::Document(_)), "object")?;
    query::Collation::parse(op.get("collation"))?;
    match kind.as_str() {
        "insert" => Ok(Op::Insert { ns, document: document("document")? }),
        "update" => {
            let filter = document("filter")?;
            let mods = op.get("updateMods").ok_or_else(|| missing("ops.updateMods"))?;
            // Option types fail the whole command, as in `update`; the
            // statement's other checks (its update, sort, hint) fail only
            // the operation, when it runs.
            let multi = bool_option(op, "multi", "bulkWrite.ops", false)?;
            bool_option(op, "upsert", "bulkWrite.ops", false)?;
            let mut statement = doc! { "q": filter, "u": mods.clone(), "multi": multi };
            for field in ["upsert", "arrayFilters", "hint", "collation", "sort"] {
                if let Some(v) = op.get(field) {
                    statement.insert(field, v.clone());
                }
            }
            if let Some(c) = op.get("constants") {
                statement.insert("c", c.clone());
            }
            Ok(Op::Update { ns, statement })
        }
        _ => {
            let filter = document("filter")?;
            let multi = bool_option(op, "multi", "bulkWrite.ops", false)?;
            let mut statement = doc! { "q": filter, "limit": if multi { 0i64 } else { 1i64 } };
            for field in ["hint", "collation"] {
                if let Some(v) = op.get(field) {
                    statement.insert(field, v.clone());
                }
            }
            Ok(Op::Delete { ns, statement })
        }
    }
}

/// The `nsInfo` entries: `{ns: "db.coll"}` each. A namespace that cannot
/// be written is the error of each operation on it, as mongod reports it.
fn namespaces(msg: &OpMsg) -> Result<Vec<Result<Namespace, CommandError>>, CommandError> {
    let entries = statements(msg, "bulkWrite", "nsInfo").map_err(|e| match e.code {
        9 => missing("nsInfo"),
        _ => e,
    })?;
    entries
        .iter()
        .map(|entry| {
            check_fields(
                entry,
                "bulkWrite.nsInfo",
                &["ns", "collectionUUID", "encryptionInformation", "isTimeseriesNamespace"],
                true,
            )?;
            let full = match entry.get("ns") {
                Some(Bson::String(s)) => s,
                Some(other) => return Err(wrong_type("bulkWrite.nsInfo.ns", other, "string")),
                None => return Err(missing("nsInfo.ns")),
            };
            Ok(match full.split_once('.') {
                Some((db, coll)) => Namespace::new(db, coll).map_err(CommandError::from).and_then(|ns| {
                    if ns.coll.starts_with("system.") {
                        Err(CommandError::invalid_namespace(format!("cannot write to '{ns}'")))
                    } else {
                        Ok(ns)
                    }
                }),
                None => Err(CommandError::invalid_namespace(format!("Invalid namespace specified '{full}'"))),
            })
        })
        .collect()
}

/// What one operation did, as its cursor entry reports it.
struct Done {
    kind: Kind,
    outcome: Outcome,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Insert,
    Update,
    Delete,
}

pub fn bulk_write(shared: &Ctx<'_>, call: &Call, msg: &OpMsg) -> CommandResult {
    let cmd: &Document = &msg.body;
    if db_of(cmd)? != "admin" {
        return Err(CommandError::unauthorized("bulkWrite may only be run against the admin database."));
    }
    check_fields(cmd, "bulkWrite", &["ops", "nsInfo", "errorsOnly", "ordered", "cursor"], false)?;
    let ops = statements(msg, "bulkWrite", "ops").map_err(|e| match e.code {
        9 => missing("ops"),
        _ => e,
    })?;
    let spaces = namespaces(msg)?;
    // In a transaction the first failure ends the command, as mongod's.
    let ordered = bool_option(cmd, "ordered", "bulkWrite", true)? || shared.txn().is_some();
    let errors_only = bool_option(cmd, "errorsOnly", "bulkWrite", false)?;
    let batch_size = match cmd.get("cursor") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(c)) => {
            check_fields(c, "bulkWrite.cursor", &["batchSize"], true)?;
            match count_option(c, "batchSize")? {
                Some(n) if n < 0 => {
                    return Err(CommandError::bad_value(format!(
                        "BSON field 'batchSize' value must be >= 0, actual value '{n}'"
                    )))
                }
                n => n.map(|n| n as usize),
            }
        }
        Some(other) => return Err(wrong_type("bulkWrite.cursor", other, "object")),
    };
    bool_option(cmd, "bypassDocumentValidation", "bulkWrite", false)?;
    let ack = ack_of(cmd)?;
    let ops: Vec<Op> = ops.iter().map(|op| parse_op(op, spaces.len())).collect::<Result<_, _>>()?;
    let scope = scope_of(cmd)?;
    let mut retry = Retry::begin(shared, cmd)?;

    let mut results: Vec<Bson> = Vec::new();
    let (mut inserted, mut matched, mut modified, mut upserted, mut deleted, mut errors) = (0, 0, 0, 0, 0, 0);
    for (i, op) in ops.iter().enumerate() {
        let done =
            spaces[op.ns()].clone().and_then(|ns| run_op(shared, cmd, &ns, op, i, (&scope, &call.op), retry.as_mut()));
        match done {
            Ok(Done { kind, outcome }) => {
                let n = outcome.n as i32;
                match kind {
                    Kind::Insert => inserted += n,
                    Kind::Delete => deleted += n,
                    Kind::Update => {
                        let up = i32::from(outcome.upserted.is_some());
                        matched += n - up;
                        upserted += up;
                        modified += outcome.modified as i32;
                    }
                }
                if !errors_only {
                    let mut entry = doc! { "ok": 1.0, "idx": i as i32, "n": n };
                    if kind == Kind::Update {
                        entry.insert("nModified", outcome.modified as i32);
                        if let Some(id) = outcome.upserted {
                            entry.insert("upserted", doc! { "_id": id });
                        }
                    }
                    results.push(Bson::Document(entry));
                }
            }
            Err(e) => {
                errors += 1;
                let mut entry = doc! { "ok": 0.0, "idx": i as i32, "code": e.code, "codeName": e.code_name.as_ref(), "errmsg": &e.errmsg };
                if let Some(extra) = &e.extra {
                    entry.extend((**extra).clone());
                }
                results.push(Bson::Document(entry));
                if ordered {
                    break;
                }
            }
        }
    }
    let retried = retry.as_ref().map(|r| r.retried.clone()).unwrap_or_default();
    drop(retry);
    let ns = Namespace { db: "admin".into(), coll: CURSOR_COLLECTION.into() };
    let docs = results.into_iter().filter_map(|b| b.as_document().cloned()).collect();
    let mut reply =
        crate::exec::cursors::buffered_cursor(shared, ns, docs, batch_size.or(Some(usize::MAX)))?.into_document();
    reply.remove("ok");
    reply.insert("nErrors", errors);
    reply.insert("nInserted", inserted);
    reply.insert("nMatched", matched);
    reply.insert("nModified", modified);
    reply.insert("nUpserted", upserted);
    reply.insert("nDeleted", deleted);
    if !retried.is_empty() {
        reply.insert("retriedStmtIds", retried);
    }
    reply.insert("ok", 1.0);
    acknowledge(shared, Some(call), ack, reply)
}

/// Run operation `i` on `ns`: as its `insert`, `update` or `delete`
/// statement would run; a retryable one answers from its record if it
/// already ran.
fn run_op(
    shared: &Ctx<'_>,
    cmd: &Document,
    ns: &Namespace,
    op: &Op,
    i: usize,
    (scope, debug): (&Scope, &OpDebug),
    retry: Option<&mut Retry>,
) -> Result<Done, CommandError> {
    check_not_view(shared, ns)?;
    let kind = match op {
        Op::Insert { .. } => Kind::Insert,
        Op::Update { .. } => Kind::Update,
        Op::Delete { .. } => Kind::Delete,
    };
    let counter = match kind {
        Kind::Insert => &shared.opcounters.insert,
        Kind::Update => &shared.opcounters.update,
        Kind::Delete => &shared.opcounters.delete,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let retry = match retry {
        None => None,
        Some(_) if op.multi() => {
            let what = if kind == Kind::Update { "multi=true" } else { "limit=0" };
            return Err(CommandError::invalid_options(format!("Cannot use (or request) retryable writes with {what}")));
        }
        Some(r) => match r.answered(i) {
            Some(a) => {
                let outcome = Outcome {
                    n: a.get_i64("n").unwrap_or(1),
                    modified: a.get_i64("nModified").unwrap_or(0),
                    upserted: a.get("upserted").cloned(),
                };
                return Ok(Done { kind, outcome });
            }
            None => Some(r),
        },
    };
    let log = retry.map(|r| StmtLog::new(r, i));
    let outcome = match op {
        Op::Insert { document, .. } => {
            let validator = validator_of(shared, ns, cmd)?;
            check_insert(document, validator.as_ref())?;
            let coll = shared.collection_or_create(ns)?;
            let record = log.as_ref().map(|l| l.record(doc! { "n": 1i64 })).transpose()?;
            insert_doc(shared, &coll, document, STATEMENT_ACK, record.as_ref().map(|r| r as &dyn Stamp))?;
            if coll.capped.is_some() {
                shared.capped_inserts.send_modify(|n| *n += 1);
            }
            Outcome { n: 1, ..Outcome::default() }
        }
        Op::Update { statement, .. } => run_statement(
            shared,
            ns,
            cmd,
            &parse_statement(shared, ns, statement, scope)?,
            STATEMENT_ACK,
            log.as_ref(),
            debug,
        )?,
        Op::Delete { statement, .. } => {
            Outcome { n: delete_one_spec(shared, ns, statement, scope, log.as_ref(), debug)?, ..Outcome::default() }
        }
    };
    Ok(Done { kind, outcome })
}
