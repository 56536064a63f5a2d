//! Capped collections: their limits, and trimming the oldest documents
//! in the transaction of the insert that overflows them.

use super::*;
use crate::index::Index;
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::sync::Arc;
use storage::Txn;

/// A capped collection's limits (`size` bytes of BSON, `max` documents)
/// and what it holds. Every write to the collection holds `used` from
/// before it reads until after it commits, so capped writes serialize (as
/// MongoDB's do) and `used` is exact.
pub struct Capped {
    pub size: u64,
    pub max: Option<u64>,
    /// Bytes and documents stored.
    pub(crate) used: Mutex<(u64, u64)>,
}

impl Capped {
    /// The limits in a collection's options, if it is capped.
    pub(crate) fn of(options: &Document) -> Option<(u64, Option<u64>)> {
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

    pub(crate) fn over(&self, (bytes, count): (u64, u64)) -> bool {
        bytes > self.size || self.max.is_some_and(|m| count > m)
    }
}

impl Collection {
    /// For a capped collection: hold its write lock.
    pub(crate) fn capped_lock(&self) -> Option<parking_lot::MutexGuard<'_, (u64, u64)>> {
        self.capped.as_ref().map(|c| c.used.lock())
    }

    /// In `txn`, delete the oldest documents until the capped collection
    /// holding `used` is within its limits; returns what it then holds.
    pub(crate) fn trim_capped(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        capped: &Capped,
        mut used: (u64, u64),
    ) -> Result<(u64, u64), DocError> {
        let mut victims = Vec::new();
        {
            let mut c = txn.cursor(&self.records)?;
            let mut entry = c.first()?;
            while capped.over(used) {
                let Some((key, value)) = entry else { break };
                let doc = decode(&value)?;
                let id = doc.get("_id").ok_or_else(|| DocError::Corrupt("a capped document without _id".into()))?;
                victims.push((key.to_vec(), self.id_key(id), doc));
                used = (used.0.saturating_sub(value.len() as u64), used.1.saturating_sub(1));
                entry = c.next()?;
            }
        }
        for (rid, id_key, doc) in victims {
            txn.delete(&self.records, &rid)?;
            txn.delete(&self.id_index, &id_key)?;
            self.index_delete(txn, ixs, record_id(&rid)?, &doc)?;
        }
        Ok(used)
    }
}
