//! Argument parsing shared by every command, as mongod's IDL does it:
//! field checks, namespaces, options, filters, write concerns.

use crate::error::CommandError;
use crate::limits::*;
use crate::net::wire::OpMsg;
use bson::{Bson, Document};
use doc::catalog::{check_db_name, Ack, Namespace};
use query::expr::Scope;
pub(crate) use query::type_name;
use query::Filter;

pub(crate) type CommandResult = Result<Document, CommandError>;
/// A command's outcome as a [`crate::reply::Reply`] (a cursor's reply,
/// written as BSON).
pub(crate) type ReplyResult = Result<crate::reply::Reply, CommandError>;

/// mongod's IDL error for the field at `path` (e.g. `find.let`) holding `v`
/// of the wrong type. `expected` is one type name (`"object"`, giving
/// "expected type 'object'") or a list as mongod shows it (`"[long, int]"`,
/// giving "expected types '[long, int']": mongod's IDL puts the closing
/// quote inside the bracket). Every such message should come from here.
pub(crate) fn wrong_type(path: &str, v: &Bson, expected: &str) -> CommandError {
    let found = type_name(v);
    let message = match expected.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        Some(list) => format!("BSON field '{path}' is the wrong type '{found}', expected types '[{list}']"),
        None => format!("BSON field '{path}' is the wrong type '{found}', expected type '{expected}'"),
    };
    CommandError::type_mismatch(message)
}

/// The acknowledgement a write command's `writeConcern` asks for: after
/// the journal fsync (the default, `j: true`), or after the journal write
/// (`j: false`).
pub(crate) fn ack_of(cmd: &Document) -> Result<Ack, CommandError> {
    let Some(wc) = cmd.get("writeConcern") else { return Ok(Ack::Journaled) };
    let wc = match wc {
        Bson::Document(wc) => wc,
        Bson::Null => return Ok(Ack::Journaled),
        other => return Err(wrong_type("writeConcern", other, "object")),
    };
    match wc.get("j") {
        None | Some(Bson::Null) | Some(Bson::Boolean(true)) => Ok(Ack::Journaled),
        Some(Bson::Boolean(false)) if wc.get_bool("fsync") == Ok(true) => Ok(Ack::Journaled),
        Some(Bson::Boolean(false)) => Ok(Ack::Written),
        Some(other @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            let zero = matches!(other, Bson::Int32(0) | Bson::Int64(0)) || other.as_f64() == Some(0.0);
            Ok(if zero { Ack::Written } else { Ack::Journaled })
        }
        Some(other) => Err(CommandError::failed_to_parse(format!(
            "j must be numeric or a boolean value, found: {}",
            type_name(other)
        ))),
    }
}

/// The commands that take a write concern (writes and DDL), which a
/// write concern this one-member replica set cannot satisfy answers with
/// a `writeConcernError`.
pub(crate) const WRITE_CONCERN_COMMANDS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "bulkWrite",
    "create",
    "drop",
    "dropDatabase",
    "renameCollection",
    "collMod",
    "createIndexes",
    "dropIndexes",
    "commitTransaction",
    "abortTransaction",
];

/// The `writeConcernError` for a write concern a one-member replica set
/// cannot satisfy, as mongod answers it (the write itself is done): `w`
/// above 1 (UnsatisfiableWriteConcern, 100), a mode it does not know
/// (UnknownReplWriteConcern, 79).
pub(crate) fn unsatisfiable_write_concern(cmd: &Document) -> Option<Document> {
    let wc = cmd.get_document("writeConcern").ok()?;
    let w = wc.get("w")?;
    let (code, name, errmsg) = match w {
        Bson::String(mode) if mode != "majority" => (
            79,
            "UnknownReplWriteConcern",
            format!("No write concern mode named '{mode}' found in replica set configuration"),
        ),
        other => match integral_w(other) {
            Some(n) if n > 1 => (100, "UnsatisfiableWriteConcern", "Not enough data-bearing nodes".to_string()),
            _ => return None,
        },
    };
    let mut shown = wc.clone();
    shown.insert("provenance", "clientSupplied");
    Some(bson::doc! { "code": code, "codeName": name, "errmsg": errmsg, "errInfo": { "writeConcern": shown } })
}

/// A numeric `w`.
fn integral_w(w: &Bson) -> Option<i64> {
    match w {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(d) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

/// Fields every command may carry (sessions, transactions, read and
/// write concerns, the stable API, driver metadata).
pub(crate) const GENERIC_FIELDS: &[&str] = &[
    "lsid",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "stmtId",
    "readConcern",
    "writeConcern",
    "comment",
    "maxTimeMS",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "bypassDocumentValidation",
    "mayBypassWriteBlocking",
    "let",
];

/// Refuse fields a command (or one of its statements, `path`
/// "update.updates") does not know, as MongoDB's command parser does.
pub(crate) fn check_fields(doc: &Document, path: &str, known: &[&str], statement: bool) -> Result<(), CommandError> {
    for (i, k) in doc.keys().enumerate() {
        if (!statement && i == 0) || known.contains(&k.as_str()) {
            continue;
        }
        if !statement && (k.starts_with('$') || GENERIC_FIELDS.contains(&k.as_str())) {
            continue;
        }
        return Err(CommandError::unknown_parameter(format!("BSON field '{path}.{k}' is an unknown field.")));
    }
    Ok(())
}

pub(crate) fn db_of(cmd: &Document) -> Result<&str, CommandError> {
    let db = cmd.get_str("$db").map_err(|_| CommandError::failed_to_parse("the command needs a $db string"))?;
    check_db_name(db).map_err(CommandError::from)?;
    Ok(db)
}

/// The namespace a command's first field names (`{find: "coll", $db}`).
pub(crate) fn namespace(cmd: &Document, name: &str) -> Result<Namespace, CommandError> {
    let db = db_of(cmd)?;
    match cmd.get(name) {
        Some(Bson::String(coll)) => Namespace::new(db, coll).map_err(CommandError::from),
        _ => Err(CommandError::invalid_namespace(format!(
            "collection name has invalid type {}",
            cmd.get(name).map(type_name).unwrap_or("missing")
        ))),
    }
}

/// A boolean option read as MongoDB's IDL reads `safeBool`: a bool or a
/// number (non-zero is true); missing or null is `default`. `context` is
/// the command (or statement) path the error names, e.g. `find` or
/// `update.updates`.
pub(crate) fn bool_option(doc: &Document, field: &str, context: &str, default: bool) -> Result<bool, CommandError> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(default),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(Bson::Int32(n)) => Ok(*n != 0),
        Some(Bson::Int64(n)) => Ok(*n != 0),
        Some(Bson::Double(d)) => Ok(*d != 0.0),
        Some(Bson::Decimal128(d)) => Ok(decimal_is_nonzero(d.bytes())),
        Some(other) => Err(wrong_type(&format!("{context}.{field}"), other, "[bool, long, int, decimal, double]")),
    }
}

/// Whether an IEEE 754-2008 BID decimal128 (little-endian bytes) is not
/// zero: infinities and NaN are not; a non-canonical coefficient is zero.
pub(crate) fn decimal_is_nonzero(bytes: [u8; 16]) -> bool {
    let v = u128::from_le_bytes(bytes);
    if (v >> 125) & 0b11 == 0b11 {
        return (v >> 122) & 0b11111 >= 0b11110;
    }
    v & ((1u128 << 113) - 1) != 0
}

/// A non-negative integer option (int, long or integral double).
pub(crate) fn count_option(cmd: &Document, name: &str) -> Result<Option<i64>, CommandError> {
    match cmd.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(i)) => Ok(Some((*i).into())),
        Some(Bson::Int64(i)) => Ok(Some(*i)),
        Some(Bson::Double(d)) if d.fract() == 0.0 => Ok(Some(*d as i64)),
        Some(other) => Err(wrong_type(name, other, "[long, int, decimal, double]")),
    }
}

/// The variables of a command's `let` (constants for its `$expr`s).
pub(crate) fn scope_of(cmd: &Document) -> Result<Scope, CommandError> {
    match cmd.get("let") {
        None | Some(Bson::Null) => Ok(Scope::default()),
        Some(Bson::Document(vars)) => Ok(Scope::with_let(Some(vars))?),
        Some(other) => Err(wrong_type("let", other, "object")),
    }
}

/// The filter in field `name` of `cmd` (missing or null: everything),
/// parsed with `scope`'s variables.
pub(crate) fn filter_of(cmd: &Document, name: &str, scope: &Scope) -> Result<(Document, Filter), CommandError> {
    let f = match cmd.get(name) {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(wrong_type(name, other, "object")),
    };
    let parsed = Filter::parse_in(&f, scope)?;
    Ok((f, parsed))
}

/// The statements of a write command: the body's array or the document
/// sequence of the same name.
pub(crate) fn statements(msg: &OpMsg, cmd_name: &str, field: &str) -> Result<Vec<Document>, CommandError> {
    let cmd: &Document = &msg.body;
    let docs: Vec<Document> = match (cmd.get(field), msg.sequences.iter().find(|(id, _)| id == field)) {
        (Some(Bson::Array(items)), None) => items
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(wrong_type(&format!("{cmd_name}.{field}.{i}"), other, "object")),
            })
            .collect::<Result<_, _>>()?,
        (None, Some((_, seq))) => seq.clone(),
        (Some(_), Some(_)) => {
            return Err(CommandError::bad_value(format!("{field} given both in the body and as a sequence")))
        }
        (Some(other), None) => return Err(wrong_type(&format!("{cmd_name}.{field}"), other, "array")),
        (None, None) => {
            return Err(CommandError::failed_to_parse(format!(
                "BSON field '{cmd_name}.{field}' is missing but a required field"
            )))
        }
    };
    if docs.is_empty() || docs.len() > write_batch_size_max {
        return Err(CommandError::invalid_length(format!(
            "Write batch sizes must be between 1 and {write_batch_size_max}. Got {} operations.",
            docs.len()
        )));
    }
    Ok(docs)
}

pub(crate) fn document_option(cmd: &Document, name: &str) -> Result<Option<Document>, CommandError> {
    match cmd.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d.clone())),
        Some(other) => Err(wrong_type(&format!("find.{name}"), other, "object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_type_writes_mongods_messages() {
        let e = wrong_type("find.let", &Bson::String("x".into()), "object");
        assert_eq!(
            (e.code, e.errmsg.as_str()),
            (14, "BSON field 'find.let' is the wrong type 'string', expected type 'object'")
        );
        let e = wrong_type("limit", &Bson::Boolean(true), "[long, int, decimal, double]");
        assert_eq!(
            e.errmsg,
            "BSON field 'limit' is the wrong type 'bool', expected types '[long, int, decimal, double']"
        );
        let e = wrong_type("create.clusteredIndex", &Bson::Int32(1), "[bool]");
        assert_eq!(e.errmsg, "BSON field 'create.clusteredIndex' is the wrong type 'int', expected types '[bool']");
    }
}
