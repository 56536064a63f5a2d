//! Collections and writes: `create`, `drop`, `dropDatabase`,
//! `listCollections`, `listDatabases`, `insert`, `delete`, and the helpers
//! every command shares (namespaces, options, write replies).

use crate::error::CommandError;
use crate::limits::*;
use crate::server::Shared;
use crate::session::{Retry, StmtLog};
use crate::wire::OpMsg;
use bson::{doc, Bson, Document};
use doc::catalog::{check_db_name, Ack, DocError, Namespace};
use doc::sessions::Stamp;
use query::expr::Scope;
use query::Filter;
use std::sync::atomic::Ordering;

pub(crate) type CommandResult = Result<Document, CommandError>;

impl From<DocError> for CommandError {
    fn from(e: DocError) -> CommandError {
        match e {
            DocError::DuplicateKey { ref key, ref collation, .. } => {
                let msg = e.to_string();
                let mut err = CommandError::duplicate_key(msg);
                // keyValue is the `_id` given, also under a collation (where
                // mongod shows the collation key).
                let mut extra = doc! { "keyPattern": { "_id": 1 }, "keyValue": { "_id": (**key).clone() } };
                if let Some(c) = collation {
                    extra.insert("collation", c.0.clone());
                }
                err.extra = Some(Box::new(extra));
                err
            }
            DocError::NamespaceExists(_) => CommandError::namespace_exists(e.to_string()),
            DocError::NamespaceNotFound(_) => CommandError::namespace_not_found(e.to_string()),
            DocError::InvalidNamespace(m) => CommandError::invalid_namespace(m),
            DocError::Unencodable(why) => CommandError::bad_value(why.to_string()),
            DocError::TooDeep(_) => CommandError::with_code(15, e.to_string()),
            DocError::ExceedsCappedSize => CommandError::bad_value(e.to_string()),
            DocError::Corrupt(_) | DocError::Storage(_) => CommandError::internal_error(e.to_string()),
        }
    }
}

/// The acknowledgement a write command's `writeConcern` asks for: after
/// the journal fsync (the default, `j: true`), or after the journal write
/// (`j: false`).
pub(crate) fn ack_of(cmd: &Document) -> Result<Ack, CommandError> {
    let Some(wc) = cmd.get("writeConcern") else { return Ok(Ack::Journaled) };
    let wc = match wc {
        Bson::Document(wc) => wc,
        Bson::Null => return Ok(Ack::Journaled),
        other => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'writeConcern' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
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

/// Fields every command may carry (sessions, transactions, read and
/// write concerns, the stable API, driver metadata).
const GENERIC_FIELDS: &[&str] = &[
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

/// The statements of a write command commit without waiting for the
/// journal fsync; the command then waits once, before it replies, for all
/// of them (with `j: true`, the default) — so a 1,000-document insert costs
/// one fsync, not 1,000, and nothing is acknowledged before it is durable.
pub(crate) const STATEMENT_ACK: Ack = Ack::Written;

thread_local! {
    /// Set while a write command runs on a connection's task: `Some(owed)`.
    static DEFERRED_SYNC: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Run `command` with its journal wait deferred: [`acknowledge`] records
/// that the reply needs a durable journal instead of blocking for it.
/// Returns the reply and whether the caller owes that wait
/// ([`crate::durability::Durability::wait`]) before sending it.
pub(crate) fn deferring_sync<T>(command: impl FnOnce() -> T) -> (T, bool) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFERRED_SYNC.set(None);
        }
    }
    DEFERRED_SYNC.set(Some(false));
    let _reset = Reset;
    let reply = command();
    (reply, DEFERRED_SYNC.get() == Some(true))
}

/// Wait for the journal fsync a write command's acknowledgement needs
/// (or, under [`deferring_sync`], leave the wait to the caller).
pub(crate) fn acknowledge(shared: &Shared, ack: Ack, reply: Document) -> CommandResult {
    if ack != Ack::Journaled {
        return Ok(reply);
    }
    if DEFERRED_SYNC.get().is_some() {
        DEFERRED_SYNC.set(Some(true));
    } else {
        shared
            .catalog
            .engine()
            .sync_journal()
            .map_err(|e| CommandError::internal_error(format!("the journal could not be made durable: {e}")))?;
    }
    Ok(reply)
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

pub(crate) use query::type_name;

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
        // MongoDB's IDL puts the closing quote inside the bracket.
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{context}.{field}' is the wrong type '{}', expected types '[bool, long, int, decimal, double']",
            type_name(other)
        ))),
    }
}

/// Whether an IEEE 754-2008 BID decimal128 (little-endian bytes) is not
/// zero: infinities and NaN are not; a non-canonical coefficient is zero.
fn decimal_is_nonzero(bytes: [u8; 16]) -> bool {
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
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{name}' is the wrong type '{}', expected types '[long, int, decimal, double']",
            type_name(other)
        ))),
    }
}

/// The variables of a command's `let` (constants for its `$expr`s).
pub(crate) fn scope_of(cmd: &Document) -> Result<Scope, CommandError> {
    match cmd.get("let") {
        None | Some(Bson::Null) => Ok(Scope::default()),
        Some(Bson::Document(vars)) => Ok(Scope::with_let(Some(vars))?),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field 'let' is the wrong type '{}', expected type 'object'",
            type_name(other)
        ))),
    }
}

/// The filter in field `name` of `cmd` (missing or null: everything),
/// parsed with `scope`'s variables.
pub(crate) fn filter_of(cmd: &Document, name: &str, scope: &Scope) -> Result<(Document, Filter), CommandError> {
    let f = match cmd.get(name) {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{name}' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
    };
    let parsed = Filter::parse_in(&f, scope)?;
    Ok((f, parsed))
}

pub fn create(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "create")?;
    let options: Document = cmd
        .iter()
        .skip(1)
        .filter(|(k, _)| !k.starts_with('$') && !GENERIC_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(k) = options.keys().find(|k| {
        !matches!(
            k.as_str(),
            "validator"
                | "validationLevel"
                | "validationAction"
                | "capped"
                | "size"
                | "max"
                | "viewOn"
                | "pipeline"
                | "collation"
                | "clusteredIndex"
                | "expireAfterSeconds"
        )
    }) {
        // mongod's other create options are refused as not supported;
        // anything else is not a create option at all.
        const OTHERS: &[&str] = &[
            "timeseries",
            "changeStreamPreAndPostImages",
            "encryptedFields",
            "storageEngine",
            "indexOptionDefaults",
            "idIndex",
            "autoIndexId",
            "temp",
            "flags",
            "recordIdsReplicated",
        ];
        if !OTHERS.contains(&k.as_str()) {
            return Err(CommandError::with_code(40415, format!("BSON field 'create.{k}' is an unknown field.")));
        }
        return Err(CommandError::invalid_options(format!("collection option {k} is not supported yet")));
    }
    // A default collation is kept in full, as mongod reports it; the
    // simple one is no default at all.
    let mut options = options;
    if let Some(given) = options.remove("collation") {
        if let Some(c) = query::Collation::parse(Some(&given))? {
            options.insert("collation", c.full_spec());
        }
    }
    let options = clustered_options(options)?;
    if options.contains_key("viewOn") || options.contains_key("pipeline") {
        if options.contains_key("clusteredIndex") {
            return Err(CommandError::with_code(6026500, "The 'clusteredIndex' option is not supported with views"));
        }
        let options = view_options(shared, &ns, options, "create")?;
        shared.catalog.create(&ns, options)?;
        return Ok(doc! { "ok": 1.0 });
    }
    Validator::of(&options)?;
    let options = capped_options(cmd, options)?;
    shared.catalog.create(&ns, options)?;
    Ok(doc! { "ok": 1.0 })
}

/// Check `clusteredIndex` and `expireAfterSeconds` as mongod's `create`
/// does, in its order, and store them normalized: the index as
/// `{v: 2, key, name, unique: true}` (`name` "_id_" by default), the TTL
/// as a long. `clusteredIndex: false` is an ordinary collection.
fn clustered_options(mut options: Document) -> Result<Document, CommandError> {
    let wrong_type = |field: &str, v: &Bson, expected: &str| {
        CommandError::type_mismatch(format!(
            "BSON field 'create.{field}' is the wrong type '{}', expected {expected}",
            type_name(v)
        ))
    };
    let ttl = match options.get("expireAfterSeconds") {
        None => None,
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => Some(
            number_of(v).ok_or_else(|| wrong_type("expireAfterSeconds", v, "types '[long, int, decimal, double']"))?,
        ),
        Some(v) => return Err(wrong_type("expireAfterSeconds", v, "types '[long, int, decimal, double']")),
    };
    // The IDL parse: a bool (or a number read as one), or a strict spec.
    let spec = match options.get("clusteredIndex") {
        None => None,
        Some(Bson::Boolean(b)) => Some(Err(*b)),
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => Some(Err(number_of(v) != Some(0))),
        Some(Bson::Document(d)) => {
            for (k, v) in d {
                match (k.as_str(), v) {
                    ("v" | "unique", Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)) => {}
                    ("unique", Bson::Boolean(_)) | ("key", Bson::Document(_)) | ("name", Bson::String(_)) => {}
                    ("v", other) => return Err(wrong_type("v", other, "types '[long, int, decimal, double']")),
                    ("unique", other) => {
                        return Err(wrong_type("unique", other, "types '[bool, long, int, decimal, double']"))
                    }
                    ("key", other) => return Err(wrong_type("key", other, "type 'object'")),
                    ("name", other) => return Err(wrong_type("name", other, "type 'string'")),
                    (other, _) => {
                        return Err(CommandError::with_code(
                            40415,
                            format!("BSON field 'create.{other}' is an unknown field."),
                        ))
                    }
                }
            }
            for required in ["key", "unique"] {
                if !d.contains_key(required) {
                    return Err(CommandError::with_code(
                        40414,
                        format!("BSON field 'create.{required}' is missing but a required field"),
                    ));
                }
            }
            Some(Ok(d.clone()))
        }
        Some(other) => return Err(wrong_type("clusteredIndex", other, "types '[bool']")),
    };
    if spec.is_some() {
        let refuse = |code: i32, field: &str| {
            CommandError::with_code(code, format!(
                "'{field}' field for capped collections is not allowed on clustered collections. Did you mean 'capped: true' with 'expireAfterSeconds'?"
            ))
        };
        if options.contains_key("size") {
            return Err(refuse(6049200, "size"));
        }
        if options.contains_key("max") {
            return Err(refuse(6049204, "max"));
        }
        if options.get("capped").is_some_and(|c| !matches!(c, Bson::Boolean(false)) && number_of(c) != Some(0)) {
            return Err(CommandError::with_code(
                6127800,
                "Clustered capped collection only available with 'enableTestCommands' server parameter",
            ));
        }
    }
    let spec = match spec {
        None if ttl.is_some() => {
            return Err(CommandError::invalid_options(
                "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is specified",
            ))
        }
        None => return Ok(options),
        Some(Err(false)) if ttl.is_some() => {
            return Err(CommandError::invalid_options(
                "'expireAfterSeconds' can be used only for clustered collections or timeseries collections",
            ))
        }
        Some(Err(false)) => {
            options.remove("clusteredIndex");
            return Ok(options);
        }
        Some(Err(true)) => {
            return Err(CommandError::with_code(
                5979703,
                "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for specific internal collections and vice versa",
            ))
        }
        Some(Ok(spec)) => spec,
    };
    let truthy = |v: &Bson| matches!(v, Bson::Boolean(true)) || number_of(v).is_some_and(|n| n != 0);
    if !spec.get("unique").is_some_and(truthy) {
        return Err(CommandError::with_code(
            5979700,
            "The clusteredIndex option requires unique: true to be specified",
        ));
    }
    let key = spec.get_document("key").expect("checked above");
    if !crate::indexes::is_id_key(key) {
        return Err(CommandError::with_code(197, "The clusteredIndex option is only supported for key: {_id: 1}"));
    }
    if ttl.is_some_and(|t| t < 0) {
        return Err(CommandError::invalid_options("TTL index 'expireAfterSeconds' option cannot be less than 0"));
    }
    if ttl.is_some_and(|t| t > i64::MAX / 1000) {
        return Err(CommandError::invalid_options(
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
        ));
    }
    let name = spec.get_str("name").unwrap_or("_id_").to_string();
    let v = spec.get("v").map_or(Some(2), number_of);
    let normalized = doc! { "v": v.unwrap_or(0) as i32, "key": key.clone(), "name": name, "unique": true };
    if v != Some(2) {
        return Err(CommandError::with_code(
            5979704,
            format!(
                "Invalid clusteredIndex specification {}; cannot create a clusteredIndex with v={}",
                doc::format::spaced(&Bson::Document(normalized.clone())),
                v.map_or("?".to_string(), |v| v.to_string())
            ),
        ));
    }
    options.insert("clusteredIndex", normalized);
    if let Some(ttl) = ttl {
        options.insert("expireAfterSeconds", ttl);
    }
    Ok(options)
}

/// A number's integer value (truncated), if it is a number.
fn number_of(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.is_finite() => Some(*d as i64),
        Bson::Decimal128(_) => {
            let d = doc::decimal_math::Dec::from_bson(v, doc::decimal_math::DoubleDigits::Fifteen)?;
            let f = d.to_integral(doc::decimal_math::Integral::Trunc).to_f64();
            f.is_finite().then_some(f as i64)
        }
        _ => None,
    }
}

/// Check a view's `viewOn` and `pipeline`; the view may read a missing
/// collection, but not itself through other views.
fn view_options(shared: &Shared, ns: &Namespace, options: Document, cmd_name: &str) -> Result<Document, CommandError> {
    let on = match options.get("viewOn") {
        Some(Bson::String(on)) => on.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{cmd_name}.viewOn' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )))
        }
        None => return Err(CommandError::bad_value("'pipeline' requires 'viewOn' to also be specified")),
    };
    if on.is_empty() {
        return Err(CommandError::bad_value("'viewOn' cannot be empty"));
    }
    if let Some(k) = options.keys().find(|k| !matches!(k.as_str(), "viewOn" | "pipeline" | "collation")) {
        return Err(CommandError::invalid_options(format!("option '{k}' is not supported with 'viewOn'")));
    }
    let pipeline = match options.get("pipeline") {
        None => Vec::new(),
        Some(Bson::Array(stages)) => stages.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{cmd_name}.pipeline' is the wrong type '{}', expected type 'array'",
                type_name(other)
            )))
        }
    };
    query::Pipeline::parse(&pipeline)?;
    // Follow what the view would read: back to itself is a cycle.
    let mut seen = vec![ns.to_string()];
    let mut next = Namespace::new(&ns.db, &on)?;
    loop {
        seen.push(next.to_string());
        if next == *ns {
            return Err(CommandError::graph_contains_cycle(format!("View cycle detected: [{}]", seen.join(", "))));
        }
        match shared.catalog.get(&next).and_then(|c| c.view_on().map(|(o, _)| o.to_string())) {
            Some(o) => next = Namespace::new(&ns.db, &o)?,
            None => break,
        }
    }
    // A view reads another view only if both compare strings alike: the
    // view it reads, and the views (left from before) that read it.
    let mine = query::Collation::parse(options.get("collation"))?;
    let on_ns = Namespace::new(&ns.db, &on)?;
    if shared.catalog.get(&on_ns).is_some_and(|c| c.view_on().is_some()) {
        let theirs = crate::read::collation_of(shared, &on_ns, &Document::new())?;
        if !crate::read::same_collation(mine.as_ref(), theirs.as_ref()) {
            return Err(CommandError::option_not_supported_on_view(format!(
                "View {ns} has a collation that does not match the collation of view {on_ns}"
            )));
        }
    }
    for reader in shared.catalog.list(&ns.db) {
        if reader.ns == *ns || reader.view_on().is_none_or(|(o, _)| o != ns.coll) {
            continue;
        }
        let theirs = query::Collation::parse(reader.options.get("collation"))?;
        if !crate::read::same_collation(theirs.as_ref(), mine.as_ref()) {
            return Err(CommandError::option_not_supported_on_view(format!(
                "View {} has a collation that does not match the collation of view {ns}",
                reader.ns
            )));
        }
    }
    let mut checked = doc! { "viewOn": on, "pipeline": pipeline };
    if let Some(c) = options.get("collation") {
        checked.insert("collation", c.clone());
    }
    Ok(checked)
}

/// `collMod`: change a collection's validator (`validator`,
/// `validationLevel`, `validationAction`) or a view's definition
/// (`viewOn`, `pipeline`), checked as `create` checks them.
pub fn coll_mod(shared: &Shared, cmd: &Document) -> CommandResult {
    const CHANGES: &[&str] = &["validator", "validationLevel", "validationAction", "viewOn", "pipeline"];
    const NOT_YET: &[&str] = &["index", "cappedSize", "cappedMax", "changeStreamPreAndPostImages", "timeseries"];
    let ns = namespace(cmd, "collMod")?;
    let known: Vec<&str> = CHANGES.iter().chain(NOT_YET).chain(&["dryRun", "expireAfterSeconds"]).copied().collect();
    check_fields(cmd, "collMod", &known, false)?;
    if let Some(k) = NOT_YET.iter().find(|k| cmd.contains_key(**k)) {
        return Err(CommandError::not_implemented(format!("collMod with '{k}' is not supported yet")));
    }
    let Some(c) = shared.catalog.get(&ns) else {
        return Err(CommandError::namespace_not_found(format!("ns does not exist: {ns}")));
    };
    let is_view = c.view_on().is_some();
    let mut options = c.options.clone();
    // A clustered collection's TTL: seconds, or "off" to remove it.
    if let Some(ttl) = cmd.get("expireAfterSeconds") {
        if is_view {
            return Err(CommandError::invalid_options("option not supported on a view: expireAfterSeconds"));
        }
        let seconds = match ttl {
            Bson::String(s) if s == "off" => None,
            Bson::String(s) => {
                return Err(CommandError::invalid_options(format!(
                    "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: '{s}'. Accepted value is 'off'"
                )))
            }
            other => Some(number_of(other).ok_or_else(|| {
                CommandError::type_mismatch(format!(
                    "BSON field 'collMod.expireAfterSeconds' is the wrong type '{}', expected types '[string, long, int, decimal, double']",
                    type_name(other)
                ))
            })?),
        };
        if !c.is_clustered() {
            return Err(CommandError::invalid_options(
                "'expireAfterSeconds' option is only supported on collections clustered by _id",
            ));
        }
        match seconds {
            Some(n) if n < 0 => {
                return Err(CommandError::invalid_options(
                    "TTL index 'expireAfterSeconds' option cannot be less than 0",
                ))
            }
            Some(n) if n > i64::MAX / 1000 => {
                return Err(CommandError::invalid_options(
                    "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
                ))
            }
            Some(n) => {
                options.insert("expireAfterSeconds", n);
            }
            None => {
                options.remove("expireAfterSeconds");
            }
        }
    }
    for (k, v) in cmd.iter().skip(1).filter(|(k, _)| CHANGES.contains(&k.as_str())) {
        let view_option = matches!(k.as_str(), "viewOn" | "pipeline");
        if view_option != is_view {
            let what = if is_view { "not supported on a view" } else { "only supported on a view" };
            return Err(CommandError::invalid_options(format!("option {what}: {k}")));
        }
        options.insert(k.clone(), v.clone());
    }
    let options = match is_view {
        true => view_options(shared, &ns, options, "collMod")?,
        false => {
            Validator::of(&options)?;
            options
        }
    };
    if bool_option(cmd, "dryRun", "collMod", false)? {
        return Ok(doc! { "ok": 1.0 });
    }
    shared.catalog.set_options(&ns, options)?;
    Ok(doc! { "ok": 1.0 })
}

/// Writes and storage commands on a view fail as mongod's do.
pub(crate) fn check_not_view(shared: &Shared, ns: &Namespace) -> Result<(), CommandError> {
    match shared.catalog.get(ns) {
        Some(c) if c.view_on().is_some() => Err(not_on_view(ns)),
        _ => Ok(()),
    }
}

/// CommandNotSupportedOnView (166) for `ns`.
pub(crate) fn not_on_view(ns: &Namespace) -> CommandError {
    CommandError::command_not_supported_on_view(format!("Namespace {ns} is a view, not a collection"))
}

/// Check `capped`, `size` and `max` as mongod's `create` does, and store
/// them normalized (`capped: true`, sizes as integers).
fn capped_options(cmd: &Document, mut options: Document) -> Result<Document, CommandError> {
    let capped = bool_option(cmd, "capped", "create", false)?;
    let mut number = |field: &str| -> Result<Option<i64>, CommandError> {
        let n = match options.get(field) {
            None | Some(Bson::Null) => return Ok(None),
            Some(Bson::Int32(i)) => i64::from(*i),
            Some(Bson::Int64(i)) => *i,
            Some(Bson::Double(d)) => *d as i64,
            Some(Bson::Decimal128(_)) => {
                return Err(CommandError::not_implemented(format!("a Decimal128 {field} is not supported yet")))
            }
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'create.{field}' is the wrong type '{}', expected types '[long, int, decimal, double']",
                    type_name(other)
                )))
            }
        };
        options.insert(field, if let Ok(i) = i32::try_from(n) { Bson::Int32(i) } else { Bson::Int64(n) });
        Ok(Some(n))
    };
    let size = number("size")?;
    let max = number("max")?;
    if let Some(size) = size.filter(|&s| s < 1) {
        return Err(CommandError::with_code(
            51024,
            format!("BSON field 'size' value must be >= 1, actual value '{size}'"),
        ));
    }
    if capped && size.is_none() {
        return Err(CommandError::invalid_options("the 'size' field is required when 'capped' is true"));
    }
    if !capped && (size.is_some() || max.is_some()) {
        return Err(CommandError::invalid_options(
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are present",
        ));
    }
    match capped {
        true => options.insert("capped", true),
        false => options.remove("capped"),
    };
    Ok(options)
}

pub fn drop(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "drop")?;
    // Since MongoDB 7.0, dropping a missing collection succeeds.
    if shared.catalog.drop(&ns)? {
        Ok(doc! { "nIndexesWas": 1, "ns": ns.to_string(), "ok": 1.0 })
    } else {
        Ok(doc! { "ok": 1.0 })
    }
}

pub fn drop_database(shared: &Shared, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    for c in shared.catalog.list(db) {
        shared.catalog.drop(&c.ns)?;
    }
    Ok(doc! { "dropped": db, "ok": 1.0 })
}

pub fn list_collections(shared: &Shared, cmd: &Document) -> CommandResult {
    const CONTEXT: &str = "listCollections";
    let db = db_of(cmd)?;
    let (_, filter) = filter_of(cmd, "filter", &Scope::default())?;
    let name_only = bool_option(cmd, "nameOnly", CONTEXT, false)?;
    let mut batch = Vec::new();
    for c in shared.catalog.list(db) {
        let view = c.view_on().is_some();
        let kind = if view { "view" } else { "collection" };
        let mut entry = doc! {
            "name": &c.ns.coll,
            "type": kind,
            "options": c.options.clone(),
            "info": { "readOnly": view },
        };
        // A clustered collection has no separate `_id` index to show.
        if !view && !c.is_clustered() {
            entry.insert("idIndex", crate::indexes::id_index_spec(&c));
        }
        if filter.matches(&entry) {
            batch.push(Bson::Document(if name_only {
                doc! { "name": &c.ns.coll, "type": kind }
            } else {
                entry
            }));
        }
    }
    Ok(doc! { "cursor": { "id": 0i64, "ns": format!("{db}.$cmd.listCollections"), "firstBatch": batch }, "ok": 1.0 })
}

pub fn list_databases(shared: &Shared, cmd: &Document) -> CommandResult {
    const CONTEXT: &str = "listDatabases";
    let (_, filter) = filter_of(cmd, "filter", &Scope::default())?;
    let name_only = bool_option(cmd, "nameOnly", CONTEXT, false)?;
    let mut dbs = Vec::new();
    let mut total = 0i64;
    for db in shared.catalog.databases() {
        // Bytes on disk of its tables, as mongod's sizeOnDisk (no scan).
        let mut size = 0i64;
        for c in shared.catalog.list(&db) {
            let (records, index) = c.storage_sizes(shared.catalog.engine());
            size += (records + index) as i64;
        }
        total += size;
        let entry = if name_only {
            doc! { "name": &db }
        } else {
            doc! { "name": &db, "sizeOnDisk": size, "empty": false }
        };
        if filter.matches(&entry) {
            dbs.push(Bson::Document(entry));
        }
    }
    let mut reply = doc! { "databases": dbs };
    if !name_only {
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total >> 20);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn rename_collection(shared: &Shared, cmd: &Document) -> CommandResult {
    if db_of(cmd)? != "admin" {
        return Err(CommandError::unauthorized("renameCollection may only be run against the admin database."));
    }
    let full = |field: &str| -> Result<Namespace, CommandError> {
        match cmd.get(field) {
            Some(Bson::String(s)) => match s.split_once('.') {
                Some((db, coll)) => Ok(Namespace::new(db, coll)?),
                None => Err(CommandError::invalid_namespace(format!("Invalid namespace specified '{s}'"))),
            },
            other => Err(CommandError::type_mismatch(format!(
                "BSON field 'renameCollection.{field}' is the wrong type '{}', expected type 'string'",
                other.map(type_name).unwrap_or("missing")
            ))),
        }
    };
    let (from, to) = (full("renameCollection")?, full("to")?);
    check_not_view(shared, &from)?;
    if from == to {
        return Err(CommandError::illegal_operation("Can't rename a collection to itself"));
    }
    shared.catalog.rename(&from, &to, bool_option(cmd, "dropTarget", "renameCollection", false)?).map_err(
        |e| match e {
            DocError::NamespaceExists(_) => CommandError::namespace_exists("target namespace exists"),
            other => other.into(),
        },
    )?;
    Ok(doc! { "ok": 1.0 })
}

/// A `scale` option (bytes per unit of the size fields).
fn scale_of(cmd: &Document) -> Result<i64, CommandError> {
    match count_option(cmd, "scale")? {
        None => Ok(1),
        Some(s) if s >= 1 => Ok(s),
        Some(_) => Err(CommandError::bad_value("Scale factor must be a positive number")),
    }
}

/// Sizes of one collection: (count, data bytes, storage bytes, `_id`
/// index bytes).
fn collection_sizes(shared: &Shared, ns: &Namespace) -> Result<(i64, i64, i64, i64), CommandError> {
    let Some(c) = shared.catalog.get(ns) else { return Ok((0, 0, 0, 0)) };
    let engine = shared.catalog.engine();
    let (count, size) = c.count_and_size(engine)?;
    let (storage, index) = c.storage_sizes(engine);
    Ok((count as i64, size as i64, storage as i64, index as i64))
}

/// The storage statistics of a collection, as `collStats` and
/// `$collStats: {storageStats: {}}` report them.
pub(crate) fn storage_stats(shared: &Shared, ns: &Namespace, scale: i64) -> Result<Document, CommandError> {
    let (count, size, mut storage, mut index) = collection_sizes(shared, ns)?;
    let capped = shared.catalog.get(ns).and_then(|c| c.capped.as_ref().map(|c| (c.size, c.max)));
    // A clustered collection's `_id` index is part of its record store,
    // as mongod's: no index sizes (the clustered index is still counted).
    let clustered = shared.catalog.get(ns).is_some_and(|c| c.is_clustered());
    if clustered {
        storage += index;
        index = 0;
    }
    let mut stats = doc! {
        "size": size / scale,
        "count": count,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": storage / scale,
        "freeStorageSize": 0i64,
        "capped": capped.is_some(),
        "nindexes": 1,
        "indexBuilds": [],
        "totalIndexSize": index / scale,
        "totalSize": (storage + index) / scale,
        "indexSizes": if clustered { doc! {} } else { doc! { "_id_": index / scale } },
        "scaleFactor": scale,
    };
    if let Some((max_size, max)) = capped {
        // mongod reports an unset max as 2^31 - 1.
        stats.insert("max", max.map_or(i64::from(i32::MAX), |m| m as i64));
        stats.insert("maxSize", max_size as i64 / scale);
    }
    Ok(stats)
}

pub fn coll_stats(shared: &Shared, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "collStats")?;
    check_not_view(shared, &ns)?;
    if shared.catalog.get(&ns).is_none() {
        return Err(CommandError::namespace_not_found(format!("Collection [{ns}] not found.")));
    }
    let mut reply = doc! { "ns": ns.to_string() };
    reply.extend(storage_stats(shared, &ns, scale_of(cmd)?)?);
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn db_stats(shared: &Shared, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    let scale = scale_of(cmd)?;
    let (mut objects, mut data, mut storage, mut index) = (0i64, 0i64, 0i64, 0i64);
    let (views, collections): (Vec<_>, Vec<_>) =
        shared.catalog.list(db).into_iter().partition(|c| c.view_on().is_some());
    for c in &collections {
        let (n, d, s, i) = collection_sizes(shared, &c.ns)?;
        objects += n;
        data += d;
        storage += s;
        index += i;
    }
    let (fs_used, fs_total) = filesystem_sizes(shared.catalog.engine().dir());
    Ok(doc! {
        "db": db,
        "collections": collections.len() as i64,
        "views": views.len() as i64,
        "objects": objects,
        "avgObjSize": if objects > 0 { data as f64 / objects as f64 } else { 0.0 },
        "dataSize": data as f64 / scale as f64,
        "storageSize": storage as f64 / scale as f64,
        "indexes": collections.len() as i64,
        "indexSize": index as f64 / scale as f64,
        "totalSize": (storage + index) as f64 / scale as f64,
        "scaleFactor": scale,
        "fsUsedSize": fs_used as f64 / scale as f64,
        "fsTotalSize": fs_total as f64 / scale as f64,
        "ok": 1.0,
    })
}

/// Used and total bytes of the filesystem holding `dir`.
fn filesystem_sizes(dir: &std::path::Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return (0, 0) };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return (0, 0);
    }
    let block = st.f_frsize as u64;
    let total = st.f_blocks as u64 * block;
    (total - st.f_bfree as u64 * block, total)
}

/// A collection's document validator (`validator`, `validationLevel`,
/// `validationAction`), checked on insert and update.
pub(crate) struct Validator {
    filter: Filter,
    /// The validator as written, which `errInfo.details` explains.
    spec: Document,
    /// `moderate`: updates of documents that did not pass are not checked.
    moderate: bool,
    /// `warn`: log instead of refusing.
    warn: bool,
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
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'create.validator' is the wrong type '{}', expected type 'object'",
                    type_name(other)
                )))
            }
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
    shared: &Shared,
    ns: &Namespace,
    cmd: &Document,
) -> Result<Option<(Validator, bool)>, CommandError> {
    let Some(c) = shared.catalog.get(ns) else { return Ok(None) };
    let name = cmd.keys().next().map_or("", String::as_str);
    let bypass = bool_option(cmd, "bypassDocumentValidation", name, false)?;
    Ok(Validator::of(&c.options)?.map(|v| (v, bypass)))
}

pub fn insert(shared: &Shared, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
    let ns = namespace(cmd, "insert")?;
    let docs = statements(msg, "insert", "documents")?;
    check_fields(cmd, "insert", &["documents", "ordered"], false)?;
    let ordered = bool_option(cmd, "ordered", "insert", true)?;
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
    let mut retry = Retry::begin(shared, cmd)?;
    let coll = shared.catalog.get_or_create(&ns)?;
    let validator = validator_of(shared, &ns, cmd)?;
    let engine = shared.catalog.engine();
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
    let inserted =
        coll.insert_many(engine, &to_insert, ordered, STATEMENT_ACK, record.as_ref().map(|r| r as &dyn Stamp));
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
    });
    std::mem::drop(record);
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, ack, reply)
}

/// A document's own checks before it is inserted: its `_id`, and the
/// collection's validator (with the command's bypass flag).
pub(crate) fn check_insert(d: &Document, validator: Option<&(Validator, bool)>) -> Result<(), CommandError> {
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
/// at its first failure. `updates` adds `nModified` and `upserted`.
pub(crate) fn write_reply<T>(
    items: &[T],
    ordered: bool,
    updates: bool,
    mut run: impl FnMut(usize, &T) -> Result<Outcome, CommandError>,
) -> Document {
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
    reply
}

/// The statements of a write command: the body's array or the document
/// sequence of the same name.
pub(crate) fn statements(msg: &OpMsg, cmd_name: &str, field: &str) -> Result<Vec<Document>, CommandError> {
    let cmd = &msg.body;
    let docs: Vec<Document> = match (cmd.get(field), msg.sequences.iter().find(|(id, _)| id == field)) {
        (Some(Bson::Array(items)), None) => items
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(CommandError::type_mismatch(format!(
                    "BSON field '{cmd_name}.{field}.{i}' is the wrong type '{}', expected type 'object'",
                    type_name(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        (None, Some((_, seq))) => seq.clone(),
        (Some(_), Some(_)) => {
            return Err(CommandError::bad_value(format!("{field} given both in the body and as a sequence")))
        }
        (Some(other), None) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{cmd_name}.{field}' is the wrong type '{}', expected type 'array'",
                type_name(other)
            )))
        }
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

pub fn delete(shared: &Shared, msg: &OpMsg) -> CommandResult {
    let cmd = &msg.body;
    let ns = namespace(cmd, "delete")?;
    let specs = statements(msg, "delete", "deletes")?;
    // The shape of every statement is checked before any runs, as
    // MongoDB's command parser does; query errors are per statement.
    check_fields(cmd, "delete", &["deletes", "ordered"], false)?;
    for spec in &specs {
        check_fields(spec, "delete.deletes", &["q", "limit", "collation", "hint"], true)?;
        query::Collation::parse(spec.get("collation"))?;
        if !spec.contains_key("q") {
            return Err(CommandError::failed_to_parse("BSON field 'delete.deletes.q' is missing but a required field"));
        }
        let limit = count_option(spec, "limit")?.unwrap_or(0);
        if limit != 0 && limit != 1 {
            return Err(CommandError::failed_to_parse(format!(
                "The limit field in delete objects must be 0 or 1. Got {limit}"
            )));
        }
    }
    let ordered = bool_option(cmd, "ordered", "delete", true)?;
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
    let scope = scope_of(cmd)?;
    let mut retry = Retry::begin(shared, cmd)?;
    let mut reply = write_reply(&specs, ordered, false, |index, spec| {
        shared.opcounters.delete.fetch_add(1, Ordering::Relaxed);
        let log = match retry.as_mut() {
            None => None,
            Some(_) if count_option(spec, "limit")?.unwrap_or(0) == 0 => {
                return Err(CommandError::invalid_options("Cannot use (or request) retryable writes with limit=0"));
            }
            Some(r) => match r.answered(index) {
                Some(answer) => return Ok(Outcome { n: answer.get_i64("n").unwrap_or(1), ..Outcome::default() }),
                None => Some(StmtLog::new(r, index)),
            },
        };
        Ok(Outcome { n: delete_one_spec(shared, &ns, spec, &scope, log.as_ref())?, ..Outcome::default() })
    });
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, ack, reply)
}

/// One `{q, limit}` statement: delete the first match (limit 1) or all,
/// its filter's `$expr`s seeing `scope`'s variables. A retryable one
/// (`log`; limit 1) records itself with its delete.
pub(crate) fn delete_one_spec(
    shared: &Shared,
    ns: &Namespace,
    spec: &Document,
    scope: &Scope,
    log: Option<&StmtLog>,
) -> Result<i64, CommandError> {
    let ack = STATEMENT_ACK;
    let (filter_doc, filter) = filter_of(spec, "q", scope)?;
    // A hint naming no index fails its statement only, as a planner error.
    crate::read::check_hint(shared, ns, spec)?;
    let collation = crate::read::collation_of(shared, ns, spec)?;
    let filter = filter.with_collation(collation.clone());
    let limit = count_option(spec, "limit")?.unwrap_or(0);
    let Some(coll) = shared.catalog.get(ns) else { return Ok(0) };
    let engine = shared.catalog.engine();
    let record = log.map(|l| l.record(doc! { "n": 1i64 })).transpose()?;
    let stamp = record.as_ref().map(|r| r as &dyn Stamp);
    if let Some(id) = crate::read::point_id(&filter_doc, collation.as_ref(), &coll) {
        return Ok(match coll.find_rid_by_id(engine, id)? {
            Some((rid, d)) => i64::from(coll.delete(engine, rid, &d, ack, stamp)?),
            None => 0,
        });
    }
    // In natural order: a single delete takes the first match.
    let mut deleted = 0;
    for record in crate::read::ScanIter::new(shared, ns).results() {
        let (rid, d) = record?;
        if filter.try_matches_at(&d)?.0 && coll.delete(engine, rid, &d, ack, stamp)? {
            deleted += 1;
            if limit == 1 {
                break;
            }
        }
    }
    Ok(deleted)
}
