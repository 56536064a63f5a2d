//! Why a document fails a collection validator: the `errInfo.details`
//! mongod attaches to DocumentValidationFailure (121).
//!
//! The explanation is built from the validator as written (not from the
//! parsed filter), one clause at a time, each clause re-checked with the
//! matcher (or the JSON Schema evaluator), so it never disagrees with the
//! verdict:
//! - The top level is an implicit `$and` of its clauses (a field with
//!   several operators gives one clause per operator); with one clause,
//!   that clause's explanation stands alone.
//! - A failing leaf reports `operatorName`, `specifiedAs`, a `reason`, and
//!   the values it considered (an array at the end of the path gives its
//!   elements, except for `$size`, `$all` and `$elemMatch`); a missing
//!   path reports "field was missing".
//! - `$not` and `$nor` invert: below them a clause is reported because it
//!   matched, with the opposite reason ("comparison succeeded").
//! - `$jsonSchema` reports its keywords in mongod's fixed order (`type`
//!   last), each only for values of its own type, and `required` with the
//!   missing names.
//!
//! Not explained (the clause is still listed, with its operator and what
//! it was given): `patternProperties`, `dependencies` and
//! `additionalItems` in a schema.

use crate::expr::{Expression, Scope};
use crate::matcher::{walk, Filter};
use crate::regex::Regex;
use crate::schema::JsonSchema;
use crate::types::{truthy, type_name};
use bson::{doc, Bson, Document};
use std::collections::BTreeSet;

/// At most this many considered values are shown (mongod's default).
const MAX_CONSIDERED: usize = 10;

/// The most an `errInfo` may take (mongod's 12 MiB).
const MAX_ERR_INFO_BYTES: usize = 12 << 20;

/// The `details` of a document failing `validator`.
pub fn details(validator: &Document, doc: &Document) -> Document {
    explain_clauses(validator, doc, false)
}

/// The `errInfo` of a document failing `validator`: `{failingDocumentId,
/// details}`; past 12 MiB, the details without what was specified and
/// considered (`truncated: true`); past that again, only a note (as
/// mongod's).
pub fn err_info(validator: &Document, doc: &Document) -> Document {
    let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
    let mut details = details(validator, doc);
    let size = doc::bson_bytes::encoded_len;
    if size(&details) <= MAX_ERR_INFO_BYTES {
        return doc! { "failingDocumentId": id, "details": details };
    }
    strip(&mut details);
    if size(&details) <= MAX_ERR_INFO_BYTES {
        return doc! { "failingDocumentId": id, "truncated": true, "details": details };
    }
    doc! { "failingDocumentId": id, "note": "detailed error was too large" }
}

/// Drop what was specified and considered, everywhere in `d`.
fn strip(d: &mut Document) {
    for key in ["specifiedAs", "consideredValue", "consideredValues", "consideredValuesTruncated"] {
        d.remove(key);
    }
    for (_, v) in d.iter_mut() {
        match v {
            Bson::Document(inner) => strip(inner),
            Bson::Array(items) => items.iter_mut().filter_map(Bson::as_document_mut).for_each(strip),
            _ => {}
        }
    }
}

/// The clauses of a filter document, as mongod's parser lays them out at
/// one level: one per top-level operator, one per field operator.
fn clauses(filter: &Document) -> Vec<Document> {
    let mut out = Vec::new();
    for (key, value) in filter {
        if key == "$comment" {
            continue;
        }
        match value {
            Bson::Document(ops) if !key.starts_with('$') && ops.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (op, arg) in ops {
                    match op.as_str() {
                        // `$options` travels with its `$regex`.
                        "$options" => {}
                        "$regex" => {
                            let mut spec = doc! { "$regex": arg.clone() };
                            if let Some(o) = ops.get("$options") {
                                spec.insert("$options", o.clone());
                            }
                            out.push(doc! { key: spec });
                        }
                        _ => out.push(doc! { key: { op: arg.clone() } }),
                    }
                }
            }
            _ => out.push(doc! { key: value.clone() }),
        }
    }
    out
}

fn matches(filter: &Document, doc: &Document) -> bool {
    Filter::parse(filter).map(|f| f.matches(doc)).unwrap_or(false)
}

/// A filter document's explanation: its one clause's, or an implicit
/// `$and` over its clauses.
fn explain_clauses(filter: &Document, doc: &Document, inverted: bool) -> Document {
    let parts = clauses(filter);
    match parts.as_slice() {
        [one] => explain_clause(one, doc, inverted),
        _ => and(&parts, doc, inverted),
    }
}

/// `$and`: the clauses that failed (inverted: that matched).
fn and(parts: &[Document], doc: &Document, inverted: bool) -> Document {
    let listed = indexed(parts, doc, inverted, |matched| matched == inverted);
    let key = if inverted { "clausesSatisfied" } else { "clausesNotSatisfied" };
    doc! { "operatorName": "$and", key: listed }
}

/// `{index, details}` for each clause `pick` chooses by whether it matched.
fn indexed(parts: &[Document], doc: &Document, inverted: bool, pick: impl Fn(bool) -> bool) -> Vec<Document> {
    parts
        .iter()
        .enumerate()
        .filter(|(_, c)| pick(matches(c, doc)))
        .map(|(i, c)| doc! { "index": i as i32, "details": explain_clauses(c, doc, inverted) })
        .collect()
}

/// The sub-filters of a logical operator's array.
fn sub_filters(arg: &Bson) -> Vec<Document> {
    match arg {
        Bson::Array(items) => items.iter().filter_map(|i| i.as_document().cloned()).collect(),
        _ => Vec::new(),
    }
}

fn explain_clause(clause: &Document, doc: &Document, inverted: bool) -> Document {
    let Some((key, value)) = clause.iter().next() else { return Document::new() };
    match key.as_str() {
        "$and" => and(&sub_filters(value), doc, inverted),
        "$or" => {
            let parts = sub_filters(value);
            // Not inverted, every clause failed.
            let listed = indexed(&parts, doc, inverted, |matched| !inverted || matched);
            let key = if inverted { "clausesSatisfied" } else { "clausesNotSatisfied" };
            doc! { "operatorName": "$or", key: listed }
        }
        "$nor" => {
            let parts = sub_filters(value);
            let listed = indexed(&parts, doc, !inverted, |matched| matched != inverted);
            let key = if inverted { "clausesNotSatisfied" } else { "clausesSatisfied" };
            doc! { "operatorName": "$nor", key: listed }
        }
        "$expr" => {
            let result = Expression::parse(value, &Scope::default()).and_then(|e| e.eval(doc));
            let mut out = doc! { "operatorName": "$expr", "specifiedAs": clause.clone() };
            match result {
                Ok(v) => {
                    let matched = truthy(&v);
                    out.insert("reason", if matched { "expression did match" } else { "expression did not match" });
                    out.insert("expressionResult", v.unwrap_or(Bson::Null));
                }
                Err(e) => {
                    out.insert("reason", "failed to evaluate aggregation expression");
                    out.insert("details", doc! { "code": e.code, "errmsg": e.message });
                }
            }
            out
        }
        "$jsonSchema" => match (value, inverted) {
            (_, true) => doc! { "operatorName": "$jsonSchema", "reason": "schema matched" },
            (Bson::Document(schema), false) => {
                let mut out = doc! { "operatorName": "$jsonSchema" };
                annotate(&mut out, schema);
                out.insert("schemaRulesNotSatisfied", schema_errors(schema, &Bson::Document(doc.clone()), true));
                out
            }
            _ => doc! { "operatorName": "$jsonSchema" },
        },
        "$alwaysFalse" | "$alwaysTrue" => {
            let reason =
                if inverted { "expression always evaluates to true" } else { "expression always evaluates to false" };
            doc! { "operatorName": key, "specifiedAs": clause.clone(), "reason": reason }
        }
        path => match value {
            Bson::Document(ops) if ops.keys().next().is_some_and(|k| k.starts_with('$')) => {
                let (op, arg) = ops.iter().next().expect("not empty");
                if op == "$not" {
                    let inner = match arg {
                        Bson::Document(d) => Bson::Document(d.clone()),
                        regex => regex.clone(),
                    };
                    let details = explain_clauses(&doc! { path: inner }, doc, !inverted);
                    return doc! { "operatorName": "$not", "details": details };
                }
                leaf(path, op, arg, clause, doc, inverted)
            }
            Bson::RegularExpression(_) => leaf(path, "$regex", value, clause, doc, inverted),
            _ => leaf(path, "$eq", value, clause, doc, inverted),
        },
    }
}

/// The values `path` reaches (an array at its end gives its elements when
/// `elements`), or `None` when it reaches none at all.
fn considered(doc: &Document, path: &str, elements: bool) -> Option<Vec<Bson>> {
    let mut found = false;
    let mut values = Vec::new();
    walk(doc, path, None, &mut |v, _| match v {
        Some(Bson::Array(items)) if elements => {
            found = true;
            values.extend(items.iter().cloned());
        }
        Some(v) => {
            found = true;
            values.push(v.clone());
        }
        None => {}
    });
    found.then_some(values)
}

/// `consideredValue` for one value, else `consideredValues` (at most 10).
fn put_values(out: &mut Document, values: &[Bson]) {
    match values {
        [one] => {
            out.insert("consideredValue", one.clone());
        }
        _ => {
            out.insert("consideredValues", values.iter().take(MAX_CONSIDERED).cloned().collect::<Vec<_>>());
            if values.len() > MAX_CONSIDERED {
                out.insert("consideredValuesTruncated", true);
            }
        }
    }
}

/// `<singular>` for one name, else `<plural>` (a sorted set).
fn put_names(out: &mut Document, singular: &str, plural: &str, names: BTreeSet<&str>) {
    match names.len() {
        0 => {}
        1 => {
            out.insert(singular, names.into_iter().next().unwrap_or_default());
        }
        _ => {
            out.insert(plural, names.into_iter().collect::<Vec<_>>());
        }
    }
}

/// One field operator's explanation (the caller knows it failed, or
/// matched when `inverted`).
fn leaf(path: &str, op: &str, arg: &Bson, clause: &Document, doc: &Document, inverted: bool) -> Document {
    let mut out = doc! { "operatorName": op, "specifiedAs": clause.clone() };
    // `$ne`, `$nin` and `{$exists: false}` are negations of `$eq`, `$in`
    // and `{$exists: true}`, and explain as such.
    let negated = matches!(op, "$ne" | "$nin") || (op == "$exists" && !truthy(&Some(arg.clone())));
    let flip = inverted != negated;
    let pick = |normal: &'static str, when_flipped: &'static str| if flip { when_flipped } else { normal };
    if op == "$exists" {
        out.insert("reason", pick("path does not exist", "path does exist"));
        return out;
    }
    let whole = matches!(op, "$size" | "$all" | "$elemMatch");
    let Some(values) = considered(doc, path, !whole) else {
        out.insert("reason", "field was missing");
        return out;
    };
    let expected: &[&str] = match op {
        "$regex" => &["regex", "string", "symbol"],
        "$mod" => &["decimal", "double", "int", "long"],
        "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
            &["binData", "decimal", "double", "int", "long"]
        }
        "$size" | "$elemMatch" => &["array"],
        _ => &[],
    };
    let types: BTreeSet<&str> = values.iter().map(type_name).collect();
    if !expected.is_empty() && !flip && !types.iter().any(|t| expected.contains(t)) {
        out.insert("reason", "type did not match");
        put_names(&mut out, "consideredType", "consideredTypes", types);
        put_names(&mut out, "expectedType", "expectedTypes", expected.iter().copied().collect());
        put_values(&mut out, &values);
        return out;
    }
    let reason = match op {
        "$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" => pick("comparison failed", "comparison succeeded"),
        "$in" | "$nin" => pick("no matching value found in array", "matching value found in array"),
        "$type" => pick("type did not match", "type did match"),
        "$regex" => pick("regular expression did not match", "regular expression did match"),
        "$mod" => pick("$mod did not evaluate to expected remainder", "$mod did evaluate to expected remainder"),
        "$size" => pick("array length was not equal to given size", "array length was equal to given size"),
        "$elemMatch" => pick("array did not satisfy the child predicate", "array did satisfy the child predicate"),
        "$all" if matches!(arg, Bson::Array(a) if a.is_empty()) => {
            pick("expression always evaluates to false", "expression always evaluates to true")
        }
        "$all" => pick("array did not contain all specified values", "array did contain all specified values"),
        "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
            pick("bitwise operator failed to match", "bitwise operator matched successfully")
        }
        _ => pick("expression did not match", "expression did match"),
    };
    out.insert("reason", reason);
    put_values(&mut out, &values);
    if op == "$type" {
        put_names(&mut out, "consideredType", "consideredTypes", types);
    }
    out
}

/// A schema's `title` and `description` (strings only), title first.
fn annotate(out: &mut Document, schema: &Document) {
    for key in ["title", "description"] {
        if let Ok(text) = schema.get_str(key) {
            out.insert(key, text);
        }
    }
}

/// Whether `v` satisfies `schema` (an unparsable one: never).
fn satisfies(schema: &Document, v: &Bson) -> bool {
    JsonSchema::parse(schema).map(|s| s.matches_value(v)).unwrap_or(false)
}

/// The keyword groups in the order mongod reports them.
const ORDER: &[&str] = &[
    "pattern",
    "maxLength",
    "minLength",
    "multipleOf",
    "maximum",
    "minimum",
    "minItems",
    "maxItems",
    "uniqueItems",
    "items",
    "additionalItems",
    "properties",
    "additionalProperties",
    "patternProperties",
    "required",
    "minProperties",
    "maxProperties",
    "dependencies",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "enum",
    "type",
    "bsonType",
];

/// Why `v` fails `schema`, keyword by keyword (`top`: the document itself).
fn schema_errors(schema: &Document, v: &Bson, top: bool) -> Vec<Document> {
    let mut out = Vec::new();
    for &kw in ORDER {
        let Some(arg) = schema.get(kw) else { continue };
        // The keyword alone (`minimum` with its `exclusiveMinimum`).
        let mut alone = doc! { kw: arg.clone() };
        let exclusive = match kw {
            "minimum" => Some("exclusiveMinimum"),
            "maximum" => Some("exclusiveMaximum"),
            _ => None,
        };
        if let Some(x) = exclusive.and_then(|x| schema.get(x).map(|b| (x, b))) {
            alone.insert(x.0, x.1.clone());
        }
        if kw == "items" || kw == "properties" || kw == "additionalProperties" || kw == "allOf" || kw == "anyOf" {
            // Their entries come from their subschemas (below).
        } else if satisfies(&alone, v) {
            continue;
        }
        let entry = match kw {
            "pattern" => Some(simple(kw, alone, "regular expression did not match", v)),
            "maxLength" | "minLength" => Some(simple(kw, alone, "specified string length was not satisfied", v)),
            "multipleOf" => Some(simple(kw, alone, "considered value is not a multiple of the specified value", v)),
            "maximum" | "minimum" => Some(simple(kw, alone, "comparison failed", v)),
            "enum" => Some(simple(kw, alone, "value was not found in enum", v)),
            "minItems" | "maxItems" => {
                let n = v.as_array().map_or(0, Vec::len) as i32;
                let mut e = simple(kw, alone, "array did not match specified length", v);
                e.insert("numberOfItems", n);
                Some(e)
            }
            "uniqueItems" => {
                let items = v.as_array().cloned().unwrap_or_default();
                let dup = items
                    .iter()
                    .enumerate()
                    .find(|(i, x)| items[..*i].iter().any(|y| doc::compare::compare(x, y).is_eq()))
                    .map(|(_, x)| x.clone());
                let mut e = simple(kw, alone, "found a duplicate item", v);
                e.insert("duplicatedValue", dup.unwrap_or(Bson::Null));
                Some(e)
            }
            "minProperties" | "maxProperties" => {
                let n = v.as_document().map_or(0, Document::len) as i32;
                Some(doc! {
                    "operatorName": kw, "specifiedAs": alone,
                    "reason": "specified number of properties was not satisfied", "numberOfProperties": n,
                })
            }
            "required" => {
                let present = v.as_document();
                let mut missing: Vec<&str> =
                    arg.as_array().map(|a| a.iter().filter_map(Bson::as_str).collect()).unwrap_or_default();
                missing.retain(|name| !present.is_some_and(|d| d.contains_key(*name)));
                missing.sort_unstable();
                missing.dedup();
                Some(doc! { "operatorName": kw, "specifiedAs": alone, "missingProperties": missing })
            }
            "properties" => properties(arg, v),
            "additionalProperties" => additional_properties(schema, arg, v),
            "items" => items(arg, v),
            "allOf" | "anyOf" | "oneOf" => combination(kw, arg, v),
            "not" => Some(doc! { "operatorName": kw, "reason": "child expression matched" }),
            "type" | "bsonType" if top => Some(
                doc! { "operatorName": kw, "specifiedAs": alone, "reason": "expression always evaluates to false" },
            ),
            "type" | "bsonType" => Some(doc! {
                "operatorName": kw, "specifiedAs": alone, "reason": "type did not match",
                "consideredValue": v.clone(), "consideredType": type_name(v),
            }),
            _ => Some(doc! { "operatorName": kw, "specifiedAs": alone }),
        };
        out.extend(entry);
    }
    out
}

fn simple(kw: &str, alone: Document, reason: &str, v: &Bson) -> Document {
    doc! { "operatorName": kw, "specifiedAs": alone, "reason": reason, "consideredValue": v.clone() }
}

/// `properties`: each present property that fails its subschema.
fn properties(arg: &Bson, v: &Bson) -> Option<Document> {
    let (Bson::Document(props), Bson::Document(d)) = (arg, v) else { return None };
    let failing: Vec<Document> = props
        .iter()
        .filter_map(|(name, sub)| {
            let (sub, value) = (sub.as_document()?, d.get(name)?);
            if satisfies(sub, value) {
                return None;
            }
            let details = schema_errors(sub, value, false);
            if details.is_empty() {
                return None;
            }
            let mut e = doc! { "propertyName": name };
            annotate(&mut e, sub);
            e.insert("details", details);
            Some(e)
        })
        .collect();
    (!failing.is_empty()).then(|| doc! { "operatorName": "properties", "propertiesNotSatisfied": failing })
}

/// `additionalProperties`: the fields `properties` does not name.
fn additional_properties(schema: &Document, arg: &Bson, v: &Bson) -> Option<Document> {
    let Bson::Document(d) = v else { return None };
    let named = schema.get_document("properties").ok();
    let patterns: Vec<Regex> = schema
        .get_document("patternProperties")
        .map(|p| p.keys().filter_map(|k| Regex::new(k, "").ok()).collect())
        .unwrap_or_default();
    let extra = d.iter().filter(|(k, _)| {
        !named.is_some_and(|n| n.contains_key(k.as_str()))
            && !patterns.iter().any(|p| p.matches(&Bson::String(k.to_string())))
    });
    match arg {
        Bson::Boolean(false) => {
            let names: Vec<&str> = extra.map(|(k, _)| k.as_str()).collect();
            (!names.is_empty()).then(|| {
                doc! {
                    "operatorName": "additionalProperties",
                    "specifiedAs": { "additionalProperties": false },
                    "additionalProperties": names,
                }
            })
        }
        Bson::Document(sub) => {
            let (name, value) = extra.into_iter().find(|(_, x)| !satisfies(sub, x))?;
            let mut e = doc! { "operatorName": "additionalProperties" };
            annotate(&mut e, sub);
            e.insert("reason", "at least one additional property did not match the subschema");
            e.insert("failingProperty", name.as_str());
            e.insert("details", schema_errors(sub, value, false));
            Some(e)
        }
        _ => None,
    }
}

/// `items`: the first failing element (one schema), or each failing
/// position (an array of schemas).
fn items(arg: &Bson, v: &Bson) -> Option<Document> {
    let Bson::Array(values) = v else { return None };
    match arg {
        Bson::Document(sub) => {
            let (i, item) = values.iter().enumerate().find(|(_, x)| !satisfies(sub, x))?;
            let mut e = doc! { "operatorName": "items" };
            annotate(&mut e, sub);
            e.insert("reason", "At least one item did not match the sub-schema");
            e.insert("itemIndex", i as i32);
            e.insert("details", schema_errors(sub, item, false));
            Some(e)
        }
        Bson::Array(subs) => {
            let failing: Vec<Document> = subs
                .iter()
                .zip(values)
                .enumerate()
                .filter_map(|(i, (sub, item))| {
                    let sub = sub.as_document()?;
                    (!satisfies(sub, item))
                        .then(|| doc! { "itemIndex": i as i64, "details": schema_errors(sub, item, false) })
                })
                .collect();
            (!failing.is_empty()).then(|| doc! { "operatorName": "items", "details": failing })
        }
        _ => None,
    }
}

/// `allOf` (the failing schemas), `anyOf` and `oneOf` (every schema, none
/// matching; or `oneOf` matching more than one).
fn combination(kw: &str, arg: &Bson, v: &Bson) -> Option<Document> {
    let subs: Vec<&Document> = arg.as_array()?.iter().filter_map(Bson::as_document).collect();
    let matching: Vec<i32> = (0..subs.len()).filter(|&i| satisfies(subs[i], v)).map(|i| i as i32).collect();
    if kw == "oneOf" && matching.len() > 1 {
        return Some(doc! {
            "operatorName": kw, "reason": "more than one subschema matched", "matchingSchemaIndexes": matching,
        });
    }
    let failed = match kw {
        "allOf" => matching.len() < subs.len(),
        _ => matching.is_empty(),
    };
    if !failed {
        return None;
    }
    let listed: Vec<Document> = subs
        .iter()
        .enumerate()
        .filter(|(i, _)| !matching.contains(&(*i as i32)))
        .map(|(i, sub)| {
            let mut e = doc! { "index": i as i32 };
            annotate(&mut e, sub);
            e.insert("details", schema_errors(sub, v, false));
            e
        })
        .collect();
    Some(doc! { "operatorName": kw, "schemasNotSatisfied": listed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Regex;

    fn explain(validator: Document, d: Document) -> Document {
        assert!(!matches(&validator, &d), "the document must fail the validator");
        details(&validator, &d)
    }

    #[test]
    fn an_over_large_explanation_is_truncated_then_left_out() {
        let big: Vec<String> = (0..35_000).map(|i| format!("{i:0>400}")).collect();
        let d = doc! { "_id": 1, "a": "x" };
        let info = err_info(&doc! { "a": { "$in": big } }, &d);
        assert_eq!(info.get_bool("truncated"), Ok(true));
        assert_eq!(
            info.get_document("details").unwrap(),
            &doc! { "operatorName": "$in", "reason": "no matching value found in array" }
        );
        let small = err_info(&doc! { "a": 1 }, &d);
        assert!(small.get_document("details").unwrap().contains_key("specifiedAs"));
    }

    #[test]
    fn one_clause_stands_alone_and_several_make_an_and() {
        assert_eq!(
            explain(doc! { "x": { "$type": "string" } }, doc! { "_id": 1, "x": 1 }),
            doc! { "operatorName": "$type", "specifiedAs": { "x": { "$type": "string" } },
            "reason": "type did not match", "consideredValue": 1, "consideredType": "int" }
        );
        assert_eq!(
            explain(doc! { "x": { "$type": "string" } }, doc! { "_id": 1 }),
            doc! { "operatorName": "$type", "specifiedAs": { "x": { "$type": "string" } }, "reason": "field was missing" }
        );
        assert_eq!(
            explain(doc! { "a": { "$gt": 5 }, "b": { "$exists": true } }, doc! { "_id": 1, "a": [1, 2, 3] }),
            doc! { "operatorName": "$and", "clausesNotSatisfied": [
                { "index": 0, "details": { "operatorName": "$gt", "specifiedAs": { "a": { "$gt": 5 } },
                                           "reason": "comparison failed", "consideredValues": [1, 2, 3] } },
                { "index": 1, "details": { "operatorName": "$exists", "specifiedAs": { "b": { "$exists": true } },
                                           "reason": "path does not exist" } },
            ] }
        );
        // Two operators on one field are two clauses.
        let d = explain(doc! { "a": { "$gt": 0, "$lt": 10 } }, doc! { "a": 12 });
        assert_eq!(d.get_array("clausesNotSatisfied").unwrap().len(), 1);
    }

    #[test]
    fn or_nor_not_and_negated_operators() {
        let v = doc! { "$or": [
            { "phone": { "$type": "string" } },
            { "email": { "$regex": Regex { pattern: "@mongodb\\.com$".into(), options: String::new() } } },
            { "status": { "$in": ["Unknown", "Incomplete"] } },
        ] };
        let d = explain(v, doc! { "email": "info@mongodb.co" });
        let listed = d.get_array("clausesNotSatisfied").unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(
            listed[1].as_document().unwrap().get_document("details").unwrap().get_str("reason"),
            Ok("regular expression did not match")
        );
        assert_eq!(
            explain(doc! { "$nor": [{ "a": { "$gt": 10 } }, { "b": { "$lt": 10 } }] }, doc! { "a": 9, "b": 9 }),
            doc! { "operatorName": "$nor", "clausesSatisfied": [
                { "index": 1, "details": { "operatorName": "$lt", "specifiedAs": { "b": { "$lt": 10 } },
                                           "reason": "comparison succeeded", "consideredValue": 9 } },
            ] }
        );
        assert_eq!(
            explain(doc! { "a": { "$not": { "$lt": 10 } } }, doc! { "a": 9 }),
            doc! { "operatorName": "$not", "details": { "operatorName": "$lt", "specifiedAs": { "a": { "$lt": 10 } },
            "reason": "comparison succeeded", "consideredValue": 9 } }
        );
        assert_eq!(
            explain(doc! { "a": { "$ne": 2 } }, doc! { "a": 2 }),
            doc! { "operatorName": "$ne", "specifiedAs": { "a": { "$ne": 2 } },
            "reason": "comparison succeeded", "consideredValue": 2 }
        );
        assert_eq!(
            explain(doc! { "a": { "$exists": false } }, doc! { "a": 2 }).get_str("reason"),
            Ok("path does exist")
        );
        let d = explain(doc! { "a": { "$regex": "^x" } }, doc! { "a": 5 });
        assert_eq!(d.get_str("reason"), Ok("type did not match"));
        assert_eq!(d.get_array("expectedTypes").unwrap().len(), 3);
        assert_eq!(
            explain(doc! { "$expr": { "$eq": ["$a", "$b"] } }, doc! { "a": 1, "b": 2 }),
            doc! { "operatorName": "$expr", "specifiedAs": { "$expr": { "$eq": ["$a", "$b"] } },
            "reason": "expression did not match", "expressionResult": false }
        );
        let many = explain(doc! { "a": 100 }, doc! { "a": (0..12).collect::<Vec<i32>>() });
        assert_eq!(many.get_array("consideredValues").unwrap().len(), 10);
        assert_eq!(many.get_bool("consideredValuesTruncated"), Ok(true));
    }

    #[test]
    fn json_schema_keywords_in_mongod_order() {
        let v = doc! { "$jsonSchema": {
            "title": "T",
            "required": ["name", "year"],
            "properties": {
                "year": { "bsonType": "int", "minimum": 2017, "maximum": 3017 },
                "major": { "enum": ["Math", "History"], "description": "one of the list" },
                "street": { "bsonType": "string" },
                "a": { "minimum": 10, "maximum": -10 },
            },
            "additionalProperties": false,
        } };
        let d = explain(v, doc! { "_id": 0, "year": 2016, "major": "Art", "street": 5, "a": 5, "year2": 1 });
        assert_eq!(d.get_str("title"), Ok("T"));
        let rules = d.get_array("schemaRulesNotSatisfied").unwrap();
        let names: Vec<&str> =
            rules.iter().map(|r| r.as_document().unwrap().get_str("operatorName").unwrap()).collect();
        assert_eq!(names, ["properties", "additionalProperties", "required"]);
        let props = rules[0].as_document().unwrap().get_array("propertiesNotSatisfied").unwrap();
        let year = props[0].as_document().unwrap();
        assert_eq!(year.get_str("propertyName"), Ok("year"));
        // An int32 2016: only `minimum` fails (the type holds).
        assert_eq!(
            year.get_array("details").unwrap()[0],
            Bson::Document(doc! { "operatorName": "minimum", "specifiedAs": { "minimum": 2017 },
            "reason": "comparison failed", "consideredValue": 2016 })
        );
        assert_eq!(props[1].as_document().unwrap().get_str("description"), Ok("one of the list"));
        let street = props[2].as_document().unwrap().get_array("details").unwrap()[0].as_document().unwrap().clone();
        assert_eq!(street.get_str("consideredType"), Ok("int"));
        let a: Vec<&str> = props[3]
            .as_document()
            .unwrap()
            .get_array("details")
            .unwrap()
            .iter()
            .map(|e| e.as_document().unwrap().get_str("operatorName").unwrap())
            .collect();
        assert_eq!(a, ["maximum", "minimum"]);
        assert_eq!(
            rules[1].as_document().unwrap().get_array("additionalProperties").unwrap(),
            &vec![Bson::from("_id"), Bson::from("year2")]
        );
        assert_eq!(rules[2].as_document().unwrap().get_array("missingProperties").unwrap(), &vec![Bson::from("name")]);
        let items = explain(
            doc! { "$jsonSchema": { "properties": { "a": { "items": { "type": "string" }, "maxItems": 2 } } } },
            doc! { "a": [1, "A", {}] },
        );
        let a = items.get_array("schemaRulesNotSatisfied").unwrap()[0]
            .as_document()
            .unwrap()
            .get_array("propertiesNotSatisfied")
            .unwrap()[0]
            .as_document()
            .unwrap()
            .get_array("details")
            .unwrap()
            .clone();
        assert_eq!(a[0].as_document().unwrap().get_str("operatorName"), Ok("maxItems"));
        assert_eq!(a[0].as_document().unwrap().get_i32("numberOfItems"), Ok(3));
        assert_eq!(a[1].as_document().unwrap().get_i32("itemIndex"), Ok(0));
    }
}
