//! W4 `tpcb`: pgbench's TPC-B-like transaction as documents, side by side
//! with `pgbench` (its own client) on PostgreSQL in the same run.
//!
//! The data is pgbench's at the same scale: per scale one branch, 10
//! tellers and 100,000 accounts, each document carrying pgbench's filler.
//! Two designs of the business transaction:
//! - `multi`: one multi-document transaction with pgbench's five statements
//!   (update the account, read its balance, update the teller, update the
//!   branch, insert into history), then commitTransaction: 6 round trips
//!   where pgbench's simple protocol takes 7 (BEGIN and END are its own).
//!   A transaction that meets a conflict (TransientTransactionError) is
//!   retried whole, as the drivers' `with_transaction` does; its latency
//!   counts every attempt.
//! - `single`: the business transaction is one `insertOne` into history;
//!   an applier task beside the clients folds new history documents into
//!   the accounts, tellers and branches in batches, each batch one
//!   transaction that also records how far it got (`applied`, from which
//!   a restarted applier would resume; this one keeps its marks in
//!   memory too), so every history document is applied exactly once. Its
//!   throughput counts the time the applier takes to catch up after the
//!   clients stop. Each client's history `_id`s count
//!   up from `client << 40` and a client inserts its next document only
//!   after the last is acknowledged, so what the applier sees of a client
//!   is always a prefix.
//!
//! Both modes end with a check that the balances add up: the accounts',
//! tellers' and branches' sums each equal the sum of history's deltas.
//! Durability is the same on both sides: ArborDB fsyncs its journal before
//! acknowledging (group commit), PostgreSQL runs with synchronous_commit on.
//! Server CPU is per-process accounting: the ArborDB process; the peer's
//! postmaster and its children, with the CPU of the backends it has
//! reaped (read once pgbench's backends have exited).

use crate::measure::{self, process_cpu_seconds};
use crate::procs::{percentile, start_arbordb, start_postgres};
use crate::{report, BenchResult};
use clap::{Args, ValueEnum};
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::options::ReadConcern;
use mongodb::{ClientSession, Collection, Database};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// pgbench's sizes per unit of scale.
const ACCOUNTS_PER_SCALE: i64 = 100_000;
const TELLERS_PER_SCALE: i64 = 10;
/// pgbench's filler columns: accounts and tellers char(84), branches char(88).
const FILLER_84: usize = 84;
const FILLER_88: usize = 88;
/// Round trips per transaction: pgbench's simple protocol sends BEGIN, the
/// five statements and END one by one.
const PGBENCH_ROUND_TRIPS: u64 = 7;
/// A single-mode history `_id` is `client << CLIENT_SHIFT | sequence`.
const CLIENT_SHIFT: u32 = 40;
/// Documents per load batch, and per applier batch (all clients
/// together: one transaction, kept well inside the cache).
const LOAD_BATCH: i64 = 10_000;
const APPLY_BATCH: i64 = 2_000;
/// How often the applier looks for new history documents while it keeps up.
const APPLY_PERIOD: Duration = Duration::from_millis(100);

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Multi,
    Single,
}

#[derive(Args, Debug, Clone)]
pub struct TpcbArgs {
    /// pgbench's scale: branches; 10 tellers and 100,000 accounts each.
    #[arg(long, default_value_t = 1)]
    scale: i64,
    /// Client counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    clients: Vec<usize>,
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// ArborDB's designs to run, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "multi,single")]
    modes: Vec<Mode>,
    /// Run ArborDB alone (no PostgreSQL, no pgbench).
    #[arg(long)]
    skip_peer: bool,
    #[arg(long, default_value = "../shared/tools/postgres-local")]
    postgres_local: PathBuf,
    #[command(flatten)]
    server: crate::procs::ServerArgs,
}

/// The four collections.
#[derive(Clone)]
struct Bank {
    db: Database,
    accounts: Collection<Document>,
    tellers: Collection<Document>,
    branches: Collection<Document>,
    history: Collection<Document>,
}

impl Bank {
    fn new(db: Database) -> Bank {
        Bank {
            accounts: db.collection("accounts"),
            tellers: db.collection("tellers"),
            branches: db.collection("branches"),
            history: db.collection("history"),
            db,
        }
    }
}

/// One business transaction's random choices, as pgbench's script makes them.
struct Pick {
    aid: i64,
    tid: i64,
    bid: i64,
    delta: i64,
}

impl Pick {
    fn random(rng: &mut StdRng, scale: i64) -> Pick {
        Pick {
            aid: rng.gen_range(1..=ACCOUNTS_PER_SCALE * scale),
            tid: rng.gen_range(1..=TELLERS_PER_SCALE * scale),
            bid: rng.gen_range(1..=scale),
            delta: rng.gen_range(-5000..=5000),
        }
    }

    fn history(&self) -> Document {
        doc! { "tid": self.tid, "bid": self.bid, "aid": self.aid, "delta": self.delta,
        "mtime": DateTime::now(), "filler": " ".repeat(22) }
    }
}

/// What one client counted.
#[derive(Default)]
struct Counts {
    committed: u64,
    retries: u64,
    round_trips: u64,
    latencies_us: Vec<u32>,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.committed += other.committed;
        self.retries += other.retries;
        self.round_trips += other.round_trips;
        self.latencies_us.extend(other.latencies_us);
    }
}

pub fn run(a: TpcbArgs) -> BenchResult<()> {
    let distinct: std::collections::BTreeSet<_> = a.clients.iter().collect();
    if a.clients.is_empty() || a.clients.contains(&0) || distinct.len() != a.clients.len() || a.scale < 1 {
        return Err("--clients needs distinct positive counts and --scale at least 1".into());
    }
    report::block_on(async {
        let mut rows = Vec::new();
        for mode in &a.modes {
            rows.extend(run_arbordb(&a, *mode).await?);
        }
        if !a.skip_peer {
            rows.extend(run_pgbench(&a)?);
        }
        print_rows(&rows);
        let doc = json!({
            "benchmark": "tpcb (W4)",
            "time": measure::utc_timestamp_compact(),
            "commit": measure::git_commit(),
            "scale": a.scale, "seconds_per_run": a.seconds,
            "durability": "ArborDB: journal fsync before each acknowledgement (group commit); PostgreSQL: synchronous_commit=on, fsync=on",
            "clients_driver": "ArborDB: the Rust mongodb driver, one session per client; PostgreSQL: pgbench (C, libpq, simple protocol)",
            "machine_cpus": measure::cpus(),
            "results": rows,
            "ratios": ratios(&rows, &a.clients),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        if let Some(out) = &a.server.out {
            report::save(out, &doc)?;
        }
        Ok(())
    })
}

/// Per client count: each ArborDB mode's throughput over pgbench's, and
/// pgbench's server CPU per transaction over the mode's (above 1: ArborDB
/// uses less).
fn ratios(rows: &[serde_json::Value], clients: &[usize]) -> serde_json::Value {
    let field = |sys: &str, n: usize, f: &str| {
        rows.iter().find(|r| r["system"] == sys && r["clients"] == n).and_then(|r| r[f].as_f64())
    };
    let mut out = serde_json::Map::new();
    for &n in clients {
        for sys in ["arbordb-multi", "arbordb-single"] {
            if let (Some(x), Some(y)) = (field(sys, n, "tps"), field("pgbench", n, "tps")) {
                out.insert(format!("{sys}@{n} throughput / pgbench"), json!(x / y));
            }
            let cpu = |s| field(s, n, "server_cpu_us_per_txn").filter(|c| *c > 0.0);
            if let (Some(x), Some(y)) = (cpu(sys), cpu("pgbench")) {
                out.insert(format!("{sys}@{n} pgbench server CPU / ours"), json!(y / x));
            }
        }
    }
    serde_json::Value::Object(out)
}

fn print_rows(rows: &[serde_json::Value]) {
    println!(
        "{:<15} {:>7} {:>9} {:>9} {:>9} {:>10} {:>14} {:>12} {:>9}",
        "system", "clients", "tps", "p50 us", "p99 us", "p99.9 us", "server cpu us", "round trips", "retries"
    );
    for r in rows {
        println!(
            "{:<15} {:>7} {:>9.0} {:>9} {:>9} {:>10} {:>14.1} {:>12.2} {:>9}",
            r["system"].as_str().unwrap_or(""),
            r["clients"].as_u64().unwrap_or(0),
            r["tps"].as_f64().unwrap_or(0.0),
            r["p50_us"].as_u64().unwrap_or(0),
            r["p99_us"].as_u64().unwrap_or(0),
            r["p999_us"].as_u64().unwrap_or(0),
            r["server_cpu_us_per_txn"].as_f64().unwrap_or(0.0),
            r["round_trips_per_txn"].as_f64().unwrap_or(0.0),
            r["retries"].as_u64().unwrap_or(0),
        );
    }
}

/// One server per mode, loaded once, run at each client count.
async fn run_arbordb(a: &TpcbArgs, mode: Mode) -> BenchResult<Vec<serde_json::Value>> {
    let server = start_arbordb(a.server.bin.as_deref(), 0, "tpcb").await?;
    let pid = server.server.0.id().to_string();
    let max_clients = a.clients.iter().max().copied().unwrap_or(1);
    let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true&maxPoolSize={}", server.port, max_clients + 4);
    let client = mongodb::Client::with_uri_str(&uri).await?;
    let bank = Bank::new(client.database("pgbench"));
    load(&bank, a.scale).await?;
    let mut rows = Vec::new();
    // Single mode: the clients of each run take new numbers, so history
    // `_id`s never repeat across runs.
    let mut first_client = 0;
    for &n in &a.clients {
        let row = match mode {
            Mode::Multi => run_multi(&client, &bank, a, n, &pid).await?,
            Mode::Single => run_single(&client, &bank, a, (first_client, n), &pid).await?,
        };
        first_client += n;
        check_balances(&bank).await?;
        eprintln!("tpcb: arbordb {mode:?} with {n} clients: {:.0} tps", row["tps"].as_f64().unwrap_or(0.0));
        rows.push(row);
    }
    Ok(rows)
}

/// pgbench's tables as documents, with progress on stderr.
async fn load(bank: &Bank, scale: i64) -> BenchResult<()> {
    let started = Instant::now();
    let filler = |n: usize| " ".repeat(n);
    let branches: Vec<Document> =
        (1..=scale).map(|b| doc! { "_id": b, "bbalance": 0i64, "filler": filler(FILLER_88) }).collect();
    bank.branches.insert_many(branches).await?;
    let tellers: Vec<Document> = (1..=TELLERS_PER_SCALE * scale)
        .map(|t| doc! { "_id": t, "bid": (t - 1) / TELLERS_PER_SCALE + 1, "tbalance": 0i64, "filler": filler(FILLER_84) })
        .collect();
    bank.tellers.insert_many(tellers).await?;
    let total = ACCOUNTS_PER_SCALE * scale;
    for from in (1..=total).step_by(LOAD_BATCH as usize) {
        let to = (from + LOAD_BATCH - 1).min(total);
        let accounts: Vec<Document> = (from..=to)
            .map(|aid| {
                doc! { "_id": aid, "bid": (aid - 1) / ACCOUNTS_PER_SCALE + 1, "abalance": 0i64,
                "filler": filler(FILLER_84) }
            })
            .collect();
        bank.accounts.insert_many(accounts).await?;
        // About every tenth of the way.
        if to == total || (to / LOAD_BATCH) % (total / LOAD_BATCH / 10).max(1) == 0 {
            eprintln!("tpcb: loaded {to} of {total} accounts ({:.1} s)", started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// The row of one ArborDB run.
fn arbordb_row(mode: Mode, clients: usize, counts: &mut Counts, seconds: f64, server_cpu: f64) -> serde_json::Value {
    counts.latencies_us.sort_unstable();
    let committed = counts.committed.max(1) as f64;
    json!({
        "system": format!("arbordb-{mode:?}").to_lowercase(),
        "workload": "tpcb",
        "clients": clients,
        "threads": clients,
        "transactions": counts.committed,
        "seconds": seconds,
        "tps": counts.committed as f64 / seconds,
        "ops_per_sec": counts.committed as f64 / seconds,
        "p50_us": percentile(&counts.latencies_us, 0.50),
        "p99_us": percentile(&counts.latencies_us, 0.99),
        "p999_us": percentile(&counts.latencies_us, 0.999),
        "server_cpu_sec": server_cpu,
        "server_cpu_us_per_txn": server_cpu * 1e6 / committed,
        "round_trips_per_txn": counts.round_trips as f64 / committed,
        "retries": counts.retries,
    })
}

/// `clients` tasks running `body` until the run's end; the totals.
async fn clients_loop<F, Fut>(clients: usize, seconds: u64, seed: u64, body: F) -> BenchResult<(Counts, f64)>
where
    F: Fn(usize, StdRng, Instant) -> Fut,
    Fut: std::future::Future<Output = BenchResult<Counts>> + Send + 'static,
{
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let rng = StdRng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add(c as u64));
            tokio::spawn(body(c, rng, until))
        })
        .collect();
    let mut total = Counts::default();
    for t in tasks {
        total.add(t.await.map_err(|e| e.to_string())??);
    }
    Ok((total, started.elapsed().as_secs_f64()))
}

async fn run_multi(
    client: &mongodb::Client,
    bank: &Bank,
    a: &TpcbArgs,
    n: usize,
    pid: &str,
) -> BenchResult<serde_json::Value> {
    let cpu_before = process_cpu_seconds(pid).unwrap_or(0.0);
    let scale = a.scale;
    let (mut counts, seconds) = clients_loop(n, a.seconds, a.server.seed, |_, mut rng, until| {
        let (client, bank) = (client.clone(), bank.clone());
        async move {
            let mut session = client.start_session().await?;
            let mut counts = Counts::default();
            while Instant::now() < until {
                let (pick, started) = (Pick::random(&mut rng, scale), Instant::now());
                multi_transaction(&bank, &mut session, &pick, &mut counts).await?;
                counts.committed += 1;
                counts.latencies_us.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            Ok(counts)
        }
    })
    .await?;
    let server_cpu = process_cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    Ok(arbordb_row(Mode::Multi, n, &mut counts, seconds, server_cpu))
}

/// pgbench's five statements in one transaction, retried whole while it
/// meets conflicts; the commit is retried alone when its outcome is unknown.
async fn multi_transaction(bank: &Bank, session: &mut ClientSession, p: &Pick, counts: &mut Counts) -> BenchResult<()> {
    loop {
        session.start_transaction().read_concern(ReadConcern::snapshot()).await?;
        let body = async {
            counts.round_trips += 5;
            let inc = |field: &str| doc! { "$inc": { field: p.delta } };
            bank.accounts.update_one(doc! { "_id": p.aid }, inc("abalance")).session(&mut *session).await?;
            let found = bank
                .accounts
                .find_one(doc! { "_id": p.aid })
                .projection(doc! { "abalance": 1 })
                .session(&mut *session)
                .await?;
            if found.and_then(|d| d.get("abalance").cloned()).is_none() {
                return Err(mongodb::error::Error::custom(format!("account {} has no balance", p.aid)));
            }
            bank.tellers.update_one(doc! { "_id": p.tid }, inc("tbalance")).session(&mut *session).await?;
            bank.branches.update_one(doc! { "_id": p.bid }, inc("bbalance")).session(&mut *session).await?;
            bank.history.insert_one(p.history()).session(&mut *session).await?;
            Ok(())
        };
        match body.await {
            Ok(()) => {}
            Err(e) if e.contains_label("TransientTransactionError") => {
                counts.retries += 1;
                counts.round_trips += 1;
                let _ = session.abort_transaction().await;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        loop {
            counts.round_trips += 1;
            match session.commit_transaction().await {
                Ok(()) => return Ok(()),
                Err(e) if e.contains_label("UnknownTransactionCommitResult") => continue,
                Err(e) if e.contains_label("TransientTransactionError") => break,
                Err(e) => return Err(e.into()),
            }
        }
        counts.retries += 1;
    }
}

async fn run_single(
    client: &mongodb::Client,
    bank: &Bank,
    a: &TpcbArgs,
    (first_client, n): (usize, usize),
    pid: &str,
) -> BenchResult<serde_json::Value> {
    let progress = Arc::new(Progress::default());
    let cpu_before = process_cpu_seconds(pid).unwrap_or(0.0);
    let clients = first_client..first_client + n;
    let applier = tokio::spawn(applier(client.clone(), bank.clone(), clients, progress.clone()));
    let scale = a.scale;
    let (mut counts, seconds) = clients_loop(n, a.seconds, a.server.seed, |c, mut rng, until| {
        let (history, progress) = (bank.history.clone(), progress.clone());
        async move {
            let mut counts = Counts::default();
            let mut seq: i64 = 0;
            while Instant::now() < until {
                let (pick, started) = (Pick::random(&mut rng, scale), Instant::now());
                seq += 1;
                let mut d = pick.history();
                d.insert("_id", (((first_client + c) as i64) << CLIENT_SHIFT) | seq);
                history.insert_one(d).await?;
                progress.acked.fetch_add(1, Ordering::Relaxed);
                counts.committed += 1;
                counts.round_trips += 1;
                counts.latencies_us.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            Ok(counts)
        }
    })
    .await?;
    let server_cpu_run = process_cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    let drain_started = Instant::now();
    progress.stop.store(true, Ordering::Release);
    let applied = applier.await.map_err(|e| e.to_string())??;
    if applied != counts.committed {
        return Err(format!("the applier applied {applied} of {} history documents", counts.committed).into());
    }
    let drain = drain_started.elapsed().as_secs_f64();
    let server_cpu = process_cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    // Throughput until every acknowledged transaction is applied.
    let mut row = arbordb_row(Mode::Single, n, &mut counts, seconds + drain, server_cpu);
    row["acknowledged_tps"] = json!(counts.committed as f64 / seconds);
    row["server_cpu_us_per_txn_during_run"] = json!(server_cpu_run * 1e6 / counts.committed.max(1) as f64);
    row["applier_drain_seconds"] = json!(drain);
    row["applier_max_lag_documents"] = json!(progress.max_lag.load(Ordering::Relaxed));
    Ok(row)
}

/// Between the single-mode clients and the applier.
#[derive(Default)]
struct Progress {
    /// Inserts acknowledged so far.
    acked: AtomicU64,
    /// Set when the clients stop: the applier finishes what is left.
    stop: AtomicBool,
    /// The most acknowledged documents not yet applied.
    max_lag: AtomicU64,
}

/// The applier of the single-document design: until `stop` and then until
/// nothing is left, reads each client's history documents past its mark
/// and applies them as one transaction; returns how many it applied. The
/// marks live in `applied` (`{_id: client, upto: seq}`), written in the
/// same transaction as the sums, so a batch is applied exactly once.
async fn applier(
    client: mongodb::Client,
    bank: Bank,
    clients: std::ops::Range<usize>,
    progress: Arc<Progress>,
) -> BenchResult<u64> {
    let mut marks: BTreeMap<usize, i64> = clients.map(|c| (c, 0)).collect();
    let per_client = (APPLY_BATCH / marks.len().max(1) as i64).max(1);
    let mut applied = 0u64;
    let mut session = client.start_session().await?;
    loop {
        let stopping = progress.stop.load(Ordering::Acquire);
        let lag = progress.acked.load(Ordering::Relaxed).saturating_sub(applied);
        progress.max_lag.fetch_max(lag, Ordering::Relaxed);
        let mut batch = Vec::new();
        for (&c, mark) in &marks {
            let base = (c as i64) << CLIENT_SHIFT;
            let filter = doc! { "_id": { "$gt": base | *mark, "$lt": base + (1 << CLIENT_SHIFT) } };
            let mut cursor = bank.history.find(filter).sort(doc! { "_id": 1 }).limit(per_client).await?;
            while cursor.advance().await? {
                batch.push(cursor.deserialize_current()?);
            }
        }
        if batch.is_empty() && stopping {
            return Ok(applied);
        }
        let full = batch.len() as i64 >= per_client * marks.len() as i64;
        if !batch.is_empty() {
            applied += batch.len() as u64;
            apply_batch(&bank, &mut session, &batch, &mut marks).await?;
        }
        // Behind: the next batch at once; else one a period, so each
        // batch's round trips are shared by many transactions.
        if !full && !stopping {
            tokio::time::sleep(APPLY_PERIOD).await;
        }
    }
}

/// Sums a batch per account, teller and branch and writes them with the
/// new marks in one transaction (no other writer: it never conflicts).
async fn apply_batch(
    bank: &Bank,
    session: &mut ClientSession,
    batch: &[Document],
    marks: &mut BTreeMap<usize, i64>,
) -> BenchResult<()> {
    let mut sums: [BTreeMap<i64, i64>; 3] = Default::default();
    for d in batch {
        let delta = d.get_i64("delta")?;
        for (i, key) in ["aid", "tid", "bid"].iter().enumerate() {
            *sums[i].entry(d.get_i64(key)?).or_default() += delta;
        }
        let id = d.get_i64("_id")?;
        let mark = marks.get_mut(&((id >> CLIENT_SHIFT) as usize)).ok_or("a history document of no client")?;
        *mark = (*mark).max(id & ((1 << CLIENT_SHIFT) - 1));
    }
    // No readConcern level: its first batch creates `applied`, which a
    // transaction may do only at level local (mongod's rule).
    session.start_transaction().await?;
    let targets = [("accounts", "abalance"), ("tellers", "tbalance"), ("branches", "bbalance")];
    for ((coll, field), sums) in targets.iter().zip(&sums) {
        let updates: Vec<Document> =
            sums.iter().map(|(id, delta)| doc! { "q": { "_id": id }, "u": { "$inc": { *field: delta } } }).collect();
        write_command(bank, session, doc! { "update": *coll, "updates": updates }).await?;
    }
    let marks_doc: Vec<Document> = marks
        .iter()
        .map(|(&c, upto)| doc! { "q": { "_id": c as i64 }, "u": { "$set": { "upto": upto } }, "upsert": true })
        .collect();
    write_command(bank, session, doc! { "update": "applied", "updates": marks_doc }).await?;
    session.commit_transaction().await?;
    Ok(())
}

/// One write command in the session's transaction; write errors end the run.
async fn write_command(bank: &Bank, session: &mut ClientSession, command: Document) -> BenchResult<()> {
    let reply = bank.db.run_command(command).session(&mut *session).await?;
    if let Ok(errors) = reply.get_array("writeErrors") {
        return Err(format!("applier: write errors {errors:?}").into());
    }
    Ok(())
}

/// After a run: accounts, tellers and branches each sum to history's deltas.
async fn check_balances(bank: &Bank) -> BenchResult<()> {
    let sum = |coll: &Collection<Document>, field: &str| {
        let pipeline = vec![doc! { "$group": { "_id": Bson::Null, "s": { "$sum": format!("${field}") } } }];
        let coll = coll.clone();
        async move {
            let mut cursor = coll.aggregate(pipeline).await?;
            let total = match cursor.advance().await? {
                true => match cursor.deserialize_current()?.get("s") {
                    Some(Bson::Int64(n)) => *n,
                    Some(Bson::Int32(n)) => i64::from(*n),
                    other => return Err(format!("a sum of {other:?}, not an integer").into()),
                },
                false => 0,
            };
            BenchResult::Ok(total)
        }
    };
    let expected = sum(&bank.history, "delta").await?;
    for (coll, field) in [(&bank.accounts, "abalance"), (&bank.tellers, "tbalance"), (&bank.branches, "bbalance")] {
        let got = sum(coll, field).await?;
        if got != expected {
            return Err(format!("{field} sums to {got}, history's deltas to {expected}").into());
        }
    }
    Ok(())
}

/// pgbench at the same scale against the PostgreSQL peer: one
/// initialisation, then one run per client count.
fn run_pgbench(a: &TpcbArgs) -> BenchResult<Vec<serde_json::Value>> {
    let (_peer, url) = start_postgres(&a.postgres_local)?;
    let pgbench = pgbench_binary(&a.postgres_local);
    let init = Command::new(&pgbench).args(["-i", "-q", "-s", &a.scale.to_string(), &url]).output()?;
    if !init.status.success() {
        return Err(format!("pgbench -i failed: {}", String::from_utf8_lossy(&init.stderr)).into());
    }
    let postmaster = crate::procs::postmaster_pid()?;
    let logs = tempfile::Builder::new().prefix("arbordb-pgbench-").tempdir()?;
    let mut rows = Vec::new();
    for &n in &a.clients {
        let prefix = logs.path().join(format!("c{n}"));
        let cpu_before = postgres_cpu_seconds(&postmaster)?;
        let out = Command::new(&pgbench)
            .args(["-n", "-c", &n.to_string(), "-j", &n.min(measure::cpus()).to_string()])
            .args(["-T", &a.seconds.to_string(), "-l", "--log-prefix"])
            .arg(&prefix)
            .arg(&url)
            .output()?;
        let server_cpu = postgres_cpu_seconds(&postmaster)? - cpu_before;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("pgbench failed: {}{}", text, String::from_utf8_lossy(&out.stderr)).into());
        }
        let mut latencies = pgbench_latencies(logs.path(), &format!("c{n}"))?;
        latencies.sort_unstable();
        let transactions = latencies.len() as u64;
        let tps = pgbench_field(&text, "tps = ").ok_or_else(|| format!("no tps in pgbench's output: {text}"))?;
        eprintln!("tpcb: pgbench with {n} clients: {tps:.0} tps");
        rows.push(json!({
            "system": "pgbench", "workload": "tpcb", "clients": n, "threads": n,
            "transactions": transactions, "seconds": a.seconds,
            "tps": tps, "ops_per_sec": tps,
            "p50_us": percentile(&latencies, 0.50),
            "p99_us": percentile(&latencies, 0.99),
            "p999_us": percentile(&latencies, 0.999),
            "server_cpu_sec": server_cpu,
            "server_cpu_us_per_txn": server_cpu * 1e6 / transactions.max(1) as f64,
            "round_trips_per_txn": PGBENCH_ROUND_TRIPS,
            "retries": 0,
        }));
    }
    Ok(rows)
}

/// `pgbench` from the peer's PostgreSQL installation, else from PATH.
fn pgbench_binary(postgres_local: &Path) -> PathBuf {
    let bin = Command::new(postgres_local).arg("bin").output().ok().filter(|o| o.status.success());
    bin.map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("pgbench"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pgbench"))
}

/// The number after `label` in pgbench's summary (`tps = 1234.5 (...)`);
/// of two such lines (pgbench before 14), the one without connection time.
fn pgbench_field(text: &str, label: &str) -> Option<f64> {
    let mut lines = text.lines().filter(|l| l.starts_with(label));
    let all: Vec<&str> = lines.by_ref().collect();
    let line = all.iter().find(|l| l.contains("without") || l.contains("excluding")).or(all.first())?;
    line[label.len()..].split_whitespace().next()?.parse().ok()
}

/// Every transaction's latency in µs from pgbench's per-transaction logs
/// (`client transaction latency_us script epoch epoch_us`), files
/// `<prefix>.<pid>[.<thread>]`.
fn pgbench_latencies(dir: &Path, prefix: &str) -> BenchResult<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with(&format!("{prefix}.")) {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            let latency = line.split_whitespace().nth(2).and_then(|f| f.parse::<u64>().ok());
            out.push(latency.ok_or_else(|| format!("bad pgbench log line {line:?}"))?.min(u32::MAX as u64) as u32);
        }
    }
    Ok(out)
}

/// PostgreSQL's server CPU so far (the postmaster's process tree), read
/// once no client backend is left (they exit, and are reaped, just after
/// pgbench does), so none is missed between the readings.
fn postgres_cpu_seconds(postmaster: &str) -> BenchResult<f64> {
    let is_backend = |pid: &String| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("127.0.0.1("))
    };
    for _ in 0..200 {
        if !measure::children_of(postmaster).iter().any(is_backend) {
            return measure::tree_cpu_seconds(postmaster).ok_or_else(|| "the postmaster is gone".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("PostgreSQL's client backends did not exit within 10 s".into())
}
