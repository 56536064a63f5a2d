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
//! 1. A collection exists iff its catalog entry does; tables without an
//!    entry (a crash between creating them and writing the entry) are
//!    dropped at open.
//! 2. A document and its `_id` index entry are written in one storage
//!    transaction; a duplicate `_id` fails it with nothing written.
//! 3. Record ids only grow within a collection.

use crate::keystring;
use crate::sessions::Stamp;
use bson::{doc, oid::ObjectId, Bson, Document};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use storage::{Bytes, Engine, StorageError, Table, TableConfig, Txn, TxnOptions};

const CATALOG: &str = "_catalog";

#[derive(Debug, thiserror::Error)]
pub enum DocError {
    #[error("{}", duplicate_key_message(ns, *clustered, key, collation.as_deref()))]
    DuplicateKey {
        ns: String,
        /// A clustered collection's: its message names no index, as mongod's.
        clustered: bool,
        key: Box<Bson>,
        /// The `_id` index's collation and the key's collated form.
        collation: Option<Box<(Document, Bson)>>,
    },
    #[error("Collection {0} already exists.")]
    NamespaceExists(String),
    #[error("Source collection {0} does not exist")]
    NamespaceNotFound(String),
    #[error("{0}")]
    InvalidNamespace(String),
    #[error("stored document is corrupt: {0}")]
    Corrupt(String),
    /// A document larger than its capped collection.
    #[error("object to insert exceeds cappedMaxSize")]
    ExceedsCappedSize,
    /// A document nested deeper than `limits::stored_depth_max`.
    #[error("cannot insert document because it exceeds {0} levels of nesting")]
    TooDeep(usize),
    /// A document BSON cannot hold (a field name with a null byte).
    #[error(transparent)]
    Unencodable(#[from] crate::bson_bytes::EncodeError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// mongod's E11000 message. Under a collation it names the collation and
/// shows a string key as its collation key, hex encoded.
fn duplicate_key_message(ns: &str, clustered: bool, key: &Bson, collation: Option<&(Document, Bson)>) -> String {
    let index = if clustered { "" } else { " index: _id_" };
    let Some((spec, collated)) = collation else {
        return format!(
            "E11000 duplicate key error collection: {ns}{index} dup key: {{ _id: {} }}",
            crate::format::spaced(key)
        );
    };
    let shown = match collated {
        Bson::String(hex) => format!("\"0x{hex}\""),
        _ => crate::format::spaced(key),
    };
    format!(
        "E11000 duplicate key error collection: {ns}{index} collation: {} dup key: {{ _id: {shown} }}",
        crate::format::spaced(&Bson::Document(spec.clone()))
    )
}

/// A database and collection name, checked as MongoDB checks them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Result<Namespace, DocError> {
        check_db_name(db)?;
        if coll.is_empty() {
            return Err(DocError::InvalidNamespace(format!("Invalid namespace specified '{db}.'")));
        }
        if coll.contains('\0') || coll.contains('$') {
            return Err(DocError::InvalidNamespace(format!("Invalid collection name: {coll}")));
        }
        if db.len() + 1 + coll.len() > 255 {
            return Err(DocError::InvalidNamespace(format!(
                "Fully qualified namespace is too long. Namespace: {db}.{coll} Max: 255"
            )));
        }
        Ok(Namespace { db: db.to_string(), coll: coll.to_string() })
    }

    fn parse(full: &str) -> Option<Namespace> {
        let (db, coll) = full.split_once('.')?;
        Namespace::new(db, coll).ok()
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

pub fn check_db_name(db: &str) -> Result<(), DocError> {
    if db.is_empty() || db.len() >= 64 || db.chars().any(|c| "/\\. \"$\0".contains(c)) {
        return Err(DocError::InvalidNamespace(format!("Invalid database name: '{db}'")));
    }
    Ok(())
}

/// A collection's default collation as its `_id` index applies it (the
/// query layer implements it with ICU; this crate only stores its keys).
pub trait IdCollation: Send + Sync {
    /// `id` with every string replaced so that the binary order of its
    /// KeyString is the collation's order: two `_id`s the collation finds
    /// equal get one key.
    fn key_of(&self, id: &Bson) -> Bson;
    /// The collation in full, as the `_id` index entry records it.
    fn full_spec(&self) -> Document;
    /// Names the code and data that make the keys: an index whose entry
    /// names another is not opened (its keys may not match this build's).
    fn key_format(&self) -> &'static str;
}

/// Makes the `IdCollation` of a collation specification (`None`: the
/// simple collation, binary keys).
pub type IdCollations = fn(&Document) -> Option<Arc<dyn IdCollation>>;

/// One collection: its record store and `_id` index.
pub struct Collection {
    pub ns: Namespace,
    pub options: Document,
    records: Table,
    id_index: Table,
    /// The `_id` index's collation (the collection's default one, from
    /// its catalog entry); `None`: binary keys.
    id_collation: Option<Arc<dyn IdCollation>>,
    /// Shared with the collection's renamed self, so that writers still
    /// holding this one allocate from the same sequence.
    next_record: Arc<AtomicU64>,
    /// Set for a capped collection (shared across a rename, as above).
    pub capped: Option<Arc<Capped>>,
}

/// A capped collection's limits (`size` bytes of BSON, `max` documents)
/// and what it holds. Every write to the collection holds `used` from
/// before it reads until after it commits, so capped writes serialize (as
/// MongoDB's do) and `used` is exact.
pub struct Capped {
    pub size: u64,
    pub max: Option<u64>,
    /// Bytes and documents stored.
    used: Mutex<(u64, u64)>,
}

impl Capped {
    /// The limits in a collection's options, if it is capped.
    fn of(options: &Document) -> Option<(u64, Option<u64>)> {
        let number = |k: &str| match options.get(k) {
            Some(Bson::Int32(i)) => Some(i64::from(*i)),
            Some(Bson::Int64(i)) => Some(*i),
            Some(Bson::Double(d)) => Some(*d as i64),
            _ => None,
        };
        let capped = match options.get("capped") {
            Some(Bson::Boolean(b)) => *b,
            Some(_) => number("capped").is_some_and(|n| n != 0),
            None => false,
        };
        let size = number("size").filter(|&n| n > 0)?;
        capped.then(|| (size as u64, number("max").filter(|&n| n > 0).map(|n| n as u64)))
    }

    fn over(&self, (bytes, count): (u64, u64)) -> bool {
        bytes > self.size || self.max.is_some_and(|m| count > m)
    }
}

/// Where a natural-order scan resumes (`Collection::natural`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ScanFrom {
    #[default]
    Start,
    /// After (or before, backwards) this record id: record-id order.
    Record(u64),
    /// After (or before) this `_id` index key: a clustered collection's
    /// `_id` order.
    Key(Vec<u8>),
}

/// Every collection, loaded at open.
pub struct Catalog {
    engine: Engine,
    meta: Table,
    collections: RwLock<BTreeMap<Namespace, Arc<Collection>>>,
    /// The next collection ident.
    next_ident: AtomicU64,
    id_collations: Option<IdCollations>,
}

/// The table names of a catalog entry, and its `_id` index's collation
/// with the format of its keys.
fn entry_tables(ns: &Namespace, entry: &Document) -> (String, String, Option<(Document, String)>) {
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

/// Index tables get smaller leaves than record tables (16 KiB against
/// 32 KiB, as MongoDB configures WiredTiger): their entries are small and
/// many, and a commit copies each leaf it changes whole while a reader's
/// version still holds it, so smaller leaves copy fewer entries per insert.
fn index_table_config() -> TableConfig {
    TableConfig {
        leaf_page_max_bytes: INDEX_LEAF_BYTES,
        overflow_min_bytes: INDEX_LEAF_BYTES / 4,
        ..TableConfig::default()
    }
}

const INDEX_LEAF_BYTES: u32 = 16 * 1024;

/// The most documents of one insert command committed together.
pub const INSERT_CHUNK_DOCS: usize = 256;
/// A chunk closes once its documents reach this many bytes.
pub const INSERT_CHUNK_BYTES: usize = 1024 * 1024;

fn catalog_entry(
    ns: &Namespace,
    options: &Document,
    records: &str,
    id_index: &str,
    id_collation: Option<&Arc<dyn IdCollation>>,
) -> Document {
    let mut index = doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_", "table": id_index };
    if let Some(c) = id_collation {
        index.insert("collation", c.full_spec());
        index.insert("keyFormat", c.key_format());
    }
    doc! {
        "ns": ns.to_string(),
        "options": options.clone(),
        "records": records,
        "indexes": [index],
    }
}

impl Catalog {
    /// Open the catalog of a collection that has no collations (every
    /// `_id` index binary).
    pub fn open(engine: Engine) -> Result<Catalog, DocError> {
        Catalog::open_with(engine, None)
    }

    /// Open the catalog; `id_collations` makes the `_id` index collations
    /// of collections with a default collation.
    pub fn open_with(engine: Engine, id_collations: Option<IdCollations>) -> Result<Catalog, DocError> {
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
            let meta_doc = decode(&value)?;
            let options = meta_doc.get_document("options").cloned().unwrap_or_default();
            let (records, id_index, collation) = entry_tables(&ns, &meta_doc);
            let id_collation = match collation {
                None => None,
                Some((spec, format)) => {
                    let c = id_collations.and_then(|make| make(&spec)).ok_or_else(|| {
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
            let c = Collection::load(&engine, ns.clone(), options, &records, &id_index, id_collation)?;
            collections.insert(ns, Arc::new(c));
            entry = cursor.next()?;
        }
        // Invariant 1: tables nobody's entry names are leftovers.
        let named: Vec<String> =
            collections.values().flat_map(|c| [c.records.name().to_string(), c.id_index.name().to_string()]).collect();
        let mut next_ident = 1;
        for t in engine.table_names() {
            if let Some(ident) = t.strip_prefix("c/").and_then(|i| i.parse::<u64>().ok()) {
                next_ident = next_ident.max(ident + 1);
            }
            if (t.starts_with("c/") || t.starts_with("i/")) && !named.contains(&t) {
                engine.drop_table(&t)?;
            }
        }
        Ok(Catalog {
            engine,
            meta,
            collections: RwLock::new(collections),
            next_ident: AtomicU64::new(next_ident),
            id_collations,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn get(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        self.collections.read().get(ns).cloned()
    }

    /// Create a collection; fails if it exists.
    pub fn create(&self, ns: &Namespace, options: Document) -> Result<Arc<Collection>, DocError> {
        let mut all = self.collections.write();
        if all.contains_key(ns) {
            return Err(DocError::NamespaceExists(ns.to_string()));
        }
        let ident = self.next_ident.fetch_add(1, Ordering::Relaxed);
        let (records, id_index) = (format!("c/{ident}"), format!("i/{ident}/_id_"));
        for (name, config) in [(&records, TableConfig::default()), (&id_index, index_table_config())] {
            if self.engine.table(name).is_ok() {
                self.engine.drop_table(name)?;
            }
            self.engine.create_table(name, config)?;
        }
        // The `_id` index keeps the collection's default collation.
        let id_collation =
            options.get_document("collation").ok().and_then(|spec| self.id_collations.and_then(|make| make(spec)));
        let entry = catalog_entry(ns, &options, &records, &id_index, id_collation.as_ref());
        self.engine.put(&self.meta, ns.to_string().as_bytes(), &encode(&entry)?)?;
        let c = Arc::new(Collection::load(&self.engine, ns.clone(), options, &records, &id_index, id_collation)?);
        all.insert(ns.clone(), c.clone());
        Ok(c)
    }

    /// The collection, created (with default options) if missing, as an
    /// insert does.
    pub fn get_or_create(&self, ns: &Namespace) -> Result<Arc<Collection>, DocError> {
        if let Some(c) = self.get(ns) {
            return Ok(c);
        }
        match self.create(ns, Document::new()) {
            Err(DocError::NamespaceExists(_)) => Ok(self.get(ns).expect("exists")),
            other => other,
        }
    }

    /// Drop a collection; returns whether it existed.
    pub fn drop(&self, ns: &Namespace) -> Result<bool, DocError> {
        let mut all = self.collections.write();
        let Some(c) = all.remove(ns) else { return Ok(false) };
        self.engine.delete(&self.meta, ns.to_string().as_bytes())?;
        for name in [c.records.name(), c.id_index.name()] {
            self.engine.drop_table(name)?;
        }
        Ok(true)
    }

    /// Rename a collection (across databases too): only its catalog entry
    /// changes, in one transaction. An existing target is replaced in
    /// that transaction when `drop_target`, else refused.
    pub fn rename(&self, from: &Namespace, to: &Namespace, drop_target: bool) -> Result<(), DocError> {
        if from == to {
            return Err(DocError::NamespaceExists(to.to_string()));
        }
        let mut all = self.collections.write();
        let Some(c) = all.get(from).cloned() else { return Err(DocError::NamespaceNotFound(from.to_string())) };
        // A dropped target goes in the same transaction: its entry is
        // overwritten, so a crash leaves the old target or the renamed
        // collection, never neither. Its tables go after the commit (or,
        // after a crash, at the next open, as tables no entry names).
        let replaced = match all.get(to) {
            Some(_) if !drop_target => return Err(DocError::NamespaceExists(to.to_string())),
            existing => existing.cloned(),
        };
        let (records, id_index) = (c.records.name().to_string(), c.id_index.name().to_string());
        let entry = encode(&catalog_entry(to, &c.options, &records, &id_index, c.id_collation.as_ref()))?;
        loop {
            let txn = self.engine.begin(TxnOptions::default())?;
            let attempt = txn
                .delete(&self.meta, from.to_string().as_bytes())
                .and_then(|_| txn.put(&self.meta, to.to_string().as_bytes(), &entry))
                .and_then(|_| txn.commit());
            match attempt {
                Ok(_) => break,
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
        all.remove(from);
        // The same tables, record-id sequence and capped state: a writer
        // that got the collection before the rename shares them.
        let moved = Collection {
            ns: to.clone(),
            options: c.options.clone(),
            records: c.records.clone(),
            id_index: c.id_index.clone(),
            id_collation: c.id_collation.clone(),
            next_record: c.next_record.clone(),
            capped: c.capped.clone(),
        };
        all.insert(to.clone(), Arc::new(moved));
        if let Some(old) = replaced {
            for name in [old.records.name(), old.id_index.name()] {
                self.engine.drop_table(name)?;
            }
        }
        Ok(())
    }

    /// Replace a collection's options (`collMod`): its catalog entry is
    /// rewritten; writers that already hold the collection keep the old
    /// options until their next lookup.
    pub fn set_options(&self, ns: &Namespace, options: Document) -> Result<(), DocError> {
        let mut all = self.collections.write();
        let Some(c) = all.get(ns).cloned() else { return Err(DocError::NamespaceNotFound(ns.to_string())) };
        let entry = catalog_entry(ns, &options, c.records.name(), c.id_index.name(), c.id_collation.as_ref());
        self.engine.put(&self.meta, ns.to_string().as_bytes(), &encode(&entry)?)?;
        let changed = Collection {
            ns: ns.clone(),
            options,
            records: c.records.clone(),
            id_index: c.id_index.clone(),
            id_collation: c.id_collation.clone(),
            next_record: c.next_record.clone(),
            capped: c.capped.clone(),
        };
        all.insert(ns.clone(), Arc::new(changed));
        Ok(())
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

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ack {
    /// Once its journal record is fsynced (the default; `j: true`).
    #[default]
    Journaled,
    /// Once its journal record is written, before the fsync (`j: false`).
    Written,
}

impl Ack {
    fn txn_options(self) -> TxnOptions {
        TxnOptions { skip_journal_sync: self == Ack::Written, ..TxnOptions::default() }
    }
}

/// One inserted document's outcome.
pub type InsertResult = Result<(), DocError>;

impl Collection {
    fn load(
        engine: &Engine,
        ns: Namespace,
        options: Document,
        records: &str,
        id_index: &str,
        id_collation: Option<Arc<dyn IdCollation>>,
    ) -> Result<Collection, DocError> {
        let records = engine.table(records)?;
        let id_index = engine.table(id_index)?;
        let next = match engine.cursor(&records)?.last()? {
            Some((k, _)) => record_id(&k)? + 1,
            None => 1,
        };
        let mut c = Collection {
            ns,
            options,
            records,
            id_index,
            id_collation,
            next_record: Arc::new(AtomicU64::new(next)),
            capped: None,
        };
        if let Some((size, max)) = Capped::of(&c.options) {
            let used = c.count_and_size(engine)?;
            c.capped = Some(Arc::new(Capped { size, max, used: Mutex::new((used.1, used.0)) }));
        }
        Ok(c)
    }

    /// The `_id` index's collation (`None`: binary).
    pub fn id_collation(&self) -> Option<&Arc<dyn IdCollation>> {
        self.id_collation.as_ref()
    }

    /// The `_id` index key of `id`: its KeyString, strings by their
    /// collation keys under the index's collation.
    pub fn id_key(&self, id: &Bson) -> Vec<u8> {
        match &self.id_collation {
            Some(c) => keystring::encode(&c.key_of(id)),
            None => keystring::encode(id),
        }
    }

    fn duplicate(&self, id: Bson) -> DocError {
        let collation = self.id_collation.as_ref().map(|c| Box::new((c.full_spec(), c.key_of(&id))));
        DocError::DuplicateKey { ns: self.ns.to_string(), clustered: self.is_clustered(), key: Box::new(id), collation }
    }

    /// For a view: the collection or view it reads, and its pipeline.
    pub fn view_on(&self) -> Option<(&str, &[Bson])> {
        let on = self.options.get_str("viewOn").ok()?;
        Some((on, self.options.get_array("pipeline").map_or(&[][..], |p| &p[..])))
    }

    /// For a capped collection: hold its write lock.
    fn capped_lock(&self) -> Option<parking_lot::MutexGuard<'_, (u64, u64)>> {
        self.capped.as_ref().map(|c| c.used.lock())
    }

    /// In `txn`, delete the oldest documents until the capped collection
    /// holding `used` is within its limits; returns what it then holds.
    fn trim_capped(&self, txn: &Txn, capped: &Capped, mut used: (u64, u64)) -> Result<(u64, u64), DocError> {
        let mut victims = Vec::new();
        {
            let mut c = txn.cursor(&self.records)?;
            let mut entry = c.first()?;
            while capped.over(used) {
                let Some((key, value)) = entry else { break };
                let id = bson::RawDocument::from_bytes(&value)
                    .ok()
                    .and_then(|d| d.get("_id").ok().flatten())
                    .and_then(|v| Bson::try_from(v).ok())
                    .ok_or_else(|| DocError::Corrupt("a capped document without _id".into()))?;
                victims.push((key.to_vec(), self.id_key(&id)));
                used = (used.0.saturating_sub(value.len() as u64), used.1.saturating_sub(1));
                entry = c.next()?;
            }
        }
        for (rid, id_key) in victims {
            txn.delete(&self.records, &rid)?;
            txn.delete(&self.id_index, &id_key)?;
        }
        Ok(used)
    }

    /// Insert one document (an `_id` is added first if missing), in one
    /// transaction with its `_id` index entry (invariant 2). Returns the
    /// document as stored. `stamp` is written in the same transaction.
    pub fn insert(
        &self,
        engine: &Engine,
        doc: &Document,
        ack: Ack,
        stamp: Option<&dyn Stamp>,
    ) -> Result<Document, DocError> {
        let doc = with_id_first(doc);
        let id = doc.get("_id").expect("with_id_first adds one").clone();
        let key = self.id_key(&id);
        let bytes = encode_record(&doc)?;
        let mut capped_used = self.capped_lock();
        if self.capped.as_ref().is_some_and(|c| bytes.len() as u64 > c.size) {
            return Err(DocError::ExceedsCappedSize);
        }
        loop {
            let txn = engine.begin(ack.txn_options())?;
            if txn.get(&self.id_index, &key)?.is_some() {
                return Err(self.duplicate(id));
            }
            let rid = self.next_record.fetch_add(1, Ordering::Relaxed);
            let written = (|| {
                txn.put(&self.records, &rid.to_be_bytes(), &bytes)?;
                txn.put(&self.id_index, &key, &rid.to_be_bytes())?;
                match (&self.capped, capped_used.as_deref()) {
                    (Some(capped), Some(&(b, n))) => {
                        Ok(Some(self.trim_capped(&txn, capped, (b + bytes.len() as u64, n + 1))?))
                    }
                    _ => Ok(None),
                }
            })();
            let attempt = written.and_then(|used| Ok((commit_stamped(txn, stamp, &[0])?, used)));
            match attempt {
                Ok((_, used)) => {
                    if let (Some(now), Some(held)) = (used, capped_used.as_deref_mut()) {
                        *held = now;
                    }
                    return Ok(doc);
                }
                // Another insert of the same _id is in flight: look again.
                Err(DocError::Storage(e)) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Insert the documents of one insert command. Each succeeds or fails
    /// on its own (a duplicate `_id` fails that document alone), but they
    /// commit in chunks of up to [`INSERT_CHUNK_DOCS`] documents or
    /// [`INSERT_CHUNK_BYTES`] bytes, a transaction each: a leaf a chunk
    /// changes is copied once per chunk instead of once per document, and
    /// the chunk is one journal record. Returns a result per document
    /// tried, in order; with `ordered` they stop at the first failure.
    /// Each transaction writes `stamp` with the indexes (in `docs`) of the
    /// documents it inserts.
    pub fn insert_many(
        &self,
        engine: &Engine,
        docs: &[&Document],
        ordered: bool,
        ack: Ack,
        stamp: Option<&dyn Stamp>,
    ) -> Vec<Result<(), DocError>> {
        let mut results = Vec::with_capacity(docs.len());
        if self.capped.is_some() {
            // One transaction per document, each trimming the oldest.
            for (i, doc) in docs.iter().enumerate() {
                let shifted = stamp.map(|inner| Shifted { inner, base: i });
                let result = self.insert(engine, doc, ack, shifted.as_ref().map(|s| s as &dyn Stamp)).map(|_| ());
                let failed = result.is_err();
                results.push(result);
                if failed && ordered {
                    break;
                }
            }
            return results;
        }
        while results.len() < docs.len() {
            let rest = &docs[results.len()..];
            let shifted = stamp.map(|inner| Shifted { inner, base: results.len() });
            let stamp = shifted.as_ref().map(|s| s as &dyn Stamp);
            let (chunk, stopped) = match self.insert_chunk(engine, rest, ordered, ack, stamp) {
                Ok(done) => done,
                Err(e) => (vec![Err(e)], true),
            };
            results.extend(chunk);
            if stopped {
                break;
            }
        }
        results
    }

    /// Insert a prefix of `docs` in one transaction; returns the results
    /// for that prefix and whether an ordered insert stopped. A document
    /// the transaction cannot take (an error other than a duplicate `_id`)
    /// is tried alone, after the documents before it commit.
    fn insert_chunk(
        &self,
        engine: &Engine,
        docs: &[&Document],
        ordered: bool,
        ack: Ack,
        stamp: Option<&dyn Stamp>,
    ) -> Result<(Vec<Result<(), DocError>>, bool), DocError> {
        let mut limit = docs.len().min(INSERT_CHUNK_DOCS);
        loop {
            if limit == 0 {
                // The first document failed inside the chunk: alone, it
                // reports its own error (or succeeds if it was a conflict).
                let result = self.insert(engine, docs[0], ack, stamp).map(|_| ());
                let stopped = ordered && result.is_err();
                return Ok((vec![result], stopped));
            }
            let txn = engine.begin(ack.txn_options())?;
            let (mut results, mut seen, mut bytes_total) = (Vec::new(), std::collections::HashSet::new(), 0);
            let mut stopped = false;
            let mut failed_at = None;
            for (i, doc) in docs[..limit].iter().enumerate() {
                if bytes_total >= INSERT_CHUNK_BYTES {
                    break;
                }
                let doc = with_id_first(doc);
                let id = doc.get("_id").expect("with_id_first adds one");
                // A document fails alone on a duplicate `_id`; anything
                // else the engine refuses ends the chunk before it
                // (`failed_at`).
                let key = self.id_key(id);
                let duplicate = !seen.insert(key.clone())
                    || match txn.get(&self.id_index, &key) {
                        Ok(found) => found.is_some(),
                        Err(_) => {
                            failed_at = Some(i);
                            break;
                        }
                    };
                if !duplicate {
                    // A document that cannot be stored fails alone too.
                    let Ok(bytes) = encode_record(&doc) else {
                        failed_at = Some(i);
                        break;
                    };
                    bytes_total += bytes.len();
                    let rid = self.next_record.fetch_add(1, Ordering::Relaxed);
                    let put = txn
                        .put(&self.records, &rid.to_be_bytes(), &bytes)
                        .and_then(|_| txn.put(&self.id_index, &key, &rid.to_be_bytes()));
                    if put.is_err() {
                        failed_at = Some(i);
                        break;
                    }
                    results.push(Ok(()));
                    continue;
                }
                results.push(Err(self.duplicate(id.clone())));
                if ordered {
                    stopped = true;
                    break;
                }
            }
            if let Some(i) = failed_at {
                // A conflict with a concurrent insert, or a document the
                // engine refuses: commit what came before it, then meet it
                // alone.
                drop(txn);
                limit = i;
                continue;
            }
            let done: Vec<usize> = (0..results.len()).filter(|&i| results[i].is_ok()).collect();
            match commit_stamped(txn, stamp, &done) {
                Ok(_) => return Ok((results, stopped)),
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                // Too much for a small cache: fewer documents at a time,
                // down to one (which fails as a lone insert would).
                Err(StorageError::TransactionTooLarge { .. }) if results.len() > 1 => limit = results.len() / 2,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Delete the document at record id `rid` if it is still `doc`'s
    /// version, with its `_id` index entry, in one transaction. Returns
    /// whether it deleted (false: someone else changed or removed it).
    pub fn delete(
        &self,
        engine: &Engine,
        rid: u64,
        doc: &Document,
        ack: Ack,
        stamp: Option<&dyn Stamp>,
    ) -> Result<bool, DocError> {
        let key = self.id_key(doc.get("_id").ok_or_else(|| DocError::Corrupt("a document without _id".into()))?);
        let mut capped_used = self.capped_lock();
        loop {
            let txn = engine.begin(ack.txn_options())?;
            let expected = encode(doc)?;
            match txn.get(&self.records, &rid.to_be_bytes())? {
                Some(bytes) if *bytes == *expected => {}
                _ => return Ok(false),
            }
            let attempt = txn
                .delete(&self.records, &rid.to_be_bytes())
                .and_then(|_| txn.delete(&self.id_index, &key))
                .and_then(|_| commit_stamped(txn, stamp, &[0]));
            match attempt {
                Ok(_) => {
                    if let Some((bytes, count)) = capped_used.as_deref_mut() {
                        *bytes = bytes.saturating_sub(expected.len() as u64);
                        *count = count.saturating_sub(1);
                    }
                    return Ok(true);
                }
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Replace the document at record id `rid` by `new` if it is still
    /// `old` (byte for byte). Returns whether it replaced (false: someone
    /// else changed or removed it). `_id` must be unchanged, so the `_id`
    /// index entry stays.
    pub fn replace(
        &self,
        engine: &Engine,
        rid: u64,
        old: &Document,
        new: &Document,
        ack: Ack,
        stamp: Option<&dyn Stamp>,
    ) -> Result<bool, DocError> {
        let expected = encode(old)?;
        let bytes = encode_record(new)?;
        let mut capped_used = self.capped_lock();
        loop {
            let txn = engine.begin(ack.txn_options())?;
            match txn.get(&self.records, &rid.to_be_bytes())? {
                Some(current) if *current == *expected => {}
                _ => return Ok(false),
            }
            match txn.put(&self.records, &rid.to_be_bytes(), &bytes).and_then(|_| commit_stamped(txn, stamp, &[0])) {
                Ok(_) => {
                    // A capped collection may pass its size until the next
                    // insert trims it, as MongoDB's does.
                    if let Some((used, _)) = capped_used.as_deref_mut() {
                        *used = (*used + bytes.len() as u64).saturating_sub(expected.len() as u64);
                    }
                    return Ok(true);
                }
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The document at record id `rid`, if any.
    pub fn get(&self, engine: &Engine, rid: u64) -> Result<Option<Document>, DocError> {
        engine.get(&self.records, &rid.to_be_bytes())?.map(|b| decode(&b)).transpose()
    }

    /// The document with this `_id` and its record id, if any.
    pub fn find_rid_by_id(&self, engine: &Engine, id: &Bson) -> Result<Option<(u64, Document)>, DocError> {
        match self.find_raw_by_id(engine, id)? {
            Some((rid, bytes)) => Ok(Some((rid, decode(&bytes)?))),
            None => Ok(None),
        }
    }

    /// The stored BSON bytes of the document with this `_id` and its record
    /// id, if any: a point read that never builds a `Document`.
    pub fn find_raw_by_id(&self, engine: &Engine, id: &Bson) -> Result<Option<(u64, Bytes)>, DocError> {
        let key = self.id_key(id);
        let Some(rid) = engine.get(&self.id_index, &key)? else { return Ok(None) };
        let rid = record_id(&rid)?;
        match engine.get(&self.records, &rid.to_be_bytes())? {
            Some(bytes) => Ok(Some((rid, bytes))),
            None => Err(DocError::Corrupt(format!("_id index names a missing record in {}", self.ns))),
        }
    }

    /// The document with this `_id`, if any.
    pub fn find_by_id(&self, engine: &Engine, id: &Bson) -> Result<Option<Document>, DocError> {
        Ok(self.find_rid_by_id(engine, id)?.map(|(_, d)| d))
    }

    /// The name of the record store's table: the same across `collMod`s
    /// (which replace the `Collection`), new for a re-created collection.
    pub fn records_table(&self) -> &str {
        self.records.name()
    }

    /// Whether the collection is clustered by `_id` (`clusteredIndex`):
    /// its natural order is `_id` order (the `_id` index's).
    pub fn is_clustered(&self) -> bool {
        self.options.contains_key("clusteredIndex")
    }

    /// Up to `max` documents (0: all) in natural order after `from` (before
    /// it, backwards, when `reverse`), each with the position to resume
    /// after it and its record id. Natural order is record-id (insertion)
    /// order, or `_id` order for a clustered collection, read through the
    /// `_id` index; a record deleted between its index entry and its read
    /// is skipped, as a delete just before the scan would be.
    pub fn natural(
        &self,
        engine: &Engine,
        from: &ScanFrom,
        reverse: bool,
        max: usize,
    ) -> Result<Vec<(ScanFrom, u64, Document)>, DocError> {
        if !self.is_clustered() {
            let rid = match from {
                ScanFrom::Record(rid) => *rid,
                _ => 0,
            };
            let found = if reverse { self.scan_back(engine, rid, max)? } else { self.scan(engine, rid, max)? };
            return Ok(found.into_iter().map(|(rid, d)| (ScanFrom::Record(rid), rid, d)).collect());
        }
        use std::ops::Bound::{Excluded, Unbounded};
        let mut c = engine.cursor(&self.id_index)?;
        if let ScanFrom::Key(k) = from {
            match reverse {
                false => c.set_bounds(Excluded(k.clone()), Unbounded),
                true => c.set_bounds(Unbounded, Excluded(k.clone())),
            }
        }
        let mut out = Vec::new();
        let mut e = if reverse { c.last()? } else { c.first()? };
        while let Some((k, v)) = e {
            let rid = record_id(&v)?;
            if let Some(bytes) = engine.get(&self.records, &rid.to_be_bytes())? {
                out.push((ScanFrom::Key(k.to_vec()), rid, decode(&bytes)?));
                if max != 0 && out.len() >= max {
                    break;
                }
            }
            e = if reverse { c.prev()? } else { c.next()? };
        }
        Ok(out)
    }

    /// Up to `max` documents whose `_id` is a date from 1970-01-01 to
    /// `until_ms` (both included), in `_id` order, with their record ids:
    /// what a clustered collection's TTL (`expireAfterSeconds`) removes.
    /// Other `_id` types are never expired, as in mongod.
    pub fn expired(&self, engine: &Engine, until_ms: i64, max: usize) -> Result<Vec<(u64, Document)>, DocError> {
        use std::ops::Bound::Included;
        if until_ms < 0 {
            return Ok(Vec::new());
        }
        let lo = self.id_key(&Bson::DateTime(bson::DateTime::from_millis(0)));
        let hi = self.id_key(&Bson::DateTime(bson::DateTime::from_millis(until_ms)));
        let mut c = engine.cursor(&self.id_index)?;
        c.set_bounds(Included(lo), Included(hi));
        let mut out = Vec::new();
        let mut e = c.first()?;
        while let Some((_, v)) = e {
            let rid = record_id(&v)?;
            if let Some(bytes) = engine.get(&self.records, &rid.to_be_bytes())? {
                out.push((rid, decode(&bytes)?));
                if out.len() >= max {
                    break;
                }
            }
            e = c.next()?;
        }
        Ok(out)
    }

    /// Up to `max` documents with record ids above `after`, in record-id
    /// order, each with its record id; `max` = 0 means all.
    pub fn scan(&self, engine: &Engine, after: u64, max: usize) -> Result<Vec<(u64, Document)>, DocError> {
        let mut out = Vec::new();
        let mut c = engine.cursor(&self.records)?;
        let mut e = c.seek(&(after + 1).to_be_bytes())?;
        while let Some((k, v)) = e {
            let rid = record_id(&k)?;
            out.push((rid, decode(&v)?));
            if max != 0 && out.len() >= max {
                break;
            }
            e = c.next()?;
        }
        Ok(out)
    }

    /// Up to `max` documents (0: all) with record ids below `before` (0:
    /// from the newest), newest first: a reverse natural-order scan.
    pub fn scan_back(&self, engine: &Engine, before: u64, max: usize) -> Result<Vec<(u64, Document)>, DocError> {
        let mut out = Vec::new();
        let mut c = engine.cursor(&self.records)?;
        if before != 0 {
            c.set_bounds(std::ops::Bound::Unbounded, std::ops::Bound::Excluded(before.to_be_bytes().to_vec()));
        }
        let mut e = c.last()?;
        while let Some((k, v)) = e {
            out.push((record_id(&k)?, decode(&v)?));
            if max != 0 && out.len() >= max {
                break;
            }
            e = c.prev()?;
        }
        Ok(out)
    }

    /// Bytes on disk of the record store and of the `_id` index (their
    /// table files).
    pub fn storage_sizes(&self, engine: &Engine) -> (u64, u64) {
        let size = |t: &Table| {
            std::fs::metadata(engine.dir().join(storage::engine::table_file_name(t.id()))).map(|m| m.len()).unwrap_or(0)
        };
        (size(&self.records), size(&self.id_index))
    }

    /// Documents and their total BSON bytes (for `collStats`/`dbStats`).
    pub fn count_and_size(&self, engine: &Engine) -> Result<(u64, u64), DocError> {
        let mut c = engine.cursor(&self.records)?;
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut e = c.first()?;
        while let Some((_, v)) = e {
            n += 1;
            bytes += v.len() as u64;
            e = c.next()?;
        }
        Ok((n, bytes))
    }
}

/// A record id stored as 8 big-endian bytes (a record key or an `_id`
/// index value).
fn record_id(bytes: &[u8]) -> Result<u64, DocError> {
    let b: [u8; 8] =
        bytes.try_into().map_err(|_| DocError::Corrupt(format!("a record id of {} bytes", bytes.len())))?;
    Ok(u64::from_be_bytes(b))
}

/// A document's bytes as stored (`bson_bytes`: exactly as sent).
fn encode(doc: &Document) -> Result<Vec<u8>, DocError> {
    Ok(crate::bson_bytes::encode(doc)?)
}

/// A record's bytes: also refused past `stored_depth_max`, so that every
/// stored record decodes again (`limits.rs`).
fn encode_record(doc: &Document) -> Result<Vec<u8>, DocError> {
    let max = crate::limits::stored_depth_max;
    if crate::bson_bytes::deeper_than(doc, max) {
        return Err(DocError::TooDeep(max));
    }
    encode(doc)
}

fn decode(bytes: &[u8]) -> Result<Document, DocError> {
    crate::bson_bytes::decode(bytes).map_err(|e| DocError::Corrupt(e.to_string()))
}

/// Write `stamp` (for the statements `done`), then commit.
fn commit_stamped(txn: Txn, stamp: Option<&dyn Stamp>, done: &[usize]) -> Result<u64, StorageError> {
    if let Some(s) = stamp {
        s.write(&txn, done)?;
    }
    txn.commit()
}

/// A stamp seen from a suffix of the statements: index `i` is `base + i`.
struct Shifted<'a> {
    inner: &'a dyn Stamp,
    base: usize,
}

impl Stamp for Shifted<'_> {
    fn write(&self, txn: &Txn, done: &[usize]) -> Result<(), StorageError> {
        let done: Vec<usize> = done.iter().map(|i| i + self.base).collect();
        self.inner.write(txn, &done)
    }
}

/// The document with its `_id` first (a new ObjectId if it has none), as
/// it is stored.
pub fn with_id_first(doc: &Document) -> Document {
    let mut out = Document::new();
    out.insert("_id", doc.get("_id").cloned().unwrap_or_else(|| Bson::ObjectId(ObjectId::new())));
    for (k, v) in doc {
        if k != "_id" {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(dir: &std::path::Path) -> Engine {
        Engine::open(dir, storage::Config::default()).unwrap()
    }

    /// A catalog over a new engine (the directory lives as long as the
    /// first value).
    fn fresh_catalog() -> (tempfile::TempDir, Engine, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        (dir, e, cat)
    }

    /// A stand-in collation for the catalog's tests: case-insensitive,
    /// its keys of the format named.
    struct Folded(&'static str);

    impl IdCollation for Folded {
        fn key_of(&self, id: &Bson) -> Bson {
            match id {
                Bson::String(s) => Bson::String(s.to_lowercase()),
                other => other.clone(),
            }
        }
        fn full_spec(&self) -> Document {
            doc! { "locale": "folded" }
        }
        fn key_format(&self) -> &'static str {
            self.0
        }
    }

    fn folded(spec: &Document) -> Option<Arc<dyn IdCollation>> {
        (spec.get_str("locale") == Ok("folded")).then(|| Arc::new(Folded("lowercase")) as Arc<dyn IdCollation>)
    }

    fn folded_otherwise(spec: &Document) -> Option<Arc<dyn IdCollation>> {
        (spec.get_str("locale") == Ok("folded")).then(|| Arc::new(Folded("lowercase-2")) as Arc<dyn IdCollation>)
    }

    #[test]
    fn the_id_index_applies_the_collection_collation_and_keeps_it_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (ci, plain) = (Namespace::new("test", "ci").unwrap(), Namespace::new("test", "plain").unwrap());
        let spec = doc! { "collation": { "locale": "folded" } };
        {
            let e = engine(dir.path());
            let cat = Catalog::open_with(e.clone(), Some(folded)).unwrap();
            let c = cat.create(&ci, spec.clone()).unwrap();
            let p = cat.create(&plain, Document::new()).unwrap();
            c.insert(&e, &doc! { "_id": "Ann" }, Ack::Journaled, None).unwrap();
            p.insert(&e, &doc! { "_id": "Ann" }, Ack::Journaled, None).unwrap();
            p.insert(&e, &doc! { "_id": "ANN" }, Ack::Journaled, None).unwrap();
            match c.insert(&e, &doc! { "_id": "ANN" }, Ack::Journaled, None) {
                Err(e @ DocError::DuplicateKey { .. }) => {
                    assert!(e.to_string().contains("collation: { locale: \"folded\" } dup key: { _id: \"0xann\" }"))
                }
                other => panic!("expected a duplicate key, got {other:?}"),
            }
            assert_eq!(c.find_by_id(&e, &Bson::from("aNN")).unwrap(), Some(doc! { "_id": "Ann" }));
            assert_eq!(p.find_by_id(&e, &Bson::from("aNN")).unwrap(), None);
            cat.rename(&ci, &Namespace::new("test", "ci2").unwrap(), false).unwrap();
        }
        let e = engine(dir.path());
        let ci2 = Namespace::new("test", "ci2").unwrap();
        let cat = Catalog::open_with(e.clone(), Some(folded)).unwrap();
        let c = cat.get(&ci2).unwrap();
        assert!(c.id_collation().is_some() && cat.get(&plain).unwrap().id_collation().is_none());
        assert!(matches!(
            c.insert(&e, &doc! { "_id": "aNn" }, Ack::Journaled, None),
            Err(DocError::DuplicateKey { .. })
        ));
        let (rid, d) = c.find_rid_by_id(&e, &Bson::from("ann")).unwrap().unwrap();
        assert!(c.delete(&e, rid, &d, Ack::Journaled, None).unwrap());
        c.insert(&e, &doc! { "_id": "aNn" }, Ack::Journaled, None).unwrap();
        drop(cat);
        // A catalog that cannot apply the collation, or makes keys of
        // another format, refuses to open.
        assert!(matches!(Catalog::open(e.clone()), Err(DocError::Corrupt(_))));
        match Catalog::open_with(e.clone(), Some(folded_otherwise)) {
            Err(DocError::Corrupt(why)) => assert!(why.contains("\"lowercase\""), "{why}"),
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_clustered_collection_scans_in_id_order_and_expires_date_ids() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        let ns = Namespace::new("test", "c").unwrap();
        let c = cat
            .create(&ns, doc! { "clusteredIndex": { "v": 2, "key": { "_id": 1 }, "name": "_id_", "unique": true } })
            .unwrap();
        assert!(c.is_clustered());
        let date = |ms: i64| Bson::DateTime(bson::DateTime::from_millis(ms));
        for id in
            [Bson::Int32(4), date(5_000), Bson::String("x".into()), Bson::Int32(2), date(-1), date(0), date(9_000)]
        {
            c.insert(&e, &doc! { "_id": id }, Ack::Journaled, None).unwrap();
        }
        let ids = |found: Vec<(ScanFrom, u64, Document)>| -> Vec<Bson> {
            found.into_iter().map(|(_, _, d)| d.get("_id").unwrap().clone()).collect()
        };
        let all =
            vec![Bson::Int32(2), Bson::Int32(4), Bson::String("x".into()), date(-1), date(0), date(5_000), date(9_000)];
        assert_eq!(ids(c.natural(&e, &ScanFrom::Start, false, 0).unwrap()), all);
        // Resuming after a position, in chunks, both ways.
        let first = c.natural(&e, &ScanFrom::Start, false, 3).unwrap();
        let resume = first[2].0.clone();
        assert_eq!(ids(c.natural(&e, &resume, false, 0).unwrap()), all[3..].to_vec());
        let mut back = all[..2].to_vec();
        back.reverse();
        assert_eq!(ids(c.natural(&e, &resume, true, 0).unwrap()), back);
        // Expiry takes dates from 1970 to the cutoff, both included.
        let expired: Vec<Bson> =
            c.expired(&e, 5_000, 10).unwrap().into_iter().map(|(_, d)| d.get("_id").unwrap().clone()).collect();
        assert_eq!(expired, vec![date(0), date(5_000)]);
        assert!(c.expired(&e, -10, 10).unwrap().is_empty());
        // An ordinary collection's natural order is insertion order.
        let plain = cat.get_or_create(&Namespace::new("test", "plain").unwrap()).unwrap();
        for id in [3, 1, 2] {
            plain.insert(&e, &doc! { "_id": id }, Ack::Journaled, None).unwrap();
        }
        assert_eq!(
            ids(plain.natural(&e, &ScanFrom::Start, false, 0).unwrap()),
            vec![Bson::Int32(3), Bson::Int32(1), Bson::Int32(2)]
        );
        e.close().unwrap();
    }

    #[test]
    fn collections_survive_reopen_and_ids_are_unique() {
        let dir = tempfile::tempdir().unwrap();
        let ns = Namespace::new("test", "people").unwrap();
        {
            let e = engine(dir.path());
            let cat = Catalog::open(e.clone()).unwrap();
            let c = cat.get_or_create(&ns).unwrap();
            let stored = c.insert(&e, &doc! { "name": "ann", "_id": 1 }, Ack::Journaled, None).unwrap();
            assert_eq!(stored.keys().next().map(String::as_str), Some("_id"), "_id moves first");
            c.insert(&e, &doc! { "name": "bob" }, Ack::Journaled, None).unwrap();
            match c.insert(&e, &doc! { "_id": 1.0, "name": "dup" }, Ack::Journaled, None) {
                Err(DocError::DuplicateKey { key, .. }) => assert_eq!(*key, Bson::Double(1.0)),
                other => panic!("expected a duplicate key, got {other:?}"),
            }
            assert!(matches!(cat.create(&ns, Document::new()), Err(DocError::NamespaceExists(_))));
            e.close().unwrap();
        }
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        let c = cat.get(&ns).expect("the collection is still there");
        let all = c.scan(&e, 0, 0).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(c.find_by_id(&e, &Bson::Int64(1)).unwrap().unwrap().get_str("name").unwrap(), "ann");
        c.insert(&e, &doc! { "_id": 3 }, Ack::Journaled, None).unwrap();
        assert!(c.scan(&e, 0, 0).unwrap().windows(2).all(|w| w[0].0 < w[1].0), "record ids grow");
        assert_eq!(cat.databases(), vec!["test".to_string()]);
        assert!(cat.drop(&ns).unwrap());
        assert!(cat.get(&ns).is_none() && !e.table_names().iter().any(|t| t.starts_with("c/")));
    }

    /// Renaming over an existing collection replaces it in one catalog
    /// transaction; its tables go, and the result survives a reopen.
    #[test]
    fn rename_over_a_target_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (Namespace::new("test", "tmp").unwrap(), Namespace::new("test", "real").unwrap());
        {
            let e = engine(dir.path());
            let cat = Catalog::open(e.clone()).unwrap();
            cat.get_or_create(&to).unwrap().insert(&e, &doc! { "_id": "old" }, Ack::Journaled, None).unwrap();
            cat.get_or_create(&from).unwrap().insert(&e, &doc! { "_id": "new" }, Ack::Journaled, None).unwrap();
            let old_tables = e.table_names().len();
            assert!(matches!(cat.rename(&from, &to, false), Err(DocError::NamespaceExists(_))));
            assert!(matches!(cat.rename(&to, &to, true), Err(DocError::NamespaceExists(_))));
            cat.rename(&from, &to, true).unwrap();
            assert_eq!(e.table_names().len(), old_tables - 2, "the replaced target's tables are dropped");
            assert!(cat.get(&from).is_none());
            e.close().unwrap();
        }
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        let c = cat.get(&to).unwrap();
        assert_eq!(
            c.scan(&e, 0, 0).unwrap().into_iter().map(|(_, d)| d).collect::<Vec<_>>(),
            vec![doc! { "_id": "new" }]
        );
    }

    /// `insert_many` against inserting one by one: the same documents end
    /// up stored, with the same per-document errors, across chunks.
    #[test]
    fn insert_many_commits_in_chunks_with_per_document_results() {
        let (_dir, e, cat) = fresh_catalog();
        let c = cat.get_or_create(&Namespace::new("test", "many").unwrap()).unwrap();
        c.insert(&e, &doc! { "_id": 5 }, Ack::Journaled, None).unwrap();
        let n = INSERT_CHUNK_DOCS * 2 + 50;
        let mut docs: Vec<Document> = (0..n as i64).map(|i| doc! { "_id": i + 10, "v": i }).collect();
        docs[7] = doc! { "_id": 5 }; // exists already
        docs[300] = doc! { "_id": 12 }; // repeats docs[2], across a chunk boundary
        docs[301] = doc! { "_id": 13, "v": 1 }; // repeats docs[3]
        docs[400] = doc! { "_id": "k".repeat(9000) }; // a key the engine refuses
        docs[401] = doc! { "_id": "10".parse::<bson::Decimal128>().unwrap() }; // equals docs[0]'s 10
        let refs: Vec<&Document> = docs.iter().collect();
        let results = c.insert_many(&e, &refs, false, Ack::Journaled, None);
        assert_eq!(results.len(), n);
        let failed: Vec<usize> = (0..n).filter(|&i| results[i].is_err()).collect();
        assert_eq!(failed, vec![7, 300, 301, 400, 401]);
        assert!(matches!(results[7], Err(DocError::DuplicateKey { .. })));
        assert!(matches!(results[300], Err(DocError::DuplicateKey { .. })));
        assert!(matches!(results[400], Err(DocError::Storage(StorageError::KeyTooLarge { .. }))));
        assert!(matches!(results[401], Err(DocError::DuplicateKey { .. })));
        let stored = c.scan(&e, 0, 0).unwrap();
        assert_eq!(stored.len(), 1 + n - failed.len());
        assert_eq!(c.find_by_id(&e, &Bson::Int64(13)).unwrap().unwrap().get_i64("v").unwrap(), 3, "the first one wins");
        assert!(c.find_by_id(&e, &Bson::Int64(n as i64 + 9)).unwrap().is_some(), "the last chunk is there");

        // Ordered: stops at the first failure, everything before it stored.
        let c2 = cat.get_or_create(&Namespace::new("test", "ordered").unwrap()).unwrap();
        let mut docs: Vec<Document> = (0..n as i64).map(|i| doc! { "_id": i }).collect();
        docs[270] = doc! { "_id": 1 };
        let refs: Vec<&Document> = docs.iter().collect();
        let results = c2.insert_many(&e, &refs, true, Ack::Journaled, None);
        assert_eq!(results.len(), 271);
        assert!(results[..270].iter().all(Result::is_ok) && results[270].is_err());
        assert_eq!(c2.scan(&e, 0, 0).unwrap().len(), 270);
        // An ordered insert that stops at a refused key in its first chunk.
        let c3 = cat.get_or_create(&Namespace::new("test", "refused").unwrap()).unwrap();
        let docs = [doc! { "_id": 1 }, doc! { "_id": "k".repeat(9000) }, doc! { "_id": 3 }];
        let refs: Vec<&Document> = docs.iter().collect();
        let results = c3.insert_many(&e, &refs, true, Ack::Journaled, None);
        assert_eq!(results.len(), 2);
        assert!(results[0].is_ok() && results[1].is_err());
        assert_eq!(c3.scan(&e, 0, 0).unwrap().len(), 1);
    }

    /// With a cache too small for a whole chunk's write set, the chunks
    /// shrink: every document still goes in.
    #[test]
    fn insert_many_fits_its_chunks_to_a_small_cache() {
        let dir = tempfile::tempdir().unwrap();
        let config = storage::Config { cache_size_bytes: 1024 * 1024, ..storage::Config::default() };
        let e = Engine::open(dir.path(), config).unwrap();
        let cat = Catalog::open(e.clone()).unwrap();
        let c = cat.get_or_create(&Namespace::new("test", "small").unwrap()).unwrap();
        let pad = "x".repeat(900);
        // Scattered _ids: every document of a chunk lands on another leaf.
        let docs: Vec<Document> = (0..3000u64)
            .map(|i| doc! { "_id": (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) as i64, "pad": &pad })
            .collect();
        let refs: Vec<&Document> = docs.iter().collect();
        for batch in refs.chunks(1000) {
            let results = c.insert_many(&e, batch, true, Ack::Written, None);
            assert_eq!(results.len(), batch.len());
            assert!(results.iter().all(Result::is_ok), "{:?}", results.iter().find(|r| r.is_err()));
        }
        assert_eq!(c.scan(&e, 0, 0).unwrap().len(), docs.len());
    }

    /// Two inserts of the same `_id`s at once: each `_id` is stored once,
    /// and every document is either inserted or a duplicate.
    #[test]
    fn concurrent_insert_many_of_the_same_ids_store_each_once() {
        let (_dir, e, cat) = fresh_catalog();
        let c = cat.get_or_create(&Namespace::new("test", "race").unwrap()).unwrap();
        let docs: Vec<Document> = (0..2000i64).map(|i| doc! { "_id": i }).collect();
        let start = std::sync::Barrier::new(3);
        let inserted: usize = std::thread::scope(|s| {
            let runs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let refs: Vec<&Document> = docs.iter().collect();
                        start.wait();
                        let results = c.insert_many(&e, &refs, false, Ack::Written, None);
                        assert_eq!(results.len(), docs.len());
                        for r in &results {
                            assert!(matches!(r, Ok(()) | Err(DocError::DuplicateKey { .. })), "{r:?}");
                        }
                        results.iter().filter(|r| r.is_ok()).count()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).sum()
        });
        assert_eq!(inserted, docs.len());
        assert_eq!(c.scan(&e, 0, 0).unwrap().len(), docs.len());
    }

    #[test]
    fn names_are_checked() {
        assert!(Namespace::new("", "c").is_err());
        assert!(Namespace::new("a.b", "c").is_err());
        assert!(Namespace::new("a", "").is_err());
        assert!(Namespace::new("a", "c$d").is_err());
        assert!(Namespace::new("a", "b.c").is_ok());
    }
}
