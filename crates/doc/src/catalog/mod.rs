//! The catalog of collections, and each collection's record store and
//! `_id` index, as storage tables:
//! - `_catalog`: key = namespace (`db.coll`), value = the collection's
//!   metadata as BSON (`ns`, `options`, `records` = its record table's
//!   name, `indexes` with each index's `table`);
//! - `c/<ident>`: key = record id (u64 big-endian, so numeric order),
//!   value = the document's BSON bytes;
//! - `i/<ident>/_id_`: key = KeyString of `_id`, value = record id.
//!
//! The ident is a number given at creation, so renaming a collection
//! rewrites only its catalog entry. (Entries written before idents existed
//! have no table names and use `c/<ns>` and `i/<ns>/_id_`.)
//!
//! Invariants:
//! 1. A collection exists iff its committed catalog entry does; tables
//!    without an entry (a crash or an abort between creating them and
//!    committing the entry, or between committing a drop and dropping
//!    them) are dropped at open.
//! 2. A document and its `_id` index entry are written in one storage
//!    transaction; a duplicate `_id` fails it with nothing written.
//! 3. Record ids only grow within a collection.

use bson::{doc, Bson, Document};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use storage::{Engine, StorageError, Table, TableConfig};

mod capped;
mod collection;
mod conflict_wait;
mod ddl;
mod error;
mod id_index;
mod indexes;
mod namespace;
mod record_store;
mod tally;
#[cfg(test)]
mod tests;
mod unique;

pub use collection::{with_id_first, Ack, Collection, ScanFrom};
pub use conflict_wait::{backoff, ConflictWait};
pub use ddl::Pending;
pub use error::{DocError, DuplicateIndexKey};
pub use id_index::{KeyCollation, KeyCollations};
pub use indexes::IndexCheck;
pub use namespace::{check_db_name, Namespace};
pub use record_store::InsertResult;
pub use tally::{Counts, Tally};
pub use unique::Convert;

use capped::Capped;
use id_index::index_table_config;
use record_store::{decode, encode, record_id};

pub(crate) const CATALOG: &str = "_catalog";

/// What an engine table holds, told by its name: a collection's records
/// (`c/<ident>`), an index (`i/<ident>/_id_`, `i/<ident>/ix`), or the server's own
/// metadata (the catalog, sessions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    Collection,
    Index,
    Metadata,
}

impl TableKind {
    pub fn of(table: &str) -> TableKind {
        if table.starts_with("c/") {
            TableKind::Collection
        } else if table.starts_with("i/") {
            TableKind::Index
        } else {
            TableKind::Metadata
        }
    }
}

/// What the catalog needs of the query layer, which it cannot depend on.
#[derive(Clone, Copy, Default)]
pub struct Hooks {
    /// Makes the `_id` index collations of collections with a default
    /// collation.
    pub collations: Option<KeyCollations>,
    /// Makes partial indexes' filters.
    pub filters: Option<crate::index::DocFilters>,
}

/// Every collection, loaded at open.
pub struct Catalog {
    pub(crate) engine: Engine,
    pub(crate) meta: Table,
    pub(crate) collections: RwLock<BTreeMap<Namespace, Arc<Collection>>>,
    /// The next collection ident.
    pub(crate) next_ident: AtomicU64,
    pub(crate) hooks: Hooks,
    /// Per namespace, the commit timestamp of the last change published
    /// to `collections` (`ddl.rs`, `Catalog::publish`).
    pub(crate) published: parking_lot::Mutex<std::collections::HashMap<Namespace, u64>>,
    /// Serializes the catalog's own DDL transactions (`Catalog::create`
    /// and the like) from their write to their publication.
    pub(crate) ddl: parking_lot::Mutex<()>,
}

/// The table names of a catalog entry, and its `_id` index's collation
/// with the format of its keys.
pub(crate) fn entry_tables(ns: &Namespace, entry: &Document) -> (String, String, Option<(Document, String)>) {
    let records = entry.get_str("records").map(str::to_string).unwrap_or_else(|_| format!("c/{ns}"));
    let index = entry
        .get_array("indexes")
        .ok()
        .and_then(|ix| ix.iter().filter_map(Bson::as_document).find(|i| i.get_str("name") == Ok("_id_")));
    let id_index =
        index.and_then(|i| i.get_str("table").ok().map(str::to_string)).unwrap_or_else(|| format!("i/{ns}/_id_"));
    let collation = index.and_then(|i| {
        let spec = i.get_document("collation").ok()?.clone();
        Some((spec, i.get_str("keyFormat").unwrap_or_default().to_string()))
    });
    (records, id_index, collation)
}

/// Whether an entry's `_id` index takes keys of any length.
fn id_index_long_keys(entry: &Document) -> bool {
    let indexes = entry.get_array("indexes").map(|a| a.as_slice()).unwrap_or_default();
    let id = indexes.iter().filter_map(Bson::as_document).find(|i| i.get_str("name") == Ok("_id_"));
    id.is_some_and(|i| i.get_bool("longKeys").unwrap_or(false))
}

/// A new catalog entry; `long_keys`: `_id` keys of any length (every
/// collection made since they are possible).
pub(crate) fn catalog_entry(
    ns: &Namespace,
    options: &Document,
    (records, id_index): (&str, &str),
    id_collation: Option<&Arc<dyn KeyCollation>>,
    long_keys: bool,
) -> Document {
    let mut index = doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_", "table": id_index };
    if let Some(c) = id_collation {
        index.insert("collation", c.full_spec());
        index.insert("keyFormat", c.key_format());
    }
    if long_keys {
        index.insert("longKeys", true);
    }
    doc! {
        "ns": ns.to_string(),
        "options": options.clone(),
        "records": records,
        "indexes": [index],
    }
}

impl Catalog {
    /// Open a catalog that evaluates nothing of the query language (every
    /// `_id` index binary, no partial index).
    pub fn open(engine: Engine) -> Result<Catalog, DocError> {
        Catalog::open_with(engine, Hooks::default())
    }

    /// Open the catalog with the query layer's `hooks`.
    pub fn open_with(engine: Engine, hooks: Hooks) -> Result<Catalog, DocError> {
        let collations = hooks.collations;
        let meta = match engine.table(CATALOG) {
            Ok(t) => t,
            Err(StorageError::TableNotFound(_)) => engine.create_table(CATALOG, TableConfig::default())?,
            Err(e) => return Err(e.into()),
        };
        let mut collections = BTreeMap::new();
        let mut cursor = engine.cursor(&meta)?;
        let mut entry = cursor.first()?;
        while let Some((key, value)) = entry {
            let full = String::from_utf8_lossy(&key).into_owned();
            let ns = Namespace::parse(&full).ok_or_else(|| DocError::Corrupt(format!("catalog key {full:?}")))?;
            let mut meta_doc = decode(&value)?;
            // A build a crash interrupted was never acknowledged: its
            // index goes (its table, named by no entry, goes below).
            if indexes::index_entries(&meta_doc)?.iter().any(|ix| !ix.ready) {
                meta_doc = indexes::without_unready(meta_doc);
                engine.put(&meta, &key, &encode(&meta_doc)?)?;
            }
            let options = meta_doc.get_document("options").cloned().unwrap_or_default();
            let (records, id_index, collation) = entry_tables(&ns, &meta_doc);
            let id_collation = match collation {
                None => None,
                Some((spec, format)) => {
                    let c = collations.and_then(|make| make(&spec)).ok_or_else(|| {
                        DocError::Corrupt(format!("the _id index of {ns} has a collation this catalog cannot apply"))
                    })?;
                    if c.key_format() != format {
                        return Err(DocError::Corrupt(format!(
                            "the _id index of {ns} holds collation keys of format {format:?}, this build makes {:?}",
                            c.key_format()
                        )));
                    }
                    Some(c)
                }
            };
            let secondary = indexes::index_entries(&meta_doc)?;
            let long_keys = id_index_long_keys(&meta_doc);
            let id = collection::IdIndexEntry { records, id_index, id_collation, long_keys };
            let c = Collection::load(&engine, ns.clone(), options, id, secondary, &hooks)?;
            collections.insert(ns, Arc::new(c));
            entry = cursor.next()?;
        }
        // Invariant 1: tables nobody's entry names are leftovers.
        let named: Vec<String> = collections
            .values()
            .flat_map(|c| {
                let secondary = c.indexes.read().iter().map(|ix| ix.table_name().to_string()).collect::<Vec<_>>();
                [c.records.name().to_string(), c.id_index.name().to_string()].into_iter().chain(secondary)
            })
            .collect();
        let mut next_ident = 1;
        for t in engine.table_names() {
            let ident = t.strip_prefix("c/").or_else(|| t.strip_prefix("i/")).and_then(|i| i.split('/').next());
            if let Some(ident) = ident.and_then(|i| i.parse::<u64>().ok()) {
                next_ident = next_ident.max(ident + 1);
            }
            if TableKind::of(&t) != TableKind::Metadata && !named.contains(&t) {
                engine.drop_table(&t)?;
            }
        }
        Ok(Catalog {
            engine,
            meta,
            collections: RwLock::new(collections),
            next_ident: AtomicU64::new(next_ident),
            hooks,
            published: parking_lot::Mutex::default(),
            ddl: parking_lot::Mutex::new(()),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn get(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        self.collections.read().get(ns).cloned()
    }

    /// The collections of `db`, by name.
    pub fn list(&self, db: &str) -> Vec<Arc<Collection>> {
        self.collections.read().values().filter(|c| c.ns.db == db).cloned().collect()
    }

    /// Databases that hold at least one collection.
    pub fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = self.collections.read().keys().map(|ns| ns.db.clone()).collect();
        dbs.dedup();
        dbs
    }
}
