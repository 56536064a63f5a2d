//! Retryable writes' statement records (MongoDB keeps these in
//! `config.transactions` and the oplog): which statements of a session's
//! retryable write committed, and what each answered, so that a driver's
//! retry of the same `(lsid, txnNumber)` returns those answers instead of
//! writing again.
//!
//! One storage table, `_sessions`:
//! - key = session id (the 16 bytes of `lsid.id`) ++ the first statement
//!   id of the record (i32, big-endian, sign bit flipped);
//! - value = BSON `{n: txnNumber, ids: [stmtId, ...], o: <outcome>, t:
//!   <date>}`: the statements one storage transaction committed under
//!   that txnNumber, the answer they share (an insert's is empty), and
//!   when.
//!
//! The txnNumber is in the value, not the key, so the common case — one
//! statement per command, statement id 0 — overwrites the session's
//! previous record with one put: no scan and no delete on the write path.
//! Records of older txnNumbers under other keys are ignored by readers and
//! deleted by [`Sessions::reap`].
//!
//! Invariants:
//! 1. A record is written by the storage transaction that commits its
//!    statements ([`Stamp`]), so after a crash a statement is recorded iff
//!    its write is durable.
//! 2. Only records of the txnNumber asked for count ([`Sessions::executed`]).
//! 3. Records older than the session timeout, or of a txnNumber below
//!    their session's newest, are reaped ([`Sessions::reap`]).

use crate::catalog::DocError;
use bson::{doc, Bson, Document};
use std::collections::HashMap;
use std::ops::Bound;
use storage::{Engine, StorageError, Table, TableConfig, Txn, TxnOptions};

const SESSIONS: &str = "_sessions";

/// A session's id: the UUID bytes of `lsid.id`.
pub type SessionId = [u8; 16];

/// Something written in the same storage transaction as a write: the
/// write calls it once per transaction it commits, with the indexes (in
/// the write's own order) of the statements that transaction commits.
pub trait Stamp {
    fn write(&self, txn: &Txn, done: &[usize]) -> Result<(), StorageError>;
}

/// The statement id under which a committed multi-document transaction
/// records its commit (a statement id no driver sends: they count from 0).
pub const TXN_COMMIT_STMT: i32 = i32::MIN;

/// The statement-record table.
pub struct Sessions {
    table: Table,
}

fn record_key(lsid: &SessionId, stmt_id: i32) -> Vec<u8> {
    let mut k = Vec::with_capacity(20);
    k.extend_from_slice(lsid);
    k.extend_from_slice(&((stmt_id as u32) ^ (1 << 31)).to_be_bytes());
    k
}

/// The bounds of one session's records.
fn session_bounds(lsid: &SessionId) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (Bound::Included(record_key(lsid, i32::MIN)), Bound::Included(record_key(lsid, i32::MAX)))
}

/// A record's txnNumber and document.
fn decode_record(value: &[u8]) -> Result<(i64, Document), DocError> {
    let record = crate::bson_bytes::decode(value).map_err(corrupt)?;
    Ok((record.get_i64("n").map_err(corrupt)?, record))
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
        let mut newest = None;
        self.each_record(engine, lsid, |n, _| {
            newest = newest.max(Some(n));
            Ok(())
        })?;
        Ok(newest)
    }

    /// Call `f` with the txnNumber and record of each of the session's
    /// statement records.
    fn each_record(
        &self,
        engine: &Engine,
        lsid: &SessionId,
        mut f: impl FnMut(i64, &Document) -> Result<(), DocError>,
    ) -> Result<(), DocError> {
        let mut c = engine.cursor(&self.table)?;
        let (lower, upper) = session_bounds(lsid);
        c.set_bounds(lower, upper);
        let mut entry = c.first()?;
        while let Some((_, value)) = entry {
            let (n, record) = decode_record(&value)?;
            f(n, &record)?;
            entry = c.next()?;
        }
        Ok(())
    }

    /// The statements of `(lsid, txn_number)` that committed, each with
    /// its recorded answer.
    pub fn executed(
        &self,
        engine: &Engine,
        lsid: &SessionId,
        txn_number: i64,
    ) -> Result<HashMap<i32, Document>, DocError> {
        let mut out = HashMap::new();
        self.each_record(engine, lsid, |n, record| {
            if n != txn_number {
                return Ok(());
            }
            let outcome = record.get_document("o").map_err(corrupt)?;
            for id in record.get_array("ids").map_err(corrupt)? {
                let Bson::Int32(id) = id else { return Err(corrupt("a statement id is not an int")) };
                out.insert(*id, outcome.clone());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The [`Stamp`] recording statements of `(lsid, txn_number)`: the
    /// write's statement `i` has id `stmt_ids[i]`; they answer `outcome`.
    /// An outcome BSON cannot hold (a name with a null byte, projected by
    /// findAndModify) is refused here, before anything is written.
    pub fn record<'a>(
        &'a self,
        lsid: SessionId,
        txn_number: i64,
        stmt_ids: &'a [i32],
        outcome: Document,
    ) -> Result<Record<'a>, crate::bson_bytes::EncodeError> {
        crate::bson_bytes::encode(&outcome)?;
        Ok(Record { sessions: self, lsid, txn_number, stmt_ids, outcome })
    }

    /// Whether the session's multi-document transaction `txn_number`
    /// committed (its commit record, [`TXN_COMMIT_STMT`]).
    pub fn committed(&self, engine: &Engine, lsid: &SessionId, txn_number: i64) -> Result<bool, DocError> {
        Ok(self.executed(engine, lsid, txn_number)?.contains_key(&TXN_COMMIT_STMT))
    }

    /// Delete records written before `cutoff_ms` (milliseconds since the
    /// epoch) and records of a txnNumber below their session's newest;
    /// returns how many. A record rewritten meanwhile is left alone.
    pub fn reap(&self, engine: &Engine, cutoff_ms: i64) -> Result<usize, DocError> {
        struct Stored {
            key: Vec<u8>,
            n: i64,
            /// When it was written (milliseconds).
            t: i64,
        }
        let mut newest: HashMap<SessionId, i64> = HashMap::new();
        let mut stored = Vec::new();
        let mut c = engine.cursor(&self.table)?;
        let mut entry = c.first()?;
        while let Some((key, value)) = entry {
            let (n, record) = decode_record(&value)?;
            let lsid: SessionId = key.get(..16).and_then(|k| k.try_into().ok()).ok_or_else(|| corrupt("short key"))?;
            let top = newest.entry(lsid).or_insert(n);
            *top = (*top).max(n);
            let t = record.get_datetime("t").map_or(i64::MIN, |t| t.timestamp_millis());
            stored.push(Stored { key: key.to_vec(), n, t });
            entry = c.next()?;
        }
        let mut reaped = 0;
        for Stored { key, n, t } in stored {
            if t >= cutoff_ms && Some(&n) == newest.get(&key[..16]) {
                continue;
            }
            let txn = engine.begin(TxnOptions { skip_journal_sync: true, ..TxnOptions::default() })?;
            // Rewritten meanwhile (a newer statement of the session): kept.
            let unchanged = match txn.get(&self.table, &key)? {
                Some(v) => decode_record(&v).is_ok_and(|(n2, r)| {
                    n2 == n && r.get_datetime("t").map_or(i64::MIN, |t| t.timestamp_millis()) == t
                }),
                None => false,
            };
            let done = if unchanged { txn.delete(&self.table, &key).and_then(|_| txn.commit()) } else { Ok(0) };
            match done {
                Ok(_) => reaped += usize::from(unchanged),
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(reaped)
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
        let Some(&first) = done.first() else { return Ok(()) };
        let ids: Vec<i32> = done.iter().map(|&i| self.stmt_ids[i]).collect();
        let value = doc! {
            "n": self.txn_number,
            "ids": ids,
            "o": self.outcome.clone(),
            "t": bson::DateTime::from_millis(now_ms()),
        };
        let key = record_key(&self.lsid, self.stmt_ids[first]);
        // `record` checked that the outcome encodes; the rest is ours.
        let bytes = crate::bson_bytes::encode(&value).expect("a statement record encodes");
        txn.put(&self.sessions.table, &key, &bytes)
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
    fn records_are_found_per_txn_number_and_older_ones_are_reaped() {
        let (_d, e) = engine();
        let s = Sessions::open(&e).unwrap();
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), None);
        let ids = [0, 1, 2, 3];
        commit(&e, &s.record(a, 5, &ids, Document::new()).unwrap(), &[0, 1]);
        commit(&e, &s.record(a, 5, &ids, Document::new()).unwrap(), &[3]);
        commit(&e, &s.record(b, 9, &ids[..1], doc! { "n": 1 }).unwrap(), &[0]);
        let got = s.executed(&e, &a, 5).unwrap();
        let mut keys: Vec<i32> = got.keys().copied().collect();
        keys.sort();
        assert_eq!(keys, vec![0, 1, 3]);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), Some(5));
        assert!(s.executed(&e, &a, 4).unwrap().is_empty());
        assert!(s.executed(&e, &a, 6).unwrap().is_empty());
        // txnNumber 6 on session a overwrites 5's record at statement 0;
        // 5's record at statement 3 lingers until reaped (the server
        // refuses txnNumber 5 by now); b is left alone.
        commit(&e, &s.record(a, 6, &ids[..1], doc! { "n": 1 }).unwrap(), &[0]);
        assert_eq!(s.executed(&e, &a, 5).unwrap().keys().collect::<Vec<_>>(), vec![&3]);
        assert_eq!(s.executed(&e, &a, 6).unwrap().len(), 1);
        assert_eq!(s.executed(&e, &a, 6).unwrap()[&0], doc! { "n": 1 });
        assert_eq!(s.executed(&e, &b, 9).unwrap()[&0], doc! { "n": 1 });
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), Some(6));
        let records = |s: &Sessions| {
            let mut c = e.cursor(&s.table).unwrap();
            let (mut n, mut entry) = (0, c.first().unwrap());
            while entry.is_some() {
                n += 1;
                entry = c.next().unwrap();
            }
            n
        };
        assert_eq!(records(&s), 3);
        // Reaping: the lingering record of txnNumber 5 goes at once, the
        // rest by age.
        assert_eq!(s.reap(&e, now_ms() - 60_000).unwrap(), 1);
        assert!(s.executed(&e, &a, 5).unwrap().is_empty());
        assert_eq!(s.executed(&e, &a, 6).unwrap()[&0], doc! { "n": 1 });
        assert_eq!(s.reap(&e, now_ms() + 1).unwrap(), 2);
        assert_eq!(s.latest_txn_number(&e, &a).unwrap(), None);
    }

    #[test]
    fn a_record_survives_restart_with_its_write() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(dir.path(), Config::default()).unwrap();
            let s = Sessions::open(&e).unwrap();
            commit(&e, &s.record([7; 16], 0, &[4], doc! { "n": 1 }).unwrap(), &[0]);
            e.close().unwrap();
        }
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        let s = Sessions::open(&e).unwrap();
        assert_eq!(s.executed(&e, &[7; 16], 0).unwrap()[&4], doc! { "n": 1 });
    }
}
