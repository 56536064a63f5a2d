//! DDL: creating, dropping, renaming a collection and changing its
//! options, as a catalog-entry write in the caller's transaction.
//!
//! Each `*_in` method writes (or deletes) catalog entries in `txn` and
//! returns a [`Pending`] change; once `txn` commits, the caller hands it
//! to [`Catalog::publish`], which makes it visible to lookups and drops
//! the tables the change freed; if `txn` rolls back instead, to
//! [`Catalog::abandon`], which drops the tables it created. Storage
//! tables are created and dropped outside transactions, so:
//! - a table is created before the entry naming it is written, and
//!   dropped only after the entry stops naming it has committed;
//! - a table left over by a crash or a forgotten `Pending` is named by no
//!   committed entry, and `Catalog::open` drops it (invariant 1).
//!
//! Two DDL changes of one namespace write the same catalog key, so the
//! second to commit fails with a write conflict (first updater wins); the
//! own-transaction wrappers (`create`, `drop`, ...) begin again.

use super::*;
use collection::IdIndexEntry;
use storage::{Txn, TxnOptions};

/// How often `get_or_create` looks again for a collection another writer
/// created but has not yet published (a millisecond apart).
const GET_OR_CREATE_TRIES: usize = 1000;

/// A catalog change written in a transaction, to publish once that
/// transaction commits (or abandon once it rolls back).
#[must_use = "a catalog change is published after its transaction commits, or abandoned"]
pub struct Pending {
    change: Change,
}

impl Pending {
    /// [`Catalog::abandon`] with only the engine at hand.
    pub fn abandon_on(self, engine: &Engine) {
        if let Change::Create { coll } = self.change {
            // Its secondary indexes were added in the same transaction
            // (`Catalog::add_index_in`).
            let secondary: Vec<String> = coll.indexes.read().iter().map(|ix| ix.table.name().to_string()).collect();
            let tables =
                [coll.records.name(), coll.id_index.name()].into_iter().chain(secondary.iter().map(|s| s.as_str()));
            for name in tables {
                if let Err(e) = engine.drop_table(name) {
                    tracing::warn!(table = %name, error = %e, "table left for the next open to drop");
                }
            }
        }
    }

    /// The collection a create or rename makes, to write to in the same
    /// transaction before it is published.
    pub fn collection(&self) -> Option<&Arc<Collection>> {
        match &self.change {
            Change::Create { coll } | Change::Rename { coll, .. } | Change::SetOptions { coll } => Some(coll),
            Change::Drop { .. } => None,
        }
    }
}

enum Change {
    Create {
        coll: Arc<Collection>,
    },
    /// `tables`: the dropped collection's, to drop once published.
    Drop {
        ns: Namespace,
        tables: Vec<String>,
    },
    /// `replaced`: the tables of a dropped target.
    Rename {
        from: Namespace,
        coll: Arc<Collection>,
        replaced: Vec<String>,
    },
    SetOptions {
        coll: Arc<Collection>,
    },
}

/// Every table a catalog entry names: its record table first, then its
/// index tables.
pub(crate) fn entry_table_names(ns: &Namespace, entry: &Document) -> Vec<String> {
    let (records, id_index, _) = entry_tables(ns, entry);
    let secondary = indexes::index_entries(entry).unwrap_or_default().into_iter().map(|ix| ix.table);
    [records, id_index].into_iter().chain(secondary).collect()
}

impl Catalog {
    /// The committed (as `txn` sees it) catalog entry of `ns`.
    fn entry_in(&self, txn: &Txn, ns: &Namespace) -> Result<Option<Document>, DocError> {
        txn.get(&self.meta, ns.to_string().as_bytes())?.map(|bytes| decode(&bytes)).transpose()
    }

    /// The entry of `ns` as `txn` sees it, and the published collection
    /// it names. A collection created or replaced in a transaction is
    /// renamed or changed only once published (one change per namespace
    /// per transaction).
    fn committed(&self, txn: &Txn, ns: &Namespace) -> Result<(Document, Arc<Collection>), DocError> {
        let missing = || DocError::NamespaceNotFound(ns.to_string());
        let entry = self.entry_in(txn, ns)?.ok_or_else(missing)?;
        let c = self.get(ns).ok_or_else(missing)?;
        if entry_tables(ns, &entry).0 != c.records.name() {
            return Err(missing());
        }
        Ok((entry, c))
    }

    /// In `txn`: create the collection `ns` with `options`; fails if it
    /// exists. Its (empty) tables are created at once.
    pub fn create_in(&self, txn: &Txn, ns: &Namespace, options: Document) -> Result<Pending, DocError> {
        if self.entry_in(txn, ns)?.is_some() {
            return Err(DocError::NamespaceExists(ns.to_string()));
        }
        let ident = self.next_ident.fetch_add(1, Ordering::Relaxed);
        let (records, id_index) = (format!("c/{ident}"), format!("i/{ident}/_id_"));
        // The `_id` index keeps the collection's default collation.
        let id_collation =
            options.get_document("collation").ok().and_then(|spec| self.hooks.collations.and_then(|make| make(spec)));
        // The entry first: a create that conflicts with another (a
        // transaction's, held until it ends) fails before it makes tables.
        let entry = catalog_entry(ns, &options, (&records, &id_index), id_collation.as_ref(), true);
        txn.put(&self.meta, ns.to_string().as_bytes(), &encode(&entry)?)?;
        for (name, config) in
            [(&records, self.engine.default_table_config()), (&id_index, index_table_config(&self.engine))]
        {
            if self.engine.table(name).is_ok() {
                self.engine.drop_table(name)?;
            }
            self.engine.create_table(name, config)?;
        }
        let id = IdIndexEntry { records: records.clone(), id_index: id_index.clone(), id_collation, long_keys: true };
        let made = Collection::load(&self.engine, ns.clone(), options, id, Vec::new(), &self.hooks);
        match made {
            Ok(coll) => Ok(Pending { change: Change::Create { coll: Arc::new(coll) } }),
            Err(e) => {
                self.drop_tables(&[records, id_index]);
                Err(e)
            }
        }
    }

    /// In `txn`: drop the collection `ns`; `None` if it does not exist.
    pub fn drop_in(&self, txn: &Txn, ns: &Namespace) -> Result<Option<Pending>, DocError> {
        let Some(entry) = self.entry_in(txn, ns)? else { return Ok(None) };
        txn.delete(&self.meta, ns.to_string().as_bytes())?;
        let tables = entry_table_names(ns, &entry);
        Ok(Some(Pending { change: Change::Drop { ns: ns.clone(), tables } }))
    }

    /// In `txn`: rename a collection (across databases too); only catalog
    /// entries change. An existing target is dropped when `drop_target`,
    /// else refused: its entry is overwritten in the same transaction, so
    /// a crash leaves the old target or the renamed collection, never
    /// neither.
    pub fn rename_in(
        &self,
        txn: &Txn,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> Result<Pending, DocError> {
        if from == to {
            return Err(DocError::NamespaceExists(to.to_string()));
        }
        let (entry, c) = self.committed(txn, from)?;
        // A build finds its collection by name until it is done.
        for building in [Some(c.clone()), self.get(to)].into_iter().flatten() {
            if building.indexes.read().iter().any(|ix| !ix.is_ready()) {
                return Err(DocError::BuildInProgress(building.ns.to_string()));
            }
        }
        let replaced = match self.entry_in(txn, to)? {
            Some(_) if !drop_target => return Err(DocError::NamespaceExists(to.to_string())),
            Some(target) => entry_table_names(to, &target),
            None => Vec::new(),
        };
        // Entries written before idents existed name their tables by
        // namespace: the new entry names the same tables explicitly.
        let (records, id_index, _) = entry_tables(from, &entry);
        let options = entry.get_document("options").cloned().unwrap_or_default();
        let mut renamed = catalog_entry(to, &options, (&records, &id_index), c.id_collation.as_ref(), c.long_ids);
        // Secondary index entries name their tables and move as they are.
        let secondary = entry.get_array("indexes").map(|ix| ix.to_vec()).unwrap_or_default();
        if let Ok(list) = renamed.get_array_mut("indexes") {
            list.extend(
                secondary
                    .into_iter()
                    .filter(|ix| ix.as_document().and_then(|d| d.get_str("name").ok()) != Some("_id_")),
            );
        }
        let entry = renamed;
        txn.delete(&self.meta, from.to_string().as_bytes())?;
        txn.put(&self.meta, to.to_string().as_bytes(), &encode(&entry)?)?;
        let coll = Arc::new(c.renamed(to.clone(), options));
        Ok(Pending { change: Change::Rename { from: from.clone(), coll, replaced } })
    }

    /// In `txn`: replace a collection's options (`collMod`). Writers that
    /// already hold the collection keep the old options until their next
    /// lookup.
    pub fn set_options_in(&self, txn: &Txn, ns: &Namespace, options: Document) -> Result<Pending, DocError> {
        let (mut entry, c) = self.committed(txn, ns)?;
        entry.insert("options", options.clone());
        txn.put(&self.meta, ns.to_string().as_bytes(), &encode(&entry)?)?;
        Ok(Pending { change: Change::SetOptions { coll: Arc::new(c.renamed(ns.clone(), options)) } })
    }

    /// Make a change committed at `commit_ts` visible, and drop the
    /// tables it freed; returns the collection it created, renamed or
    /// changed. Changes may be published out of commit order: a
    /// namespace's lookup slot takes a change only if it committed after
    /// the last one published there, so the map ends as the commits
    /// order it.
    pub fn publish(&self, pending: Pending, commit_ts: u64) -> Option<Arc<Collection>> {
        let mut all = self.collections.write();
        let mut last = self.published.lock();
        let mut newer = |ns: &Namespace| {
            let at = last.entry(ns.clone()).or_insert(0);
            let newer = commit_ts > *at;
            *at = (*at).max(commit_ts);
            newer
        };
        let (published, freed) = match pending.change {
            Change::Create { coll } => {
                if newer(&coll.ns) {
                    all.insert(coll.ns.clone(), coll.clone());
                }
                (Some(coll), Vec::new())
            }
            Change::Drop { ns, tables } => {
                if newer(&ns) {
                    all.remove(&ns);
                }
                (None, tables)
            }
            Change::Rename { from, coll, replaced } => {
                if newer(&from) {
                    all.remove(&from);
                }
                if newer(&coll.ns) {
                    all.insert(coll.ns.clone(), coll.clone());
                }
                (Some(coll), replaced)
            }
            Change::SetOptions { coll } => {
                if newer(&coll.ns) {
                    all.insert(coll.ns.clone(), coll.clone());
                }
                (Some(coll), Vec::new())
            }
        };
        drop((all, last));
        self.drop_tables(&freed);
        published
    }

    /// Forget a change whose transaction rolled back: drop the tables it
    /// created.
    pub fn abandon(&self, pending: Pending) {
        pending.abandon_on(&self.engine);
    }

    /// Drop tables no committed entry names; one that cannot be dropped
    /// now is dropped at the next open (invariant 1).
    pub(crate) fn drop_tables(&self, names: &[String]) {
        for name in names {
            if let Err(e) = self.engine.drop_table(name) {
                tracing::warn!(table = %name, error = %e, "table left for the next open to drop");
            }
        }
    }

    /// Run one DDL change in a transaction of its own and publish it;
    /// a write conflict with another change begins again. The wrappers
    /// are serialized, so one's lookups see every change of another.
    fn own_txn(
        &self,
        wait: &ConflictWait,
        mut change: impl FnMut(&Txn) -> Result<Option<Pending>, DocError>,
    ) -> Result<Option<Arc<Collection>>, DocError> {
        loop {
            // Held for one attempt: a conflict with a caller's transaction
            // that holds the entry waits outside it.
            let serial = self.ddl.lock();
            let txn = self.engine.begin(TxnOptions::default())?;
            let pending = match change(&txn) {
                Ok(Some(pending)) => pending,
                Ok(None) => return Ok(None),
                Err(DocError::Storage(e)) if e.is_retryable() => {
                    drop((txn, serial));
                    wait.pause(&e)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match txn.commit() {
                Ok(ts) => return Ok(self.publish(pending, ts)),
                Err(e) => {
                    self.abandon(pending);
                    if !e.is_retryable() {
                        return Err(e.into());
                    }
                    drop(serial);
                    wait.pause(&e)?;
                }
            }
        }
    }

    /// Create a collection; fails if it exists.
    pub fn create(&self, ns: &Namespace, options: Document) -> Result<Arc<Collection>, DocError> {
        self.create_waiting(ns, options, &ConflictWait::default())
    }

    /// [`Catalog::create`], a conflict (another creator's transaction)
    /// waited on as `wait` says.
    pub fn create_waiting(
        &self,
        ns: &Namespace,
        options: Document,
        wait: &ConflictWait,
    ) -> Result<Arc<Collection>, DocError> {
        let made = self.own_txn(wait, |txn| self.create_in(txn, ns, options.clone()).map(Some))?;
        Ok(made.expect("a create publishes its collection"))
    }

    /// The collection, created (with default options) if missing, as an
    /// insert does.
    pub fn get_or_create(&self, ns: &Namespace) -> Result<Arc<Collection>, DocError> {
        self.get_or_create_waiting(ns, &ConflictWait::default())
    }

    /// [`Catalog::get_or_create`], a conflict waited on as `wait` says.
    pub fn get_or_create_waiting(&self, ns: &Namespace, wait: &ConflictWait) -> Result<Arc<Collection>, DocError> {
        for _ in 0..GET_OR_CREATE_TRIES {
            if let Some(c) = self.get(ns) {
                return Ok(c);
            }
            match self.create_waiting(ns, Document::new(), wait) {
                // Created by another writer; visible once it publishes.
                Err(DocError::NamespaceExists(_)) => std::thread::sleep(std::time::Duration::from_millis(1)),
                other => return other,
            }
        }
        // Committed but never published (its creator failed after the
        // commit): the next open loads it.
        Err(DocError::NamespaceExists(ns.to_string()))
    }

    /// Drop a collection; returns whether it existed.
    pub fn drop(&self, ns: &Namespace) -> Result<bool, DocError> {
        let mut existed = false;
        self.own_txn(&ConflictWait::default(), |txn| {
            let pending = self.drop_in(txn, ns)?;
            existed = pending.is_some();
            Ok(pending)
        })?;
        Ok(existed)
    }

    /// Rename a collection (see [`Catalog::rename_in`]).
    pub fn rename(&self, from: &Namespace, to: &Namespace, drop_target: bool) -> Result<(), DocError> {
        self.own_txn(&ConflictWait::default(), |txn| self.rename_in(txn, from, to, drop_target).map(Some)).map(|_| ())
    }

    /// Replace a collection's options (see [`Catalog::set_options_in`]).
    pub fn set_options(&self, ns: &Namespace, options: Document) -> Result<(), DocError> {
        self.own_txn(&ConflictWait::default(), |txn| self.set_options_in(txn, ns, options.clone()).map(Some))
            .map(|_| ())
    }
}

impl Collection {
    /// This collection under another name or with other options: the same
    /// tables, record-id sequence and capped state, so a writer that got
    /// the collection before the change shares them.
    fn renamed(&self, ns: Namespace, options: Document) -> Collection {
        Collection {
            ns,
            options,
            records: self.records.clone(),
            id_index: self.id_index.clone(),
            id_view: self.id_view.clone(),
            id_collation: self.id_collation.clone(),
            long_ids: self.long_ids,
            next_record: self.next_record.clone(),
            capped: self.capped.clone(),
            indexes: self.indexes.clone(),
            meta: self.meta.clone(),
        }
    }
}
