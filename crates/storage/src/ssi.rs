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
//!   scanned) has a newer version it cannot see (`TxnManager` looks these up
//!   in the table's key versions and calls [`SsiState::on_read`]);
//! - the writer, when the key it writes is covered by another transaction's
//!   mark ([`SsiState::on_write`]).
//!
//! Every cycle in the dependency graph of an SI history contains a
//! *dangerous structure* `A -> P -> B` of two consecutive rw edges where `B`
//! commits first (A may be B). We abort the pivot `P`, or `A` when `P` has
//! already committed. For a read-only `A` the structure is dangerous only
//! when `B` committed before `A`'s snapshot. Checks run when an edge is added
//! and when a transaction prepares to commit; a victim other than the
//! transaction at hand is *doomed* and fails at its next operation.
//!
//! A read-only transaction that begins while no serializable read-write
//! transaction is active has a safe snapshot: it is never tracked.
//!
//! Finished transactions and their marks stay while a transaction that was
//! concurrent with them is still active (or still points at them).
//!
//! Everything here sits behind one mutex held by the transaction manager.

use crate::limits::*;
use std::collections::{HashMap, HashSet};
use std::ops::Bound;

pub type TxnId = u64;

/// Why a transaction must fail: the other transaction involved and what
/// was read or written.
#[derive(Debug, Clone)]
pub struct Failure {
    pub other: TxnId,
    pub detail: String,
}

#[derive(Debug)]
struct Node {
    read_ts: u64,
    read_only: bool,
    /// Event number (comparable with begin ids) taken when the transaction
    /// prepares to commit, before its writes become visible.
    prepared: Option<u64>,
    /// Event number taken once its writes are visible (for a read-only
    /// transaction, its prepare event). A commit's visibility falls between
    /// the two, which is all the ordering SSI needs (see [`SsiState::dangerous`]).
    commit: Option<u64>,
    /// Journal timestamp of the commit, once published.
    commit_ts: Option<u64>,
    finished: bool,
    /// rw edges into (readers of what we overwrote) and out of us (writers
    /// of what we read), with what caused each.
    ins: Vec<(TxnId, String)>,
    outs: Vec<(TxnId, String)>,
    doomed: Option<Failure>,
    /// Tables where this transaction has range or whole-table marks.
    marked: HashSet<u32>,
    /// Its key marks, so they can be removed one by one.
    points: Vec<(u32, Vec<u8>)>,
}

type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

#[derive(Default)]
struct TableMarks {
    points: HashMap<Vec<u8>, Vec<TxnId>>,
    ranges: Vec<(Range, TxnId)>,
    whole: HashSet<TxnId>,
    /// Point and range marks per transaction, to coarsen.
    counts: HashMap<TxnId, usize>,
}

impl TableMarks {
    /// Remove `id`'s key marks on `points` and its range marks (and its
    /// whole-table mark unless `keep_whole`); returns how many went.
    fn drop_txn<'k>(&mut self, id: TxnId, points: impl Iterator<Item = &'k [u8]>, keep_whole: bool) -> usize {
        let n = self.counts.remove(&id).unwrap_or(0);
        if n > 0 {
            for key in points {
                if let Some(ids) = self.points.get_mut(key) {
                    ids.retain(|x| *x != id);
                    if ids.is_empty() {
                        self.points.remove(key);
                    }
                }
            }
            self.ranges.retain(|(_, x)| *x != id);
        }
        if !keep_whole {
            self.whole.remove(&id);
        }
        n
    }

    fn readers_of<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = (TxnId, &'static str)> + 'a {
        let points = self.points.get(key).into_iter().flatten().map(|id| (*id, "read"));
        let ranges = self.ranges.iter().filter(|(r, _)| covers(r, key)).map(|(_, id)| (*id, "scanned a range holding"));
        let whole = self.whole.iter().map(|id| (*id, "scanned the whole table (coarsened marks), holding"));
        points.chain(ranges).chain(whole)
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

/// What a mark covers, for `on_read`.
pub enum Mark<'a> {
    Key(&'a [u8]),
    Range(Range),
}

#[derive(Default)]
pub struct SsiState {
    nodes: HashMap<TxnId, Node>,
    marks: HashMap<u32, TableMarks>,
    total_marks: usize,
    /// Serializable read-write transactions now active.
    active_rw: usize,
    pub marks_coarsened: u64,
}

impl SsiState {
    /// Register a serializable transaction. Returns `false` for a read-only
    /// transaction with a safe snapshot, which is not tracked at all.
    pub fn begin(&mut self, id: TxnId, read_ts: u64, read_only: bool) -> bool {
        if read_only && self.active_rw == 0 {
            return false;
        }
        if !read_only {
            self.active_rw += 1;
        }
        let node = Node {
            read_ts,
            read_only,
            prepared: None,
            commit: None,
            commit_ts: None,
            finished: false,
            ins: Vec::new(),
            outs: Vec::new(),
            doomed: None,
            marked: HashSet::new(),
            points: Vec::new(),
        };
        self.nodes.insert(id, node);
        true
    }

    pub fn tracked(&self) -> usize {
        self.nodes.len()
    }

    /// `me` reads `what` in `table`: leave the mark. The caller then looks
    /// for versions it cannot see and reports them with [`Self::read_unseen`].
    /// (Mark first, look second; a writer claims first, checks marks second:
    /// whichever runs second finds the other.)
    pub fn mark_read(&mut self, me: TxnId, table: u32, what: Mark) -> Result<(), Failure> {
        self.check_doomed(me)?;
        self.add_mark(me, table, what);
        Ok(())
    }

    /// `me` read keys in `table_name` and saw none of the versions `writers`
    /// wrote (uncommitted, or committed after its snapshot): add the edges
    /// `me -> writer`.
    pub fn read_unseen(&mut self, me: TxnId, table_name: &str, writers: &[(TxnId, Vec<u8>)]) -> Result<(), Failure> {
        self.check_doomed(me)?;
        for (w, key) in writers {
            if *w != me {
                let why =
                    format!("{me} read key {} in table {table_name:?}; {w} wrote it", crate::error::show_key(key));
                self.add_edge(me, *w, me, why)?;
            }
        }
        Ok(())
    }

    /// `me` writes `key` in `table`: every concurrent transaction with a mark
    /// covering it gets the edge `reader -> me`.
    pub fn on_write(&mut self, me: TxnId, table: u32, table_name: &str, key: &[u8]) -> Result<(), Failure> {
        self.check_doomed(me)?;
        let Some(marks) = self.marks.get(&table) else { return Ok(()) };
        let readers: Vec<(TxnId, &str)> = marks.readers_of(key).filter(|(r, _)| *r != me).collect();
        for (r, how) in readers {
            // Concurrent: the reader is active, or its commit is not in our snapshot.
            let concurrent = match (self.nodes.get(&r), self.nodes.get(&me)) {
                (Some(n), Some(w)) => match (n.finished, n.commit_ts, n.commit) {
                    (false, _, _) => true,
                    (true, Some(ts), _) => ts > w.read_ts,
                    (true, None, Some(c)) => c > me, // read-only: finished at its commit event
                    (true, None, None) => false,     // aborted
                },
                _ => false,
            };
            if concurrent {
                let why =
                    format!("{r} {how} key {} in table {table_name:?}; {me} wrote it", crate::error::show_key(key));
                self.add_edge(r, me, me, why)?;
            }
        }
        Ok(())
    }

    fn check_doomed(&self, me: TxnId) -> Result<(), Failure> {
        match self.nodes.get(&me).and_then(|n| n.doomed.clone()) {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    fn add_mark(&mut self, me: TxnId, table: u32, what: Mark) {
        let marks = self.marks.entry(table).or_default();
        if marks.whole.contains(&me) {
            return;
        }
        let Some(node) = self.nodes.get_mut(&me) else { return };
        match what {
            Mark::Key(k) => {
                let ids = marks.points.entry(k.to_vec()).or_default();
                if ids.contains(&me) {
                    return;
                }
                ids.push(me);
                node.points.push((table, k.to_vec()));
            }
            Mark::Range(r) => {
                marks.ranges.push((r, me));
                node.marked.insert(table);
            }
        }
        let n = marks.counts.entry(me).or_default();
        *n += 1;
        self.total_marks += 1;
        if *n > ssi_marks_per_table_max {
            self.coarsen(me, table);
        }
        while self.total_marks > ssi_marks_max {
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
    }

    /// Replace `id`'s key and range marks in `table` by one whole-table mark.
    fn coarsen(&mut self, id: TxnId, table: u32) {
        let (Some(marks), Some(node)) = (self.marks.get_mut(&table), self.nodes.get_mut(&id)) else { return };
        let (here, elsewhere): (Vec<_>, Vec<_>) =
            std::mem::take(&mut node.points).into_iter().partition(|(t, _)| *t == table);
        node.points = elsewhere;
        node.marked.insert(table);
        self.total_marks -= marks.drop_txn(id, here.iter().map(|(_, k)| k.as_slice()), true);
        marks.whole.insert(id);
        self.marks_coarsened += 1;
    }

    fn add_edge(&mut self, r: TxnId, w: TxnId, me: TxnId, why: String) -> Result<(), Failure> {
        let (Some(rn), Some(wn)) = (self.nodes.get(&r), self.nodes.get(&w)) else { return Ok(()) };
        if rn.outs.iter().any(|(x, _)| *x == w) {
            return Ok(());
        }
        // An aborted transaction's edges do not count.
        if (rn.finished && rn.prepared.is_none()) || (wn.finished && wn.prepared.is_none()) {
            return Ok(());
        }
        self.nodes.get_mut(&r).unwrap().outs.push((w, why.clone()));
        self.nodes.get_mut(&w).unwrap().ins.push((r, why));
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
        let Some(bp) = bn.prepared else { return false };
        if pn.commit.is_some_and(|pc| pc < bp) {
            return false;
        }
        if a != b {
            if an.commit.is_some_and(|ac| ac < bp) {
                return false;
            }
            if an.read_only && bn.commit_ts.is_none_or(|ts| ts > an.read_ts) {
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
        let open = |x: TxnId| self.nodes[&x].prepared.is_none() || x == me;
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
        let node = self.nodes.get_mut(&victim).unwrap();
        if node.doomed.is_none() {
            node.doomed = Some(failure.clone());
        }
        if victim == me {
            return Err(failure);
        }
        Ok(())
    }

    /// `me` is about to commit: fail if it is doomed or the pivot of a
    /// dangerous structure; otherwise mark it prepared at `event` (from
    /// then on it cannot fail) and doom the pivots for which `me` is the
    /// first committer, failing instead when such a pivot has prepared.
    pub fn prepare(&mut self, me: TxnId, event: u64) -> Result<(), Failure> {
        self.check_doomed(me)?;
        let Some(node) = self.nodes.get(&me) else { return Ok(()) };
        let ins: Vec<TxnId> = node.ins.iter().map(|(a, _)| *a).collect();
        let outs: Vec<TxnId> = node.outs.iter().map(|(b, _)| *b).collect();
        for &a in &ins {
            for &b in &outs {
                if self.dangerous(a, me, b) {
                    self.resolve(a, me, b, me)?;
                }
            }
        }
        self.nodes.get_mut(&me).unwrap().prepared = Some(event);
        for &p in &ins {
            let p_ins: Vec<TxnId> = match self.nodes.get(&p) {
                Some(n) if n.commit.is_none() => n.ins.iter().map(|(a, _)| *a).collect(),
                _ => continue,
            };
            for a in p_ins {
                if self.dangerous(a, p, me) {
                    if let Err(f) = self.resolve(a, p, me, me) {
                        self.nodes.get_mut(&me).unwrap().prepared = None;
                        return Err(f);
                    }
                }
            }
        }
        Ok(())
    }

    /// The commit of `me` is visible at journal timestamp `ts` (`None` for
    /// a read-only transaction); `event` was taken after it became visible.
    pub fn committed(&mut self, me: TxnId, ts: Option<u64>, event: u64) {
        if let Some(n) = self.nodes.get_mut(&me) {
            n.commit_ts = ts;
            n.commit = Some(if ts.is_some() { event } else { n.prepared.unwrap_or(event) });
            n.finished = true;
            if !n.read_only {
                self.active_rw -= 1;
            }
        }
    }

    /// `me` rolled back: forget it, its edges and its marks.
    pub fn aborted(&mut self, me: TxnId) {
        let Some(n) = self.nodes.remove(&me) else { return };
        if !n.read_only {
            self.active_rw -= 1;
        }
        for (x, _) in n.ins.iter().chain(n.outs.iter()) {
            if let Some(xn) = self.nodes.get_mut(x) {
                xn.ins.retain(|(y, _)| *y != me);
                xn.outs.retain(|(y, _)| *y != me);
            }
        }
        self.drop_marks(me, &n);
    }

    fn drop_marks(&mut self, id: TxnId, n: &Node) {
        let mut tables: HashSet<u32> = n.marked.clone();
        tables.extend(n.points.iter().map(|(t, _)| *t));
        for t in tables {
            if let Some(m) = self.marks.get_mut(&t) {
                let points = n.points.iter().filter(|(pt, _)| *pt == t).map(|(_, k)| k.as_slice());
                self.total_marks -= m.drop_txn(id, points, false);
            }
        }
    }

    /// Forget finished transactions no active transaction is concurrent
    /// with: every open snapshot (the oldest is `oldest_read_ts`) sees a
    /// writer's commit; a read-only one finished before the oldest active
    /// transaction began (`oldest_begin`). Keep those a transaction that
    /// stays still points at.
    pub fn cleanup(&mut self, oldest_begin: u64, oldest_read_ts: u64) {
        let mut gone: HashSet<TxnId> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.finished
                    && match (n.commit_ts, n.commit) {
                        (Some(ts), _) => ts <= oldest_read_ts,
                        (None, Some(c)) => c < oldest_begin,
                        (None, None) => false,
                    }
            })
            .map(|(id, _)| *id)
            .collect();
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
            self.drop_marks(id, &n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Mark<'_> {
        Mark::Key(k.as_bytes())
    }

    impl SsiState {
        /// `mark_read` and `read_unseen` in one step, as `Txn::get` does.
        fn on_read(
            &mut self,
            me: TxnId,
            table: u32,
            table_name: &str,
            what: Mark,
            writers: &[(TxnId, Vec<u8>)],
        ) -> Result<(), Failure> {
            self.mark_read(me, table, what)?;
            self.read_unseen(me, table_name, writers)
        }
    }

    #[test]
    fn write_skew_aborts_the_second_committer() {
        let mut s = SsiState::default();
        assert!(s.begin(1, 10, false));
        assert!(s.begin(2, 10, false));
        // Both read x and y; 1 writes x, 2 writes y.
        for t in [1, 2] {
            s.on_read(t, 0, "t", key("x"), &[]).unwrap();
            s.on_read(t, 0, "t", key("y"), &[]).unwrap();
        }
        s.on_write(1, 0, "t", b"x").unwrap(); // 2 -> 1
        s.on_write(2, 0, "t", b"y").unwrap(); // 1 -> 2
        s.prepare(1, 3).unwrap();
        s.committed(1, Some(11), 5);
        let f = s.prepare(2, 6).unwrap_err();
        assert_eq!(f.other, 1);
        assert!(f.detail.contains("dangerous structure"), "{}", f.detail);
    }

    #[test]
    fn write_skew_fails_the_second_to_prepare_before_either_is_visible() {
        let mut s = SsiState::default();
        s.begin(1, 10, false);
        s.begin(2, 10, false);
        for t in [1, 2] {
            s.on_read(t, 0, "t", key("x"), &[]).unwrap();
            s.on_read(t, 0, "t", key("y"), &[]).unwrap();
        }
        s.on_write(1, 0, "t", b"x").unwrap();
        s.on_write(2, 0, "t", b"y").unwrap();
        s.prepare(1, 3).unwrap();
        // 1 is prepared, not yet visible: it may become visible first.
        let f = s.prepare(2, 4).unwrap_err();
        assert_eq!(f.other, 1, "{}", f.detail);
        assert_eq!(s.nodes[&2].prepared, None);
    }

    /// 1 -> 2 -> 3 (1 read x, 2 wrote it; 2 read y, 3 wrote it).
    fn chain() -> SsiState {
        let mut s = SsiState::default();
        for t in 1..=3 {
            s.begin(t, 10, false);
        }
        s.on_read(1, 0, "t", key("x"), &[]).unwrap();
        s.on_write(2, 0, "t", b"x").unwrap();
        s.on_read(2, 0, "t", key("y"), &[]).unwrap();
        s.on_write(3, 0, "t", b"y").unwrap();
        s
    }

    #[test]
    fn a_prepared_pivot_is_spared_and_the_reader_doomed() {
        let mut s = chain();
        s.prepare(2, 4).unwrap();
        s.prepare(3, 5).unwrap(); // 3 may be visible before 2: 1 -> 2 -> 3 is dangerous
        assert!(s.nodes[&2].doomed.is_none());
        let f = s.prepare(1, 6).unwrap_err();
        assert!(f.detail.contains("1 -rw-> 2 -rw-> 3"), "{}", f.detail);
    }

    #[test]
    fn with_pivot_and_reader_prepared_the_first_committer_fails() {
        let mut s = chain();
        s.prepare(1, 4).unwrap();
        s.prepare(2, 5).unwrap();
        let f = s.prepare(3, 6).unwrap_err();
        assert_eq!(f.other, 2, "{}", f.detail);
        assert_eq!(s.nodes[&3].prepared, None);
    }

    #[test]
    fn a_pivot_visible_before_the_first_committer_prepares_is_safe() {
        let mut s = chain();
        s.prepare(2, 4).unwrap();
        s.committed(2, Some(11), 5);
        s.prepare(3, 6).unwrap();
        s.committed(3, Some(12), 7);
        s.prepare(1, 8).unwrap();
    }

    #[test]
    fn a_single_rw_edge_is_harmless() {
        let mut s = SsiState::default();
        s.begin(1, 10, false);
        s.begin(2, 10, false);
        s.on_read(1, 0, "t", key("x"), &[]).unwrap();
        s.on_write(2, 0, "t", b"x").unwrap();
        s.prepare(2, 3).unwrap();
        s.committed(2, Some(11), 5);
        s.prepare(1, 6).unwrap();
        s.committed(1, None, 7);
    }

    #[test]
    fn marks_coarsen_to_the_whole_table() {
        let mut s = SsiState::default();
        s.begin(1, 10, false);
        s.begin(2, 10, false);
        for i in 0..=ssi_marks_per_table_max {
            s.on_read(1, 0, "t", Mark::Key(format!("k{i}").as_bytes()), &[]).unwrap();
        }
        assert_eq!(s.marks_coarsened, 1);
        assert_eq!(s.total_marks, 0);
        // A write anywhere in the table now meets 1's mark.
        s.on_write(2, 0, "t", b"unrelated").unwrap();
        assert!(s.nodes[&2].ins.iter().any(|(r, _)| *r == 1));
    }

    #[test]
    fn read_only_with_no_writers_active_is_untracked() {
        let mut s = SsiState::default();
        assert!(!s.begin(1, 10, true));
        assert!(s.begin(2, 10, false));
        assert!(s.begin(3, 10, true));
    }

    #[test]
    fn cleanup_keeps_what_active_transactions_point_at() {
        let mut s = SsiState::default();
        s.begin(1, 10, false);
        s.begin(2, 10, false);
        s.on_read(2, 0, "t", key("x"), &[]).unwrap();
        s.on_write(1, 0, "t", b"x").unwrap(); // 2 -> 1
        s.prepare(1, 3).unwrap();
        s.committed(1, Some(11), 5);
        s.cleanup(5, 11); // every snapshot sees 1's commit, but 2 points at it
        assert!(s.nodes.contains_key(&1));
        s.prepare(2, 6).unwrap();
        s.committed(2, None, 7);
        s.cleanup(7, 11);
        assert!(s.nodes.is_empty());
        assert_eq!(s.total_marks, 0);
    }
}
