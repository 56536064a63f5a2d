//! SmallBank (W5) over the wire (`smallbank-wire`): the five SmallBank
//! transactions as multi-document transactions through the Rust driver,
//! under snapshot isolation and under serializable (readConcern level
//! `"serializable"`), on one server per level. Reports commits per second,
//! commits per second of server CPU (per-process accounting), aborts, and
//! the anomalies of each history (`smallbank::anomalies`: transactions the
//! checker removes, one per cycle), which must be 0 under serializable.
//!
//! Each balance document `{_id: customer, b: balance, w: writer}` names
//! the transaction that wrote it, so the history is recorded client side;
//! the server's snapshot and commit timestamps come back as each
//! transaction's `operationTime` (see `txn_check.rs`).

use crate::measure::process_cpu_seconds;
use crate::procs::start_arbordb;
use crate::smallbank::Level;
use crate::txn_check::{commit_point, engine_ts, read_concern, SCALE};
use crate::BenchResult;
use clap::Args;
use mongodb::bson::{doc, Document};
use mongodb::{Client, ClientSession, Collection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::history::{self, History};

#[derive(Args, Debug, Clone)]
pub struct SmallBankWireArgs {
    #[arg(long, default_value_t = 1_000)]
    customers: u32,
    /// Customers in the hotspot.
    #[arg(long, default_value_t = 100)]
    hotspot: u32,
    /// Percent of transactions that pick their customers in the hotspot.
    #[arg(long, default_value_t = 90)]
    hotspot_percent: u32,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Isolation levels to run, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "snapshot,serializable")]
    isolation: Vec<Level>,
    #[command(flatten)]
    server: crate::procs::ServerArgs,
}

/// The two accounts' collections: savings and checking.
#[derive(Clone)]
struct Bank {
    savings: Collection<Document>,
    checking: Collection<Document>,
}

fn key_of(savings: bool, cust: u32) -> Vec<u8> {
    let mut k = vec![if savings { b's' } else { b'c' }];
    k.extend_from_slice(&cust.to_be_bytes());
    k
}

/// One transaction in progress and its record.
struct Recorded<'s> {
    session: &'s mut ClientSession,
    bank: &'s Bank,
    id: u64,
    ops: Vec<history::Op>,
    snapshot: Option<u64>,
    wrote: bool,
}

impl Recorded<'_> {
    fn coll(&self, savings: bool) -> Collection<Document> {
        if savings {
            self.bank.savings.clone()
        } else {
            self.bank.checking.clone()
        }
    }

    async fn read(&mut self, savings: bool, cust: u32) -> mongodb::error::Result<i64> {
        let coll = self.coll(savings);
        let found = coll.find_one(doc! { "_id": cust as i64 }).session(&mut *self.session).await?;
        let d = found.ok_or_else(|| mongodb::error::Error::custom(format!("customer {cust} has no account")))?;
        self.snapshot = self.snapshot.or(self.session.operation_time().map(engine_ts));
        let writer = d.get_i64("w").unwrap_or(0) as u64;
        self.ops.push(history::Op::Read { key: key_of(savings, cust), observed: Some(history::TxnId(writer)) });
        Ok(d.get_i64("b").unwrap_or(0))
    }

    async fn write(&mut self, savings: bool, cust: u32, balance: i64) -> mongodb::error::Result<()> {
        let update = doc! { "$set": { "b": balance, "w": self.id as i64 } };
        let coll = self.coll(savings);
        coll.update_one(doc! { "_id": cust as i64 }, update).session(&mut *self.session).await?;
        self.snapshot = self.snapshot.or(self.session.operation_time().map(engine_ts));
        self.ops.push(history::Op::Write { key: key_of(savings, cust), kind: history::WriteKind::Put });
        self.wrote = true;
        Ok(())
    }
}

/// What a run counted.
#[derive(Default)]
struct Counts {
    committed: u64,
    aborted: u64,
    app_rollbacks: u64,
}

/// One SmallBank transaction of a random kind; `None`: rolled back by the
/// application (an overdraft), not recorded.
async fn one(
    bank: &Bank,
    session: &mut ClientSession,
    level: Level,
    id: u64,
    rng: &mut StdRng,
    pick: &(dyn Fn(&mut StdRng) -> u32 + Sync),
    counts: &mut Counts,
) -> BenchResult<Option<history::Txn>> {
    session.start_transaction().read_concern(read_concern(level)).await?;
    let mut r = Recorded { session, bank, id, ops: Vec::new(), snapshot: None, wrote: false };
    let (n1, amount, kind) = (pick(rng), rng.gen_range(1..=100i64), rng.gen_range(0..5));
    let body: mongodb::error::Result<bool> = async {
        match kind {
            0 => {
                r.read(true, n1).await?;
                r.read(false, n1).await?;
            }
            1 => {
                let c = r.read(false, n1).await?;
                r.write(false, n1, c + amount).await?;
            }
            2 => {
                let delta = if rng.gen_bool(0.5) { amount } else { -amount * 20 };
                let s = r.read(true, n1).await?;
                if s + delta < 0 {
                    return Ok(false);
                }
                r.write(true, n1, s + delta).await?;
            }
            3 => {
                let mut n2 = pick(rng);
                while n2 == n1 {
                    n2 = pick(rng);
                }
                let s1 = r.read(true, n1).await?;
                let c1 = r.read(false, n1).await?;
                let c2 = r.read(false, n2).await?;
                r.write(true, n1, 0).await?;
                r.write(false, n1, 0).await?;
                r.write(false, n2, c2 + s1 + c1).await?;
            }
            _ => {
                let s = r.read(true, n1).await?;
                let c = r.read(false, n1).await?;
                let penalty = i64::from(s + c < amount);
                r.write(false, n1, c - amount - penalty).await?;
            }
        }
        Ok(true)
    }
    .await;
    let Recorded { session, ops, snapshot, wrote, .. } = r;
    let snapshot = snapshot.unwrap_or(0) * SCALE;
    let outcome = match body {
        Ok(false) => {
            session.abort_transaction().await?;
            counts.app_rollbacks += 1;
            return Ok(None);
        }
        Ok(true) => session.commit_transaction().await,
        Err(e) => Err(e),
    };
    let mut rec = history::Txn {
        id: history::TxnId(id),
        snapshot: history::Timestamp(snapshot),
        outcome: history::Outcome::Aborted,
        ops,
    };
    match outcome {
        Ok(()) => {
            counts.committed += 1;
            rec.outcome = commit_point(wrote, snapshot, session.operation_time())?;
            Ok(Some(rec))
        }
        Err(e) if e.contains_label("TransientTransactionError") => {
            counts.aborted += 1;
            let _ = session.abort_transaction().await;
            Ok(Some(rec))
        }
        Err(e) => Err(format!("transaction {id}: unexpected error: {e}").into()),
    }
}

pub fn run(a: SmallBankWireArgs) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut runs = Vec::new();
        for level in &a.isolation {
            let r = run_level(&a, *level).await?;
            println!("{r}");
            runs.push(r);
        }
        let by = |l: &str, f: &str| runs.iter().find(|r| r["isolation"] == l).and_then(|r| r[f].as_f64());
        let ratio = |f: &str| match (by("serializable", f), by("snapshot", f)) {
            (Some(s), Some(si)) if si > 0.0 => json!(s / si),
            _ => json!(null),
        };
        let report = json!({
            "workload": "W5 SmallBank over the wire (multi-document transactions, Rust driver)",
            "customers": a.customers, "hotspot": a.hotspot, "hotspot_percent": a.hotspot_percent,
            "clients": a.clients, "seconds": a.seconds,
            "runs": runs,
            "serializable_over_snapshot_commits_per_sec": ratio("commits_per_sec"),
            "serializable_over_snapshot_commits_per_server_cpu_sec": ratio("commits_per_server_cpu_sec"),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        if let Some(out) = &a.server.out {
            std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
        }
        let serializable_anomalies = runs
            .iter()
            .filter(|r| r["isolation"] == "serializable")
            .map(|r| r["anomalies"].as_u64().unwrap_or(0))
            .sum::<u64>();
        if serializable_anomalies > 0 {
            return Err(format!("serializable runs have {serializable_anomalies} anomalies").into());
        }
        Ok(())
    })
}

async fn run_level(a: &SmallBankWireArgs, level: Level) -> BenchResult<serde_json::Value> {
    let server = start_arbordb(a.server.bin.as_deref(), 0, "smallbank-wire").await?;
    let pid = server.server.0.id().to_string();
    let client = Client::with_uri_str(format!("mongodb://127.0.0.1:{}/?directConnection=true", server.port)).await?;
    let db = client.database("bank");
    let bank = Bank { savings: db.collection("savings"), checking: db.collection("checking") };
    // Loaded by transaction 0, the history's initial writer.
    for coll in [&bank.savings, &bank.checking] {
        let docs: Vec<Document> =
            (0..a.customers).map(|c| doc! { "_id": c as i64, "b": 10_000i64, "w": 0i64 }).collect();
        coll.insert_many(docs).await?;
    }
    let mut initial = history::Txn::committed(0, 0, 1);
    for c in 0..a.customers {
        initial = initial.put(&key_of(true, c)).put(&key_of(false, c));
    }
    let ids = Arc::new(AtomicU64::new(1));
    let until = Instant::now() + Duration::from_secs(a.seconds);
    let (cpu_before, started) = (process_cpu_seconds(&pid).unwrap_or(0.0), Instant::now());
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let (client, bank, ids) = (client.clone(), bank.clone(), ids.clone());
        let (customers, hotspot, percent) = (a.customers, a.hotspot.min(a.customers), a.hotspot_percent);
        let mut rng = StdRng::seed_from_u64(a.server.seed.wrapping_mul(7919).wrapping_add(c as u64));
        tasks.push(tokio::spawn(async move {
            let pick = move |rng: &mut StdRng| {
                if rng.gen_range(0..100) < percent {
                    rng.gen_range(0..hotspot)
                } else {
                    rng.gen_range(0..customers)
                }
            };
            let (mut records, mut counts) = (Vec::new(), Counts::default());
            while Instant::now() < until {
                let id = ids.fetch_add(1, Ordering::Relaxed) + 1;
                let mut session = client.start_session().await?;
                if let Some(r) = one(&bank, &mut session, level, id, &mut rng, &pick, &mut counts).await? {
                    records.push(r);
                }
            }
            BenchResult::Ok((records, counts))
        }));
    }
    let (mut txns, mut total) = (vec![initial], Counts::default());
    for t in tasks {
        let (records, c) = t.await.map_err(|e| e.to_string())??;
        txns.extend(records);
        total.committed += c.committed;
        total.aborted += c.aborted;
        total.app_rollbacks += c.app_rollbacks;
    }
    let seconds = started.elapsed().as_secs_f64();
    let server_cpu = process_cpu_seconds(&pid).unwrap_or(0.0) - cpu_before;
    crate::txn_check::unique_read_only_commits(&mut txns);
    let history = History::new(txns);
    let si = history::check_snapshot_isolation(&history).err().map(|v| v.to_string());
    let (anomalies, example) = crate::smallbank::anomalies(&history);
    drop(server);
    Ok(json!({
        "isolation": format!("{level:?}").to_lowercase(),
        "committed": total.committed,
        "aborted": total.aborted,
        "app_rollbacks": total.app_rollbacks,
        "seconds": seconds,
        "commits_per_sec": total.committed as f64 / seconds,
        "server_cpu_sec": server_cpu,
        "commits_per_server_cpu_sec": total.committed as f64 / server_cpu.max(1e-9),
        "server_cpu_us_per_commit": server_cpu * 1e6 / total.committed.max(1) as f64,
        "snapshot_isolation_violation": si,
        "anomalies": anomalies,
        "anomaly_example": example,
    }))
}
