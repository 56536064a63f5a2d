//! Secondary indexes: what one is (its key pattern and options), the keys
//! a document gives it (`keys.rs`), and its entries in storage.
//!
//! An index is a storage table `i/<collection ident>/<n>`:
//! - key = the key's KeyString (`keys::key_string`, stored as
//!   `keystring::storable` stores it: a long one cut, with a digest)
//!   followed by the record id (8 bytes, big-endian), so equal keys sort
//!   by record id and every entry is unique;
//! - value = the key's values as BSON (`{"0": v0, "1": v1, ...}`, a
//!   missing field absent), so a covered read gets them back without the
//!   document.
//!
//! A unique index leaves the record id out of the key and puts it first
//! in the value (8 bytes, big-endian): every writer of one key writes the
//! same storage key, so two concurrent writers of it conflict (first
//! updater wins) instead of both passing their uniqueness checks.
//!
//! The `_id` index reads as a unique index on `{_id: 1}` whose values are
//! not stored (`Index::over_id_table`): its table has the unique layout
//! with the record id alone as the value, so a read plans and scans it as
//! any other, and takes a key's value, when it must check or return one
//! (a read covered by it), from the record.
//!
//! A `prepareUnique` index (on its way to unique, `collMod`) keeps the
//! non-unique layout and refuses a key another record holds; its writers
//! claim the key's bare storage key (`keystring::storable`, a delete that
//! leaves nothing behind) so that two concurrent writers of one new key
//! conflict the same way.
//!
//! Invariants:
//! 1. A ready index holds exactly the entries its collection's documents
//!    give it (`keys::doc_keys`), written in the transaction of the write
//!    that changes the document.
//! 2. A unique index holds at most one record id per key (by its
//!    layout: one storage key per key).
//! 3. `multikey` only grows, and is written to the catalog in the
//!    transaction of the first write that meets an array on a new path;
//!    in memory it is raised before that transaction commits, so a reader
//!    never plans with less than is stored.

pub mod hashed;
pub mod keys;
pub mod wildcard;

use crate::catalog::{DocError, Hooks, KeyCollation};
use bson::{Bson, Document};
use keys::{DocKeys, KeyField, KeyValues};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use storage::{Table, TableFormat, Txn};

/// An index's definition as its catalog entry and `listIndexes` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    /// The key pattern as given (`{a: 1, "b.c": -1}`).
    pub key: Document,
    pub fields: Vec<KeyField>,
    pub unique: bool,
    pub sparse: bool,
    /// A wildcard index's paths (`wildcard.rs`): its `fields` are then
    /// `$_path` and the value, each key a path and a value.
    pub wildcard: Option<wildcard::Wildcard>,
    /// How its table stores entries: `storageEngine: {arbordb: {format:
    /// "write-optimized"}}` in `shown` asks for a write-optimized table.
    pub format: TableFormat,
    /// `parallelArrays: true` (our extension): a document's arrays on
    /// different fields give the product of their elements as keys.
    pub parallel_arrays: bool,
    /// The spec as `listIndexes` shows it: `v`, `key`, `name` and the
    /// options given.
    pub shown: Document,
}

/// The name `storageEngine.arbordb.format` gives a table format.
pub fn format_name(format: TableFormat) -> &'static str {
    match format {
        TableFormat::BTree => "btree",
        TableFormat::WriteOptimized => "write-optimized",
    }
}

/// The table format a `storageEngine.arbordb.format` names.
pub fn format_named(name: &str) -> Option<TableFormat> {
    [TableFormat::BTree, TableFormat::WriteOptimized].into_iter().find(|f| format_name(*f) == name)
}

impl IndexSpec {
    /// The spec of a `listIndexes`-shaped document whose key pattern holds
    /// only ascending and descending fields (the caller validated it).
    pub fn from_shown(shown: Document) -> Result<IndexSpec, DocError> {
        let corrupt = || DocError::Corrupt(format!("index spec {shown}"));
        let name = shown.get_str("name").map_err(|_| corrupt())?.to_string();
        let key = shown.get_document("key").map_err(|_| corrupt())?.clone();
        let mut fields = Vec::new();
        for (path, dir) in &key {
            let descending = match dir {
                Bson::Int32(n) => *n < 0,
                Bson::Int64(n) => *n < 0,
                Bson::Double(n) => *n < 0.0,
                Bson::Decimal128(_) => dir.to_string().starts_with('-'),
                Bson::String(kind) if kind == "hashed" => false,
                _ => return Err(corrupt()),
            };
            let hashed = matches!(dir, Bson::String(_));
            fields.push(KeyField { path: path.split('.').map(String::from).collect(), descending, hashed });
        }
        let unique = shown.get_bool("unique").unwrap_or(false);
        let sparse = shown.get_bool("sparse").unwrap_or(false);
        let wildcard = match key.keys().next() {
            Some(path) if key.len() == 1 => wildcard::Wildcard::of(path, shown.get_document("wildcardProjection").ok()),
            _ => None,
        };
        if wildcard.is_some() {
            let value = fields.pop().expect("one field");
            fields = vec![KeyField { path: vec!["$_path".into()], descending: false, hashed: false }, value];
        }
        let format = match shown.get_document("storageEngine").and_then(|e| e.get_document("arbordb")) {
            Ok(options) => match options.get_str("format") {
                Ok(name) => format_named(name).ok_or_else(corrupt)?,
                Err(_) => TableFormat::BTree,
            },
            Err(_) => TableFormat::BTree,
        };
        if unique && format == TableFormat::WriteOptimized {
            return Err(corrupt());
        }
        let parallel_arrays = shown.get_bool("parallelArrays").unwrap_or(false);
        Ok(IndexSpec { name, key, fields, unique, sparse, wildcard, format, parallel_arrays, shown })
    }

    /// The keys `doc` gives this index, strings under `collation`.
    pub fn doc_keys(&self, doc: &Document, collation: Option<&dyn KeyCollation>) -> Result<DocKeys, DocError> {
        if let Some(w) = &self.wildcard {
            let (found, arrays) = w.keys(doc, collation);
            let mut out = DocKeys { multikey: vec![BTreeSet::new(); 2], wildcard_arrays: arrays, ..DocKeys::default() };
            for (path, value) in found {
                let values = vec![Some(Bson::String(path)), Some(value)];
                out.keys.insert(keys::key_string(&values, &self.fields), values);
            }
            return Ok(out);
        }
        for f in self.fields.iter().filter(|f| f.hashed) {
            if let Some(at) = keys::array_on_path(doc, f) {
                return Err(DocError::HashedArray(format!(
                    "hashed indexes do not currently support array values. Found array at path: {at}"
                )));
            }
        }
        let parallel_max = self.parallel_arrays.then_some(crate::limits::index_keys_parallel_max);
        let rules = keys::KeyRules { sparse: self.sparse, collation, parallel_max };
        keys::doc_keys(doc, &self.fields, rules).map_err(|e| match e {
            keys::KeyError::Parallel(_) => DocError::ParallelArrays(e.to_string()),
            keys::KeyError::TooMany { .. } => DocError::TooManyIndexKeys(e.to_string()),
        })
    }
}

/// A partial index's `partialFilterExpression`, as the query layer
/// evaluates it (this crate only stores its keys).
pub trait DocFilter: Send + Sync {
    fn matches(&self, doc: &Document) -> bool;
}

/// Makes the `DocFilter` of a `partialFilterExpression` under the
/// index's collation spec, if any (`None`: this catalog cannot evaluate
/// it).
pub type DocFilters = fn(&Document, Option<&Document>) -> Option<Arc<dyn DocFilter>>;

/// A secondary index of a collection.
pub struct Index {
    pub spec: IndexSpec,
    /// A partial index's filter: documents it does not match have no key.
    filter: Option<Arc<dyn DocFilter>>,
    /// Its collation (`None`: binary): keys hold strings as its sort keys.
    collation: Option<Arc<dyn KeyCollation>>,
    pub(crate) table: Table,
    /// Built: queries may use it (writers maintain it either way).
    ready: AtomicBool,
    /// The published timestamp once its build's last commit was: a
    /// snapshot older than that does not see all its entries (0: ready
    /// since the catalog was opened, or made empty in its collection's
    /// creating transaction).
    ready_ts: std::sync::atomic::AtomicU64,
    /// Per field, the component positions where arrays were met: what
    /// reads plan with (raised before the write commits).
    multikey: Mutex<Vec<BTreeSet<usize>>>,
    /// What the catalog is known to hold committed (never more than it
    /// does): a write whose paths it covers need not look.
    recorded: Mutex<Vec<BTreeSet<usize>>>,
    /// A wildcard index's array paths, as `multikey` and `recorded`.
    wildcard_multikey: Mutex<BTreeSet<String>>,
    wildcard_recorded: Mutex<BTreeSet<String>>,
    /// Whether `multikey` or `wildcard_multikey` holds a path: what every
    /// key a scan reads asks, without their locks (raised under them).
    any_multikey: AtomicBool,
    /// The options `collMod` changes (`hidden`, `expireAfterSeconds`), as
    /// they now are; they override `spec.shown`'s.
    options: Mutex<Document>,
    /// Reads this index served since `since` (`$indexStats`).
    accesses: std::sync::atomic::AtomicU64,
    since: bson::DateTime,
    /// Its entries hold their key's values: every index but the `_id`
    /// index read as one (`over_id_table`).
    holds_values: bool,
}

/// The options of an index `collMod` may change.
pub const CHANGEABLE: [&str; 3] = ["hidden", "expireAfterSeconds", "prepareUnique"];

impl Index {
    /// The index of `spec` in `table`, with the query layer's `hooks`;
    /// `stored_format`: the `keyFormat` its catalog entry records (`None`
    /// for a new index), which must be the format this build makes.
    pub(crate) fn new(
        spec: IndexSpec,
        table: Table,
        (ready, multikey): (bool, Vec<BTreeSet<usize>>),
        hooks: &Hooks,
        stored_format: Option<&str>,
    ) -> Result<Index, DocError> {
        debug_assert_eq!(multikey.len(), spec.fields.len());
        let collation_spec = spec.shown.get_document("collation").ok();
        let collation = match collation_spec {
            Some(c) => Some(hooks.collations.and_then(|make| make(c)).ok_or_else(|| {
                DocError::Corrupt(format!("index {} has a collation this catalog cannot apply", spec.name))
            })?),
            None => None,
        };
        if let (Some(c), Some(stored)) = (&collation, stored_format) {
            if c.key_format() != stored {
                return Err(DocError::Corrupt(format!(
                    "index {} holds collation keys of format {stored:?}, this build makes {:?}",
                    spec.name,
                    c.key_format()
                )));
            }
        }
        let filter = match spec.shown.get_document("partialFilterExpression") {
            Ok(expr) => Some(hooks.filters.and_then(|make| make(expr, collation_spec)).ok_or_else(|| {
                DocError::Corrupt(format!("index {} has a partial filter this catalog cannot evaluate", spec.name))
            })?),
            Err(_) => None,
        };
        let recorded = Mutex::new(multikey.clone());
        let any_multikey = AtomicBool::new(multikey.iter().any(|p| !p.is_empty()));
        let options = spec
            .shown
            .iter()
            .filter(|(k, _)| CHANGEABLE.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Index {
            spec,
            filter,
            collation,
            table,
            ready: AtomicBool::new(ready),
            ready_ts: std::sync::atomic::AtomicU64::new(0),
            multikey: Mutex::new(multikey),
            recorded,
            wildcard_multikey: Mutex::default(),
            wildcard_recorded: Mutex::default(),
            any_multikey,
            options: Mutex::new(options),
            accesses: Default::default(),
            since: bson::DateTime::now(),
            holds_values: true,
        })
    }

    /// The `_id` index, in `table`, as the planner and scans read a
    /// secondary index: unique on `{_id: 1}` under `collation`, never
    /// multikey, its entries holding no values (see the module).
    pub(crate) fn over_id_table(table: Table, collation: Option<Arc<dyn KeyCollation>>) -> Index {
        let shown = bson::doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_", "unique": true };
        let spec = IndexSpec::from_shown(shown).expect("the _id index's spec is well formed");
        Index {
            spec,
            filter: None,
            collation,
            table,
            ready: AtomicBool::new(true),
            ready_ts: std::sync::atomic::AtomicU64::new(0),
            multikey: Mutex::new(vec![BTreeSet::new()]),
            recorded: Mutex::new(vec![BTreeSet::new()]),
            wildcard_multikey: Mutex::default(),
            wildcard_recorded: Mutex::default(),
            any_multikey: AtomicBool::new(false),
            options: Mutex::new(Document::new()),
            accesses: Default::default(),
            since: bson::DateTime::now(),
            holds_values: false,
        }
    }

    /// Whether its entries hold their key's values ([`Index::decode_entry`]
    /// answers them); the `_id` index's do not.
    pub fn holds_values(&self) -> bool {
        self.holds_values
    }

    /// The spec as `listIndexes` shows it now (`collMod` changes applied).
    pub fn shown(&self) -> Document {
        let options = self.options.lock();
        let mut out: Document = self
            .spec
            .shown
            .iter()
            .filter(|(k, _)| !CHANGEABLE.contains(&k.as_str()) || options.contains_key(k.as_str()))
            .map(|(k, v)| (k.clone(), options.get(k).cloned().unwrap_or_else(|| v.clone())))
            .collect();
        for (k, v) in options.iter() {
            if !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
        out
    }

    /// One more read served (`$indexStats`).
    pub fn note_access(&self) {
        self.accesses.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads served, and since when they are counted (the index's load).
    pub fn accesses(&self) -> (u64, bson::DateTime) {
        (self.accesses.load(Ordering::Relaxed), self.since)
    }

    /// Hidden: maintained, but neither planned nor hinted.
    pub fn is_hidden(&self) -> bool {
        self.options.lock().get_bool("hidden").unwrap_or(false)
    }

    /// Refusing new duplicate keys before a conversion to unique.
    pub fn prepare_unique(&self) -> bool {
        self.options.lock().get_bool("prepareUnique").unwrap_or(false)
    }

    /// A TTL index's `expireAfterSeconds`.
    pub fn expire_after_seconds(&self) -> Option<i64> {
        match self.options.lock().get("expireAfterSeconds")? {
            Bson::Int32(n) => Some(i64::from(*n)),
            Bson::Int64(n) => Some(*n),
            Bson::Double(d) if d.is_finite() => Some(*d as i64),
            _ => None,
        }
    }

    /// Set (or with `None` remove) a `collMod`-changeable option; returns
    /// its value before.
    pub(crate) fn set_option(&self, name: &str, value: Option<Bson>) -> Option<Bson> {
        debug_assert!(CHANGEABLE.contains(&name));
        let mut options = self.options.lock();
        match value {
            Some(v) => options.insert(name, v),
            None => options.remove(name),
        }
    }

    /// The keys `doc` gives this index: none when a partial index's
    /// filter does not match it.
    pub fn doc_keys(&self, doc: &Document) -> Result<DocKeys, DocError> {
        match &self.filter {
            Some(f) if !f.matches(doc) => {
                Ok(DocKeys { multikey: vec![BTreeSet::new(); self.spec.fields.len()], ..DocKeys::default() })
            }
            _ => self.spec.doc_keys(doc, self.collation.as_deref()),
        }
    }

    /// Its collation (`None`: binary).
    pub fn collation(&self) -> Option<&Arc<dyn KeyCollation>> {
        self.collation.as_ref()
    }

    /// Whether it is a partial index.
    /// How its table stores entries, and for a write-optimized one the
    /// bytes of each run (newest first, the memtable first).
    pub fn storage_format(&self, engine: &storage::Engine) -> (TableFormat, Vec<u64>) {
        (self.table.config().format, engine.table_runs(&self.table).unwrap_or_default())
    }

    pub fn is_partial(&self) -> bool {
        self.filter.is_some()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Ready for snapshots at `ts` and later.
    pub(crate) fn set_ready(&self, ts: u64) {
        self.ready_ts.store(ts, Ordering::Release);
        self.ready.store(true, Ordering::Release)
    }

    /// Whether a snapshot at `read_ts` (`None`: the newest data) may read
    /// it: it is ready and its whole build is in that snapshot.
    pub fn readable_at(&self, read_ts: Option<u64>) -> bool {
        self.is_ready() && read_ts.is_none_or(|ts| ts >= self.ready_ts.load(Ordering::Acquire))
    }

    /// Its storage table (entries as the module describes them).
    pub fn table(&self) -> &Table {
        &self.table
    }

    pub fn table_name(&self) -> &str {
        self.table.name()
    }

    /// Per field, the component positions where arrays were met.
    pub fn multikey_paths(&self) -> Vec<BTreeSet<usize>> {
        self.multikey.lock().clone()
    }

    pub fn is_multikey(&self) -> bool {
        debug_assert!({
            // Under both locks the flag agrees with the paths.
            let (paths, wildcard) = (self.multikey.lock(), self.wildcard_multikey.lock());
            let any = paths.iter().any(|p| !p.is_empty()) || !wildcard.is_empty();
            any == self.any_multikey.load(Ordering::Acquire)
        });
        self.any_multikey.load(Ordering::Acquire)
    }

    /// A wildcard index's paths where arrays were met.
    pub fn wildcard_multikey_paths(&self) -> BTreeSet<String> {
        self.wildcard_multikey.lock().clone()
    }

    /// Raise a wildcard index's array paths (invariant 3, as
    /// `raise_multikey`).
    pub(crate) fn raise_wildcard(&self, seen: &BTreeSet<String>) {
        if !seen.is_empty() {
            let mut held = self.wildcard_multikey.lock();
            held.extend(seen.iter().cloned());
            self.any_multikey.store(true, Ordering::Release);
        }
    }

    /// Raise the multikey paths to cover `seen`; returns the new paths if
    /// they grew (the caller records them in the catalog, invariant 3).
    pub(crate) fn raise_multikey(&self, seen: &[BTreeSet<usize>]) -> Option<Vec<BTreeSet<usize>>> {
        let mut held = self.multikey.lock();
        let grows = held.iter().zip(seen).any(|(h, s)| !s.is_subset(h));
        if !grows {
            return None;
        }
        for (h, s) in held.iter_mut().zip(seen) {
            h.extend(s.iter().copied());
        }
        self.any_multikey.store(true, Ordering::Release);
        Some(held.clone())
    }

    /// Whether the catalog is known to record `seen` (and `paths`) already.
    pub(crate) fn recorded_covers(&self, seen: &[BTreeSet<usize>], paths: &BTreeSet<String>) -> bool {
        self.recorded.lock().iter().zip(seen).all(|(r, s)| s.is_subset(r))
            && paths.is_subset(&self.wildcard_recorded.lock())
    }

    /// The catalog holds `stored` (and `paths`), committed.
    pub(crate) fn raise_recorded(&self, stored: &[BTreeSet<usize>], paths: &BTreeSet<String>) {
        let mut held = self.recorded.lock();
        for (h, s) in held.iter_mut().zip(stored) {
            h.extend(s.iter().copied());
        }
        self.wildcard_recorded.lock().extend(paths.iter().cloned());
    }

    /// In `txn`: add the entries of `keys` for record `rid`; a unique
    /// index refuses a key another record holds.
    pub(crate) fn insert_keys(&self, txn: &Txn, rid: u64, keys: &DocKeys, ns: &str) -> Result<(), DocError> {
        // A build takes the duplicates already there (as mongod's does).
        let prepared = !self.spec.unique && self.prepare_unique() && self.is_ready();
        for (key, values) in &keys.keys {
            if self.spec.unique {
                if let Some(other) = self.holder(txn, key)? {
                    if other != rid {
                        return Err(self.duplicate(ns, values));
                    }
                }
            } else if prepared && self.held_by_another(txn, key, rid)? {
                return Err(self.duplicate(ns, values));
            }
            txn.put(&self.table, &self.storage_key(key, rid), &self.storage_value(rid, values)?)?;
        }
        Ok(())
    }

    /// In `txn`: remove the entries of `keys` for record `rid`.
    pub(crate) fn delete_keys(&self, txn: &Txn, rid: u64, keys: &DocKeys) -> Result<(), DocError> {
        for key in keys.keys.keys() {
            if self.spec.unique && self.holder(txn, key)? != Some(rid) {
                continue;
            }
            txn.delete(&self.table, &self.storage_key(key, rid))?;
        }
        Ok(())
    }

    /// The storage key of `key`'s entry for record `rid` (see the module).
    pub fn storage_key(&self, key: &[u8], rid: u64) -> Vec<u8> {
        match self.spec.unique {
            true => crate::keystring::storable(key.to_vec()),
            false => entry_key(key, rid),
        }
    }

    pub(crate) fn storage_value(&self, rid: u64, values: &[Option<Bson>]) -> Result<Vec<u8>, DocError> {
        let bson = entry_value(values)?;
        if !self.spec.unique {
            return Ok(bson);
        }
        let mut out = rid.to_be_bytes().to_vec();
        out.extend_from_slice(&bson);
        Ok(out)
    }

    /// The inline bytes of an entry's storage key when its KeyString was
    /// stored cut (`keystring::storable`): entries sharing them sit
    /// together in digest order, not in key order.
    pub fn cut_prefix<'k>(&self, storage_key: &'k [u8]) -> Option<&'k [u8]> {
        use crate::limits::key_inline_max_bytes;
        let key = if self.spec.unique { storage_key } else { &storage_key[..storage_key.len().saturating_sub(8)] };
        (key.len() > key_inline_max_bytes).then(|| &key[..key_inline_max_bytes])
    }

    /// An entry's record id.
    pub fn entry_record(&self, key: &[u8], value: &[u8]) -> Result<u64, DocError> {
        match self.spec.unique {
            false => record_of(key),
            true => record_of(value.get(..8).ok_or_else(|| DocError::Corrupt("a short unique index entry".into()))?),
        }
    }

    /// An entry's record id and key values (only where it
    /// [`holds_values`](Index::holds_values)).
    pub fn decode_entry(&self, key: &[u8], value: &[u8]) -> Result<(u64, KeyValues), DocError> {
        assert!(self.holds_values, "the _id index's entries hold no values");
        let fields = self.spec.fields.len();
        if !self.spec.unique {
            return Ok((record_of(key)?, entry_values(value, fields)?));
        }
        let (rid, rest) =
            value.split_at_checked(8).ok_or_else(|| DocError::Corrupt("a short unique index entry".into()))?;
        Ok((record_of(rid)?, entry_values(rest, fields)?))
    }

    /// Every entry, in index order: its key's values and its record id
    /// (for `validate` and tests).
    pub fn entries(&self, engine: &storage::Engine) -> Result<Vec<(KeyValues, u64)>, DocError> {
        let mut out = Vec::new();
        let mut c = engine.cursor(&self.table)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            let (rid, values) = self.decode_entry(&k, &v)?;
            out.push((values, rid));
            e = c.next()?;
        }
        Ok(out)
    }

    /// In `txn`, whether a record other than `rid` holds `key` in this
    /// non-unique index; claims the key first (see the module).
    fn held_by_another(&self, txn: &Txn, key: &[u8], rid: u64) -> Result<bool, DocError> {
        debug_assert!(!self.spec.unique);
        let stored = crate::keystring::storable(key.to_vec());
        txn.delete(&self.table, &stored)?;
        let mut c = txn.cursor(&self.table)?;
        let mut e = c.seek(&entry_key(key, 0))?;
        while let Some((k, _)) = e {
            if !k.starts_with(&stored) {
                break;
            }
            if k.len() == stored.len() + 8 && record_of(&k)? != rid {
                return Ok(true);
            }
            e = c.next()?;
        }
        Ok(false)
    }

    /// The record ids of each key more than one record holds, in index
    /// order (none for a unique index, by its layout).
    pub fn duplicates(&self, engine: &storage::Engine) -> Result<Vec<Vec<u64>>, DocError> {
        let mut groups: Vec<Vec<u64>> = Vec::new();
        if self.spec.unique {
            return Ok(groups);
        }
        let mut c = engine.cursor(&self.table)?;
        let mut e = c.first()?;
        let mut previous: Option<(Vec<u8>, u64)> = None;
        let mut run: Vec<u64> = Vec::new();
        while let Some((k, _)) = e {
            let (stored, rid) = (k[..k.len().saturating_sub(8)].to_vec(), record_of(&k)?);
            match previous {
                Some((p, first)) if p == stored => {
                    if run.is_empty() {
                        run.push(first);
                    }
                    run.push(rid);
                }
                _ => groups.extend((!run.is_empty()).then(|| std::mem::take(&mut run))),
            }
            previous = Some((stored, rid));
            e = c.next()?;
        }
        groups.extend((!run.is_empty()).then_some(run));
        Ok(groups)
    }

    /// The record a unique index's `key` belongs to, if any.
    fn holder(&self, txn: &Txn, key: &[u8]) -> Result<Option<u64>, DocError> {
        debug_assert!(self.spec.unique);
        match txn.get(&self.table, &crate::keystring::storable(key.to_vec()))? {
            Some(v) => Ok(Some(self.decode_entry(&[], &v)?.0)),
            None => Ok(None),
        }
    }

    /// mongod's E11000 for a key of this index: under a collation it
    /// names the collation and shows a string as its sort key (`0x…`).
    pub(crate) fn duplicate(&self, ns: &str, values: &[Option<Bson>]) -> DocError {
        let mut key_value = Document::new();
        for ((path, _), v) in self.spec.key.iter().zip(values) {
            let v = match (v, &self.collation) {
                (Some(Bson::String(hex)), Some(_)) => Bson::String(format!("0x{hex}")),
                (v, _) => v.clone().unwrap_or(Bson::Null),
            };
            key_value.insert(path.clone(), v);
        }
        DocError::DuplicateIndexKey(Box::new(crate::catalog::DuplicateIndexKey {
            ns: ns.to_string(),
            index: self.spec.name.clone(),
            key_pattern: self.spec.key.clone(),
            key_value,
            collation: self.collation.as_ref().map(|c| c.full_spec()),
        }))
    }
}

/// An entry's storage key: the KeyString (as `keystring::storable`
/// stores it), then the record id.
pub fn entry_key(key: &[u8], rid: u64) -> Vec<u8> {
    let mut out = crate::keystring::storable(key.to_vec());
    out.extend_from_slice(&rid.to_be_bytes());
    out
}

/// The record id a non-unique entry's storage key ends with (or a
/// unique entry's value begins with).
pub fn record_of(bytes: &[u8]) -> Result<u64, DocError> {
    let at =
        bytes.len().checked_sub(8).ok_or_else(|| DocError::Corrupt("an index entry without a record id".into()))?;
    Ok(u64::from_be_bytes(bytes[at..].try_into().expect("8 bytes")))
}

/// Whether two keys' values are the same to the byte (`1` and `1.0`, or
/// `0.0` and `-0.0`, share a KeyString but not a stored value).
pub(crate) fn same_values(a: &[Option<Bson>], b: &[Option<Bson>]) -> bool {
    matches!((entry_value(a), entry_value(b)), (Ok(x), Ok(y)) if x == y)
}

/// An entry's value: the key's values as a BSON document, field `i`
/// holding field `i`'s value (absent for a missing field).
fn entry_value(values: &[Option<Bson>]) -> Result<Vec<u8>, DocError> {
    let mut d = Document::new();
    for (i, v) in values.iter().enumerate() {
        if let Some(v) = v {
            d.insert(i.to_string(), v.clone());
        }
    }
    Ok(crate::bson_bytes::encode(&d)?)
}

/// The key values of an index of `fields` fields an entry's value holds.
pub fn entry_values(value: &[u8], fields: usize) -> Result<KeyValues, DocError> {
    crate::bson_bytes::decode_positional(value, fields).map_err(|e| DocError::Corrupt(e.to_string()))
}
