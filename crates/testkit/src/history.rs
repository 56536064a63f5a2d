//! Checkers for recorded histories of concurrent transactions: one for
//! snapshot isolation (SI), and one that builds the dependency graph of the
//! committed transactions (Adya, 1999) and looks for a cycle (serializable
//! isolation). Pure test code: nothing here knows the engine, so a test can
//! record a history from any number of threads and hand it over.
//!
//! The model. Each transaction has an id, a snapshot timestamp, an outcome
//! (a commit timestamp, or aborted) and its operations in order: point reads,
//! writes (put or delete) and range scans over `[start, end)`. A committed
//! transaction's last write to a key is its version of that key, named by
//! the transaction's id; a read records the writer of the value it saw, or
//! `None` when the key was absent (never written, or deleted). The database
//! starts empty: a test that needs initial data commits a setup transaction.
//! A version committed at `c` is in snapshot `s` when `c <= s`.
//!
//! A well-formed history keeps these invariants (reported as
//! [`Violation::Malformed`]; [`dependency_graph`] panics on them):
//! 1. Transaction ids are unique.
//! 2. A committed transaction's commit timestamp is greater than its snapshot.
//! 3. Commit timestamps are unique (they order every key's versions).
//! 4. A scan's range is not inverted (`start <= end`).
//!
//! Snapshot isolation, checked by [`check_snapshot_isolation`] for every
//! transaction, aborted ones included: every read and every key of every
//! scan observes exactly the transaction's own last write, or else the newest
//! version committed in its snapshot (this forbids dirty reads, reads from
//! the future, stale reads, and scans with missing or extra keys); and first
//! updater wins: two committed transactions that are concurrent (neither
//! committed in the other's snapshot) never both wrote, or deleted, one key.
//!
//! Serializability, checked by [`check_serializable`] over committed
//! transactions: ww edges follow each key's version order (= commit order),
//! wr edges go from a writer to each reader of its version, and rw
//! anti-dependencies go from a reader to the writer of the next version of
//! what it saw. Absence is one observation however many deletes produced it:
//! a read or scan that saw a key absent depends on the delete that made it
//! absent (none for the initial state) and is overwritten by the next put —
//! for a scan, that put into its range is a phantom. The history is
//! serializable when the graph has no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::{Bound, Range};

pub type Key = Vec<u8>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed(Timestamp),
    /// Rolled back, or still open when the recording ended.
    Aborted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WriteKind {
    Put,
    Delete,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `observed` is the writer of the value seen; `None` when the key was absent.
    Read {
        key: Key,
        observed: Option<TxnId>,
    },
    Write {
        key: Key,
        kind: WriteKind,
    },
    /// Every key the scan returned in `[range.start, range.end)`, with the writer of its value.
    Scan {
        range: Range<Key>,
        observed: BTreeMap<Key, TxnId>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub id: TxnId,
    /// The commit timestamp of the newest transaction this one can see.
    pub snapshot: Timestamp,
    pub outcome: Outcome,
    pub ops: Vec<Op>,
}

/// Builders for fixtures: `Txn::committed(2, 1, 3).read(b"x", Some(1)).put(b"x")`.
impl Txn {
    pub fn committed(id: u64, snapshot: u64, commit: u64) -> Txn {
        Txn {
            id: TxnId(id),
            snapshot: Timestamp(snapshot),
            outcome: Outcome::Committed(Timestamp(commit)),
            ops: vec![],
        }
    }

    pub fn aborted(id: u64, snapshot: u64) -> Txn {
        Txn { id: TxnId(id), snapshot: Timestamp(snapshot), outcome: Outcome::Aborted, ops: vec![] }
    }

    pub fn read(mut self, key: &[u8], observed: Option<u64>) -> Txn {
        self.ops.push(Op::Read { key: key.to_vec(), observed: observed.map(TxnId) });
        self
    }

    pub fn put(mut self, key: &[u8]) -> Txn {
        self.ops.push(Op::Write { key: key.to_vec(), kind: WriteKind::Put });
        self
    }

    pub fn delete(mut self, key: &[u8]) -> Txn {
        self.ops.push(Op::Write { key: key.to_vec(), kind: WriteKind::Delete });
        self
    }

    pub fn scan(mut self, range: Range<&[u8]>, observed: &[(&[u8], u64)]) -> Txn {
        let observed = observed.iter().map(|(k, w)| (k.to_vec(), TxnId(*w))).collect();
        self.ops.push(Op::Scan { range: range.start.to_vec()..range.end.to_vec(), observed });
        self
    }

    pub fn commit(&self) -> Option<Timestamp> {
        match self.outcome {
            Outcome::Committed(ts) => Some(ts),
            Outcome::Aborted => None,
        }
    }

    /// The last write to each key: the transaction's versions, if it commits.
    pub fn writes_last(&self) -> BTreeMap<&[u8], WriteKind> {
        let mut writes = BTreeMap::new();
        for op in &self.ops {
            if let Op::Write { key, kind } = op {
                writes.insert(key.as_slice(), *kind);
            }
        }
        writes
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub txns: Vec<Txn>,
}

impl History {
    pub fn new(txns: Vec<Txn>) -> History {
        History { txns }
    }
}

/// What makes a history malformed (see the module's invariants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformation {
    /// Invariant 1.
    IdDuplicate,
    /// Invariant 2.
    CommitNotAfterSnapshot,
    /// Invariant 3.
    CommitDuplicate,
    /// Invariant 4.
    RangeInverted,
}

/// The first way a history breaks snapshot isolation. `op` is the index of
/// the operation in the reader's `ops`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    Malformed {
        txn: TxnId,
        problem: Malformation,
    },
    /// Observed a version its writer never committed.
    DirtyRead {
        reader: TxnId,
        op: usize,
        key: Key,
        writer: TxnId,
    },
    /// Observed a version committed after the reader's snapshot.
    FutureRead {
        reader: TxnId,
        op: usize,
        key: Key,
        writer: TxnId,
    },
    /// Observed a version that does not exist: the writer is unknown or put no value for this key.
    VersionUnknown {
        reader: TxnId,
        op: usize,
        key: Key,
        writer: TxnId,
    },
    /// Observed something other than its snapshot plus its own writes (stale, missing or extra).
    InconsistentRead {
        reader: TxnId,
        op: usize,
        key: Key,
        observed: Option<TxnId>,
        expected: Option<TxnId>,
    },
    ScanOutOfRange {
        reader: TxnId,
        op: usize,
        key: Key,
    },
    /// Two concurrent committed transactions both wrote `key`; `first` committed first.
    LostUpdate {
        key: Key,
        first: TxnId,
        second: TxnId,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    Ww,
    Wr,
    Rw,
}

/// `from` must precede `to` in any equivalent serial order, because of `key`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: TxnId,
    pub to: TxnId,
    pub kind: EdgeKind,
    pub key: Key,
    /// The read side of the edge was a range scan (a phantom, for an rw edge to an insert).
    pub via_scan: bool,
}

/// The dependency graph of a history's committed transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: BTreeSet<TxnId>,
    pub edges: BTreeSet<Edge>,
}

/// A cycle of the dependency graph: each edge's `to` is the next edge's `from`,
/// and the last edge returns to the first edge's `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub edges: Vec<Edge>,
}

impl Cycle {
    pub fn txns(&self) -> Vec<TxnId> {
        self.edges.iter().map(|e| e.from).collect()
    }

    pub fn kinds(&self) -> Vec<EdgeKind> {
        self.edges.iter().map(|e| e.kind).collect()
    }
}

/// Check snapshot isolation (see the module docs); the first violation found
/// is returned, in history order.
pub fn check_snapshot_isolation(history: &History) -> Result<(), Violation> {
    let index = Index::new(history)?;
    for txn in &history.txns {
        check_reads(&index, txn)?;
    }
    check_first_updater_wins(&index)
}

/// The dependency graph of the committed transactions (see the module docs).
/// Panics on a malformed history.
pub fn dependency_graph(history: &History) -> Graph {
    let index = Index::new(history).unwrap_or_else(|violation| panic!("{violation}"));
    let mut graph = Graph::default();
    for txn in history.txns.iter().filter(|t| t.commit().is_some()) {
        graph.nodes.insert(txn.id);
        add_read_edges(&index, txn, &mut graph);
    }
    for (key, chain) in &index.chains {
        for pair in chain.windows(2) {
            graph.add(pair[0].writer, pair[1].writer, EdgeKind::Ww, key, false);
        }
    }
    graph
}

/// Serializable when the dependency graph is acyclic; otherwise one cycle.
pub fn check_serializable(history: &History) -> Result<(), Cycle> {
    match dependency_graph(history).find_cycle() {
        Some(cycle) => Err(cycle),
        None => Ok(()),
    }
}

/// One committed version of a key.
#[derive(Clone, Copy, Debug)]
struct Version {
    writer: TxnId,
    snapshot: Timestamp,
    commit: Timestamp,
    kind: WriteKind,
}

/// The history, indexed: transactions by id, and each key's committed
/// versions oldest first.
struct Index<'h> {
    txns: BTreeMap<TxnId, &'h Txn>,
    chains: BTreeMap<&'h [u8], Vec<Version>>,
}

impl<'h> Index<'h> {
    fn new(history: &'h History) -> Result<Index<'h>, Violation> {
        let mut index = Index { txns: BTreeMap::new(), chains: BTreeMap::new() };
        let mut commits = BTreeSet::new();
        for txn in &history.txns {
            check_well_formed(txn, &mut commits).map_err(|problem| Violation::Malformed { txn: txn.id, problem })?;
            if index.txns.insert(txn.id, txn).is_some() {
                return Err(Violation::Malformed { txn: txn.id, problem: Malformation::IdDuplicate });
            }
            index.add_versions(txn);
        }
        for chain in index.chains.values_mut() {
            chain.sort_by_key(|v| v.commit);
        }
        Ok(index)
    }

    fn add_versions(&mut self, txn: &'h Txn) {
        let Some(commit) = txn.commit() else { return };
        for (key, kind) in txn.writes_last() {
            let version = Version { writer: txn.id, snapshot: txn.snapshot, commit, kind };
            self.chains.entry(key).or_default().push(version);
        }
    }

    fn chain(&self, key: &[u8]) -> &[Version] {
        self.chains.get(key).map_or(&[], Vec::as_slice)
    }

    /// The newest version of `key` in `snapshot`.
    fn visible(&self, key: &[u8], snapshot: Timestamp) -> Option<&Version> {
        self.chain(key).iter().rev().find(|v| v.commit <= snapshot)
    }

    /// Keys in `range` with at least one committed version.
    fn keys_in(&self, range: &'h Range<Key>) -> impl Iterator<Item = &'h [u8]> + '_ {
        let bounds = (Bound::Included(range.start.as_slice()), Bound::Excluded(range.end.as_slice()));
        self.chains.range::<[u8], _>(bounds).map(|(key, _)| *key)
    }
}

fn check_well_formed(txn: &Txn, commits: &mut BTreeSet<Timestamp>) -> Result<(), Malformation> {
    if let Some(commit) = txn.commit() {
        if commit <= txn.snapshot {
            return Err(Malformation::CommitNotAfterSnapshot);
        }
        if !commits.insert(commit) {
            return Err(Malformation::CommitDuplicate);
        }
    }
    let inverted = |op: &Op| matches!(op, Op::Scan { range, .. } if range.start > range.end);
    if txn.ops.iter().any(inverted) {
        return Err(Malformation::RangeInverted);
    }
    Ok(())
}

/// A transaction's own writes so far, while walking its operations.
type OwnWrites<'h> = BTreeMap<&'h [u8], WriteKind>;

fn check_reads<'h>(index: &Index<'h>, txn: &'h Txn) -> Result<(), Violation> {
    let mut own = OwnWrites::new();
    for (op, operation) in txn.ops.iter().enumerate() {
        match operation {
            Op::Read { key, observed } => check_observation(index, txn, &own, op, key, *observed)?,
            Op::Write { key, kind } => {
                own.insert(key, *kind);
            }
            Op::Scan { range, observed } => check_scan(index, txn, &own, op, range, observed)?,
        }
    }
    Ok(())
}

fn check_scan<'h>(
    index: &Index<'h>,
    txn: &'h Txn,
    own: &OwnWrites<'h>,
    op: usize,
    range: &'h Range<Key>,
    observed: &'h BTreeMap<Key, TxnId>,
) -> Result<(), Violation> {
    if let Some(key) = observed.keys().find(|k| !in_range(range, k)) {
        return Err(Violation::ScanOutOfRange { reader: txn.id, op, key: key.clone() });
    }
    let mut keys: BTreeSet<&[u8]> = index.keys_in(range).collect();
    keys.extend(own.keys().copied().filter(|k| in_range(range, k)));
    keys.extend(observed.keys().map(Vec::as_slice));
    for key in keys {
        check_observation(index, txn, own, op, key, observed.get(key).copied())?;
    }
    Ok(())
}

fn in_range(range: &Range<Key>, key: &[u8]) -> bool {
    range.start.as_slice() <= key && key < range.end.as_slice()
}

fn check_observation(
    index: &Index,
    txn: &Txn,
    own: &OwnWrites,
    op: usize,
    key: &[u8],
    observed: Option<TxnId>,
) -> Result<(), Violation> {
    let expected = match own.get(key) {
        Some(WriteKind::Put) => Some(txn.id),
        Some(WriteKind::Delete) => None,
        None => index.visible(key, txn.snapshot).filter(|v| v.kind == WriteKind::Put).map(|v| v.writer),
    };
    if observed == expected {
        return Ok(());
    }
    let key = key.to_vec();
    let reader = txn.id;
    let inconsistent = Violation::InconsistentRead { reader, op, key: key.clone(), observed, expected };
    let Some(writer) = observed.filter(|w| *w != reader) else { return Err(inconsistent) };
    let wrote = index.txns.get(&writer).and_then(|w| Some((w.commit(), *w.writes_last().get(key.as_slice())?)));
    Err(match wrote {
        None | Some((_, WriteKind::Delete)) => Violation::VersionUnknown { reader, op, key, writer },
        Some((None, _)) => Violation::DirtyRead { reader, op, key, writer },
        Some((Some(commit), _)) if commit > txn.snapshot => Violation::FutureRead { reader, op, key, writer },
        Some(_) => inconsistent,
    })
}

/// Versions are in commit order, so the second of two consecutive versions
/// conflicts with any earlier one exactly when it conflicts with the first.
fn check_first_updater_wins(index: &Index) -> Result<(), Violation> {
    for (key, chain) in &index.chains {
        for pair in chain.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            if first.commit > second.snapshot {
                return Err(Violation::LostUpdate { key: key.to_vec(), first: first.writer, second: second.writer });
            }
        }
    }
    Ok(())
}

fn add_read_edges<'h>(index: &Index<'h>, txn: &'h Txn, graph: &mut Graph) {
    let mut own = OwnWrites::new();
    for operation in &txn.ops {
        match operation {
            Op::Read { key, observed } if !own.contains_key(key.as_slice()) => {
                add_observation_edges(index, txn, key, *observed, false, graph);
            }
            Op::Read { .. } => {}
            Op::Write { key, kind } => {
                own.insert(key, *kind);
            }
            Op::Scan { range, observed } => {
                for key in index.keys_in(range).filter(|k| !own.contains_key(k)) {
                    add_observation_edges(index, txn, key, observed.get(key).copied(), true, graph);
                }
            }
        }
    }
}

/// The wr edge into `reader` and the rw edge out of it for one observation
/// of `key` (see the module docs for absent keys).
fn add_observation_edges(
    index: &Index,
    reader: &Txn,
    key: &[u8],
    observed: Option<TxnId>,
    via_scan: bool,
    graph: &mut Graph,
) {
    let chain = index.chain(key);
    let (writer, overwriter) = match observed {
        Some(writer) => {
            // A version nobody committed has no place in the graph (an SI violation).
            let Some(i) = chain.iter().position(|v| v.writer == writer) else { return };
            (Some(writer), chain.get(i + 1).map(|v| v.writer))
        }
        None => absence_neighbours(chain, reader.snapshot),
    };
    if let Some(writer) = writer {
        graph.add(writer, reader.id, EdgeKind::Wr, key, via_scan);
    }
    if let Some(overwriter) = overwriter {
        graph.add(reader.id, overwriter, EdgeKind::Rw, key, via_scan);
    }
}

/// For a key seen absent in `snapshot`: the delete that made it absent (none
/// when it has been absent since the start) and the next put. The newest
/// delete in the snapshot stands for what was seen (exact when SI holds).
fn absence_neighbours(chain: &[Version], snapshot: Timestamp) -> (Option<TxnId>, Option<TxnId>) {
    let is_delete = |v: &Version| v.kind == WriteKind::Delete;
    let end = chain.iter().rposition(|v| v.commit <= snapshot && is_delete(v)).map_or(0, |i| i + 1);
    let put_before = chain[..end].iter().rposition(|v| !is_delete(v));
    let deleter = put_before.map(|p| chain[p + 1].writer);
    let putter = chain[end..].iter().find(|v| !is_delete(v)).map(|v| v.writer);
    (deleter, putter)
}

/// Where the depth-first search has been: on the current path (at that
/// depth, i.e. path length when entered) or finished.
#[derive(Clone, Copy)]
enum Visit {
    OnPath(usize),
    Done,
}

impl Graph {
    fn add(&mut self, from: TxnId, to: TxnId, kind: EdgeKind, key: &[u8], via_scan: bool) {
        if from != to {
            self.edges.insert(Edge { from, to, kind, key: key.to_vec(), via_scan });
        }
    }

    pub fn has_edge(&self, from: TxnId, to: TxnId, kind: EdgeKind) -> bool {
        self.edges.iter().any(|e| e.from == from && e.to == to && e.kind == kind)
    }

    /// A cycle, if there is one; deterministic (smallest ids explored first).
    pub fn find_cycle(&self) -> Option<Cycle> {
        let mut adjacency: BTreeMap<TxnId, Vec<&Edge>> = BTreeMap::new();
        for edge in &self.edges {
            adjacency.entry(edge.from).or_default().push(edge);
        }
        let mut visits = BTreeMap::new();
        for &root in &self.nodes {
            if !visits.contains_key(&root) {
                if let Some(cycle) = cycle_from(root, &adjacency, &mut visits) {
                    return Some(cycle);
                }
            }
        }
        None
    }
}

fn cycle_from(
    root: TxnId,
    adjacency: &BTreeMap<TxnId, Vec<&Edge>>,
    visits: &mut BTreeMap<TxnId, Visit>,
) -> Option<Cycle> {
    let mut path: Vec<&Edge> = Vec::new();
    let mut stack = vec![(root, 0usize)];
    visits.insert(root, Visit::OnPath(0));
    while let Some(&(node, next)) = stack.last() {
        let Some(&edge) = adjacency.get(&node).and_then(|out| out.get(next)) else {
            visits.insert(node, Visit::Done);
            stack.pop();
            path.pop();
            continue;
        };
        stack.last_mut().expect("stack is not empty").1 += 1;
        match visits.get(&edge.to) {
            Some(Visit::OnPath(depth)) => {
                let edges = path[*depth..].iter().chain([&edge]).map(|e| (*e).clone()).collect();
                return Some(Cycle { edges });
            }
            Some(Visit::Done) => {}
            None => {
                visits.insert(edge.to, Visit::OnPath(path.len() + 1));
                path.push(edge);
                stack.push((edge.to, 0));
            }
        }
    }
    None
}

/// A key as text: printable ASCII as is, other bytes escaped.
struct KeyText<'a>(&'a [u8]);

impl fmt::Display for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

struct VersionText(Option<TxnId>);

impl fmt::Display for VersionText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(writer) => write!(f, "{writer}'s version"),
            None => f.write_str("absent"),
        }
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}", self.0)
    }
}

impl fmt::Display for Malformation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformation::IdDuplicate => "its id is used twice",
            Malformation::CommitNotAfterSnapshot => "its commit timestamp is not after its snapshot",
            Malformation::CommitDuplicate => "its commit timestamp is used twice",
            Malformation::RangeInverted => "it scans a range whose start is after its end",
        })
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Malformed { txn, problem } => write!(f, "malformed history: {txn}: {problem}"),
            Violation::DirtyRead { reader, op, key, writer } => {
                write!(f, "dirty read: {reader} op {op} saw {writer}'s uncommitted {}", KeyText(key))
            }
            Violation::FutureRead { reader, op, key, writer } => {
                write!(f, "{reader} op {op} saw {writer}'s {}, committed after its snapshot", KeyText(key))
            }
            Violation::VersionUnknown { reader, op, key, writer } => {
                write!(f, "{reader} op {op} saw a version of {} that {writer} never wrote", KeyText(key))
            }
            Violation::InconsistentRead { reader, op, key, observed, expected } => write!(
                f,
                "{reader} op {op} saw {} {}, but its snapshot and own writes give {}",
                KeyText(key),
                VersionText(*observed),
                VersionText(*expected)
            ),
            Violation::ScanOutOfRange { reader, op, key } => {
                write!(f, "{reader} op {op} scan returned {}, outside its range", KeyText(key))
            }
            Violation::LostUpdate { key, first, second } => {
                write!(f, "lost update: concurrent {first} and {second} both committed writes to {}", KeyText(key))
            }
        }
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
        })
    }
}

impl Edge {
    /// `T1 -rw("y" scan)-> `: the edge without its target.
    fn fmt_tail(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scan = if self.via_scan { " scan" } else { "" };
        write!(f, "{} -{}({}{scan})-> ", self.from, self.kind, KeyText(&self.key))
    }
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_tail(f)?;
        write!(f, "{}", self.to)
    }
}

/// `cycle: T1 -rw("y")-> T2 -rw("x")-> T1`.
impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cycle: ")?;
        for edge in &self.edges {
            edge.fmt_tail(f)?;
        }
        match self.edges.first() {
            Some(edge) => write!(f, "{}", edge.from),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// SI holds, serializability does not; returns the cycle for the caller to explain.
    fn check_si_only(history: &History) -> Cycle {
        assert_eq!(check_snapshot_isolation(history), Ok(()));
        check_serializable(history).expect_err("history should not be serializable")
    }

    fn check_both(history: &History) {
        assert_eq!(check_snapshot_isolation(history), Ok(()));
        if let Err(cycle) = check_serializable(history) {
            panic!("{cycle}");
        }
    }

    /// Setup transaction T0 puts `keys` and commits at 1.
    fn setup(keys: &[&[u8]]) -> Txn {
        keys.iter().fold(Txn::committed(0, 0, 1), |txn, key| txn.put(key))
    }

    #[test]
    fn write_skew_is_si_but_not_serializable() {
        let history = History::new(vec![
            setup(&[b"x", b"y"]),
            Txn::committed(1, 1, 2).read(b"x", Some(0)).read(b"y", Some(0)).put(b"x"),
            Txn::committed(2, 1, 3).read(b"x", Some(0)).read(b"y", Some(0)).put(b"y"),
        ]);
        let cycle = check_si_only(&history);
        assert_eq!(cycle.to_string(), r#"cycle: T1 -rw("y")-> T2 -rw("x")-> T1"#);
    }

    /// Fekete, O'Neil, O'Neil 2004: T1 deposits to savings y, T2 withdraws
    /// from checking x with a penalty judged on x + y, and read-only T3 sees
    /// T1's deposit but not T2's withdrawal: T2 -rw-> T1 -wr-> T3 -rw-> T2.
    #[test]
    fn read_only_anomaly_is_si_but_not_serializable() {
        let history = History::new(vec![
            setup(&[b"x", b"y"]),
            Txn::committed(2, 1, 4).read(b"x", Some(0)).read(b"y", Some(0)).put(b"x"),
            Txn::committed(1, 1, 2).read(b"y", Some(0)).put(b"y"),
            Txn::committed(3, 2, 3).read(b"x", Some(0)).read(b"y", Some(1)),
        ]);
        let cycle = check_si_only(&history);
        assert_eq!(cycle.to_string(), r#"cycle: T1 -wr("y")-> T3 -rw("x")-> T2 -rw("y")-> T1"#);
        let without_reader = History::new(history.txns[..3].to_vec());
        check_both(&without_reader);
    }

    /// Each transaction counts the keys in [a, m) and inserts one if it saw
    /// fewer than three; only the scans connect them.
    #[test]
    fn phantom_is_si_but_not_serializable() {
        let seen: &[(&[u8], u64)] = &[(b"a", 0), (b"c", 0)];
        let history = History::new(vec![
            setup(&[b"a", b"c", b"z"]),
            Txn::committed(1, 1, 2).scan(b"a"..b"m", seen).put(b"b"),
            Txn::committed(2, 1, 3).scan(b"a"..b"m", seen).put(b"d"),
        ]);
        let cycle = check_si_only(&history);
        assert!(cycle.edges.iter().all(|e| e.kind == EdgeKind::Rw && e.via_scan), "{cycle}");
        assert_eq!(cycle.to_string(), r#"cycle: T1 -rw("d" scan)-> T2 -rw("b" scan)-> T1"#);
    }

    #[test]
    fn lost_update_violates_si() {
        let history = History::new(vec![
            setup(&[b"x"]),
            Txn::committed(1, 1, 2).read(b"x", Some(0)).put(b"x"),
            Txn::committed(2, 1, 3).read(b"x", Some(0)).put(b"x"),
        ]);
        let violation = check_snapshot_isolation(&history).unwrap_err();
        assert_eq!(violation, Violation::LostUpdate { key: b"x".to_vec(), first: TxnId(1), second: TxnId(2) });
        assert_eq!(violation.to_string(), r#"lost update: concurrent T1 and T2 both committed writes to "x""#);
        assert!(check_serializable(&history).is_err());
    }

    #[test]
    fn dirty_read_violates_si() {
        let history =
            History::new(vec![Txn::aborted(1, 0).put(b"x"), Txn::committed(2, 0, 1).read(b"x", Some(1)).put(b"y")]);
        let violation = check_snapshot_isolation(&history).unwrap_err();
        assert_eq!(violation, Violation::DirtyRead { reader: TxnId(2), op: 0, key: b"x".to_vec(), writer: TxnId(1) });
    }

    #[test]
    fn read_from_after_snapshot_violates_si() {
        let history =
            History::new(vec![Txn::committed(1, 0, 2).put(b"x"), Txn::committed(2, 1, 3).read(b"x", Some(1))]);
        let violation = check_snapshot_isolation(&history).unwrap_err();
        assert!(matches!(violation, Violation::FutureRead { reader: TxnId(2), .. }), "{violation}");
    }

    #[test]
    fn scan_missing_or_extra_key_violates_si() {
        let base = || vec![setup(&[b"a", b"c"]), Txn::committed(1, 1, 2).delete(b"c")];
        let missing = Txn::committed(2, 2, 3).put(b"b").scan(b"a"..b"z", &[(b"a", 0)]);
        let violation = check_snapshot_isolation(&History::new([base(), vec![missing]].concat())).unwrap_err();
        let expected = Violation::InconsistentRead {
            reader: TxnId(2),
            op: 1,
            key: b"b".to_vec(),
            observed: None,
            expected: Some(TxnId(2)),
        };
        assert_eq!(violation, expected);
        let extra = Txn::committed(2, 2, 3).scan(b"a"..b"z", &[(b"a", 0), (b"c", 0)]);
        let violation = check_snapshot_isolation(&History::new([base(), vec![extra]].concat())).unwrap_err();
        assert!(matches!(violation, Violation::InconsistentRead { observed: Some(TxnId(0)), expected: None, .. }));
    }

    #[test]
    fn serial_history_passes_both() {
        let history = History::new(vec![
            setup(&[b"x"]),
            Txn::committed(1, 1, 2).read(b"x", Some(0)).put(b"x").read(b"x", Some(1)),
            Txn::aborted(2, 2).read(b"x", Some(1)).delete(b"x"),
            Txn::committed(3, 2, 3).scan(b"a"..b"z", &[(b"x", 1)]).delete(b"x").scan(b"a"..b"z", &[]),
            Txn::committed(4, 3, 4).read(b"x", None).put(b"y"),
        ]);
        check_both(&history);
        let graph = dependency_graph(&history);
        assert!(graph.has_edge(TxnId(0), TxnId(1), EdgeKind::Ww));
        assert!(graph.has_edge(TxnId(3), TxnId(4), EdgeKind::Wr), "T4 saw x absent because T3 deleted it");
    }

    #[test]
    fn malformed_history_is_reported() {
        let history = History::new(vec![Txn::committed(1, 0, 1), Txn::committed(1, 1, 2)]);
        let violation = check_snapshot_isolation(&history).unwrap_err();
        assert_eq!(violation, Violation::Malformed { txn: TxnId(1), problem: Malformation::IdDuplicate });
    }

    const KEY_COUNT: u8 = 6;
    /// Few keys and transactions for the concurrent runs: many conflicts, and
    /// every serial order can be tried.
    const KEY_COUNT_CONCURRENT: u8 = 3;
    const TXNS_CONCURRENT_MAX: usize = 5;

    #[derive(Clone, Debug)]
    enum Step {
        Read(u8),
        Put(u8),
        Delete(u8),
        Scan(u8, u8),
    }

    fn step_strategy(keys: u8) -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..keys).prop_map(Step::Read),
            (0..keys).prop_map(Step::Put),
            (0..keys).prop_map(Step::Delete),
            (0..keys, 1..=keys).prop_map(|(lo, len)| Step::Scan(lo, lo + len)),
        ]
    }

    /// Each transaction's steps and whether it aborts.
    fn specs_strategy(keys: u8, txns_max: usize) -> impl Strategy<Value = Vec<(Vec<Step>, bool)>> {
        let txn = (proptest::collection::vec(step_strategy(keys), 0..6), proptest::bool::weighted(0.2));
        proptest::collection::vec(txn, 1..=txns_max)
    }

    fn key_of(i: u8) -> Key {
        vec![b'k', b'0' + i]
    }

    /// Run the transactions one after another on a `BTreeMap` of key ->
    /// writer, recording what each saw.
    fn run_serial(specs: &[(Vec<Step>, bool)]) -> History {
        let mut model = BTreeMap::new();
        let mut now = 0;
        let mut history = History::default();
        for (i, (steps, aborts)) in specs.iter().enumerate() {
            let id = TxnId(i as u64 + 1);
            let mut view = model.clone();
            let ops = steps.iter().map(|step| run_step(&mut view, id, step)).collect();
            let mut txn = Txn { id, snapshot: Timestamp(now), outcome: Outcome::Aborted, ops };
            if !aborts {
                now += 1;
                txn.outcome = Outcome::Committed(Timestamp(now));
                model = view;
            }
            history.txns.push(txn);
        }
        history
    }

    fn run_step(view: &mut BTreeMap<Key, TxnId>, id: TxnId, step: &Step) -> Op {
        match *step {
            Step::Read(k) => Op::Read { key: key_of(k), observed: view.get(&key_of(k)).copied() },
            Step::Put(k) => {
                view.insert(key_of(k), id);
                Op::Write { key: key_of(k), kind: WriteKind::Put }
            }
            Step::Delete(k) => {
                view.remove(&key_of(k));
                Op::Write { key: key_of(k), kind: WriteKind::Delete }
            }
            Step::Scan(lo, hi) => {
                let range = key_of(lo)..key_of(hi);
                let observed = view.range(range.clone()).map(|(k, w)| (k.clone(), *w)).collect();
                Op::Scan { range, observed }
            }
        }
    }

    /// Committed versions of each key in commit order: (commit, writer, kind).
    type Chains = BTreeMap<Key, Vec<(Timestamp, TxnId, WriteKind)>>;

    /// What a snapshot holds for one key: the writer of the last put (`None`
    /// for the initial state), and whether the key is present.
    fn state_at(chains: &Chains, key: &[u8], snapshot: Timestamp) -> (Option<TxnId>, bool) {
        let seen: &[_] = chains.get(key).map_or(&[], |c| c.as_slice());
        let seen: Vec<_> = seen.iter().filter(|(commit, ..)| *commit <= snapshot).collect();
        let put_last = seen.iter().rev().find(|(.., kind)| *kind == WriteKind::Put).map(|(_, w, _)| *w);
        (put_last, seen.last().is_some_and(|(.., kind)| *kind == WriteKind::Put))
    }

    /// Run the transactions concurrently under SI with first-committer-wins,
    /// interleaved by `schedule`: each one begins (takes its snapshot), runs
    /// one step per turn, and then commits, or aborts (by choice or on a
    /// write conflict).
    fn run_concurrent(specs: &[(Vec<Step>, bool)], schedule: &[usize]) -> History {
        let mut chains = Chains::new();
        let mut now = Timestamp(0);
        let mut txns: Vec<Txn> = (0..specs.len()).map(|i| Txn::aborted(i as u64 + 1, 0)).collect();
        let mut turns = vec![0usize; specs.len()];
        for pick in schedule.iter().cycle() {
            let open: Vec<usize> = (0..specs.len()).filter(|&i| turns[i] <= specs[i].0.len() + 1).collect();
            let Some(&i) = open.get(pick % open.len().max(1)) else { break };
            let (steps, aborts) = &specs[i];
            let txn = &mut txns[i];
            match turns[i] {
                0 => txn.snapshot = now,
                t if t <= steps.len() => txn.ops.push(run_step_concurrent(&chains, txn, &steps[t - 1])),
                _ => finish_concurrent(&mut chains, &mut now, txn, *aborts),
            }
            turns[i] += 1;
        }
        History::new(txns)
    }

    fn run_step_concurrent(chains: &Chains, txn: &Txn, step: &Step) -> Op {
        let mut view: BTreeMap<Key, TxnId> = BTreeMap::new();
        for key in chains.keys() {
            if let (Some(writer), true) = state_at(chains, key, txn.snapshot) {
                view.insert(key.clone(), writer);
            }
        }
        for op in &txn.ops {
            run_step_again(&mut view, txn.id, op);
        }
        run_step(&mut view, txn.id, step)
    }

    /// Replay an earlier write of the transaction onto its view.
    fn run_step_again(view: &mut BTreeMap<Key, TxnId>, id: TxnId, op: &Op) {
        match op {
            Op::Write { key, kind: WriteKind::Put } => {
                view.insert(key.clone(), id);
            }
            Op::Write { key, kind: WriteKind::Delete } => {
                view.remove(key);
            }
            _ => {}
        }
    }

    fn finish_concurrent(chains: &mut Chains, now: &mut Timestamp, txn: &mut Txn, aborts: bool) {
        let writes = txn.writes_last();
        let newer = |key: &&[u8]| chains.get(*key).and_then(|c| c.last()).is_some_and(|v| v.0 > txn.snapshot);
        if aborts || writes.keys().any(newer) {
            return;
        }
        *now = Timestamp(now.0 + 1);
        for (key, kind) in writes {
            chains.entry(key.to_vec()).or_default().push((*now, txn.id, kind));
        }
        txn.outcome = Outcome::Committed(*now);
    }

    /// Brute force: is there an order of the committed transactions that
    /// keeps each key's versions in commit order and in which every read and
    /// scan sees what it saw in its snapshot?
    fn serial_order_exists(history: &History) -> bool {
        let mut committed: Vec<&Txn> = history.txns.iter().filter(|t| t.commit().is_some()).collect();
        committed.sort_by_key(|t| t.commit());
        let mut chains = Chains::new();
        for txn in &committed {
            for (key, kind) in txn.writes_last() {
                chains.entry(key.to_vec()).or_default().push((txn.commit().unwrap(), txn.id, kind));
            }
        }
        permutations(committed.len()).iter().any(|order| {
            let order: Vec<&Txn> = order.iter().map(|&i| committed[i]).collect();
            serial_order_fits(&chains, &order)
        })
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let shorter = permutations(n - 1);
        let insert_at = |p: &Vec<usize>, at: usize| [&p[..at], &[n - 1], &p[at..]].concat();
        shorter.iter().flat_map(|p| (0..n).map(move |at| insert_at(p, at))).collect()
    }

    fn serial_order_fits(chains: &Chains, order: &[&Txn]) -> bool {
        // Each key's versions applied so far, as (commit, writer, kind).
        let mut applied = Chains::new();
        for txn in order {
            let mut own = BTreeSet::new();
            for op in &txn.ops {
                let keys: Vec<&[u8]> = match op {
                    Op::Read { key, .. } => vec![key],
                    Op::Write { key, .. } => {
                        own.insert(key.as_slice());
                        vec![]
                    }
                    Op::Scan { range, .. } => {
                        chains.keys().filter(|k| range.start <= **k && **k < range.end).map(Vec::as_slice).collect()
                    }
                };
                let far = Timestamp(u64::MAX);
                let differs = |k: &&[u8]| state_at(&applied, k, far) != state_at(chains, k, txn.snapshot);
                if keys.iter().filter(|k| !own.contains(**k)).any(differs) {
                    return false;
                }
            }
            for (key, kind) in txn.writes_last() {
                let versions = applied.entry(key.to_vec()).or_default();
                if versions.last().is_some_and(|v| v.0 > txn.commit().unwrap()) {
                    return false;
                }
                versions.push((txn.commit().unwrap(), txn.id, kind));
            }
        }
        true
    }

    /// Change what one read or scan observed, so it no longer matches its snapshot.
    fn corrupt(op: &mut Op) {
        match op {
            Op::Read { observed, .. } => *observed = if observed.is_some() { None } else { Some(TxnId(1)) },
            Op::Scan { range, observed } => {
                if observed.remove(&range.start).is_none() {
                    observed.insert(range.start.clone(), TxnId(1));
                }
            }
            Op::Write { .. } => unreachable!("only reads and scans are corrupted"),
        }
    }

    proptest! {
        #[test]
        fn serial_histories_pass_both(specs in specs_strategy(KEY_COUNT, 12)) {
            check_both(&run_serial(&specs));
        }

        #[test]
        fn corrupted_serial_history_fails_si(specs in specs_strategy(KEY_COUNT, 12), pick in any::<proptest::sample::Index>()) {
            let mut history = run_serial(&specs);
            let mut reads: Vec<&mut Op> = history
                .txns
                .iter_mut()
                .flat_map(|t| t.ops.iter_mut())
                .filter(|op| !matches!(op, Op::Write { .. }))
                .collect();
            prop_assume!(!reads.is_empty());
            let i = pick.index(reads.len());
            corrupt(reads[i]);
            prop_assert!(check_snapshot_isolation(&history).is_err());
        }
    }

    proptest! {
        // A cycle turns up in about 1 run in 60; this many cases still take well under a second.
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// SI executions pass the SI check, and the graph has a cycle exactly
        /// when no serial order explains what every transaction saw.
        #[test]
        fn concurrent_histories_match_brute_force(
            specs in specs_strategy(KEY_COUNT_CONCURRENT, TXNS_CONCURRENT_MAX),
            schedule in proptest::collection::vec(any::<usize>(), 1..40),
        ) {
            let history = run_concurrent(&specs, &schedule);
            prop_assert_eq!(check_snapshot_isolation(&history), Ok(()));
            prop_assert_eq!(check_serializable(&history).is_ok(), serial_order_exists(&history));
        }
    }
}
