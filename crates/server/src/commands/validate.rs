//! `validate`: every index of a collection checked against its documents
//! (each document's keys present, no entry no document gives), in mongod's
//! reply shape.

use crate::args::{check_fields, CommandResult};
use crate::exec::ctx::Ctx;
use crate::exec::views::existing;
use bson::{doc, Bson, Document};
use doc::catalog::IndexCheck;
use doc::index::keys::KeyValues;

pub fn validate(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    check_fields(cmd, "validate", &["full", "repair", "background", "metadata", "checkBSONConformance"], false)?;
    let (ns, coll) = existing(shared, cmd, "validate")?;
    let engine = shared.catalog.engine();
    let mut checks: Vec<(String, Document, IndexCheck)> = Vec::new();
    let id_name = crate::exec::id_index::id_index_name(&coll);
    checks.push((id_name, doc! { "_id": 1 }, coll.check_id_index(engine)?));
    for ix in coll.indexes().into_iter().filter(|ix| ix.is_ready()) {
        let check = coll.check_index(engine, &ix)?;
        checks.push((ix.spec.name.clone(), ix.spec.key.clone(), check));
    }
    let nrecords = coll.count_and_size(engine)?.0;
    let (mut keys_per_index, mut details) = (Document::new(), Document::new());
    let (mut missing, mut extra, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for (name, pattern, check) in &checks {
        let valid = check.missing.is_empty() && check.extra.is_empty();
        keys_per_index.insert(name.clone(), check.keys as i64);
        details.insert(name.clone(), doc! { "valid": valid });
        if !valid {
            errors.push(Bson::String(format!("Index with name: {name} has inconsistencies.")));
        }
        for (values, rid) in &check.missing {
            missing.push(
                doc! { "indexName": name.clone(), "recordId": *rid as i64, "indexKey": key_doc(pattern, values) },
            );
        }
        for (values, rid) in &check.extra {
            extra.push(
                doc! { "indexName": name.clone(), "recordId": *rid as i64, "indexKey": key_doc(pattern, values) },
            );
        }
    }
    let valid = errors.is_empty();
    Ok(doc! {
        "ns": ns.to_string(),
        "nInvalidDocuments": 0,
        "nNonCompliantDocuments": 0,
        "nrecords": nrecords as i64,
        "nIndexes": checks.len() as i32,
        "keysPerIndex": keys_per_index,
        "indexDetails": details,
        "valid": valid,
        "repaired": false,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": extra,
        "missingIndexEntries": missing,
        "corruptRecords": [],
        "ok": 1.0,
    })
}

/// A key as `{field: value}` in key-pattern order (a missing field as
/// null, as the key holds it); a wildcard index's as `{$_path: path,
/// <field>: value}`.
fn key_doc(pattern: &Document, values: &KeyValues) -> Document {
    let wildcard = pattern.keys().any(|k| k == "$**" || k.ends_with(".$**"));
    let names = wildcard.then_some("$_path").into_iter().chain(pattern.keys().map(String::as_str));
    names.zip(values).map(|(k, v)| (k.to_string(), v.clone().unwrap_or(Bson::Null))).collect()
}
