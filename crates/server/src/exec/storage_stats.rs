//! Storage sizes of collections and databases (`collStats`,
//! `dbStats`, `$collStats`).

use crate::args::count_option;
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
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
/// index bytes, the secondary indexes' bytes by name).
pub(crate) fn collection_sizes(shared: &Ctx<'_>, ns: &Namespace) -> Result<Sizes, CommandError> {
    let Some(c) = shared.collection(ns) else { return Ok(Sizes::default()) };
    let engine = shared.catalog.engine();
    let (count, size) = c.count_and_size(engine)?;
    let (storage, index) = c.storage_sizes(engine);
    let secondary = c.index_sizes(engine).into_iter().map(|(n, b)| (n, b as i64)).collect();
    Ok(Sizes { count: count as i64, data: size as i64, storage: storage as i64, id_index: index as i64, secondary })
}

/// One collection's sizes in bytes.
#[derive(Default)]
pub(crate) struct Sizes {
    pub count: i64,
    pub data: i64,
    pub storage: i64,
    pub id_index: i64,
    pub secondary: Vec<(String, i64)>,
}

impl Sizes {
    /// Every index's bytes, `_id` included.
    pub fn indexes(&self) -> i64 {
        self.id_index + self.secondary.iter().map(|(_, b)| b).sum::<i64>()
    }
}

/// The storage statistics of a collection, as `collStats` and
/// `$collStats: {storageStats: {}}` report them.
pub(crate) fn storage_stats(shared: &Ctx<'_>, ns: &Namespace, scale: i64) -> Result<Document, CommandError> {
    let sizes = collection_sizes(shared, ns)?;
    let (count, size, mut storage, mut index) = (sizes.count, sizes.data, sizes.storage, sizes.id_index);
    let capped = shared.collection(ns).and_then(|c| c.capped.as_ref().map(|c| (c.size, c.max)));
    let compressor = shared.collection(ns).map(|c| c.block_compressor().name());
    // A clustered collection's `_id` index is part of its record store,
    // as mongod's: no index sizes (the clustered index is still counted).
    let clustered = shared.collection(ns).is_some_and(|c| c.is_clustered());
    if clustered {
        storage += index;
        index = 0;
    }
    let secondary: i64 = sizes.secondary.iter().map(|(_, b)| b).sum();
    let mut index_sizes = if clustered {
        doc! {}
    } else {
        doc! { "_id_": index / scale }
    };
    for (name, bytes) in &sizes.secondary {
        index_sizes.insert(name.clone(), bytes / scale);
    }
    let mut stats = doc! {
        "size": size / scale,
        "count": count,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": storage / scale,
        "freeStorageSize": 0i64,
        "capped": capped.is_some(),
        "nindexes": 1 + sizes.secondary.len() as i32,
        "indexBuilds": [],
        "totalIndexSize": (index + secondary) / scale,
        "totalSize": (storage + index + secondary) / scale,
        "indexSizes": index_sizes,
        "scaleFactor": scale,
    };
    if let Some(name) = compressor {
        // Where mongod shows WiredTiger's creation string: ours.
        stats.insert("arbordb", doc! { "blockCompressor": name });
    }
    if let Some(c) = shared.collection(ns) {
        stats.insert("indexDetails", index_details(&c, shared.catalog.engine()));
    }
    if let Some((max_size, max)) = capped {
        // mongod reports an unset max as 2^31 - 1.
        stats.insert("max", max.map_or(i64::from(i32::MAX), |m| m as i64));
        stats.insert("maxSize", max_size as i64 / scale);
    }
    Ok(stats)
}

/// Per secondary index, where mongod shows WiredTiger's statistics: its
/// storage format, and a write-optimized one's runs (bytes of entries,
/// newest first, the memtable first).
fn index_details(c: &doc::catalog::Collection, engine: &storage::Engine) -> Document {
    let mut details = Document::new();
    for ix in c.indexes() {
        let (format, runs) = ix.storage_format(engine);
        let mut d = doc! { "format": doc::index::format_name(format) };
        if format == storage::TableFormat::WriteOptimized {
            d.insert("runs", runs.len() as i32);
            d.insert("runBytes", runs.iter().map(|b| *b as i64).collect::<Vec<_>>());
        }
        details.insert(ix.spec.name.clone(), doc! { "arbordb": d });
    }
    details
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
