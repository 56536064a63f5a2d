//! Collections and databases: `create`, `collMod`, `drop`,
//! `dropDatabase`, `listCollections`, `listDatabases`, `renameCollection`.

use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::db_of;
use crate::args::filter_of;
use crate::args::namespace;
use crate::args::wrong_type;
use crate::args::CommandResult;
use crate::args::GENERIC_FIELDS;
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::index_mod;
use crate::exec::views::check_not_view;
use crate::exec::write::Validator;
use bson::{doc, Bson, Document};
use doc::catalog::{DocError, Namespace};
use query::expr::Scope;

pub fn create(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
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
    if shared.txn().is_some() {
        // mongod's restrictions inside a transaction.
        let what = match () {
            _ if options.contains_key("viewOn") || options.contains_key("pipeline") => Some("a view"),
            _ if options.get_bool("capped") == Ok(true) => Some("a capped collection"),
            _ => None,
        };
        if let Some(what) = what {
            return Err(CommandError::operation_not_supported_in_transaction(format!(
                "Cannot create {what} in a multi-document transaction."
            )));
        }
    }
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
    shared.create_collection(&ns, options)?;
    Ok(doc! { "ok": 1.0 })
}

/// Check `clusteredIndex` and `expireAfterSeconds` as mongod's `create`
/// does, in its order, and store them normalized: the index as
/// `{v: 2, key, name, unique: true}` (`name` "_id_" by default), the TTL
/// as a long. `clusteredIndex: false` is an ordinary collection.
pub(crate) fn clustered_options(mut options: Document) -> Result<Document, CommandError> {
    let field_type = |field: &str, v: &Bson, expected: &str| wrong_type(&format!("create.{field}"), v, expected);
    let ttl = match options.get("expireAfterSeconds") {
        None => None,
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
            Some(number_of(v).ok_or_else(|| field_type("expireAfterSeconds", v, "[long, int, decimal, double]"))?)
        }
        Some(v) => return Err(field_type("expireAfterSeconds", v, "[long, int, decimal, double]")),
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
                    ("v", other) => return Err(field_type("v", other, "[long, int, decimal, double]")),
                    ("unique", other) => return Err(field_type("unique", other, "[bool, long, int, decimal, double]")),
                    ("key", other) => return Err(field_type("key", other, "object")),
                    ("name", other) => return Err(field_type("name", other, "string")),
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
        Some(other) => return Err(field_type("clusteredIndex", other, "[bool]")),
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
    if !crate::exec::id_index::is_id_key(key) {
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
pub(crate) fn number_of(v: &Bson) -> Option<i64> {
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
pub(crate) fn view_options(
    shared: &Ctx<'_>,
    ns: &Namespace,
    options: Document,
    cmd_name: &str,
) -> Result<Document, CommandError> {
    let on = match options.get("viewOn") {
        Some(Bson::String(on)) => on.clone(),
        Some(other) => return Err(wrong_type(&format!("{cmd_name}.viewOn"), other, "string")),
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
        Some(other) => return Err(wrong_type(&format!("{cmd_name}.pipeline"), other, "array")),
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
        match shared.collection(&next).and_then(|c| c.view_on().map(|(o, _)| o.to_string())) {
            Some(o) => next = Namespace::new(&ns.db, &o)?,
            None => break,
        }
    }
    // A view reads another view only if both compare strings alike: the
    // view it reads, and the views (left from before) that read it.
    let mine = query::Collation::parse(options.get("collation"))?;
    let on_ns = Namespace::new(&ns.db, &on)?;
    if shared.collection(&on_ns).is_some_and(|c| c.view_on().is_some()) {
        let theirs = crate::exec::scan::collation_of(shared, &on_ns, &Document::new())?;
        if !crate::exec::scan::same_collation(mine.as_ref(), theirs.as_ref()) {
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
        if !crate::exec::scan::same_collation(theirs.as_ref(), mine.as_ref()) {
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
pub fn coll_mod(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    const CHANGES: &[&str] = &["validator", "validationLevel", "validationAction", "viewOn", "pipeline"];
    const NOT_YET: &[&str] = &["cappedSize", "cappedMax", "changeStreamPreAndPostImages", "timeseries"];
    let ns = namespace(cmd, "collMod")?;
    let known: Vec<&str> =
        CHANGES.iter().chain(NOT_YET).chain(&["dryRun", "expireAfterSeconds", "index"]).copied().collect();
    check_fields(cmd, "collMod", &known, false)?;
    if let Some(k) = NOT_YET.iter().find(|k| cmd.contains_key(**k)) {
        return Err(CommandError::not_implemented(format!("collMod with '{k}' is not supported yet")));
    }
    let Some(c) = shared.collection(&ns) else {
        return Err(CommandError::namespace_not_found(format!("ns does not exist: {ns}")));
    };
    let is_view = c.view_on().is_some();
    if bool_option(cmd, "dryRun", "collMod", false)? {
        index_mod::dry_run(shared, &c, cmd)?;
        return Ok(doc! { "ok": 1.0 });
    }
    let mut index = None;
    if let Some(spec) = cmd.get("index") {
        if is_view {
            return Err(CommandError::invalid_options("option not supported on a view: index"));
        }
        // Checked now, applied once every other option has been checked.
        index = Some(index_mod::check(&c, spec)?);
    }
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
                wrong_type("collMod.expireAfterSeconds", other, "[string, long, int, decimal, double]")
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
    let mut reply = match &index {
        Some(m) => index_mod::apply(shared, &c, m)?,
        None => Document::new(),
    };
    if options != c.options {
        shared.catalog.set_options(&ns, options)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// Check `capped`, `size` and `max` as mongod's `create` does, and store
/// them normalized (`capped: true`, sizes as integers).
pub(crate) fn capped_options(cmd: &Document, mut options: Document) -> Result<Document, CommandError> {
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
            Some(other) => return Err(wrong_type(&format!("create.{field}"), other, "[long, int, decimal, double]")),
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

pub fn drop(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "drop")?;
    // Since MongoDB 7.0, dropping a missing collection succeeds.
    if shared.catalog.drop(&ns)? {
        Ok(doc! { "nIndexesWas": 1, "ns": ns.to_string(), "ok": 1.0 })
    } else {
        Ok(doc! { "ok": 1.0 })
    }
}

pub fn drop_database(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    for c in shared.catalog.list(db) {
        shared.catalog.drop(&c.ns)?;
    }
    Ok(doc! { "dropped": db, "ok": 1.0 })
}

pub fn list_collections(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
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
            entry.insert("idIndex", crate::exec::id_index::id_index_spec(&c));
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

pub fn list_databases(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
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

pub fn rename_collection(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    if db_of(cmd)? != "admin" {
        return Err(CommandError::unauthorized("renameCollection may only be run against the admin database."));
    }
    let full = |field: &str| -> Result<Namespace, CommandError> {
        match cmd.get(field) {
            Some(Bson::String(s)) => match s.split_once('.') {
                Some((db, coll)) => Ok(Namespace::new(db, coll)?),
                None => Err(CommandError::invalid_namespace(format!("Invalid namespace specified '{s}'"))),
            },
            // A missing field reads as the wrong type 'missing', as mongod's.
            None => Err(CommandError::type_mismatch(format!(
                "BSON field 'renameCollection.{field}' is the wrong type 'missing', expected type 'string'"
            ))),
            Some(other) => Err(wrong_type(&format!("renameCollection.{field}"), other, "string")),
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
