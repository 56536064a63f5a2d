//! `createIndexes` specifications checked as mongod checks them, turned
//! into the document layer's `IndexSpec`, and compared with the indexes a
//! collection has (same index, or a conflict: 85 / 86).

use crate::error::CommandError;
use bson::{Bson, Document};
use doc::index::IndexSpec;

/// The most indexes a collection may have, `_id` included (mongod's).
pub(crate) const INDEXES_PER_COLLECTION_MAX: usize = 64;

/// The most fields a compound key pattern may have (mongod's).
const KEY_FIELDS_MAX: usize = 32;

/// Options a spec may carry that this build applies.
const APPLIED: [&str; 13] = [
    "storageEngine",
    "parallelArrays",
    "wildcardProjection",
    "key",
    "name",
    "v",
    "unique",
    "sparse",
    "hidden",
    "prepareUnique",
    "partialFilterExpression",
    "expireAfterSeconds",
    "collation",
];

/// Options mongod accepts that this build does not apply yet: refused
/// with NotImplemented rather than stored without effect.
const NOT_YET: [&str; 4] = ["weights", "default_language", "2dsphereIndexVersion", "bits"];

/// Accepted and ignored, as mongod ignores them.
const IGNORED: [&str; 2] = ["background", "ns"];

/// Why a unique index keeps the B+tree format: uniqueness needs a read of
/// the index before each write, which the write-optimized format exists
/// to avoid.
pub(crate) const WRITE_OPTIMIZED_UNIQUE: &str = "storageEngine.arbordb.format \"write-optimized\" cannot enforce uniqueness (its writes never read the index); a unique index keeps the default \"btree\" format";

/// CannotCreateIndex (67).
fn cannot_create(msg: String) -> CommandError {
    CommandError::with_code(67, msg)
}

/// Check one element of `indexes` and make its spec. An index takes its
/// `collation` in full, or without one the collection's `default`
/// (`{locale: "simple"}`: binary, shown without one).
pub(crate) fn parse(spec: &Bson, default: Option<&Document>) -> Result<IndexSpec, CommandError> {
    let Bson::Document(spec) = spec else {
        return Err(CommandError::type_mismatch(format!(
            "The elements of the 'indexes' array must be objects, but found {}",
            crate::args::type_name(spec)
        )));
    };
    let key = match spec.get("key") {
        Some(Bson::Document(k)) => k,
        Some(_) => return Err(CommandError::type_mismatch("The 'key' field must be an object")),
        None => {
            return Err(CommandError::failed_to_parse(
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    check_key_pattern(key)?;
    check_wildcard(spec, key)?;
    let hashed = key.values().any(|v| matches!(v, Bson::String(k) if k == "hashed"));
    if hashed && spec.get("unique").is_some_and(truthy) {
        return Err(CommandError::with_code(
            16764,
            "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
        ));
    }
    let name = match spec.get("name") {
        Some(Bson::String(n)) if n.is_empty() => return Err(CommandError::bad_value("index name cannot be empty")),
        Some(Bson::String(n)) if n == "_id_" => {
            return Err(CommandError::with_code(
                197,
                format!(
                    "The index name '_id_' is reserved for the _id index, which must have key pattern {{_id: 1}}, found key: {}",
                    doc::format::spaced(&Bson::Document(key.clone()))
                ),
            ))
        }
        Some(Bson::String(n)) => n.clone(),
        Some(other) => return Err(CommandError::type_mismatch(format!(
            "The field 'name' must be a string, but got {}", crate::args::type_name(other)))),
        None => {
            return Err(CommandError::failed_to_parse(format!(
                "Error in specification {} :: caused by :: The 'name' field is a required property of an index specification",
                doc::format::spaced(&Bson::Document(spec.clone()))
            )))
        }
    };
    let mut shown = bson::doc! { "v": 2, "key": key.clone(), "name": name };
    for (field, value) in spec {
        match field.as_str() {
            "key" | "name" | "v" => {}
            "unique" | "sparse" | "hidden" | "prepareUnique" | "parallelArrays" => {
                // mongod takes any value and keeps its truth.
                if truthy(value) {
                    shown.insert(field.clone(), true);
                }
            }
            "partialFilterExpression" => {
                let Bson::Document(expr) = value else {
                    return Err(CommandError::type_mismatch(format!(
                        "Error in specification {} :: caused by :: The field 'partialFilterExpression' must be an object, but got {}",
                        doc::format::spaced(&Bson::Document(spec.clone())),
                        crate::args::type_name(value)
                    )));
                };
                check_partial_filter(expr, 0)?;
                query::Filter::parse(expr)?;
                if spec.get("sparse").is_some_and(truthy) {
                    return Err(cannot_create("cannot mix \"partialFilterExpression\" and \"sparse\" options".into()));
                }
                shown.insert(field.clone(), value.clone());
            }
            "expireAfterSeconds" => {
                shown.insert(field.clone(), check_ttl(spec, key, value)?);
            }
            "wildcardProjection" => {
                shown.insert(field.clone(), value.clone());
            }
            "storageEngine" => {
                check_storage_engine(value)?;
                shown.insert(field.clone(), value.clone());
            }
            "collation" => {
                if !matches!(value, Bson::Document(_)) {
                    return Err(CommandError::type_mismatch(format!(
                        "The field 'collation' must be an object, but got {}",
                        crate::args::type_name(value)
                    )));
                }
                if let Some(c) = query::Collation::parse(Some(value))? {
                    shown.insert(field.clone(), c.full_spec());
                }
            }
            f if IGNORED.contains(&f) => {}
            f if NOT_YET.contains(&f) => {
                return Err(CommandError::not_implemented(format!(
                    "index option '{f}' is not supported yet (asked for {})",
                    doc::format::spaced(&Bson::Document(spec.clone()))
                )))
            }
            f => {
                debug_assert!(!APPLIED.contains(&f));
                return Err(CommandError::with_code(
                    197,
                    format!(
                        "The field '{f}' is not valid for an index specification. Specification: {}",
                        doc::format::spaced(&Bson::Document(spec.clone()))
                    ),
                ));
            }
        }
    }
    let write_optimized = shown.get_document("storageEngine").is_ok_and(|e| {
        e.get_document("arbordb")
            .is_ok_and(|a| a.get_str("format") == Ok(doc::index::format_name(storage::TableFormat::WriteOptimized)))
    });
    if write_optimized && ["unique", "prepareUnique"].iter().any(|f| shown.get_bool(f) == Ok(true)) {
        return Err(cannot_create(WRITE_OPTIMIZED_UNIQUE.into()));
    }
    if shown.get_bool("parallelArrays") == Ok(true) {
        check_parallel_arrays(&shown, key, hashed)?;
    }
    if let Some(v) = spec.get("v") {
        let version = v.as_i32().map(i64::from).or_else(|| v.as_i64()).or_else(|| v.as_f64().map(|d| d as i64));
        if version != Some(2) && version != Some(1) {
            return Err(CommandError::with_code(
                if version.is_some() { 67 } else { 14 },
                format!(
                    "Invalid index specification {}; cannot create an index with v={v}",
                    doc::format::spaced(&Bson::Document(spec.clone()))
                ),
            ));
        }
    }
    if let (None, Some(default)) = (spec.get("collation"), default) {
        if let Some(c) = query::Collation::parse(Some(&Bson::Document(default.clone())))? {
            shown.insert("collation", c.full_spec());
        }
    }
    IndexSpec::from_shown(shown).map_err(CommandError::from)
}

/// `parallelArrays: true` (our extension) is for compound indexes of
/// plain fields, not unique ones: their keys are products of arrays.
fn check_parallel_arrays(shown: &Document, key: &Document, hashed: bool) -> Result<(), CommandError> {
    let refuse = |why: &str| Err(cannot_create(format!("parallelArrays: {why}")));
    if key.len() < 2 {
        return refuse("only a compound index has fields to take parallel arrays");
    }
    if hashed || key.keys().any(|k| k.ends_with("$**")) {
        return refuse("hashed and wildcard indexes cannot take parallel arrays");
    }
    if ["unique", "prepareUnique"].iter().any(|f| shown.get_bool(f) == Ok(true)) {
        return refuse("a unique index cannot take parallel arrays");
    }
    Ok(())
}

/// An index's `storageEngine` options, as mongod checks them: an object
/// of engine names, each with an object; only `arbordb` is registered
/// here, and its one option is `format` (`docs/decisions.md`, the
/// write-optimized index format).
fn check_storage_engine(value: &Bson) -> Result<(), CommandError> {
    let Bson::Document(engines) = value else {
        return Err(CommandError::type_mismatch(format!(
            "The field 'storageEngine' must be an object, but got {}",
            crate::args::type_name(value)
        )));
    };
    for (name, options) in engines {
        let Bson::Document(options) = options else {
            return Err(CommandError::bad_value(format!("'storageEngine.{name}' has to be an embedded document.")));
        };
        if name != "arbordb" {
            return Err(CommandError::invalid_options(format!(
                "{name} is not a registered storage engine for this server"
            )));
        }
        for (option, v) in options {
            match (option.as_str(), v) {
                ("format", Bson::String(f)) if doc::index::format_named(f).is_some() => {}
                ("format", other) => {
                    return Err(CommandError::invalid_options(format!(
                        "storageEngine.arbordb.format must be \"btree\" or \"write-optimized\", found {}",
                        doc::format::spaced(other)
                    )))
                }
                _ => {
                    return Err(CommandError::invalid_options(format!(
                        "'{option}' is not a supported option in storageEngine.arbordb"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// The operators mongod allows in a `partialFilterExpression`:
/// equalities, `$exists: true`, comparisons, `$type`, `$in`, and `$and` /
/// `$or` of those.
fn check_partial_filter(expr: &Document, depth: usize) -> Result<(), CommandError> {
    let refuse = |what: String| cannot_create(format!("Expression not supported in partial index: {what}"));
    for (key, value) in expr {
        match (key.as_str(), value) {
            ("$and" | "$or", Bson::Array(items)) if depth < 4 => {
                for item in items {
                    match item {
                        Bson::Document(d) => check_partial_filter(d, depth + 1)?,
                        other => return Err(refuse(doc::format::spaced(other))),
                    }
                }
            }
            (k, _) if k.starts_with('$') => return Err(refuse(key.clone())),
            (_, Bson::Document(cond)) if cond.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (op, arg) in cond {
                    let allowed = match op.as_str() {
                        "$eq" | "$gt" | "$gte" | "$lt" | "$lte" | "$type" | "$in" => true,
                        "$exists" => matches!(arg, Bson::Boolean(true)),
                        _ => false,
                    };
                    if !allowed {
                        return Err(refuse(format!("{key} {op} {}", doc::format::spaced(arg))));
                    }
                }
            }
            (_, Bson::RegularExpression(_)) => return Err(refuse(format!("{key} regex"))),
            _ => {}
        }
    }
    Ok(())
}

/// A TTL index: one field (not `_id`), and seconds mongod accepts; the
/// seconds as stored.
fn check_ttl(spec: &Document, key: &Document, value: &Bson) -> Result<Bson, CommandError> {
    let shown = || doc::format::spaced(&Bson::Document(spec.clone()));
    if key.len() != 1 {
        return Err(cannot_create(format!(
            "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {}",
            shown()
        )));
    }
    check_ttl_seconds(value).map_err(|e| match e.code {
        67 => cannot_create(format!("{} Index spec: {}", e.errmsg, shown())),
        _ => e,
    })
}

/// `expireAfterSeconds` as mongod takes it: a number from 0 to 2^31 - 1;
/// a Decimal128 is stored as a 64-bit integer.
pub(crate) fn check_ttl_seconds(value: &Bson) -> Result<Bson, CommandError> {
    let seconds = match value {
        Bson::Int32(n) => f64::from(*n),
        Bson::Int64(n) => *n as f64,
        Bson::Double(d) => *d,
        Bson::Decimal128(_) => value.to_string().parse().unwrap_or(f64::NAN),
        other => {
            return Err(cannot_create(format!(
                "TTL index 'expireAfterSeconds' option must be numeric, but received a type of '{}'.",
                crate::args::type_name(other)
            )))
        }
    };
    if seconds.is_nan() || !(0.0..=f64::from(i32::MAX)).contains(&seconds) {
        return Err(cannot_create(format!(
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number; found {value}"
        )));
    }
    Ok(match value {
        Bson::Decimal128(_) => Bson::Int64(seconds as i64),
        other => other.clone(),
    })
}

fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// A key pattern mongod accepts for an ascending, descending or hashed
/// index (one hashed field at most); the index types this build does not
/// have (text, geo, wildcard) answer NotImplemented.
fn check_key_pattern(key: &Document) -> Result<(), CommandError> {
    if key.is_empty() {
        return Err(cannot_create("Index keys cannot be empty.".into()));
    }
    if key.len() > KEY_FIELDS_MAX {
        return Err(CommandError::with_code(
            13103,
            format!("too many fields in index key pattern (more than {KEY_FIELDS_MAX})"),
        ));
    }
    let hashed = key.values().filter(|v| matches!(v, Bson::String(k) if k == "hashed")).count();
    if hashed > 1 {
        return Err(cannot_create(format!(
            "A maximum of one index field is allowed to be hashed but found {hashed} for 'key' {}",
            doc::format::spaced(&Bson::Document(key.clone()))
        )));
    }
    for (field, value) in key {
        if field.is_empty() {
            return Err(cannot_create("Index keys cannot be an empty field.".into()));
        }
        if field.split('.').any(str::is_empty) {
            return Err(cannot_create(format!("Index key contains an illegal field name: '{field}'")));
        }
        let numeric = matches!(value, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_));
        let path = match is_wildcard(field) {
            true if numeric => field.strip_suffix("$**").unwrap_or_default(),
            _ => field.as_str(),
        };
        if path.split('.').any(|c| c.starts_with('$')) {
            return Err(cannot_create("Index key contains an illegal field name: field name starts with '$'.".into()));
        }
        match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                if doc::compare::compare(value, &Bson::Int32(0)).is_eq() || matches!(value, Bson::Double(d) if d.is_nan()) {
                    return Err(cannot_create(format!(
                        "Values in the index key pattern can't be 0. Key pattern: {}",
                        doc::format::spaced(&Bson::Document(key.clone()))
                    )));
                }
            }
            Bson::String(kind) => match kind.as_str() {
                "hashed" => {}
                "text" | "2d" | "2dsphere" | "geoHaystack" => {
                    return Err(CommandError::not_implemented(format!("'{kind}' indexes are not supported yet")))
                }
                _ => return Err(cannot_create(format!("Unknown index plugin '{kind}'"))),
            },
            other => {
                return Err(cannot_create(format!(
                    "Values in v:2 index key pattern cannot be of type {}. Only numbers > 0, numbers < 0, and strings are allowed.",
                    crate::args::type_name(other)
                )))
            }
        }
    }
    if key.len() > 1 && key.keys().any(|f| is_wildcard(f)) {
        return Err(CommandError::not_implemented("compound wildcard indexes are not supported yet"));
    }
    Ok(())
}

/// A wildcard key pattern field: `$**` or `path.$**`.
fn is_wildcard(field: &str) -> bool {
    field == "$**" || field.ends_with(".$**")
}

/// A wildcard index's options, as mongod checks them: no `sparse`,
/// `unique` or TTL; a `wildcardProjection` only with `{"$**": ±1}`, of
/// inclusions or exclusions (`_id` either way).
fn check_wildcard(spec: &Document, key: &Document) -> Result<(), CommandError> {
    let wildcard = key.keys().any(|f| is_wildcard(f));
    if !wildcard {
        return match spec.contains_key("wildcardProjection") {
            true => {
                Err(CommandError::bad_value("The field 'wildcardProjection' is only allowed in 'wildcard' indexes"))
            }
            false => Ok(()),
        };
    }
    let refused = [
        ("sparse", "does not support the sparse option"),
        ("unique", "does not support the unique option"),
        ("prepareUnique", "does not support the prepareUnique option"),
    ];
    for (option, what) in refused {
        if spec.get(option).is_some_and(truthy) {
            return Err(cannot_create(format!("Index type 'wildcard' {what}")));
        }
    }
    if spec.contains_key("expireAfterSeconds") {
        return Err(cannot_create("Index type 'wildcard' cannot be a TTL index".into()));
    }
    let Some(projection) = spec.get("wildcardProjection") else { return Ok(()) };
    let Bson::Document(projection) = projection else {
        return Err(CommandError::type_mismatch(format!(
            "The field 'wildcardProjection' must be a non-empty object, but got {}",
            crate::args::type_name(projection)
        )));
    };
    if !key.contains_key("$**") {
        return Err(CommandError::failed_to_parse(
            "The field 'wildcardProjection' is only allowed when 'key' is {\"$**\": ±1}",
        ));
    }
    if projection.is_empty() {
        return Err(CommandError::failed_to_parse("The 'wildcardProjection' field can't be an empty object"));
    }
    check_projection(projection, "", &mut None)
}

/// Every path of a `wildcardProjection` included or every one excluded
/// (`_id` either way), with numbers or booleans.
fn check_projection(projection: &Document, prefix: &str, mode: &mut Option<bool>) -> Result<(), CommandError> {
    let failed = |code: i32, why: String| {
        CommandError::with_code(code, format!("Failed to parse projection: wildcardProjection :: caused by :: {why}"))
    };
    for (k, v) in projection {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        if k.starts_with('$') || k.is_empty() {
            return Err(failed(
                31254,
                format!("Cannot use expression other than $meta in exclusion projection: {path}"),
            ));
        }
        let on = match v {
            Bson::Document(inner) if !inner.is_empty() => {
                check_projection(inner, &path, mode)?;
                continue;
            }
            Bson::Boolean(b) => *b,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                !doc::compare::compare(v, &Bson::Int32(0)).is_eq()
            }
            _ => {
                return Err(failed(
                    51271,
                    format!("The value of the projection of field '{path}' must be a number or a boolean"),
                ))
            }
        };
        if path == "_id" {
            continue;
        }
        match *mode.get_or_insert(on) {
            m if m == on => {}
            true => return Err(failed(31254, format!("Cannot do exclusion on field {path} in inclusion projection"))),
            false => return Err(failed(31253, format!("Cannot do inclusion on field {path} in exclusion projection"))),
        }
    }
    Ok(())
}

/// How a requested index stands against one the collection has.
pub(crate) enum Versus {
    /// Unrelated.
    Other,
    /// The same index: nothing to do.
    Same,
    Conflict(CommandError),
}

/// Compare a requested spec with an existing one (both as shown), as
/// mongod does: two indexes are equivalent when their key patterns,
/// collations and partial filters are the same (a collection may hold
/// several indexes of one key pattern that differ in those), identical
/// when their other options are the same too.
pub(crate) fn versus(asked: &IndexSpec, existing: &Document) -> Versus {
    let name = existing.get_str("name").unwrap_or_default();
    let key = existing.get_document("key").ok();
    let identity = |d: &Document| {
        let part = |f: &str| d.get(f).cloned();
        (part("collation"), part("partialFilterExpression"), part("wildcardProjection"))
    };
    let equivalent = key.is_some_and(|k| same_pattern(k, &asked.key)) && identity(existing) == identity(&asked.shown);
    let options = |d: &Document| -> Document {
        d.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "v" | "key" | "name" | "hidden"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let identical = equivalent && options(existing) == options(&asked.shown);
    let shown = |d: &Document| doc::format::spaced(&Bson::Document(d.clone()));
    let both = format!("Requested index: {}, existing index: {}", shown(&asked.shown), shown(existing));
    let conflict = |code: i32, msg: String| Versus::Conflict(CommandError::with_code(code, msg));
    match (name == asked.name, equivalent, identical) {
        (true, _, true) => Versus::Same,
        (true, true, false) => {
            conflict(85, format!("An equivalent index already exists with the same name but different options. {both}"))
        }
        (true, false, _) => conflict(
            86,
            format!("An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. {both}"),
        ),
        (false, _, true) => conflict(85, format!("Index already exists with a different name: {name}")),
        (false, true, false) => {
            conflict(85, format!("An equivalent index already exists with a different name and options. {both}"))
        }
        (false, false, _) => Versus::Other,
    }
}

/// Key patterns equal field by field, numbers compared by value.
pub(crate) fn same_pattern(a: &Document, b: &Document) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((ka, va), (kb, vb))| ka == kb && doc::compare::compare(va, vb).is_eq())
}

/// The default name mongod and the drivers give a key pattern.
#[cfg(test)]
fn default_name(key: &Document) -> String {
    key.iter().map(|(k, v)| format!("{k}_{v}")).collect::<Vec<_>>().join("_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn parse_plain(spec: &Bson) -> Result<IndexSpec, CommandError> {
        parse(spec, None)
    }

    #[test]
    fn specs_are_checked_as_mongod_checks_them() {
        let ok = parse_plain(&Bson::Document(doc! { "key": { "a": 1, "b.c": -1 }, "name": "x", "unique": 1 })).unwrap();
        assert_eq!(ok.shown, doc! { "v": 2, "key": { "a": 1, "b.c": -1 }, "name": "x", "unique": true });
        assert_eq!(default_name(&doc! { "a": 1, "b": -1 }), "a_1_b_-1");
        let code = |d: Document| parse_plain(&Bson::Document(d)).unwrap_err().code;
        assert_eq!(code(doc! { "key": {}, "name": "x" }), 67);
        assert_eq!(code(doc! { "key": { "a": 0 }, "name": "x" }), 67);
        assert_eq!(code(doc! { "key": { "a": "nope" }, "name": "x" }), 67);
        assert_eq!(code(doc! { "key": { "a": true }, "name": "x" }), 67);
        assert_eq!(code(doc! { "key": { "a": 1 }, "name": "x", "bogus": 1 }), 197);
        assert_eq!(code(doc! { "key": { "a": 1 } }), 9);
        assert_eq!(code(doc! { "key": { "a": "text" }, "name": "x" }), 238);
        assert_eq!(code(doc! { "key": { "a": "hashed", "b": "hashed" }, "name": "x" }), 67);
        assert_eq!(code(doc! { "key": { "a": "hashed" }, "name": "x", "unique": true }), 16764);
    }

    #[test]
    fn an_existing_index_is_the_same_or_conflicts() {
        let asked = parse_plain(&Bson::Document(doc! { "key": { "a": 1 }, "name": "a_1" })).unwrap();
        let existing = doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" };
        assert!(matches!(versus(&asked, &existing), Versus::Same));
        let renamed = doc! { "v": 2, "key": { "a": 1.0 }, "name": "other" };
        assert!(matches!(versus(&asked, &renamed), Versus::Conflict(e) if e.code == 85));
        let rekeyed = doc! { "v": 2, "key": { "b": 1 }, "name": "a_1" };
        assert!(matches!(versus(&asked, &rekeyed), Versus::Conflict(e) if e.code == 86));
        let unique = doc! { "v": 2, "key": { "a": 1 }, "name": "a_1", "unique": true };
        assert!(matches!(versus(&asked, &unique), Versus::Conflict(e) if e.code == 85));
        let unique_elsewhere = doc! { "v": 2, "key": { "a": 1 }, "name": "u", "unique": true };
        assert!(matches!(versus(&asked, &unique_elsewhere), Versus::Conflict(e) if e.code == 85));
        // Another collation or partial filter: another index of the same key.
        let collated = doc! { "v": 2, "key": { "a": 1 }, "name": "c", "collation": { "locale": "fr" } };
        assert!(matches!(versus(&asked, &collated), Versus::Other));
        let collated_same_name = doc! { "v": 2, "key": { "a": 1 }, "name": "a_1", "collation": { "locale": "fr" } };
        assert!(matches!(versus(&asked, &collated_same_name), Versus::Conflict(e) if e.code == 86));
    }

    #[test]
    fn an_index_takes_its_collation_in_full_or_the_collections() {
        let fr = doc! { "locale": "fr", "strength": 1 };
        let given =
            parse(&Bson::Document(doc! { "key": { "a": 1 }, "name": "a", "collation": fr.clone() }), None).unwrap();
        assert_eq!(given.shown.get_document("collation").unwrap().get_str("locale"), Ok("fr"));
        assert_eq!(given.shown.get_document("collation").unwrap().get_i32("strength"), Ok(1));
        let inherited = parse(&Bson::Document(doc! { "key": { "a": 1 }, "name": "a" }), Some(&fr)).unwrap();
        assert_eq!(inherited.shown, given.shown);
        let simple = doc! { "key": { "a": 1 }, "name": "a", "collation": { "locale": "simple" } };
        assert!(!parse(&Bson::Document(simple), Some(&fr)).unwrap().shown.contains_key("collation"));
        let bad = |c: Bson| parse(&Bson::Document(doc! { "key": { "a": 1 }, "name": "a", "collation": c }), None);
        assert_eq!(bad(Bson::String("fr".into())).unwrap_err().code, 14);
        assert_eq!(bad(bson::bson!({ "locale": "fr", "strength": 9 })).unwrap_err().code, 2);
    }
}
