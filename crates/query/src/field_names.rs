//! MongoDB 5.0+'s rules for stored field names that start with `$` (the
//! manual's "Field Names with Periods and Dollar Signs"; mongod's
//! `storage_validation.cpp`, `validate_id.cpp` and `fixDocumentForInsert`).
//!
//! - An insert (an upsert's new document included) may use `$`-prefixed
//!   and dotted names anywhere but inside `_id`.
//! - A replacement may not have a `$`-prefixed top-level field, unless the
//!   fields form a DBRef (`$ref`, `$id`, then optionally `$db`, in order).
//! - A pipeline-style update may set top-level `$` fields (`$setField`).
//! - Update operators may not name a top-level `$` field (`update.rs`
//!   checks their paths when it parses them).
//! - `_id` may not be a regex, an array or undefined, nor hold a
//!   `$`-prefixed field at any depth (but a DBRef's).
//!
//! Dots are allowed everywhere; only the query language reads them as paths.

use crate::error::{err, FilterError, BAD_VALUE, DBREF_INVALID, DOLLAR_PREFIXED_FIELD_NAME, ID_FIELD_INVALID};
use crate::types::type_name;
use bson::{Bson, Document};

/// Whose `_id` is checked: an insert command's document answers a bad type
/// with BadValue, an upsert's with InvalidIdField (as mongod 8.0 does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdFor {
    Insert,
    Upsert,
}

/// A new document's `_id` (mongod's `storageValidIdField`).
pub fn check_id_for_insert(id: &Bson, whose: IdFor) -> Result<(), FilterError> {
    check_id_type(id).map_err(|e| match whose {
        IdFor::Insert => FilterError { code: BAD_VALUE, ..e },
        IdFor::Upsert => e,
    })?;
    if let Bson::Document(d) = id {
        if let Err(name) = storage_valid_embedded(d) {
            return Err(err(
                DOLLAR_PREFIXED_FIELD_NAME,
                format!("_id fields may not contain '$'-prefixed fields: {name} is not valid for storage."),
            ));
        }
    }
    Ok(())
}

fn check_id_type(id: &Bson) -> Result<(), FilterError> {
    match id {
        Bson::RegularExpression(_) | Bson::Array(_) | Bson::Undefined => {
            Err(err(ID_FIELD_INVALID, format!("The '_id' value cannot be of type {}", type_name(id))))
        }
        _ => Ok(()),
    }
}

/// The first `$`-prefixed name at any depth of `d` that is not part of a
/// DBRef opening a document (mongod's `BSONObj::storageValidEmbedded`).
fn storage_valid_embedded(d: &Document) -> Result<(), String> {
    let mut fields = d.iter().peekable();
    let mut first = true;
    while let Some((name, value)) = fields.next() {
        let mut current = (name, value);
        if name.starts_with('$') {
            let is_ref = first && name == "$ref" && matches!(value, Bson::String(_));
            if !(is_ref && fields.peek().is_some_and(|(k, _)| *k == "$id")) {
                return Err(name.clone());
            }
            fields.next(); // `$id`: any value, not looked into
            first = false;
            match fields.next() {
                None => return Ok(()),
                Some((k, Bson::String(_))) if k == "$db" => continue,
                Some((k, _)) if k.starts_with('$') => return Err(k.clone()),
                Some(next) => current = next,
            }
        }
        nested_valid(current.1)?;
        first = false;
    }
    Ok(())
}

fn nested_valid(v: &Bson) -> Result<(), String> {
    match v {
        Bson::Document(d) => storage_valid_embedded(d),
        Bson::JavaScriptCodeWithScope(c) => storage_valid_embedded(&c.scope),
        Bson::Array(items) => items.iter().try_for_each(nested_valid),
        _ => Ok(()),
    }
}

/// The document a replacement or a pipeline-style update produced
/// (mongod's `scanDocument`): top-level `$` names unless
/// `top_level_dollar_allowed`, and `_id` at every depth.
pub fn check_updated(doc: &Document, top_level_dollar_allowed: bool) -> Result<(), FilterError> {
    let fields: Vec<(&String, &Bson)> = doc.iter().collect();
    for (i, (name, value)) in fields.iter().enumerate() {
        if *name == "_id" {
            match value {
                Bson::Document(id) => check_id_fields(id, "_id")?,
                other => check_id_type(other)?,
            }
        } else if name.starts_with('$') && !top_level_dollar_allowed {
            check_dollar_field(&fields, i, name)?;
        }
    }
    Ok(())
}

/// Every `$` name inside an `_id` document, at any depth but directly in
/// an array, must be part of a well-formed DBRef.
fn check_id_fields(d: &Document, path: &str) -> Result<(), FilterError> {
    let fields: Vec<(&String, &Bson)> = d.iter().collect();
    for (i, (name, value)) in fields.iter().enumerate() {
        let full = format!("{path}.{name}");
        if name.starts_with('$') {
            check_dollar_field(&fields, i, &full)?;
        }
        check_id_value(value, &full)?;
    }
    Ok(())
}

fn check_id_value(v: &Bson, path: &str) -> Result<(), FilterError> {
    match v {
        Bson::Document(d) => check_id_fields(d, path),
        Bson::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| match item {
            // Array elements have no names to check, only their contents.
            Bson::Document(d) => check_id_fields(d, &format!("{path}.{i}")),
            other => check_id_value(other, &format!("{path}.{i}")),
        }),
        _ => Ok(()),
    }
}

/// mongod's `validateDollarPrefixElement`: `fields[i]` starts with `$`; it
/// is fine only as part of `$ref`, `$id`[, `$db`] in that order.
fn check_dollar_field(fields: &[(&String, &Bson)], i: usize, full: &str) -> Result<(), FilterError> {
    let name_at = |j: Option<usize>| j.and_then(|j| fields.get(j)).map(|(k, _)| k.as_str());
    let mut at = i;
    if fields[at].0 == "$db" {
        if !matches!(fields[at].1, Bson::String(_)) {
            let kind = type_name(fields[at].1);
            return Err(err(DBREF_INVALID, format!("The DBRef $db field must be a String, not a {kind}")));
        }
        if name_at(at.checked_sub(1)) != Some("$id") {
            return Err(err(DBREF_INVALID, "Found $db field without a $id before it, which is invalid."));
        }
        at -= 1;
    }
    if fields[at].0 == "$id" {
        if name_at(at.checked_sub(1)) != Some("$ref") {
            return Err(err(DBREF_INVALID, "Found $id field without a $ref before it, which is invalid."));
        }
        at -= 1;
    }
    if fields[at].0 != "$ref" {
        return Err(err(
            DOLLAR_PREFIXED_FIELD_NAME,
            format!(
                "The dollar ($) prefixed field '{}' in '{full}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.",
                fields[i].0
            ),
        ));
    }
    if !matches!(fields[at].1, Bson::String(_)) {
        let kind = type_name(fields[at].1);
        return Err(err(DBREF_INVALID, format!("The DBRef $ref field must be a String, not a {kind}")));
    }
    if name_at(Some(at + 1)) != Some("$id") {
        return Err(err(DBREF_INVALID, "The DBRef $ref field must be followed by a $id field"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(r: Result<(), FilterError>) -> i32 {
        r.map_or_else(|e| e.code, |()| 0)
    }

    #[test]
    fn insert_ids() {
        assert_eq!(code(check_id_for_insert(&Bson::Int32(1), IdFor::Insert)), 0);
        let insert = |v: Bson| check_id_for_insert(&v, IdFor::Insert);
        assert_eq!(code(insert(Bson::Document(doc! { "a": { "b.c": 1 } }))), 0);
        assert_eq!(code(insert(Bson::Document(doc! { "$ref": "c", "$id": 1, "$db": "d" }))), 0);
        let e = insert(Bson::Document(doc! { "a": [{ "$numberLong": "5" }] })).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (52, "_id fields may not contain '$'-prefixed fields: $numberLong is not valid for storage.")
        );
        assert_eq!(code(insert(Bson::Document(doc! { "$ref": 1, "$id": 1 }))), 52);
        assert_eq!(code(insert(Bson::Document(doc! { "x": 1, "$ref": "c", "$id": 1 }))), 52);
        let e = insert(Bson::Array(vec![])).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (2, "The '_id' value cannot be of type array"));
        assert_eq!(code(check_id_for_insert(&Bson::Undefined, IdFor::Upsert)), 53);
    }

    #[test]
    fn updated_documents() {
        let ok = doc! { "_id": 1, "a": { "$x": 1 }, "$ref": "c", "$id": 2, "$db": "d" };
        assert_eq!(code(check_updated(&ok, false)), 0);
        let e = check_updated(&doc! { "_id": 1, "$x": 1 }, false).unwrap_err();
        assert_eq!(e.code, 52);
        assert!(e.message.starts_with("The dollar ($) prefixed field '$x' in '$x' is not allowed"), "{}", e.message);
        assert_eq!(code(check_updated(&doc! { "_id": 1, "$x": 1 }, true)), 0);
        let e = check_updated(&doc! { "_id": { "a": [{ "$x": 1 }] } }, true).unwrap_err();
        assert!(e.message.contains("'$x' in '_id.a.0.$x'"), "{}", e.message);
        assert_eq!(code(check_updated(&doc! { "$id": 1 }, false)), 10);
        assert_eq!(code(check_updated(&doc! { "$ref": "c", "x": 1 }, false)), 10);
        assert_eq!(code(check_updated(&doc! { "$ref": "c", "$id": 1, "$db": 5 }, false)), 10);
        assert_eq!(code(check_updated(&doc! { "_id": [1] }, true)), 53);
    }
}
