//! `listIndexes`, `createIndexes` and `dropIndexes`.

use crate::args::check_fields;
use crate::args::namespace;
use crate::args::type_name;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::id_index::id_index_name;
use crate::exec::id_index::id_index_spec;
use crate::exec::id_index::is_id_key;
use crate::exec::views::check_not_view;
use crate::server::Shared;
use bson::{doc, Bson, Document};
use doc::catalog::{Collection, Namespace};
use std::sync::Arc;

/// The collection a command names, which must exist and not be a view.
/// The command's collection, looked up once: a concurrent drop between a
/// check and a use cannot make it vanish (the `Arc` keeps it).
pub(crate) fn existing(
    shared: &Shared,
    cmd: &Document,
    name: &str,
) -> Result<(Namespace, Arc<Collection>), CommandError> {
    let ns = namespace(cmd, name)?;
    let Some(coll) = shared.catalog.get(&ns) else {
        return Err(CommandError::namespace_not_found(format!("ns does not exist: {ns}")));
    };
    if coll.view_on().is_some() {
        return Err(crate::exec::views::not_on_view(&ns));
    }
    Ok((ns, coll))
}

pub fn list_indexes(shared: &Shared, cmd: &Document) -> CommandResult {
    check_fields(cmd, "listIndexes", &["cursor", "includeBuildUUIDs", "includeIndexBuildInfo"], false)?;
    let (ns, coll) = existing(shared, cmd, "listIndexes")?;
    let batch_size = match cmd.get("cursor") {
        None => None,
        Some(Bson::Document(c)) => crate::args::count_option(c, "batchSize")?.map(|n| n.max(0) as usize),
        Some(other) => return Err(crate::args::wrong_type("listIndexes.cursor", other, "object")),
    };
    let cursor_ns = Namespace { db: ns.db.clone(), coll: format!("$cmd.listIndexes.{}", ns.coll) };
    let spec = vec![id_index_spec(&coll)];
    crate::exec::cursors::buffered_cursor(shared, cursor_ns, spec, batch_size)
}

pub fn create_indexes(shared: &Shared, cmd: &Document) -> CommandResult {
    check_fields(cmd, "createIndexes", &["indexes", "commitQuorum", "isTimeseriesNamespace"], false)?;
    let ns = namespace(cmd, "createIndexes")?;
    let specs = match cmd.get("indexes") {
        Some(Bson::Array(specs)) if !specs.is_empty() => specs,
        Some(Bson::Array(_)) => return Err(CommandError::bad_value("Must specify at least one index to create")),
        Some(other) => return Err(crate::args::wrong_type("createIndexes.indexes", other, "array")),
        None => {
            return Err(CommandError::missing_required_field(
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
    for spec in specs {
        let Bson::Document(spec) = spec else {
            return Err(CommandError::type_mismatch(format!(
                "The elements of the 'indexes' array must be objects, but found {}",
                type_name(spec)
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
        // `{_id: 1}` under any name (drivers name it `_id_1`) is the
        // index that is already there (a clustered collection's spec, as
        // listIndexes shows it, too).
        let clustered = shared.catalog.get(&ns).is_some_and(|c| c.is_clustered());
        let plain = spec.keys().all(|k| match k.as_str() {
            "key" | "name" | "v" => true,
            "unique" | "clustered" => clustered && matches!(spec.get(k), Some(Bson::Boolean(true))),
            _ => false,
        });
        if !(is_id_key(key) && plain) {
            return Err(CommandError::not_implemented(format!(
                "secondary indexes are not supported yet (asked for {spec}); every collection has its _id index"
            )));
        }
    }
    check_not_view(shared, &ns)?;
    let created = shared.catalog.get(&ns).is_none();
    shared.catalog.get_or_create(&ns)?;
    let mut reply = doc! { "numIndexesBefore": 1, "numIndexesAfter": 1 };
    if created {
        reply.insert("createdCollectionAutomatically", true);
    }
    reply.insert("note", "all indexes already exist");
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn drop_indexes(shared: &Shared, cmd: &Document) -> CommandResult {
    check_fields(cmd, "dropIndexes", &["index"], false)?;
    let (_, coll) = existing(shared, cmd, "dropIndexes")?;
    let id_name = id_index_name(&coll);
    let names: Vec<String> = match cmd.get("index") {
        Some(Bson::String(name)) => vec![name.clone()],
        Some(Bson::Array(names)) => names.iter().map(|n| n.as_str().unwrap_or_default().to_string()).collect(),
        Some(Bson::Document(key)) if is_id_key(key) => vec![id_name.clone()],
        Some(Bson::Document(key)) => {
            return Err(CommandError::with_code(27, format!("can't find index with key: {key}")));
        }
        // This one message puts the quote after the bracket.
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'dropIndexes.index' is the wrong type '{}', expected types '[string, object, array]'",
                crate::args::type_name(other)
            )))
        }
        None => {
            return Err(CommandError::missing_required_field(
                "BSON field 'dropIndexes.index' is missing but a required field",
            ))
        }
    };
    for name in &names {
        match name.as_str() {
            // Every index but `_id_`: there are none.
            "*" => {}
            n if n == id_name && coll.is_clustered() => {
                return Err(CommandError::with_code(5979800, "It is illegal to drop the clusteredIndex"))
            }
            n if n == id_name => return Err(CommandError::invalid_options("cannot drop _id index")),
            other => return Err(CommandError::with_code(27, format!("index not found with name [{other}]"))),
        }
    }
    Ok(doc! { "nIndexesWas": 1, "ok": 1.0 })
}
