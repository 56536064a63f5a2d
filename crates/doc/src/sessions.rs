//! Retryable writes' statement records (MongoDB keeps these in
//! `config.transactions` and the oplog): which statements of a session's
//! retryable write committed, and what each answered, so that a driver's
//! retry of the same `(lsid, txnNumber)` returns those answers instead of
//! writing again.
//!
//! One storage table, `_sessions`:
//! - key = session id (the 16 bytes of `lsid.id`) ++ txnNumber (i64,
//!   big-endian, sign bit flipped) ++ first statement id (i32, the same);
//! - value = BSON `{ids: [stmtId, ...], o: <outcome>, t: <date>}`: the
//!   statements one storage transaction committed under that txnNumber,
//!   the answer they share (an insert's is empty), and when.
//!
//! Invariants:
//! 1. A record is written by the storage transaction that commits its
//!    statements ([`Stamp`]), so after a crash a statement is recorded iff
//!    its write is durable.
//! 2. Writing a record of txnNumber `n` deletes the session's records of
//!    every txnNumber below `n`, in the same transaction.
//! 3. Records older than the session timeout are reaped ([`Sessions::reap`]).

use crate::catalog::DocError;
use bson::{doc, Bson, Document};
use std::collections::HashMap;
use std::ops::Bound;
use storage::{Engine, StorageError, Table, TableConfig, Txn};

const SESSIONS: &str = "_sessions";

/// A session's id: the UUID bytes of `lsid.id`.
pub type SessionId = [u8; 16];

/// Something written in the same storage transaction as a write: the
/// write calls it once per transaction it commits, with the indexes (in
/// the write's own order) of the statements that transaction commits.
pub trait Stamp {
    fn write(&self, txn: &Txn, done: &[usize]) -> Result<(), StorageError>;
}

/// The statement-record table.
pub struct Sessions {
    table: Table,
}

fn flip64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn flip32(v: i32) -> [u8; 4] {
    ((v as u32) ^ (1 << 31)).to_be_bytes()
}

fn txn_prefix(lsid: &SessionId, txn_number: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(28);
    k.extend_from_slice(lsid);
    k.extend_from_slice(&flip64(txn_number));
    k
}

fn txn_number_of(key: &[u8]) -> Option<i64> {
    let b: [u8; 8] = key.get(16..24)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

fn corrupt(e: impl std::fmt::Display) -> DocError {
    DocError::Corrupt(format!("statement record: {e}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Sessions {
    /// Open the table, creating it if missing.
    pub fn open(engine: &Engine) -> Result<Sessions, DocError> {
        let table = match engine.table(SESSIONS) {
            Ok(t) => t,
            Err(StorageError::TableNotFound(_)) => engine.create_table(SESSIONS, TableConfig::default())?,
            Err(e) => return Err(e.into()),
        };
        Ok(Sessions { table })
    }

    /// The highest txnNumber the session has records of.
    pub fn latest_txn_number(&self, engine: &Engine, lsid: &SessionId) -> Result<Option<i64>, DocError> {
        let mut c = engine.cursor(&self.table)?;
        c.set_bounds(Bound::Included(lsid.to_vec()), Bound::Excluded(txn_prefix(lsid, i64::MAX)));
        Ok(c.last()?.and_then(|(k, _)| txn_number_of(&k)))
    }

    /// The statements of `(lsid, txn_number)` that committed, each with
    /// its recorded answer.
    pub fn executed(
        &self,
        engine: &Engine,
        lsid: &SessionId,
        txn_number: i64,
    ) -> Result<HashMap<i32, Document>, DocError> {
        let mut c = engine.cursor(&self.table)?;
        c.set_bounds(Bound::Included(txn_prefix(lsid, txn_number)), Bound::Excluded(txn_prefix(lsid, txn_number + 1)));
        let mut out = HashMap::new();
        let mut entry = c.first()?;
        while let Some((_, value)) = entry {
            let record = Document::from_reader(&value[..]).map_err(corrupt)?;
            let outcome = record.get_document("o").map_err(corrupt)?;
            for id in record.get_array("ids").map_err(corrupt)? {
                let Bson::Int32(id) = id else { return Err(corrupt("a statement id is not an int")) };
                out.insert(*id, outcome.clone());
            }
            entry = c.next()?;
        }
        Ok(out)
    }

    /// The [`Stamp`] recording statements of `(lsid, txn_number)`: the
    /// write's statement `i` has id `stmt_ids[i]`; they answer `outcome`.
    pub fn record<'a>(
        &'a self,
        lsid: SessionId,
        txn_number: i64,
        stmt_ids: &'a [i32],
        outcome: Document,
    ) -> Record<'a> {
        Record { sessions: self, lsid, txn_number, stmt_ids, outcome }
    }

    /// Delete records written before `cutoff_ms` (milliseconds since the
    /// epoch); returns how many.
    pub fn reap(&self, engine: &Engine, cutoff_ms: i64) -> Result<usize, DocError> {
        let mut old = Vec::new();
        let mut c = engine.cursor(&self.table)?;
        let mut entry = c.first()?;
        while let Some((key, value)) = entry {
            let record = Document::from_reader(&value[..]).map_err(corrupt)?;
            if record.get_datetime("t").map_or(true, |t| t.timestamp_millis() < cutoff_ms) {
                old.push(key.to_vec());
            }
            entry = c.next()?;
        }
        for key in &old {
            engine.delete(&self.table, key)?;
        }
        Ok(old.len())
    }
}

/// A statement record to write with the statements it names.
pub struct Record<'a> {
    sessions: &'a Sessions,
    lsid: SessionId,
    txn_number: i64,
    stmt_ids: &'a [i32],
    outcome: Document,
}

impl Stamp for Record<'_> {
    fn write(&self, txn: &Txn, done: &[usize]) -> Result<(), StorageError> {
        let table = &self.sessions.table;
        let Some(&first) = done.first() else { return Ok(()) };
        // Invariant 2: the session's older txnNumbers are over.
        let mut stale = Vec::new();
        {
            let mut c = txn.cursor(table)?;
            c.set_bounds(Bound::Included(self.lsid.to_vec()), Bound::Excluded(txn_prefix(&self.lsid, self.txn_number)));
            let mut entry = c.first()?;
            while let Some((key, _)) = entry {
                stale.push(key.to_vec());
                entry = c.next()?;
            }
        }
        for key in &stale {
            txn.delete(table, key)?;
        }
        let ids: Vec<i32> = done.iter().map(|&i| self.stmt_ids[i]).collect();
        let mut key = txn_prefix(&self.lsid, self.txn_number);
        key.extend_from_slice(&flip32(self.stmt_ids[first]));
        let value = doc! { "ids": ids, "o": self.outcome.clone(), "t": bson::DateTime::from_millis(now_ms()) };
        txn.put(table, &key, &bson::to_vec(&value).expect("BSON encodes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::{Config, TxnOptions};

    fn engine() -> (tempfile::TempDir, Engine) {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        (dir, e)
    }

    fn commit(e: &Engine, stamp: &dyn Stamp, done: &[usize]) {
        let txn = e.begin(TxnOptions::default()).unwrap();
        stamp.write(&txn, done).unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn records_are_found_per_txn_number_and_a_newer_one_clears_older() {
        let (_d, e) = engine();
        let s = Sessions::open(&e).unwrap();
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), None);
        let ids = [0, 1, 2, 3];
        commit(&e, &s.record(a, 5, &ids, Document::new()), &[0, 1]);
        commit(&e, &s.record(a, 5, &ids, Document::new()), &[3]);
        commit(&e, &s.record(b, 9, &ids[..1], doc! { "n": 1 }), &[0]);
        let got = s.executed(&e, &a, 5).unwrap();
        let mut keys: Vec<i32> = got.keys().copied().collect();
        keys.sort();
        assert_eq!(keys, vec![0, 1, 3]);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), Some(5));
        assert!(s.executed(&e, &a, 4).unwrap().is_empty());
        assert!(s.executed(&e, &a, 6).unwrap().is_empty());
        // txnNumber 6 on session a drops a's 5 and leaves b alone.
        commit(&e, &s.record(a, 6, &ids[..1], doc! { "n": 1 }), &[0]);
        assert!(s.executed(&e, &a, 5).unwrap().is_empty());
        assert_eq!(s.executed(&e, &a, 6).unwrap()[&0], doc! { "n": 1 });
        assert_eq!(s.executed(&e, &b, 9).unwrap()[&0], doc! { "n": 1 });
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), Some(6));
        // Reaping by age.
        assert_eq!(s.reap(&e, now_ms() - 60_000).unwrap(), 0);
        assert_eq!(s.reap(&e, now_ms() + 1).unwrap(), 2);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), None);
    }

    #[test]
    fn a_record_survives_restart_with_its_write() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(dir.path(), Config::default()).unwrap();
            let s = Sessions::open(&e).unwrap();
            commit(&e, &s.record([7; 16], 0, &[4], doc! { "n": 1 }), &[0]);
            e.close().unwrap();
        }
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        let s = Sessions::open(&e).unwrap();
        assert_eq!(s.executed(&e, &[7; 16], 0).unwrap()[&4], doc! { "n": 1 });
    }
}
