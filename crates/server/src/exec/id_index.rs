//! The `_id` index as `listIndexes` shows it and as hints name it.

use bson::{doc, Bson, Document};

/// The `_id` index as `listIndexes` and `listCollections` describe it
/// (with its collation, the collection's default one, if any).
/// A clustered collection's is its clustered index:
/// `{v, key, name, unique: true, [collation], [expireAfterSeconds], clustered: true}`.
pub(crate) fn id_index_spec(coll: &doc::catalog::Collection) -> Document {
    let clustered = coll.options.get_document("clusteredIndex").ok();
    let mut spec = match clustered {
        Some(c) => c.clone(),
        None => doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" },
    };
    if let Some(c) = coll.id_collation() {
        spec.insert("collation", c.full_spec());
    }
    if clustered.is_some() {
        if let Some(ttl) = coll.options.get("expireAfterSeconds") {
            spec.insert("expireAfterSeconds", ttl.clone());
        }
        spec.insert("clustered", true);
    }
    spec
}

/// The `_id` index's name: `_id_`, or a clustered index's own.
pub(crate) fn id_index_name(coll: &doc::catalog::Collection) -> String {
    match coll.options.get_document("clusteredIndex") {
        Ok(c) => c.get_str("name").unwrap_or("_id_").to_string(),
        Err(_) => "_id_".to_string(),
    }
}

/// `{_id: 1}`: the `_id` index's key pattern (1 as any number type).
pub(crate) fn is_id_key(key: &Document) -> bool {
    key.len() == 1
        && key.get("_id").is_some_and(|v| {
            matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
                && doc::compare::compare(v, &Bson::Int32(1)).is_eq()
        })
}
