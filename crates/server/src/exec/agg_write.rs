//! The aggregation stages that write, last in a pipeline: `$out` (replace
//! a collection with the results: written to a temporary collection, then
//! renamed over the target in one catalog transaction, so readers see the
//! old or the new contents, never a mix) and `$merge` (each result merged
//! into a collection by `_id`). Also `$documents`, the source of a
//! database-level aggregate (`{aggregate: 1}`).

use crate::args::ack_of;
use crate::args::bool_option;
use crate::args::type_name;
use crate::args::wrong_type;
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::views::check_not_view;
use crate::exec::write::acknowledge;
use crate::exec::write::check_insert;
use crate::exec::write::Validator;
use crate::exec::write::STATEMENT_ACK;
use bson::{doc, Bson, Document};
use doc::catalog::{with_id_first, Namespace};
use query::expr::{Expression, Scope};
use query::field_names;
use query::update_pipeline::UpdatePipeline;

/// The name prefix of `$out`'s temporary collections (dropped at start).
pub(crate) const TMP_PREFIX: &str = "tmp.agg_out.";

/// A parsed write stage.
pub(crate) enum WriteStage {
    Out(Namespace),
    Merge { into: Namespace, when_matched: WhenMatched, when_not_matched: WhenNotMatched },
}

pub(crate) enum WhenMatched {
    Merge,
    Replace,
    KeepExisting,
    Fail,
    Pipeline(Vec<Bson>),
}

#[derive(PartialEq)]
pub(crate) enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

/// The target of `$out` / `$merge.into`: a name in `db`, or `{db, coll}`.
fn target(v: &Bson, db: &str, stage: &str) -> Result<Namespace, CommandError> {
    match v {
        Bson::String(coll) => Ok(Namespace::new(db, coll)?),
        Bson::Document(d) => {
            let db = match d.get("db") {
                Some(Bson::String(s)) => s.as_str(),
                None => db,
                Some(other) => return Err(wrong_type(&format!("{stage}.db"), other, "string")),
            };
            match d.get("coll") {
                Some(Bson::String(c)) => Ok(Namespace::new(db, c)?),
                Some(other) => Err(wrong_type(&format!("{stage}.coll"), other, "string")),
                None => Err(CommandError::missing_required_field(format!(
                    "BSON field '{stage}.coll' is missing but a required field"
                ))),
            }
        }
        other if stage == "$out" => Err(CommandError::with_code(
            16990,
            format!("$out only supports a string or object argument, but found {}", type_name(other)),
        )),
        other => Err(CommandError::with_code(
            51178,
            format!("{stage}'s target must be a string or an object, not {}", type_name(other)),
        )),
    }
}

/// Split a write stage off the end of `stages`; one anywhere else is an
/// error, as in mongod.
pub(crate) fn split(stages: &[Bson], db: &str) -> Result<(Vec<Bson>, Option<WriteStage>), CommandError> {
    let name = |s: &Bson| s.as_document().and_then(|d| d.keys().next().cloned()).unwrap_or_default();
    for (i, s) in stages.iter().enumerate() {
        let n = name(s);
        if (n == "$out" || n == "$merge") && i + 1 != stages.len() {
            return Err(CommandError::with_code(40601, format!("{n} can only be the final stage in the pipeline")));
        }
    }
    let Some(last) = stages.last().and_then(Bson::as_document) else { return Ok((stages.to_vec(), None)) };
    let Some((n, arg)) = last.iter().next() else { return Ok((stages.to_vec(), None)) };
    let stage = match n.as_str() {
        "$out" => WriteStage::Out(target(arg, db, "$out")?),
        "$merge" => parse_merge(arg, db)?,
        _ => return Ok((stages.to_vec(), None)),
    };
    Ok((stages[..stages.len() - 1].to_vec(), Some(stage)))
}

fn parse_merge(arg: &Bson, db: &str) -> Result<WriteStage, CommandError> {
    let spec = match arg {
        Bson::String(_) => doc! { "into": arg.clone() },
        Bson::Document(d) => d.clone(),
        other => {
            return Err(CommandError::with_code(
                51182,
                format!("$merge only supports a string or object argument, not {}", type_name(other)),
            ))
        }
    };
    crate::args::check_fields(&spec, "$merge", &["into", "on", "whenMatched", "whenNotMatched", "let"], true)?;
    let into = target(
        spec.get("into").ok_or_else(|| {
            CommandError::missing_required_field("BSON field '$merge.into' is missing but a required field")
        })?,
        db,
        "$merge",
    )?;
    match spec.get("on") {
        None => {}
        Some(Bson::String(s)) if s == "_id" => {}
        Some(Bson::Array(a)) if a.len() == 1 && a[0].as_str() == Some("_id") => {}
        Some(_) => {
            return Err(CommandError::with_code(
                51183,
                "Cannot find index to verify that join fields will be unique: only '_id' has a unique index here",
            ))
        }
    }
    if spec.contains_key("let") {
        return Err(CommandError::not_implemented("$merge with 'let' is not supported yet; $$new is available"));
    }
    let when_matched = match spec.get("whenMatched") {
        None => WhenMatched::Merge,
        Some(Bson::String(s)) => match s.as_str() {
            "merge" => WhenMatched::Merge,
            "replace" => WhenMatched::Replace,
            "keepExisting" => WhenMatched::KeepExisting,
            "fail" => WhenMatched::Fail,
            other => {
                return Err(CommandError::bad_value(format!(
                    "Enumeration value '{other}' for field '$merge.whenMatched' is not a valid value."
                )))
            }
        },
        Some(Bson::Array(stages)) => {
            UpdatePipeline::parse(stages, &new_scope(&Document::new())?)?;
            WhenMatched::Pipeline(stages.clone())
        }
        Some(other) => return Err(wrong_type("$merge.whenMatched", other, "string or array")),
    };
    let when_not_matched = match spec.get("whenNotMatched") {
        None => WhenNotMatched::Insert,
        Some(Bson::String(s)) => match s.as_str() {
            "insert" => WhenNotMatched::Insert,
            "discard" => WhenNotMatched::Discard,
            "fail" => WhenNotMatched::Fail,
            other => {
                return Err(CommandError::bad_value(format!(
                    "Enumeration value '{other}' for field '$merge.whenNotMatched' is not a valid value."
                )))
            }
        },
        Some(other) => return Err(wrong_type("$merge.whenNotMatched", other, "string")),
    };
    Ok(WriteStage::Merge { into, when_matched, when_not_matched })
}

/// `$$new` for a `whenMatched` pipeline.
fn new_scope(new: &Document) -> Result<Scope, CommandError> {
    Ok(Scope::default().with_constants(&doc! { "new": { "$literal": new.clone() } })?)
}

/// Write `docs` as `stage` says; acknowledged as the command asks.
pub(crate) fn write(
    shared: &Ctx<'_>,
    cmd: &Document,
    stage: &WriteStage,
    docs: Vec<Document>,
) -> Result<(), CommandError> {
    let bypass = bool_option(cmd, "bypassDocumentValidation", "aggregate", false)?;
    let ack = ack_of(cmd)?;
    match stage {
        WriteStage::Out(ns) => out(shared, ns, docs, bypass)?,
        WriteStage::Merge { into, when_matched, when_not_matched } => {
            merge(shared, into, (when_matched, when_not_matched), docs, bypass)?
        }
    }
    acknowledge(shared, None, ack, Document::new()).map(|_| ())
}

fn validator(shared: &Ctx<'_>, ns: &Namespace, bypass: bool) -> Result<Option<(Validator, bool)>, CommandError> {
    let Some(c) = shared.collection(ns) else { return Ok(None) };
    Ok(Validator::of(&c.options)?.map(|v| (v, bypass)))
}

fn out(shared: &Ctx<'_>, ns: &Namespace, docs: Vec<Document>, bypass: bool) -> Result<(), CommandError> {
    check_not_view(shared, ns)?;
    let existing = shared.collection(ns);
    if existing.as_ref().is_some_and(|c| c.capped.is_some()) {
        return Err(CommandError::with_code(17152, format!("namespace '{ns}' is capped so it can't be used for $out")));
    }
    let options = existing.as_ref().map(|c| c.options.clone()).unwrap_or_default();
    let validator = validator(shared, ns, bypass)?;
    for d in &docs {
        check_insert(d, validator.as_ref())?;
    }
    // A temporary collection beside the target, renamed over it at the end.
    let tmp = loop {
        let name = format!("{TMP_PREFIX}{:016x}", rand_id());
        let tmp = Namespace::new(&ns.db, &name)?;
        if shared.collection(&tmp).is_none() {
            break tmp;
        }
    };
    let coll = shared.catalog.create(&tmp, options)?;
    // The target's indexes carry over, as mongod's `$out` keeps them (a
    // unique one refuses what breaks it).
    let mut built = Ok(());
    for ix in existing.iter().flat_map(|c| c.indexes()).filter(|ix| ix.is_ready()) {
        // As the index is now (`collMod` changes included).
        let spec = doc::index::IndexSpec::from_shown(ix.shown());
        built = built.and_then(|_| shared.catalog.build_index(&tmp, spec?, &|_, _| {}));
    }
    let refs: Vec<Document> = docs.into_iter().map(|d| with_id_first(&d)).collect();
    let refs: Vec<&Document> = refs.iter().collect();
    let failed = match built {
        Ok(()) => coll
            .insert_many(shared.catalog.engine(), &refs, true, (STATEMENT_ACK, &shared.conflicts), None)
            .into_iter()
            .find_map(Result::err),
        Err(e) => Some(e),
    };
    let result = match failed {
        Some(e) => Err(CommandError::from(e)),
        None => shared.catalog.rename(&tmp, ns, true).map_err(CommandError::from),
    };
    if result.is_err() {
        shared.catalog.drop(&tmp)?;
    }
    result
}

fn rand_id() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

fn merge(
    shared: &Ctx<'_>,
    ns: &Namespace,
    (when_matched, when_not_matched): (&WhenMatched, &WhenNotMatched),
    docs: Vec<Document>,
    bypass: bool,
) -> Result<(), CommandError> {
    check_not_view(shared, ns)?;
    let coll = shared.collection_or_create(ns)?;
    let validator = validator(shared, ns, bypass)?;
    let engine = shared.catalog.engine();
    for new in docs {
        let new = with_id_first(&new);
        let id = new.get("_id").cloned().expect("with_id_first adds one");
        loop {
            let Some((rid, old)) = coll.find_rid_by_id(engine, &id)? else {
                match when_not_matched {
                    WhenNotMatched::Insert => {
                        check_insert(&new, validator.as_ref())?;
                        match coll.insert(engine, &new, (STATEMENT_ACK, &shared.conflicts), None) {
                            Ok(_) => break,
                            // Inserted meanwhile: merge into it.
                            Err(doc::catalog::DocError::DuplicateKey { .. }) => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    WhenNotMatched::Discard => break,
                    WhenNotMatched::Fail => {
                        return Err(CommandError::with_code(
                            13113,
                            format!("$merge could not find a matching document in the target collection for at least one document in the source collection: {{_id: {id}}}"),
                        ))
                    }
                }
            };
            let merged = match when_matched {
                WhenMatched::KeepExisting => break,
                WhenMatched::Fail => {
                    let mut e = CommandError::duplicate_key(format!(
                        "E11000 duplicate key error collection: {ns} index: _id_ dup key: {{ _id: {} }}",
                        doc::format::spaced(&id)
                    ));
                    e.extra = Some(Box::new(doc! { "keyPattern": { "_id": 1 }, "keyValue": { "_id": id.clone() } }));
                    return Err(e);
                }
                // Each mode checks names as the update it stands for would:
                // a replacement, a `$set` of the new fields, a pipeline.
                WhenMatched::Replace => {
                    field_names::check_updated(&new, false)?;
                    new.clone()
                }
                WhenMatched::Merge => {
                    if let Some(k) = new.keys().find(|k| k.starts_with('$')) {
                        return Err(CommandError::dollar_prefixed_field_name(format!(
                            "The dollar ($) prefixed field '{k}' in '{k}' is not valid for storage."
                        )));
                    }
                    let mut m = old.clone();
                    for (k, v) in &new {
                        m.insert(k.clone(), v.clone());
                    }
                    m
                }
                WhenMatched::Pipeline(stages) => {
                    let p = UpdatePipeline::parse(stages, &new_scope(&new)?)?;
                    let mut out = p.apply(&old)?;
                    field_names::check_updated(&out, true)?;
                    // A pipeline that drops `_id` keeps the document's own;
                    // one that changes it fails below (immutable).
                    if !out.contains_key("_id") {
                        out.insert("_id", id.clone());
                    }
                    with_id_first(&out)
                }
            };
            // Under a collation the `_id` found may differ from the new
            // one ("ann" for "ANN"): `_id` stays immutable.
            if let (Some(was), Some(now)) = (old.get("_id"), merged.get("_id")) {
                if doc::compare::compare(was, now).is_ne() {
                    return Err(CommandError::immutable_field(format!(
                        "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                        doc::format::field("_id", now)
                    )));
                }
            }
            if let Some((v, bypass)) = &validator {
                v.check(&merged, Some(&old), *bypass)?;
            }
            if coll.replace(engine, rid, &old, &merged, (STATEMENT_ACK, &shared.conflicts), None)? {
                break;
            }
        }
    }
    Ok(())
}

/// `$documents`: the literal documents a database-level aggregate starts
/// from (an expression evaluating to an array of objects).
pub(crate) fn documents(arg: &Bson, scope: &Scope) -> Result<Vec<Document>, CommandError> {
    let value = Expression::parse(arg, scope)?.eval(&Document::new())?;
    let Some(Bson::Array(items)) = value else {
        return Err(CommandError::with_code(5858203, "an array is expected"));
    };
    items
        .into_iter()
        .map(|i| match i {
            Bson::Document(d) => Ok(d),
            other => Err(CommandError::type_mismatch(format!(
                "$documents expected an array of objects, found {}",
                type_name(&other)
            ))),
        })
        .collect()
}
