//! Where a read looks: the newest committed version (an [`Engine`] read
//! outside any transaction) or a transaction's snapshot with its own
//! writes (a [`Txn`]). Layers above take a [`Read`] so that one read path
//! serves both; a [`Reader`] is the owned form an iterator can keep.
//!
//! Invariant: a read through a transaction goes through `Txn::get` and
//! `TxnCursor`, so that it sees the transaction's writes and, under
//! serializable isolation, leaves its SIREAD marks.

use crate::btree::{Cursor, Entry};
use crate::engine::{Engine, Table};
use crate::error::Result;
use crate::txn::{Txn, TxnCursor};
use bytes::Bytes;
use std::ops::Bound;
use std::sync::Arc;

/// Something that reads tables: the engine (newest committed version) or
/// a transaction.
pub trait Read {
    fn get(&self, t: &Table, key: &[u8]) -> Result<Option<Bytes>>;
    fn cursor(&self, t: &Table) -> Result<ReadCursor<'_>>;
    /// The transaction reads go through, if any.
    fn txn(&self) -> Option<&Txn>;
}

impl Read for Engine {
    fn get(&self, t: &Table, key: &[u8]) -> Result<Option<Bytes>> {
        Engine::get(self, t, key)
    }

    fn cursor(&self, t: &Table) -> Result<ReadCursor<'_>> {
        Ok(ReadCursor::Latest(Engine::cursor(self, t)?))
    }

    fn txn(&self) -> Option<&Txn> {
        None
    }
}

impl Read for Txn {
    fn get(&self, t: &Table, key: &[u8]) -> Result<Option<Bytes>> {
        Txn::get(self, t, key)
    }

    fn cursor(&self, t: &Table) -> Result<ReadCursor<'_>> {
        Ok(ReadCursor::Txn(Box::new(Txn::cursor(self, t)?)))
    }

    fn txn(&self) -> Option<&Txn> {
        Some(self)
    }
}

/// An owned [`Read`]: what an iterator that outlives its caller's borrow
/// keeps.
#[derive(Clone)]
pub enum Reader {
    Latest(Engine),
    Txn(Arc<Txn>),
}

impl Reader {
    fn inner(&self) -> &dyn Read {
        match self {
            Reader::Latest(e) => e,
            Reader::Txn(t) => &**t,
        }
    }
}

impl Read for Reader {
    fn get(&self, t: &Table, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner().get(t, key)
    }

    fn cursor(&self, t: &Table) -> Result<ReadCursor<'_>> {
        self.inner().cursor(t)
    }

    fn txn(&self) -> Option<&Txn> {
        self.inner().txn()
    }
}

/// A cursor from a [`Read`].
pub enum ReadCursor<'r> {
    Latest(Cursor),
    Txn(Box<TxnCursor<'r>>),
}

// `next`/`prev` are fallible moves, not `Iterator`s.
#[allow(clippy::should_implement_trait)]
impl ReadCursor<'_> {
    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        match self {
            ReadCursor::Latest(c) => c.set_bounds(lower, upper),
            ReadCursor::Txn(c) => c.set_bounds(lower, upper),
        }
    }

    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        match self {
            ReadCursor::Latest(c) => c.seek(key),
            ReadCursor::Txn(c) => c.seek(key),
        }
    }

    pub fn first(&mut self) -> Result<Option<Entry>> {
        match self {
            ReadCursor::Latest(c) => c.first(),
            ReadCursor::Txn(c) => c.first(),
        }
    }

    pub fn last(&mut self) -> Result<Option<Entry>> {
        match self {
            ReadCursor::Latest(c) => c.last(),
            ReadCursor::Txn(c) => c.last(),
        }
    }

    pub fn next(&mut self) -> Result<Option<Entry>> {
        match self {
            ReadCursor::Latest(c) => c.next(),
            ReadCursor::Txn(c) => c.next(),
        }
    }

    pub fn prev(&mut self) -> Result<Option<Entry>> {
        match self {
            ReadCursor::Latest(c) => c.prev(),
            ReadCursor::Txn(c) => c.prev(),
        }
    }
}
