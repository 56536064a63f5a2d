//! Random multi-document transactions over the wire, their history checked
//! (`txn-check`): many clients, each through the Rust driver, run short
//! transactions of point reads, range reads (through an index and through a
//! collection scan), inserts, updates and deletes on a few keys, retrying
//! as a driver's `withTransaction` would; every transaction's reads and
//! writes are recorded client side and the history is checked with
//! `testkit::history`: snapshot isolation always, and under serializable
//! also an acyclic dependency graph (no write skew, no phantom).
//!
//! Each document `{_id: "k007", g: 7, w: <writer>}` names the transaction
//! that wrote it (`w`), so a read records whose version it saw. A write
//! goes through `findOneAndUpdate`/`findOneAndDelete` returning the
//! document before, so it records what it overwrote too. The server's
//! timestamps come back as MongoDB's do: the `operationTime` of a
//! transaction's first statement is its snapshot, that of its commit the
//! commit timestamp (`commands::cluster_time_of`, its `increment`). A
//! fresh session per transaction keeps the session's operation time that
//! of the transaction alone.

use crate::procs::start_arbordb;
use crate::smallbank::Level;
use crate::BenchResult;
use clap::Args;
use mongodb::bson::{doc, Document, Timestamp};
use mongodb::options::{ReadConcern, ReturnDocument};
use mongodb::{Client, ClientSession, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::history::{self, History};

#[derive(Args, Debug, Clone)]
pub struct TxnCheckArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Seconds per isolation level.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Keys the transactions touch (few keys, many conflicts).
    #[arg(long, default_value_t = 24)]
    keys: u32,
    /// Isolation levels to run, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "snapshot,serializable")]
    isolation: Vec<Level>,
    #[command(flatten)]
    server: crate::procs::ServerArgs,
}

/// History timestamps are engine timestamps times this, so that read-only
/// transactions get unique commit points just after their snapshot.
pub(crate) const SCALE: u64 = 1 << 20;

/// What one isolation level's run did.
#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    isolation: String,
    committed: u64,
    read_only: u64,
    aborted: u64,
    write_conflicts: u64,
    ops: u64,
    /// Range reads recorded, through an index and through a scan.
    index_ranges: u64,
    scan_ranges: u64,
    seconds: f64,
}

pub fn run(a: TxnCheckArgs) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut summaries = Vec::new();
        for level in &a.isolation {
            let summary = check_level(&a, *level).await?;
            println!("{}", serde_json::to_string(&summary)?);
            summaries.push(summary);
        }
        if let Some(out) = &a.server.out {
            std::fs::write(out, serde_json::to_string_pretty(&summaries)?)?;
        }
        Ok(())
    })
}

fn key(n: u32) -> String {
    format!("k{n:03}")
}

/// One run: a fresh server, `clients` tasks for `seconds`, then the checks.
async fn check_level(a: &TxnCheckArgs, level: Level) -> BenchResult<Summary> {
    // Keys sort as their numbers (`key`), which the range reads rely on.
    if a.keys > 1000 {
        return Err("--keys must be at most 1000".into());
    }
    let server = start_arbordb(a.server.bin.as_deref(), 0, "txn-check").await?;
    let client = Client::with_uri_str(format!("mongodb://127.0.0.1:{}/?directConnection=true", server.port)).await?;
    let coll: Collection<Document> = client.database("h").collection("kv");
    coll.create_index(mongodb::IndexModel::builder().keys(doc! { "g": 1 }).build()).await?;
    let ids = Arc::new(AtomicU64::new(1));
    let until = Instant::now() + Duration::from_secs(a.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let (client, coll, ids) = (client.clone(), coll.clone(), ids.clone());
        let mut rng = StdRng::seed_from_u64(a.server.seed.wrapping_mul(1000).wrapping_add(c as u64));
        let keys = a.keys;
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            let mut summary = Summary::default();
            while Instant::now() < until {
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let mut session = client.start_session().await?;
                let record = one_transaction(&coll, &mut session, level, id, keys, &mut rng, &mut summary).await?;
                records.push(record);
            }
            BenchResult::Ok((records, summary))
        }));
    }
    let mut summary = Summary { isolation: format!("{level:?}").to_lowercase(), ..Summary::default() };
    let mut txns = Vec::new();
    for t in tasks {
        let (records, s) = t.await.map_err(|e| e.to_string())??;
        txns.extend(records);
        for (total, part) in [
            (&mut summary.committed, s.committed),
            (&mut summary.read_only, s.read_only),
            (&mut summary.aborted, s.aborted),
            (&mut summary.write_conflicts, s.write_conflicts),
            (&mut summary.ops, s.ops),
            (&mut summary.index_ranges, s.index_ranges),
            (&mut summary.scan_ranges, s.scan_ranges),
        ] {
            *total += part;
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    unique_read_only_commits(&mut txns);
    let history = History::new(txns);
    history::check_snapshot_isolation(&history).map_err(|v| format!("{level:?}: not snapshot isolation: {v}"))?;
    if level == Level::Serializable {
        history::check_serializable(&history).map_err(|c| format!("serializable: a cycle: {c:?}"))?;
    }
    check_final_state(&coll, &history, a.keys).await?;
    if summary.committed == 0 || summary.index_ranges == 0 || summary.scan_ranges == 0 {
        return Err(format!("the run checked too little: {summary:?}").into());
    }
    drop(server);
    Ok(summary)
}

/// The readConcern that asks for `level` in a transaction.
pub(crate) fn read_concern(level: Level) -> ReadConcern {
    match level {
        Level::Snapshot => ReadConcern::snapshot(),
        Level::Serializable => ReadConcern::custom("serializable"),
    }
}

/// The engine timestamp a cluster time stands for (its `time` holds the
/// high bits on top of the server's start second, which a run of this
/// size never reaches).
pub(crate) fn engine_ts(t: Timestamp) -> u64 {
    t.increment as u64
}

/// One transaction, retried by nobody (a conflict aborts it and is
/// recorded as such); returns its record.
async fn one_transaction(
    coll: &Collection<Document>,
    session: &mut ClientSession,
    level: Level,
    id: u64,
    keys: u32,
    rng: &mut StdRng,
    summary: &mut Summary,
) -> BenchResult<history::Txn> {
    session.start_transaction().read_concern(read_concern(level)).await?;
    let mut ops: Vec<history::Op> = Vec::new();
    let mut snapshot = None;
    let n_ops = rng.gen_range(1..=5);
    let mut failed = None;
    for _ in 0..n_ops {
        match one_op(coll, session, id, keys, rng, &mut ops, summary).await {
            Ok(()) => {}
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        snapshot = snapshot.or(session.operation_time().map(engine_ts));
        summary.ops += 1;
    }
    let snapshot = snapshot.unwrap_or(0) * SCALE;
    let wrote = ops.iter().any(|o| matches!(o, history::Op::Write { .. }));
    let outcome = match failed {
        Some(e) => Err(e),
        None => session.commit_transaction().await,
    };
    let record =
        |outcome| history::Txn { id: history::TxnId(id), snapshot: history::Timestamp(snapshot), outcome, ops };
    match outcome {
        Ok(()) => {
            summary.committed += 1;
            summary.read_only += u64::from(!wrote);
            Ok(record(commit_point(wrote, snapshot, session.operation_time())?))
        }
        Err(e) if e.contains_label("TransientTransactionError") => {
            summary.aborted += 1;
            if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 112) {
                summary.write_conflicts += 1;
            }
            let _ = session.abort_transaction().await;
            Ok(record(history::Outcome::Aborted))
        }
        Err(e) => Err(format!("transaction {id}: unexpected error: {e}").into()),
    }
}

/// The writer a document names, if there is one.
fn writer(d: &Option<Document>) -> BenchResult<Option<u64>> {
    match d {
        None => Ok(None),
        Some(d) => Ok(Some(d.get_i64("w").map_err(|e| format!("a document without w: {d}: {e}"))? as u64)),
    }
}

/// One random operation, recorded in `ops`.
async fn one_op(
    coll: &Collection<Document>,
    session: &mut ClientSession,
    id: u64,
    keys: u32,
    rng: &mut StdRng,
    ops: &mut Vec<history::Op>,
    summary: &mut Summary,
) -> Result<(), mongodb::error::Error> {
    let k = rng.gen_range(0..keys);
    let kb = key(k).into_bytes();
    let read = |key: Vec<u8>, observed: Option<u64>| history::Op::Read { key, observed: observed.map(history::TxnId) };
    match rng.gen_range(0..10) {
        0..=2 => {
            let found = coll.find_one(doc! { "_id": key(k) }).session(&mut *session).await?;
            ops.push(read(kb, writer(&found).map_err(bad)?));
        }
        3 | 4 => {
            let lo = rng.gen_range(0..keys);
            let hi = (lo + rng.gen_range(1..=keys / 3 + 1)).min(keys);
            let through_index = rng.gen_bool(0.5);
            let hint = if through_index {
                doc! { "g": 1 }
            } else {
                doc! { "$natural": 1 }
            };
            let filter = doc! { "g": { "$gte": lo as i32, "$lt": hi as i32 } };
            let mut cursor =
                coll.find(filter).hint(mongodb::options::Hint::Keys(hint)).batch_size(4).session(&mut *session).await?;
            let mut observed = std::collections::BTreeMap::new();
            while let Some(d) = cursor.next(&mut *session).await {
                let d = d?;
                let w = writer(&Some(d.clone())).map_err(bad)?.expect("a document");
                observed.insert(d.get_str("_id").map_err(|e| bad(e.into()))?.as_bytes().to_vec(), history::TxnId(w));
            }
            *(if through_index { &mut summary.index_ranges } else { &mut summary.scan_ranges }) += 1;
            ops.push(history::Op::Scan { range: key(lo).into_bytes()..key(hi).into_bytes(), observed });
        }
        5..=7 => {
            let before = coll
                .find_one_and_update(doc! { "_id": key(k) }, doc! { "$set": { "g": k as i32, "w": id as i64 } })
                .upsert(true)
                .return_document(ReturnDocument::Before)
                .session(&mut *session)
                .await?;
            ops.push(read(kb.clone(), writer(&before).map_err(bad)?));
            ops.push(history::Op::Write { key: kb, kind: history::WriteKind::Put });
        }
        _ => {
            let before = coll.find_one_and_delete(doc! { "_id": key(k) }).session(&mut *session).await?;
            let observed = writer(&before).map_err(bad)?;
            ops.push(read(kb.clone(), observed));
            if observed.is_some() {
                ops.push(history::Op::Write { key: kb, kind: history::WriteKind::Delete });
            }
        }
    }
    Ok(())
}

/// A committed transaction's place in the history: its commit timestamp
/// (the commit's `operationTime`) if it wrote, else a point just after
/// its snapshot (made unique by [`unique_read_only_commits`]).
pub(crate) fn commit_point(wrote: bool, snapshot: u64, op_time: Option<Timestamp>) -> BenchResult<history::Outcome> {
    let commit = match wrote {
        true => engine_ts(op_time.ok_or("a commit without operationTime")?) * SCALE,
        false => snapshot + 1,
    };
    Ok(history::Outcome::Committed(history::Timestamp(commit)))
}

/// A malformed document as the driver's error type, so it ends the run.
fn bad(e: Box<dyn std::error::Error + Send + Sync>) -> mongodb::error::Error {
    mongodb::error::Error::custom(e.to_string())
}

/// Read-only transactions commit at their snapshot; in the history each
/// gets its own point just after it (unique, and before the next commit).
pub(crate) fn unique_read_only_commits(txns: &mut [history::Txn]) {
    let mut next: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for t in txns.iter_mut() {
        if let history::Outcome::Committed(c) = t.outcome {
            if c.0 % SCALE != 0 {
                let k = next.entry(t.snapshot.0).or_insert(0);
                *k += 1;
                assert!(*k < SCALE, "fewer read-only transactions per snapshot than the scale");
                t.outcome = history::Outcome::Committed(history::Timestamp(t.snapshot.0 + *k));
            }
        }
    }
}

/// After the run, each key holds the last committed version of the
/// history (a put's writer, or nothing after a delete).
async fn check_final_state(coll: &Collection<Document>, history: &History, keys: u32) -> BenchResult<()> {
    let mut last: std::collections::BTreeMap<Vec<u8>, (u64, Option<u64>)> = std::collections::BTreeMap::new();
    for t in &history.txns {
        let history::Outcome::Committed(c) = t.outcome else { continue };
        for (k, kind) in t.writes_last() {
            let entry = last.entry(k.to_vec()).or_insert((0, None));
            if c.0 > entry.0 {
                *entry = (c.0, (kind == history::WriteKind::Put).then_some(t.id.0));
            }
        }
    }
    for n in 0..keys {
        let found = writer(&coll.find_one(doc! { "_id": key(n) }).await?)?;
        let want = last.get(key(n).as_bytes()).and_then(|(_, w)| *w);
        if found != want {
            return Err(format!("key {}: the server holds writer {found:?}, the history says {want:?}", key(n)).into());
        }
    }
    Ok(())
}
