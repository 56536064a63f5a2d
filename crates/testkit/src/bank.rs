//! A transfer workload for crash tests with concurrent transactions.
//!
//! Two tables of accounts (`acct_a`, `acct_b`, [`ACCOUNTS`] each, starting
//! at [`OPENING`]) and a `ledger` table. A transfer moves an amount between
//! two accounts, possibly in different tables, and writes a ledger entry
//! `(thread, seq) -> (from, to, amount)` in the same transaction. So after
//! any crash: every acknowledged entry is there, and every balance equals
//! the opening balance plus what the surviving ledger entries say: a
//! transfer is all there or not at all.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use storage::{Engine, Isolation, StorageError, Table, TableConfig, TxnOptions};

pub const ACCOUNTS: u32 = 40;
pub const OPENING: i64 = 1000;

pub struct Bank {
    pub tables: [Table; 2],
    pub ledger: Table,
}

fn small_pages() -> TableConfig {
    TableConfig { leaf_page_max_bytes: 4096, internal_page_max_bytes: 1024, ..TableConfig::default() }
}

fn account_key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

pub fn ledger_key(thread: u32, seq: u64) -> Vec<u8> {
    [thread.to_be_bytes().as_slice(), &seq.to_be_bytes()].concat()
}

/// (table index, account) of each side, and the amount.
pub type Transfer = ((usize, u32), (usize, u32), i64);

fn encode(t: &Transfer) -> Vec<u8> {
    let mut v = Vec::new();
    for (tab, acct) in [t.0, t.1] {
        v.push(tab as u8);
        v.extend_from_slice(&acct.to_be_bytes());
    }
    v.extend_from_slice(&t.2.to_le_bytes());
    v
}

fn decode(v: &[u8]) -> Transfer {
    let side = |b: &[u8]| (b[0] as usize, u32::from_be_bytes(b[1..5].try_into().unwrap()));
    (side(&v[0..5]), side(&v[5..10]), i64::from_le_bytes(v[10..18].try_into().unwrap()))
}

impl Bank {
    /// Open the bank's tables, creating and funding them on first use.
    pub fn open(engine: &Engine) -> storage::Result<Bank> {
        if let Ok(ledger) = engine.table("ledger") {
            return Ok(Bank { tables: [engine.table("acct_a")?, engine.table("acct_b")?], ledger });
        }
        let a = engine.table("acct_a").or_else(|_| engine.create_table("acct_a", small_pages()))?;
        let b = engine.table("acct_b").or_else(|_| engine.create_table("acct_b", small_pages()))?;
        let txn = engine.begin(TxnOptions::default())?;
        for t in [&a, &b] {
            for i in 0..ACCOUNTS {
                txn.put(t, &account_key(i), &OPENING.to_le_bytes())?;
            }
        }
        txn.commit()?;
        // The ledger appears last: its presence says the accounts are funded.
        let ledger = engine.create_table("ledger", small_pages())?;
        Ok(Bank { tables: [a, b], ledger })
    }

    /// The next sequence number of `thread`: one past its last ledger entry.
    pub fn next_seq(&self, engine: &Engine, thread: u32) -> storage::Result<u64> {
        let mut c = engine.cursor(&self.ledger)?;
        c.set_bounds(
            std::ops::Bound::Included(ledger_key(thread, 0)),
            std::ops::Bound::Included(ledger_key(thread, u64::MAX)),
        );
        Ok(c.last()?.map(|(k, _)| u64::from_be_bytes(k[4..12].try_into().unwrap()) + 1).unwrap_or(0))
    }

    /// Run transfer `seq` of `thread`, retrying conflicts. Alternates SI and
    /// serializable so both commit paths crash.
    pub fn transfer(&self, engine: &Engine, thread: u32, seq: u64) -> storage::Result<()> {
        let mut rng = SmallRng::seed_from_u64(((thread as u64) << 40) ^ seq);
        let from = (rng.gen_range(0..2usize), rng.gen_range(0..ACCOUNTS));
        let to = (rng.gen_range(0..2usize), rng.gen_range(0..ACCOUNTS));
        let amount = rng.gen_range(1..50i64);
        let isolation = if seq.is_multiple_of(2) { Isolation::Snapshot } else { Isolation::Serializable };
        loop {
            let txn = engine.begin(TxnOptions { isolation, read_only: false, ..TxnOptions::default() })?;
            let r = (|| {
                for (side, delta) in [(from, -amount), (to, amount)] {
                    let t = &self.tables[side.0];
                    let key = account_key(side.1);
                    let v = txn.get(t, &key)?.expect("accounts exist");
                    let bal = i64::from_le_bytes(v[..8].try_into().unwrap()) + delta;
                    txn.put(t, &key, &bal.to_le_bytes())?;
                }
                txn.put(&self.ledger, &ledger_key(thread, seq), &encode(&(from, to, amount)))?;
                Ok::<(), StorageError>(())
            })();
            match r.and_then(|_| txn.commit()) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_retryable() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Check the invariants; returns the ledger entries found.
    pub fn check(&self, engine: &Engine) -> Result<BTreeMap<Vec<u8>, Transfer>, String> {
        let mut ledger = BTreeMap::new();
        let mut c = engine.cursor(&self.ledger).map_err(|e| e.to_string())?;
        while let Some((k, v)) = c.next().map_err(|e| e.to_string())? {
            ledger.insert(k.to_vec(), decode(&v));
        }
        let mut want = [[OPENING; ACCOUNTS as usize]; 2];
        if ledger.is_empty() && engine.get(&self.tables[0], &account_key(0)).map_err(|e| e.to_string())?.is_none() {
            return Ok(ledger); // not funded yet
        }
        for (from, to, amount) in ledger.values() {
            want[from.0][from.1 as usize] -= amount;
            want[to.0][to.1 as usize] += amount;
        }
        for (ti, t) in self.tables.iter().enumerate() {
            for i in 0..ACCOUNTS {
                let got = engine.get(t, &account_key(i)).map_err(|e| e.to_string())?;
                let got = got.map(|v| i64::from_le_bytes(v[..8].try_into().unwrap()));
                if got != Some(want[ti][i as usize]) {
                    return Err(format!(
                        "account {ti}/{i} holds {got:?} but the {} ledger entries say {}",
                        ledger.len(),
                        want[ti][i as usize]
                    ));
                }
            }
        }
        Ok(ledger)
    }
}
