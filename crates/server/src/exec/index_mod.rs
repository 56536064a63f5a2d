//! `collMod`'s `index` option, as mongod checks and applies it: one index
//! (by `name` or `keyPattern`) gets `hidden`, `expireAfterSeconds` or
//! `prepareUnique` changed, or is converted to unique (`unique: true`,
//! only once `prepareUnique` is set, and only if no two documents share a
//! key: CannotConvertIndexToUnique 359 lists them) or back
//! (`forceNonUnique: true`). `dryRun` checks a conversion to unique
//! without making it.

use crate::args::{check_fields, wrong_type};
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use bson::{doc, Bson, Document};
use doc::catalog::{Collection, Convert};
use doc::index::Index;
use std::sync::Arc;

/// A checked `collMod.index`.
pub(crate) struct IndexMod {
    ix: Arc<Index>,
    /// Options to set (a null value removes one), `doc::index::CHANGEABLE`.
    changes: Document,
    /// `Some(true)`: make it unique; `Some(false)`: make it non-unique.
    convert: Option<bool>,
}

/// Check `collMod.index` against `c`'s ready indexes.
pub(crate) fn check(c: &Collection, index: &Bson) -> Result<IndexMod, CommandError> {
    let Bson::Document(spec) = index else {
        return Err(wrong_type("collMod.index", index, "object"));
    };
    const FIELDS: [&str; 7] =
        ["name", "keyPattern", "hidden", "expireAfterSeconds", "unique", "prepareUnique", "forceNonUnique"];
    check_fields(spec, "collMod.index", &FIELDS, false)?;
    // mongod's booleans: true, false or a number; null is absent.
    let mut flags = Document::new();
    for f in ["hidden", "unique", "prepareUnique", "forceNonUnique"] {
        match spec.get(f) {
            None | Some(Bson::Null) => {}
            Some(Bson::Boolean(b)) => {
                flags.insert(f, *b);
            }
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))) => {
                flags.insert(f, !doc::compare::compare(v, &Bson::Int32(0)).is_eq());
            }
            Some(v) => return Err(wrong_type(&format!("collMod.index.{f}"), v, "bool")),
        }
    }
    let flag = |f: &str| flags.get_bool(f).ok();
    if spec.get("expireAfterSeconds").is_none() && flags.is_empty() {
        return Err(CommandError::invalid_options("no expireAfterSeconds, hidden, unique, or prepareUnique field"));
    }
    if flag("unique").is_some() && flag("forceNonUnique").is_some() {
        return Err(CommandError::invalid_options(
            "collMod does not support 'unique' and 'forceNonUnique' options at the same time",
        ));
    }
    if spec.contains_key("expireAfterSeconds") && c.capped.is_some() {
        return Err(CommandError::invalid_options("TTL indexes are not supported for capped collections."));
    }
    let ix = find(c, spec)?;
    if ix.spec.wildcard.is_some() {
        if spec.contains_key("expireAfterSeconds") {
            return Err(CommandError::invalid_options("Index type 'wildcard' cannot be a TTL index"));
        }
        if flag("unique") == Some(true) || flag("prepareUnique") == Some(true) {
            return Err(CommandError::invalid_options("Index type 'wildcard' does not support the unique option"));
        }
    }
    if ix.spec.format == storage::TableFormat::WriteOptimized
        && (flag("unique") == Some(true) || flag("prepareUnique") == Some(true))
    {
        return Err(CommandError::invalid_options(crate::exec::index_spec::WRITE_OPTIMIZED_UNIQUE));
    }
    let mut changes = Document::new();
    let mut convert = None;
    let mut modifications = 0;
    if let Some(ttl) = spec.get("expireAfterSeconds") {
        modifications += 1;
        if ix.spec.fields.len() != 1 {
            return Err(CommandError::invalid_options(
                "TTL indexes are single-field indexes, compound indexes do not support TTL",
            ));
        }
        changes.insert("expireAfterSeconds", crate::exec::index_spec::check_ttl_seconds(ttl)?);
    }
    if let Some(unique) = flag("unique") {
        modifications += 1;
        if !unique {
            return Err(CommandError::bad_value("Cannot make index non-unique"));
        }
        if !ix.spec.unique {
            if !ix.prepare_unique() {
                return Err(CommandError::invalid_options(
                    "Cannot make index unique with 'prepareUnique=false'. Run collMod to set it first.",
                ));
            }
            convert = Some(true);
        }
    }
    if let Some(hidden) = flag("hidden") {
        modifications += 1;
        changes.insert("hidden", if hidden { Bson::Boolean(true) } else { Bson::Null });
    }
    let mut preparing = false;
    if let Some(prepare) = flag("prepareUnique") {
        modifications += 1;
        if !ix.spec.unique && prepare != ix.prepare_unique() {
            changes.insert("prepareUnique", if prepare { Bson::Boolean(true) } else { Bson::Null });
            preparing = true;
        }
    }
    if let Some(force) = flag("forceNonUnique") {
        modifications += 1;
        if !force {
            return Err(CommandError::bad_value("'forceNonUnique: false' is not supported"));
        }
        if ix.spec.unique {
            convert = Some(false);
        }
    }
    if preparing && modifications > 1 {
        return Err(CommandError::invalid_options("prepareUnique cannot be combined with any other modification."));
    }
    Ok(IndexMod { ix, changes, convert })
}

/// The index `spec` names by `name` or `keyPattern` (not `_id`).
fn find(c: &Collection, spec: &Document) -> Result<Arc<Index>, CommandError> {
    let ready: Vec<Arc<Index>> = crate::exec::access::ready(c, None);
    let not_found = |what: String| CommandError::with_code(27, format!("cannot find index {what} for ns {}", c.ns));
    match (spec.get("name"), spec.get("keyPattern")) {
        (Some(_), Some(_)) => Err(CommandError::invalid_options("Cannot specify both key pattern and name.")),
        (None, None) => Err(CommandError::invalid_options("Must specify either index name or key pattern.")),
        (Some(Bson::String(n)), None) if n == "_id_" => Err(CommandError::bad_value("can't hide _id index")),
        (Some(Bson::String(n)), None) => {
            ready.into_iter().find(|ix| ix.spec.name == *n).ok_or_else(|| not_found(n.clone()))
        }
        (None, Some(Bson::Document(k))) if crate::exec::id_index::is_id_key(k) => {
            Err(CommandError::bad_value("can't hide _id index"))
        }
        (None, Some(Bson::Document(k))) => {
            let mut matched: Vec<Arc<Index>> =
                ready.into_iter().filter(|ix| crate::exec::index_spec::same_pattern(&ix.spec.key, k)).collect();
            let shown = |d: &Document| doc::format::spaced(&Bson::Document(d.clone()));
            match matched.len() {
                0 => Err(not_found(shown(k))),
                1 => Ok(matched.remove(0)),
                n => Err(CommandError::with_code(
                    181,
                    format!(
                        "index keyPattern {} matches {n} indexes, must use index name. Conflicting indexes:{}, {}",
                        shown(k),
                        shown(&matched[0].shown()),
                        shown(&matched[1].shown())
                    ),
                )),
            }
        }
        (Some(other), None) => Err(wrong_type("collMod.index.name", other, "string")),
        (None, Some(other)) => Err(wrong_type("collMod.index.keyPattern", other, "object")),
    }
}

/// `dryRun`: only a conversion to unique may be asked, and it is checked
/// for duplicates without being made.
pub(crate) fn dry_run(shared: &Ctx<'_>, c: &Collection, cmd: &Document) -> Result<(), CommandError> {
    let Some(index) = cmd.get("index") else {
        return Err(CommandError::invalid_options("dry run mode requires an valid index modification."));
    };
    if index.as_document().and_then(|d| d.get_bool("unique").ok()) != Some(true) {
        return Err(CommandError::invalid_options("dry run mode requires an index modification with unique: true."));
    }
    let m = check(c, index)?;
    let others = ["validator", "validationLevel", "validationAction", "viewOn", "pipeline", "expireAfterSeconds"];
    if !m.changes.is_empty() || others.iter().any(|k| cmd.contains_key(*k)) {
        return Err(CommandError::invalid_options(
            "unique: true cannot be combined with any other modification in dry run mode.",
        ));
    }
    let groups = m.ix.duplicates(shared.catalog.engine())?;
    match groups.is_empty() {
        true => Ok(()),
        false => Err(cannot_convert(shared, c, &groups)),
    }
}

/// Make the change; the reply's `<option>_old` / `<option>_new` fields.
pub(crate) fn apply(shared: &Ctx<'_>, c: &Collection, m: &IndexMod) -> Result<Document, CommandError> {
    let name = &m.ix.spec.name;
    let before = m.ix.shown();
    // The conversion first: when it finds duplicates nothing has changed.
    if let Some(unique) = m.convert {
        match shared.catalog.convert_index(&c.ns, name, unique) {
            Ok(()) => {}
            Err(Convert::Duplicates(groups)) => return Err(cannot_convert(shared, c, &groups)),
            Err(Convert::Failed(e)) => return Err(e.into()),
        }
    }
    if !m.changes.is_empty() {
        shared.catalog.modify_index(&c.ns, name, &m.changes)?;
    }
    let mut reply = Document::new();
    for (k, v) in &m.changes {
        if k == "expireAfterSeconds" {
            // mongod's: the new value always, the old one if there was one.
            let seconds = |v: &Bson| v.as_i64().or_else(|| v.as_i32().map(i64::from)).map(Bson::Int64);
            if let Some(old) = before.get(k).and_then(seconds) {
                reply.insert("expireAfterSeconds_old", old);
            }
            reply.insert("expireAfterSeconds_new", seconds(v).unwrap_or(Bson::Null));
            continue;
        }
        let old = before.get(k).cloned().unwrap_or(Bson::Boolean(false));
        let new = if matches!(v, Bson::Null) { Bson::Boolean(false) } else { v.clone() };
        if old != new {
            reply.insert(format!("{k}_old"), old);
            reply.insert(format!("{k}_new"), new);
        }
    }
    if let Some(unique) = m.convert {
        reply.insert(if unique { "unique_new" } else { "forceNonUnique_new" }, true);
    }
    // Another index is a candidate now (hidden, unhidden, converted).
    shared.plan_cache.clear(&c.ns.to_string());
    Ok(reply)
}

/// CannotConvertIndexToUnique (359): the `_id`s of the documents sharing
/// each key, in `violations`.
fn cannot_convert(shared: &Ctx<'_>, c: &Collection, groups: &[Vec<u64>]) -> CommandError {
    let engine = shared.catalog.engine();
    let mut violations: Vec<Bson> = Vec::new();
    // Up to half the document limit of `_id`s, at least one (mongod's).
    let mut bytes = 0;
    'groups: for rids in groups {
        let mut ids: Vec<Bson> = Vec::new();
        for id in rids.iter().filter_map(|&rid| c.get(engine, rid).ok().flatten()).filter_map(|d| d.get("_id").cloned())
        {
            bytes += doc::bson_bytes::encode(&doc! { "_id": id.clone() }).map_or(0, |b| b.len());
            if bytes > crate::limits::violations_max_bytes && !(violations.is_empty() && ids.is_empty()) {
                if !ids.is_empty() {
                    violations.push(Bson::Document(doc! { "ids": ids }));
                }
                break 'groups;
            }
            ids.push(id);
        }
        violations.push(Bson::Document(doc! { "ids": ids }));
    }
    let mut err = CommandError::with_code(
        359,
        "Cannot convert the index to unique. Please resolve conflicting documents before running collMod again.",
    );
    err.extra = Some(Box::new(doc! { "violations": violations }));
    err
}
