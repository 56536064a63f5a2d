//! `arbordb-bench index`: queries served by secondary indexes, ArborDB
//! against PostgreSQL in one run (issue 19's benchmark):
//! - `eq`: an indexed equality lookup returning one document;
//! - `range`: a 100-document indexed range scan;
//! - `covered`: the same range projected on the indexed fields (ArborDB:
//!   PROJECTION_COVERED, no document read; PostgreSQL cannot answer from
//!   an expression index alone and reads its rows).
//!
//! Documents `{_id: i, k: <a permutation of i>, v: i % 1000, s: 100
//! letters}`; ArborDB indexes `{k: 1}` and `{k: 1, v: 1}`, PostgreSQL
//! (table `t(id bigint primary key, doc jsonb)`) the expressions
//! `((doc->>'k')::bigint)` and `(((doc->>'k')::bigint), ((doc->>'v')::bigint))`,
//! analyzed. Results come back as raw BSON / undecoded `jsonb`. Reported:
//! throughput, p50/p99 latency, and server CPU per query (the client and
//! server share this machine's cores, so throughput is bounded by the
//! driver).

use crate::measure;
use crate::procs::{percentile, start_arbordb, start_postgres};
use crate::report;
use crate::BenchResult;
use clap::Args;
use mongodb::bson::{doc, RawDocumentBuf};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct IndexArgs {
    /// Documents loaded into each system.
    #[arg(long, default_value_t = 1_000_000)]
    docs: u64,
    /// Seconds per query kind and system.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Client tasks.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Run ArborDB only.
    #[arg(long)]
    skip_peer: bool,
    #[arg(long, default_value = "../shared/tools/postgres-local")]
    postgres_local: PathBuf,
    #[arg(long, default_value = "bench/results/index.json")]
    out: PathBuf,
    /// ArborDB's cache in MiB (0: the server's default).
    #[arg(long, default_value_t = 2048)]
    arbordb_cache_mib: u64,
    /// The server binary (default: `arbordb` beside this one).
    #[arg(long)]
    arbordb_bin: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const QUERIES: [&str; 3] = ["eq", "range", "covered"];
const RANGE: i64 = 100;
const LOAD_BATCH: u64 = 1000;

/// Document `i`'s `k`: a permutation of 0..n (multiplicative, n's
/// neighbours far apart), so `k` order is not insertion order.
fn k_of(i: u64, n: u64) -> i64 {
    ((i.wrapping_mul(2_654_435_761)) % n.max(1)) as i64
}

fn filler(i: u64) -> String {
    (0..100).map(|j| (b'a' + ((i + j) % 26) as u8) as char).collect()
}

trait Store: Send + Sync + 'static {
    fn query(&self, task: usize, kind: &str, k: i64) -> impl std::future::Future<Output = BenchResult<usize>> + Send;
    fn server_cpu_seconds(&self) -> f64;
}

struct Arbor {
    coll: mongodb::Collection<RawDocumentBuf>,
    pid: u32,
}

impl Store for Arbor {
    async fn query(&self, _task: usize, kind: &str, k: i64) -> BenchResult<usize> {
        let range = doc! { "k": { "$gte": k, "$lt": k + RANGE } };
        Ok(match kind {
            "eq" => usize::from(self.coll.find_one(doc! { "k": k }).await?.is_some()),
            "range" => count(self.coll.find(range).await?).await?,
            _ => {
                let projection = doc! { "_id": 0, "k": 1, "v": 1 };
                count(self.coll.find(range).projection(projection).await?).await?
            }
        })
    }

    fn server_cpu_seconds(&self) -> f64 {
        measure::process_cpu_seconds(&self.pid.to_string()).unwrap_or(0.0)
    }
}

/// Read a cursor to its end (every batch fetched); the documents seen.
async fn count(mut cursor: mongodb::Cursor<RawDocumentBuf>) -> BenchResult<usize> {
    let mut n = 0;
    while cursor.advance().await? {
        n += 1;
    }
    Ok(n)
}

struct Postgres {
    /// Per client task: its connection and the three prepared queries.
    conns: Vec<(tokio_postgres::Client, [tokio_postgres::Statement; 3])>,
}

impl Store for Postgres {
    async fn query(&self, task: usize, kind: &str, k: i64) -> BenchResult<usize> {
        let (client, stmts) = &self.conns[task];
        let at = QUERIES.iter().position(|q| *q == kind).unwrap_or(0);
        let rows = if at == 0 {
            client.query(&stmts[0], &[&k]).await?
        } else {
            client.query(&stmts[at], &[&k, &(k + RANGE)]).await?
        };
        Ok(rows.len())
    }

    fn server_cpu_seconds(&self) -> f64 {
        measure::command_cpu_seconds("postgres")
    }
}

async fn run_queries<S: Store>(
    name: &str,
    store: &Arc<S>,
    a: &IndexArgs,
    kind: &'static str,
) -> BenchResult<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let (server_before, started) = (store.server_cpu_seconds(), Instant::now());
    let mut tasks = Vec::new();
    for t in 0..a.threads {
        let (store, n, seed) = (store.clone(), a.docs, a.seed * 1000 + t as u64);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut lat, mut rows) = (Vec::new(), 0usize);
            while Instant::now() < deadline {
                let k = rng.gen_range(0..(n as i64 - RANGE).max(1));
                let began = Instant::now();
                rows += store.query(t, kind, k).await?;
                lat.push(began.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
            }
            Ok::<_, crate::BenchError>((lat, rows))
        }));
    }
    let (mut all, mut rows) = (Vec::new(), 0);
    for t in tasks {
        let (lat, r) = t.await??;
        all.extend(lat);
        rows += r;
    }
    let secs = started.elapsed().as_secs_f64();
    let server_cpu = store.server_cpu_seconds() - server_before;
    all.sort_unstable();
    let ops = all.len() as u64;
    eprintln!("  {name} {kind}: {ops} queries in {secs:.1} s");
    let expected_rows = if kind == "eq" { ops } else { ops * RANGE as u64 };
    if rows as u64 != expected_rows {
        return Err(format!("{name} {kind}: {rows} rows for {ops} queries, expected {expected_rows}").into());
    }
    Ok(json!({
        "system": name, "query": kind, "threads": a.threads, "queries": ops, "seconds": secs,
        "queries_per_sec": ops as f64 / secs,
        "p50_us": percentile(&all, 0.5), "p99_us": percentile(&all, 0.99),
        "server_cpu_us_per_query": server_cpu * 1e6 / ops.max(1) as f64,
    }))
}

async fn bench_arbordb(a: &IndexArgs) -> BenchResult<Vec<serde_json::Value>> {
    let arbordb = start_arbordb(a.arbordb_bin.as_deref(), a.arbordb_cache_mib, "index").await?;
    let port = arbordb.port;
    let client = mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{port}/?directConnection=true")).await?;
    let coll = client.database("bench").collection::<mongodb::bson::Document>("t");
    let started = Instant::now();
    for first in (0..a.docs).step_by(LOAD_BATCH as usize) {
        let docs: Vec<_> = (first..(first + LOAD_BATCH).min(a.docs))
            .map(|i| doc! { "_id": i as i64, "k": k_of(i, a.docs), "v": (i % 1000) as i64, "s": filler(i) })
            .collect();
        coll.insert_many(docs).await?;
        if first % 100_000 == 0 {
            eprintln!("  arbordb load: {first}/{} documents", a.docs);
        }
    }
    coll.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1 }).build()).await?;
    coll.create_index(mongodb::IndexModel::builder().keys(doc! { "k": 1, "v": 1 }).build()).await?;
    eprintln!("  arbordb load and index builds: {:.1} s", started.elapsed().as_secs_f64());
    let store = Arc::new(Arbor { coll: client.database("bench").collection("t"), pid: arbordb.server.0.id() });
    let mut rows = Vec::new();
    for kind in QUERIES {
        rows.push(run_queries("arbordb", &store, a, kind).await?);
    }
    drop(arbordb);
    Ok(rows)
}

async fn bench_postgres(a: &IndexArgs) -> BenchResult<Vec<serde_json::Value>> {
    let (_peer, url) = start_postgres(&a.postgres_local)?;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, doc jsonb NOT NULL)").await?;
    let started = Instant::now();
    for first in (0..a.docs).step_by(LOAD_BATCH as usize) {
        let mut sql = String::from("INSERT INTO t (id, doc) VALUES ");
        for (n, i) in (first..(first + LOAD_BATCH).min(a.docs)).enumerate() {
            let d = json!({ "_id": i, "k": k_of(i, a.docs), "v": i % 1000, "s": filler(i) });
            sql.push_str(&format!("{}({i}, '{d}')", if n > 0 { "," } else { "" }));
        }
        client.batch_execute(&sql).await?;
    }
    client
        .batch_execute(
            "CREATE INDEX ON t (((doc->>'k')::bigint)); \
             CREATE INDEX ON t (((doc->>'k')::bigint), ((doc->>'v')::bigint)); ANALYZE t",
        )
        .await?;
    eprintln!("  postgresql load and index builds: {:.1} s", started.elapsed().as_secs_f64());
    let mut conns = Vec::new();
    for _ in 0..a.threads {
        let (c, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let eq = c.prepare("SELECT doc FROM t WHERE (doc->>'k')::bigint = $1").await?;
        let range = c.prepare("SELECT doc FROM t WHERE (doc->>'k')::bigint >= $1 AND (doc->>'k')::bigint < $2").await?;
        let covered = c
            .prepare(
                "SELECT (doc->>'k')::bigint, (doc->>'v')::bigint FROM t \
                 WHERE (doc->>'k')::bigint >= $1 AND (doc->>'k')::bigint < $2",
            )
            .await?;
        conns.push((c, [eq, range, covered]));
    }
    let store = Arc::new(Postgres { conns });
    let mut rows = Vec::new();
    for kind in QUERIES {
        rows.push(run_queries("postgresql", &store, a, kind).await?);
    }
    Ok(rows)
}

async fn run_async(a: IndexArgs) -> BenchResult<()> {
    let mut rows = bench_arbordb(&a).await?;
    if !a.skip_peer {
        rows.extend(bench_postgres(&a).await?);
    }
    let field = |sys: &str, q: &str, f: &str| {
        rows.iter().find(|r| r["system"] == sys && r["query"] == q).and_then(|r| r[f].as_f64())
    };
    let mut cpu_ratios = serde_json::Map::new();
    println!(
        "{:<11} {:>8} {:>10} {:>8} {:>8} {:>14}",
        "system", "query", "queries/s", "p50 us", "p99 us", "server cpu us"
    );
    for r in &rows {
        println!(
            "{:<11} {:>8} {:>10.0} {:>8} {:>8} {:>14.1}",
            r["system"].as_str().unwrap_or(""),
            r["query"].as_str().unwrap_or(""),
            r["queries_per_sec"].as_f64().unwrap_or(0.0),
            r["p50_us"],
            r["p99_us"],
            r["server_cpu_us_per_query"].as_f64().unwrap_or(0.0)
        );
    }
    for q in QUERIES {
        if let (Some(x), Some(y)) =
            (field("arbordb", q, "server_cpu_us_per_query"), field("postgresql", q, "server_cpu_us_per_query"))
        {
            println!("{q}: server CPU per query, ArborDB / PostgreSQL = {:.2} (goal: at most 0.67)", x / y);
            cpu_ratios.insert(q.to_string(), json!(x / y));
        }
    }
    let doc = json!({
        "benchmark": "index (issue 19)",
        "time": measure::utc_timestamp_compact(),
        "docs": a.docs, "threads": a.threads, "seconds_per_query": a.seconds,
        "machine_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "results": rows,
        "arbordb_over_postgresql_server_cpu_per_query": cpu_ratios,
    });
    report::save(&a.out, &doc)?;
    Ok(())
}

pub fn run(a: IndexArgs) -> BenchResult<()> {
    report::block_on(run_async(a))
}
