//! `collStats` and `dbStats`.

use crate::args::db_of;
use crate::args::namespace;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::storage_stats::collection_sizes;
use crate::exec::storage_stats::filesystem_sizes;
use crate::exec::storage_stats::scale_of;
use crate::exec::storage_stats::storage_stats;
use crate::exec::views::check_not_view;
use bson::{doc, Document};

pub fn coll_stats(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    let ns = namespace(cmd, "collStats")?;
    check_not_view(shared, &ns)?;
    if shared.collection(&ns).is_none() {
        return Err(CommandError::namespace_not_found(format!("Collection [{ns}] not found.")));
    }
    let mut reply = doc! { "ns": ns.to_string() };
    reply.extend(storage_stats(shared, &ns, scale_of(cmd)?)?);
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn db_stats(shared: &Ctx<'_>, cmd: &Document) -> CommandResult {
    let db = db_of(cmd)?;
    let scale = scale_of(cmd)?;
    let (mut objects, mut data, mut storage, mut index) = (0i64, 0i64, 0i64, 0i64);
    let (views, collections): (Vec<_>, Vec<_>) =
        shared.catalog.list(db).into_iter().partition(|c| c.view_on().is_some());
    let mut indexes = 0i64;
    for c in &collections {
        let sizes = collection_sizes(shared, &c.ns)?;
        objects += sizes.count;
        data += sizes.data;
        storage += sizes.storage;
        index += sizes.indexes();
        indexes += 1 + sizes.secondary.len() as i64;
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
        "indexes": indexes,
        "indexSize": index as f64 / scale as f64,
        "totalSize": (storage + index) as f64 / scale as f64,
        "scaleFactor": scale,
        "fsUsedSize": fs_used as f64 / scale as f64,
        "fsTotalSize": fs_total as f64 / scale as f64,
        "ok": 1.0,
    })
}
