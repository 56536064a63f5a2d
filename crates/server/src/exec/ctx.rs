//! A command's view of the server: the shared state, and the transaction
//! its reads and writes go through when it runs inside a multi-document
//! transaction. Passed where `&Shared` was (it dereferences to it), so
//! that every read path takes its reader from one place ([`Ctx::reader`]).
//!
//! Invariant: a command inside a transaction reads only through
//! [`Ctx::reader`] (its snapshot and its own writes) and writes only into
//! [`Ctx::txn`]; outside one it reads the newest committed version (or,
//! at readConcern level snapshot, [`Ctx::snapshot`]; such a command does
//! not write) and each write commits in a storage transaction of its own.

use crate::exec::call::Place;
use crate::server::Shared;
use crate::transactions::InTxn;
use doc::catalog::ConflictWait;
use doc::catalog::{Collection, DocError, Namespace};
use std::ops::Deref;
use std::sync::Arc;
use storage::{Reader, Txn};

pub struct Ctx<'a> {
    shared: &'a Shared,
    txn: Option<Arc<InTxn>>,
    /// Outside a transaction, the snapshot a read at readConcern level
    /// `"snapshot"` reads (`None`: the newest committed data).
    snapshot: Option<Arc<Txn>>,
    /// How its writes outside a transaction wait on conflicts, and how
    /// many they met.
    pub conflicts: ConflictWait,
}

impl<'a> Ctx<'a> {
    /// Outside any transaction.
    pub fn new(shared: &'a Shared) -> Ctx<'a> {
        Ctx { shared, txn: None, snapshot: None, conflicts: ConflictWait::default() }
    }

    /// Outside any transaction, its writes waiting on conflicts until
    /// `deadline` at most (the command's `maxTimeMS`), on a thread at
    /// `place` (a network thread's other connections are handed off
    /// before a sleep).
    pub fn until(
        shared: &'a Shared,
        deadline: Option<std::time::Instant>,
        place: Place,
        killed: Arc<std::sync::atomic::AtomicBool>,
    ) -> Ctx<'a> {
        let mut conflicts = ConflictWait::until(deadline, place.sleeper());
        conflicts.killed = Some(killed);
        Ctx { shared, txn: None, snapshot: None, conflicts }
    }

    /// Inside the multi-document transaction `txn`.
    pub fn in_txn(shared: &'a Shared, txn: Arc<InTxn>) -> Ctx<'a> {
        Ctx { shared, txn: Some(txn), snapshot: None, conflicts: ConflictWait::default() }
    }

    /// Reading at the snapshot `txn` (a read-only transaction) instead
    /// of the newest committed data; outside transactions only.
    pub fn at_snapshot(mut self, txn: Arc<Txn>) -> Ctx<'a> {
        assert!(self.txn.is_none(), "a transaction reads its own snapshot");
        self.snapshot = Some(txn);
        self
    }

    /// The snapshot a read at level `"snapshot"` reads, if it is one.
    pub fn snapshot(&self) -> Option<&Arc<Txn>> {
        self.snapshot.as_ref()
    }

    pub fn shared(&self) -> &'a Shared {
        self.shared
    }

    /// The multi-document transaction the command runs in, if any.
    pub fn txn(&self) -> Option<&Arc<Txn>> {
        self.txn.as_ref().map(|t| &t.txn)
    }

    /// The open transaction as its statements see it, if any.
    pub fn in_transaction(&self) -> Option<&InTxn> {
        self.txn.as_deref()
    }

    /// The collection `ns` as the command sees it (inside a transaction,
    /// one the transaction created too); `None`: none.
    pub fn collection(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        match &self.txn {
            Some(t) => t.collection(&self.shared.catalog, ns),
            None => self.shared.catalog.get(ns),
        }
    }

    /// The collection `ns`, created (with default options) if missing, as
    /// an insert does: inside a transaction, created in it.
    pub fn collection_or_create(&self, ns: &Namespace) -> Result<Arc<Collection>, DocError> {
        match &self.txn {
            Some(t) => match t.collection(&self.shared.catalog, ns) {
                Some(c) => Ok(c),
                None => t.create(&self.shared.catalog, ns, bson::Document::new()),
            },
            None => self.shared.catalog.get_or_create_waiting(ns, &self.conflicts),
        }
    }

    /// Create the collection `ns` with `options` (inside a transaction,
    /// in it).
    pub fn create_collection(&self, ns: &Namespace, options: bson::Document) -> Result<Arc<Collection>, DocError> {
        match &self.txn {
            Some(t) => t.create(&self.shared.catalog, ns, options),
            None => self.shared.catalog.create_waiting(ns, options, &self.conflicts),
        }
    }

    /// The snapshot the command reads at (`None`: the newest data).
    pub fn read_ts(&self) -> Option<u64> {
        match (&self.txn, &self.snapshot) {
            (Some(t), _) => Some(t.txn.read_ts()),
            (None, Some(s)) => Some(s.read_ts()),
            (None, None) => None,
        }
    }

    /// Where the command's reads look.
    pub fn reader(&self) -> Reader {
        match (&self.txn, &self.snapshot) {
            (Some(t), _) => Reader::Txn(t.txn.clone()),
            (None, Some(s)) => Reader::Txn(s.clone()),
            (None, None) => Reader::Latest(self.shared.catalog.engine().clone()),
        }
    }
}

impl Deref for Ctx<'_> {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        self.shared
    }
}
