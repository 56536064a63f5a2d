//! Storage sizes of collections and databases (`collStats`,
//! `dbStats`, `$collStats`).

use crate::args::count_option;
use crate::error::CommandError;
use crate::server::Shared;
use bson::{doc, Document};
use doc::catalog::Namespace;

/// A `scale` option (bytes per unit of the size fields).
pub(crate) fn scale_of(cmd: &Document) -> Result<i64, CommandError> {
    match count_option(cmd, "scale")? {
        None => Ok(1),
        Some(s) if s >= 1 => Ok(s),
        Some(_) => Err(CommandError::bad_value("Scale factor must be a positive number")),
    }
}

/// Sizes of one collection: (count, data bytes, storage bytes, `_id`
/// index bytes).
pub(crate) fn collection_sizes(shared: &Shared, ns: &Namespace) -> Result<(i64, i64, i64, i64), CommandError> {
    let Some(c) = shared.catalog.get(ns) else { return Ok((0, 0, 0, 0)) };
    let engine = shared.catalog.engine();
    let (count, size) = c.count_and_size(engine)?;
    let (storage, index) = c.storage_sizes(engine);
    Ok((count as i64, size as i64, storage as i64, index as i64))
}

/// The storage statistics of a collection, as `collStats` and
/// `$collStats: {storageStats: {}}` report them.
pub(crate) fn storage_stats(shared: &Shared, ns: &Namespace, scale: i64) -> Result<Document, CommandError> {
    let (count, size, mut storage, mut index) = collection_sizes(shared, ns)?;
    let capped = shared.catalog.get(ns).and_then(|c| c.capped.as_ref().map(|c| (c.size, c.max)));
    // A clustered collection's `_id` index is part of its record store,
    // as mongod's: no index sizes (the clustered index is still counted).
    let clustered = shared.catalog.get(ns).is_some_and(|c| c.is_clustered());
    if clustered {
        storage += index;
        index = 0;
    }
    let mut stats = doc! {
        "size": size / scale,
        "count": count,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": storage / scale,
        "freeStorageSize": 0i64,
        "capped": capped.is_some(),
        "nindexes": 1,
        "indexBuilds": [],
        "totalIndexSize": index / scale,
        "totalSize": (storage + index) / scale,
        "indexSizes": if clustered { doc! {} } else { doc! { "_id_": index / scale } },
        "scaleFactor": scale,
    };
    if let Some((max_size, max)) = capped {
        // mongod reports an unset max as 2^31 - 1.
        stats.insert("max", max.map_or(i64::from(i32::MAX), |m| m as i64));
        stats.insert("maxSize", max_size as i64 / scale);
    }
    Ok(stats)
}

/// Used and total bytes of the filesystem holding `dir`.
pub(crate) fn filesystem_sizes(dir: &std::path::Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return (0, 0) };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return (0, 0);
    }
    let block = st.f_frsize as u64;
    let total = st.f_blocks as u64 * block;
    (total - st.f_bfree as u64 * block, total)
}
