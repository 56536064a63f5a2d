//! Serializable snapshot isolation (Cahill, Röhm, Fekete 2008, with the
//! refinements of PostgreSQL's implementation, Ports and Grittner 2012).
//!
//! Serializable transactions run on snapshot isolation and additionally
//! leave SIREAD marks on what they read: single keys, key ranges a cursor
//! covered, or, once a transaction holds too many marks in a table, the
//! whole table. An rw-antidependency `R -> W` ("R read a version that W
//! overwrote") between two concurrent transactions is found by whichever
//! side comes second:
//! - the reader, when it sees that a key it reads (or one in a range it
//!   scanned) has a newer version it cannot see ([`SsiState::read_unseen`]);
//! - the writer, when the key it writes is covered by another transaction's
//!   mark ([`SsiState::on_write`]).
//!
//! Every cycle in the dependency graph of an SI history contains a
//! *dangerous structure* `A -> P -> B` of two consecutive rw edges where `B`
//! commits first (A may be B). We abort the pivot `P`, or `A` when `P` has
//! already prepared. For a read-only `A` the structure is dangerous only
//! when `B` committed before `A`'s snapshot. Checks run when an edge is added
//! and when a transaction prepares to commit; a victim other than the
//! transaction at hand is *doomed* and fails at its next operation.
//!
//! What takes which lock (the point of the split is that the common case,
//! a read or write with no conflict, never takes the global one):
//! - **Key marks** live next to the key's recent writers in the table's
//!   `KeyVersions` (`txn.rs`), under that table's lock: a reader marks and
//!   looks for unseen versions in one hold; a writer claims and collects
//!   concurrent readers in one hold. Whichever comes second sees the other.
//!   Stale marks (their reader aborted, or committed before every open
//!   snapshot) are dropped when the key is next marked or collected.
//! - **Per-transaction flags** ([`SsiFlags`]: prepared, committed, doomed,
//!   aborted) are atomics on the transaction, readable by anyone.
//! - **This state**, behind one mutex: the conflict graph (a node per
//!   transaction that has an edge or a range mark, created on first need),
//!   range and whole-table marks (each table counts its own, so writers
//!   skip the lock where there are none), and every prepare.
//!
//! A read-only transaction that begins while no serializable read-write
//! transaction is active has a safe snapshot: it is never tracked
//! (`TxnManager::begin` decides under the lock that orders snapshots).
//!
//! Finished transactions stay in the graph while a transaction that was
//! concurrent with them is still active (or a node that stays points at
//! them).

use crate::limits::*;
use crate::txn::TxnShared;
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

pub type TxnId = u64;

/// Why a transaction must fail: the other transaction involved and what
/// was read or written.
#[derive(Debug, Clone)]
pub struct Failure {
    pub other: TxnId,
    pub detail: String,
}

/// The SSI part of a transaction that others read without a lock.
#[derive(Debug, Default)]
pub(crate) struct SsiFlags {
    /// Serializable and not on a safe snapshot.
    pub tracked: bool,
    pub read_only: bool,
    /// Event number (comparable with begin ids) taken under the SSI lock
    /// when it prepares to commit, before its writes are visible; 0: not yet.
    prepared: AtomicU64,
    /// Event number taken once its writes are visible (a read-only
    /// transaction: its prepare event); 0: not yet. Visibility falls
    /// between the two, which is all the ordering SSI needs (see
    /// [`SsiState::dangerous`]).
    commit: AtomicU64,
    aborted: AtomicBool,
    /// It has a node in the conflict graph.
    in_graph: AtomicBool,
    doomed: OnceLock<Failure>,
}

fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

impl SsiFlags {
    pub fn tracked(read_only: bool) -> SsiFlags {
        SsiFlags { tracked: true, read_only, ..SsiFlags::default() }
    }

    fn prepared(&self) -> Option<u64> {
        nonzero(self.prepared.load(Ordering::Acquire))
    }

    fn commit(&self) -> Option<u64> {
        nonzero(self.commit.load(Ordering::Acquire))
    }

    pub fn doomed(&self) -> Option<&Failure> {
        self.doomed.get()
    }

    /// Its writes are visible; `event` was taken after they became so.
    pub fn committed(&self, event: u64) {
        self.commit.store(event, Ordering::Release);
    }

    /// A read-only transaction finished: its commit point is its prepare.
    pub fn committed_read_only(&self) {
        self.commit.store(self.prepared.load(Ordering::Acquire), Ordering::Release);
    }

    /// Rolled back. Returns whether the graph holds a node to remove.
    pub fn abort(&self) -> bool {
        self.aborted.store(true, Ordering::SeqCst);
        self.in_graph.load(Ordering::SeqCst)
    }
}

/// Oldest snapshot and oldest begin id among active transactions (or what
/// the next transaction would get): a bound below every open and future one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Horizon {
    pub read_ts: u64,
    pub begin: u64,
}

impl TxnShared {
    /// Did it finish before every open or future snapshot (so no active or
    /// later writer is concurrent with it), or abort? Its marks are useless.
    /// A commit that wrote has a timestamp; one that wrote nothing (read
    /// only, declared or not) has only its commit event.
    pub(crate) fn ssi_stale(&self, h: Horizon) -> bool {
        if self.ssi.aborted.load(Ordering::Acquire) {
            return true;
        }
        match (self.commit_ts(), self.ssi.commit()) {
            (Some(ts), _) => ts <= h.read_ts,
            (None, Some(c)) => c < h.begin,
            (None, None) => false,
        }
    }

    /// Is `self`, a reader, concurrent with writer `w`: active, or its
    /// commit not in `w`'s snapshot? (Stale flags only make it say yes.)
    pub(crate) fn ssi_concurrent_with(&self, w: &TxnShared) -> bool {
        if self.ssi.aborted.load(Ordering::Acquire) {
            return false;
        }
        match (self.commit_ts(), self.ssi.commit()) {
            (Some(ts), _) => ts > w.read_ts,
            (None, Some(c)) => c > w.id,
            (None, None) => true,
        }
    }

    fn finished(&self) -> bool {
        self.ssi.commit().is_some() || self.ssi.aborted.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
struct Node {
    txn: Arc<TxnShared>,
    /// rw edges into (readers of what we overwrote) and out of us (writers
    /// of what we read), with what caused each.
    ins: Vec<(TxnId, String)>,
    outs: Vec<(TxnId, String)>,
    /// Tables where this transaction has range or whole-table marks.
    marked: HashSet<u32>,
}

type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// What SSI needs of a table: its id, name (for messages) and its count of
/// range and whole-table marks.
#[derive(Clone, Copy)]
pub(crate) struct TableRef<'a> {
    pub id: u32,
    pub name: &'a str,
    pub held: &'a Arc<AtomicUsize>,
}

struct TableMarks {
    ranges: Vec<(Range, TxnId)>,
    whole: HashSet<TxnId>,
    /// Range marks per transaction, to coarsen.
    counts: HashMap<TxnId, usize>,
    /// The table's count of range and whole-table marks, which writers
    /// read without the lock.
    held: Arc<AtomicUsize>,
}

impl TableMarks {
    fn held(&self) -> usize {
        self.ranges.len() + self.whole.len()
    }

    fn sync(&self) {
        self.held.store(self.held(), Ordering::SeqCst);
    }

    /// Remove `id`'s range marks (and its whole-table mark unless
    /// `keep_whole`); returns how many range marks went.
    fn drop_txn(&mut self, id: TxnId, keep_whole: bool) -> usize {
        let n = self.counts.remove(&id).unwrap_or(0);
        if n > 0 {
            self.ranges.retain(|(_, x)| *x != id);
        }
        if !keep_whole {
            self.whole.remove(&id);
        }
        self.sync();
        n
    }

    fn readers_of<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = (TxnId, &'static str)> + 'a {
        let ranges = self.ranges.iter().filter(|(r, _)| covers(r, key)).map(|(_, id)| (*id, "scanned a range holding"));
        let whole = self.whole.iter().map(|id| (*id, "scanned the whole table (coarsened marks), holding"));
        ranges.chain(whole)
    }
}

fn covers(r: &Range, key: &[u8]) -> bool {
    covers_bounds(&r.0, &r.1, key)
}

/// Is `key` within the bounds?
pub fn covers_bounds(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    let lo = match lower {
        Bound::Unbounded => true,
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
    };
    let hi = match upper {
        Bound::Unbounded => true,
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
    };
    lo && hi
}

/// The conflict graph, range and whole-table marks.
#[derive(Default)]
pub(crate) struct SsiState {
    nodes: HashMap<TxnId, Node>,
    marks: HashMap<u32, TableMarks>,
    total_ranges: usize,
    pub marks_coarsened: u64,
}

fn check_doomed(me: &TxnShared) -> Result<(), Failure> {
    match me.ssi.doomed() {
        Some(f) => Err(f.clone()),
        None => Ok(()),
    }
}

impl SsiState {
    /// Transactions in the conflict graph.
    pub fn tracked(&self) -> usize {
        self.nodes.len()
    }

    fn node(&mut self, t: &Arc<TxnShared>) -> &mut Node {
        self.nodes.entry(t.id).or_insert_with(|| {
            t.ssi.in_graph.store(true, Ordering::SeqCst);
            Node { txn: t.clone(), ins: Vec::new(), outs: Vec::new(), marked: HashSet::new() }
        })
    }

    fn txn(&self, id: TxnId) -> &TxnShared {
        &self.nodes[&id].txn
    }

    /// `me` scanned `range` of `table`: leave the mark (the caller then
    /// looks for versions it cannot see: mark first, look second).
    pub fn mark_range(&mut self, me: &Arc<TxnShared>, table: TableRef, range: Range) -> Result<(), Failure> {
        check_doomed(me)?;
        let id = table.id;
        let marks = self.marks.entry(id).or_insert_with(|| TableMarks {
            ranges: Vec::new(),
            whole: HashSet::new(),
            counts: HashMap::new(),
            held: table.held.clone(),
        });
        if marks.whole.contains(&me.id) {
            return Ok(());
        }
        marks.ranges.push((range, me.id));
        marks.sync();
        let n = marks.counts.entry(me.id).or_default();
        *n += 1;
        let n = *n;
        self.total_ranges += 1;
        self.node(me).marked.insert(id);
        if n > ssi_marks_per_table_max {
            self.coarsen(me.id, id);
        }
        while self.total_ranges > ssi_marks_max {
            let biggest = self
                .marks
                .iter()
                .flat_map(|(t, m)| m.counts.iter().map(move |(id, n)| (*n, *id, *t)))
                .max()
                .map(|(_, id, t)| (id, t));
            match biggest {
                Some((id, t)) => self.coarsen(id, t),
                None => break,
            }
        }
        Ok(())
    }

    /// `me` holds too many key marks in `table`: one whole-table mark
    /// covers them from now on.
    pub fn mark_table(&mut self, me: &Arc<TxnShared>, table: TableRef) -> Result<(), Failure> {
        check_doomed(me)?;
        self.mark_range(me, table, (Bound::Unbounded, Bound::Unbounded))?;
        self.coarsen(me.id, table.id);
        Ok(())
    }

    /// Replace `id`'s range marks in `table` by one whole-table mark.
    fn coarsen(&mut self, id: TxnId, table: u32) {
        let Some(marks) = self.marks.get_mut(&table) else { return };
        self.total_ranges -= marks.drop_txn(id, true);
        marks.whole.insert(id);
        marks.sync();
        self.marks_coarsened += 1;
    }

    /// `me` read keys in `table_name` and saw none of the versions these
    /// writers wrote (uncommitted, or committed after its snapshot): add
    /// the edges `me -> writer`.
    pub fn read_unseen(
        &mut self,
        me: &Arc<TxnShared>,
        table_name: &str,
        writers: &[(Arc<TxnShared>, Vec<u8>)],
    ) -> Result<(), Failure> {
        check_doomed(me)?;
        for (w, key) in writers {
            if w.id != me.id && w.ssi.tracked {
                let why = format!(
                    "{} read key {} in table {table_name:?}; {} wrote it",
                    me.id,
                    crate::error::show_key(key),
                    w.id
                );
                self.add_edge(me, w, me.id, why)?;
            }
        }
        Ok(())
    }

    /// `me` writes `key` in `table`: `readers` (concurrent transactions
    /// with a mark on the key) and every concurrent transaction whose range
    /// or whole-table mark covers it get the edge `reader -> me`.
    pub fn on_write(
        &mut self,
        me: &Arc<TxnShared>,
        table: TableRef,
        key: &[u8],
        readers: &[Arc<TxnShared>],
    ) -> Result<(), Failure> {
        check_doomed(me)?;
        let mut found: Vec<(Arc<TxnShared>, &str)> = readers.iter().map(|r| (r.clone(), "read")).collect();
        if let Some(marks) = self.marks.get(&table.id) {
            for (r, how) in marks.readers_of(key) {
                if r == me.id {
                    continue;
                }
                let r = self.nodes[&r].txn.clone();
                if r.ssi_concurrent_with(me) {
                    found.push((r, how));
                }
            }
        }
        for (r, how) in found {
            let why = format!(
                "{} {how} key {} in table {:?}; {} wrote it",
                r.id,
                crate::error::show_key(key),
                table.name,
                me.id
            );
            self.add_edge(&r, me, me.id, why)?;
        }
        Ok(())
    }

    fn add_edge(&mut self, r: &Arc<TxnShared>, w: &Arc<TxnShared>, me: TxnId, why: String) -> Result<(), Failure> {
        // An aborted transaction's edges do not count.
        if r.ssi.aborted.load(Ordering::Acquire) || w.ssi.aborted.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.node(r).outs.iter().any(|(x, _)| *x == w.id) {
            return Ok(());
        }
        self.node(w).ins.push((r.id, why.clone()));
        self.node(r).outs.push((w.id, why));
        let (r, w) = (r.id, w.id);
        // W as the pivot: r -> w -> b.
        let outs: Vec<TxnId> = self.nodes[&w].outs.iter().map(|(b, _)| *b).collect();
        for b in outs {
            if self.dangerous(r, w, b) {
                self.resolve(r, w, b, me)?;
            }
        }
        // R as the pivot: a -> r -> w.
        let ins: Vec<TxnId> = self.nodes[&r].ins.iter().map(|(a, _)| *a).collect();
        for a in ins {
            if self.dangerous(a, r, w) {
                self.resolve(a, r, w, me)?;
            }
        }
        Ok(())
    }

    /// Is `a -> p -> b` a dangerous structure: `b` committed before `p` and
    /// before (or as) `a`, and, for a read-only `a`, before `a`'s snapshot?
    ///
    /// Commits prepare and become visible without a lock spanning the two,
    /// so the test is conservative, as in PostgreSQL: `b` counts from its
    /// prepare event (the earliest it can be visible), `p` and `a` from
    /// their commit event (taken after they are visible; none yet: they
    /// may still commit later). A `b` visible before `p` always has
    /// `b.prepared < b visible < p visible < p.commit`.
    fn dangerous(&self, a: TxnId, p: TxnId, b: TxnId) -> bool {
        let (Some(an), Some(pn), Some(bn)) = (self.nodes.get(&a), self.nodes.get(&p), self.nodes.get(&b)) else {
            return false;
        };
        let Some(bp) = bn.txn.ssi.prepared() else { return false };
        if pn.txn.ssi.commit().is_some_and(|pc| pc < bp) {
            return false;
        }
        if a != b {
            if an.txn.ssi.commit().is_some_and(|ac| ac < bp) {
                return false;
            }
            if an.txn.ssi.read_only && bn.txn.commit_ts().is_none_or(|ts| ts > an.txn.read_ts) {
                return false;
            }
        }
        true
    }

    /// Abort the pivot, or `a` if the pivot has prepared (it can no longer
    /// fail), or else `b`: now if the victim is `me`, else by dooming it.
    /// Every structure found involves `me`, which has not prepared (a new
    /// edge comes from an active transaction's read or write) or is
    /// preparing as `b`; so a victim always exists.
    fn resolve(&mut self, a: TxnId, p: TxnId, b: TxnId, me: TxnId) -> Result<(), Failure> {
        let open = |x: TxnId| self.txn(x).ssi.prepared().is_none() || x == me;
        let victim = if open(p) {
            p
        } else if open(a) {
            a
        } else {
            b
        };
        if !open(victim) {
            debug_assert!(false, "no transaction of {a} -> {p} -> {b} can abort");
            return Ok(());
        }
        let why_in = self.nodes[&p].ins.iter().find(|(x, _)| *x == a).map(|(_, w)| w.clone()).unwrap_or_default();
        let why_out = self.nodes[&p].outs.iter().find(|(x, _)| *x == b).map(|(_, w)| w.clone()).unwrap_or_default();
        let other = if victim == p { b } else { p };
        let failure = Failure {
            other,
            detail: format!(
                "dangerous structure {a} -rw-> {p} -rw-> {b} ({why_in}; {why_out}); {b} committed first, {victim} aborts"
            ),
        };
        let _ = self.txn(victim).ssi.doomed.set(failure.clone());
        if victim == me {
            return Err(failure);
        }
        Ok(())
    }

    /// `me` is about to commit: fail if it is doomed or the pivot of a
    /// dangerous structure; otherwise mark it prepared at `event` (from
    /// then on it cannot fail) and doom the pivots for which `me` is the
    /// first committer, failing instead when such a pivot has prepared.
    pub fn prepare(&mut self, me: &TxnShared, event: u64) -> Result<(), Failure> {
        check_doomed(me)?;
        let Some(node) = self.nodes.get(&me.id) else {
            me.ssi.prepared.store(event, Ordering::Release);
            return Ok(());
        };
        let ins: Vec<TxnId> = node.ins.iter().map(|(a, _)| *a).collect();
        let outs: Vec<TxnId> = node.outs.iter().map(|(b, _)| *b).collect();
        for &a in &ins {
            for &b in &outs {
                if self.dangerous(a, me.id, b) {
                    self.resolve(a, me.id, b, me.id)?;
                }
            }
        }
        me.ssi.prepared.store(event, Ordering::Release);
        for &p in &ins {
            let p_ins: Vec<TxnId> = match self.nodes.get(&p) {
                Some(n) if n.txn.ssi.commit().is_none() => n.ins.iter().map(|(a, _)| *a).collect(),
                _ => continue,
            };
            for a in p_ins {
                if self.dangerous(a, p, me.id) {
                    if let Err(f) = self.resolve(a, p, me.id, me.id) {
                        me.ssi.prepared.store(0, Ordering::Release);
                        return Err(f);
                    }
                }
            }
        }
        Ok(())
    }

    /// `me` rolled back: forget it, its edges and its marks.
    pub fn aborted(&mut self, me: TxnId) {
        let Some(n) = self.nodes.remove(&me) else { return };
        self.forget(me, &n);
    }

    fn forget(&mut self, id: TxnId, n: &Node) {
        for (x, _) in n.ins.iter().chain(n.outs.iter()) {
            if let Some(xn) = self.nodes.get_mut(x) {
                xn.ins.retain(|(y, _)| *y != id);
                xn.outs.retain(|(y, _)| *y != id);
            }
        }
        for t in &n.marked {
            if let Some(m) = self.marks.get_mut(t) {
                self.total_ranges -= m.drop_txn(id, false);
            }
        }
    }

    /// Forget finished transactions no active transaction is concurrent
    /// with (see [`TxnShared::ssi_stale`]). Keep those a transaction that
    /// stays still points at.
    pub fn cleanup(&mut self, h: Horizon) {
        let mut gone: HashSet<TxnId> =
            self.nodes.iter().filter(|(_, n)| n.txn.finished() && n.txn.ssi_stale(h)).map(|(id, _)| *id).collect();
        loop {
            let kept: Vec<TxnId> = gone
                .iter()
                .copied()
                .filter(|id| {
                    let n = &self.nodes[id];
                    n.ins.iter().chain(n.outs.iter()).any(|(x, _)| self.nodes.contains_key(x) && !gone.contains(x))
                })
                .collect();
            if kept.is_empty() {
                break;
            }
            for id in kept {
                gone.remove(&id);
            }
        }
        for id in gone {
            let n = self.nodes.remove(&id).unwrap();
            // Everything it points at is going too: no edges to unlink.
            for t in &n.marked {
                if let Some(m) = self.marks.get_mut(t) {
                    self.total_ranges -= m.drop_txn(id, false);
                }
            }
        }
        self.marks.retain(|_, m| m.held() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::TxnShared;

    /// A transaction with begin id `id` on snapshot 10.
    fn txn(id: TxnId) -> Arc<TxnShared> {
        TxnShared::for_test(id, 10, false)
    }

    fn commit(s: &mut SsiState, t: &Arc<TxnShared>, prepare: u64, ts: u64, event: u64) -> Result<(), Failure> {
        s.prepare(t, prepare)?;
        t.set_committed_for_test(ts);
        t.ssi.committed(event);
        Ok(())
    }

    /// `r` read `key` before `w` wrote it (the writer finds the mark).
    fn rw(
        s: &mut SsiState,
        table: &Arc<AtomicUsize>,
        r: &Arc<TxnShared>,
        w: &Arc<TxnShared>,
        key: &str,
    ) -> Result<(), Failure> {
        s.on_write(w, t(table), key.as_bytes(), std::slice::from_ref(r))
    }

    fn table() -> Arc<AtomicUsize> {
        Arc::default()
    }

    fn t(held: &Arc<AtomicUsize>) -> TableRef<'_> {
        TableRef { id: 0, name: "t", held }
    }

    #[test]
    fn write_skew_aborts_the_second_committer() {
        let (mut s, h) = (SsiState::default(), table());
        let (t1, t2) = (txn(1), txn(2));
        rw(&mut s, &h, &t2, &t1, "x").unwrap(); // 2 -> 1
        rw(&mut s, &h, &t1, &t2, "y").unwrap(); // 1 -> 2
        commit(&mut s, &t1, 3, 11, 5).unwrap();
        let f = s.prepare(&t2, 6).unwrap_err();
        assert_eq!(f.other, 1);
        assert!(f.detail.contains("dangerous structure"), "{}", f.detail);
    }

    #[test]
    fn write_skew_fails_the_second_to_prepare_before_either_is_visible() {
        let (mut s, h) = (SsiState::default(), table());
        let (t1, t2) = (txn(1), txn(2));
        rw(&mut s, &h, &t2, &t1, "x").unwrap();
        rw(&mut s, &h, &t1, &t2, "y").unwrap();
        s.prepare(&t1, 3).unwrap();
        // 1 is prepared, not yet visible: it may become visible first.
        let f = s.prepare(&t2, 4).unwrap_err();
        assert_eq!(f.other, 1, "{}", f.detail);
        assert_eq!(t2.ssi.prepared(), None);
    }

    /// 1 -> 2 -> 3 (1 read x, 2 wrote it; 2 read y, 3 wrote it).
    fn chain() -> (SsiState, [Arc<TxnShared>; 3]) {
        let (mut s, h) = (SsiState::default(), table());
        let ts = [txn(1), txn(2), txn(3)];
        rw(&mut s, &h, &ts[0], &ts[1], "x").unwrap();
        rw(&mut s, &h, &ts[1], &ts[2], "y").unwrap();
        (s, ts)
    }

    #[test]
    fn a_prepared_pivot_is_spared_and_the_reader_doomed() {
        let (mut s, [t1, t2, t3]) = chain();
        s.prepare(&t2, 4).unwrap();
        s.prepare(&t3, 5).unwrap(); // 3 may be visible before 2: 1 -> 2 -> 3 is dangerous
        assert!(t2.ssi.doomed().is_none());
        let f = s.prepare(&t1, 6).unwrap_err();
        assert!(f.detail.contains("1 -rw-> 2 -rw-> 3"), "{}", f.detail);
    }

    #[test]
    fn with_pivot_and_reader_prepared_the_first_committer_fails() {
        let (mut s, [t1, t2, t3]) = chain();
        s.prepare(&t1, 4).unwrap();
        s.prepare(&t2, 5).unwrap();
        let f = s.prepare(&t3, 6).unwrap_err();
        assert_eq!(f.other, 2, "{}", f.detail);
        assert_eq!(t3.ssi.prepared(), None);
    }

    #[test]
    fn a_pivot_visible_before_the_first_committer_prepares_is_safe() {
        let (mut s, [t1, t2, t3]) = chain();
        commit(&mut s, &t2, 4, 11, 5).unwrap();
        commit(&mut s, &t3, 6, 12, 7).unwrap();
        s.prepare(&t1, 8).unwrap();
    }

    #[test]
    fn a_single_rw_edge_is_harmless() {
        let (mut s, h) = (SsiState::default(), table());
        let (t1, t2) = (txn(1), txn(2));
        rw(&mut s, &h, &t1, &t2, "x").unwrap();
        commit(&mut s, &t2, 3, 11, 5).unwrap();
        s.prepare(&t1, 6).unwrap();
    }

    #[test]
    fn range_marks_coarsen_to_the_whole_table() {
        let (mut s, h) = (SsiState::default(), table());
        let (t1, t2) = (txn(1), txn(2));
        for i in 0..=ssi_marks_per_table_max {
            let k = format!("k{i}").into_bytes();
            s.mark_range(&t1, t(&h), (Bound::Included(k.clone()), Bound::Included(k))).unwrap();
        }
        assert_eq!(s.marks_coarsened, 1);
        assert_eq!(s.total_ranges, 0);
        assert_eq!(h.load(Ordering::SeqCst), 1, "one whole-table mark");
        // A write anywhere in the table now meets 1's mark.
        s.on_write(&t2, t(&h), b"unrelated", &[]).unwrap();
        assert!(s.nodes[&2].ins.iter().any(|(r, _)| *r == 1));
    }

    #[test]
    fn cleanup_keeps_what_active_transactions_point_at() {
        let (mut s, h) = (SsiState::default(), table());
        let (t1, t2) = (txn(1), txn(2));
        s.mark_range(&t2, t(&h), (Bound::Unbounded, Bound::Unbounded)).unwrap();
        s.on_write(&t1, t(&h), b"x", &[]).unwrap(); // 2 -> 1
        commit(&mut s, &t1, 3, 11, 5).unwrap();
        // Every snapshot sees 1's commit, but 2 points at it.
        s.cleanup(Horizon { read_ts: 11, begin: 2 });
        assert!(s.nodes.contains_key(&1));
        commit(&mut s, &t2, 6, 12, 7).unwrap();
        s.cleanup(Horizon { read_ts: 12, begin: 8 });
        assert!(s.nodes.is_empty());
        assert_eq!(s.total_ranges, 0);
        assert_eq!(h.load(Ordering::SeqCst), 0);
    }
}
