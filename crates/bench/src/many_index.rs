//! `arbordb-bench w3`: the many-index update workload
//! (`../shared/workloads/README.md`, W3), ArborDB against PostgreSQL in
//! one run.
//!
//! `collections` collections of `docs` documents `{_id, a..t}` (twenty
//! integer fields), each with ten compound indexes `{a: 1, b: 1}`, `{c:
//! 1, d: 1}`, ... `{s: 1, t: 1}`, loaded by one task per collection; then
//! `threads` tasks, task `i` looping `updateMany({_id: {$mod: [100, i]}},
//! {$inc: {a: 1}})` on collection `i % collections`, for `seconds`. The
//! cache is smaller than the data (`--arbordb-cache-mib`), so eviction
//! runs throughout. PostgreSQL holds `t<n>(id bigint primary key, doc
//! jsonb)` with the same ten indexes as expression indexes and runs the
//! same update as one statement. Reported: documents updated per second,
//! server CPU per updated document, and (`--profile`) a `perf` profile of
//! the server during the update phase: the share of samples in eviction
//! and reconciliation, and in index key generation.

use crate::measure;
use crate::procs::{start_arbordb, start_postgres};
use crate::report;
use crate::BenchResult;
use clap::Args;
use mongodb::bson::{doc, Document};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct W3Args {
    /// Documents per collection.
    #[arg(long, default_value_t = 200_000)]
    docs: u64,
    #[arg(long, default_value_t = 5)]
    collections: usize,
    /// Update tasks.
    #[arg(long, default_value_t = 5)]
    threads: usize,
    /// Seconds of the update phase, per system.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// ArborDB's cache in MiB: smaller than the data.
    #[arg(long, default_value_t = 64)]
    arbordb_cache_mib: u64,
    /// Record a `perf` profile of the server's update phase.
    #[arg(long)]
    profile: bool,
    #[arg(long)]
    skip_peer: bool,
    #[arg(long, default_value = "../shared/tools/postgres-local")]
    postgres_local: PathBuf,
    #[arg(long, default_value = "bench/results/w3.json")]
    out: PathBuf,
    #[arg(long)]
    arbordb_bin: Option<PathBuf>,
}

const FIELDS: [&str; 20] =
    ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t"];
const LOAD_BATCH: u64 = 1000;

/// Field `f` of document `i`: spread, repeatable.
fn value(i: u64, f: usize) -> i64 {
    (i.wrapping_mul(2_654_435_761).wrapping_add(f as u64 * 40_503) % 1_000_003) as i64
}

/// What one system did in the update phase.
struct Phase {
    updated: u64,
    statements: u64,
    seconds: f64,
    server_cpu: f64,
}

/// The update tasks' counts (documents updated, statements) summed, and
/// the phase's length (its server CPU is the caller's to fill in).
async fn join(tasks: Vec<tokio::task::JoinHandle<BenchResult<(u64, u64)>>>, began: Instant) -> BenchResult<Phase> {
    let mut phase = Phase { updated: 0, statements: 0, seconds: 0.0, server_cpu: 0.0 };
    for t in tasks {
        let (u, s) = t.await??;
        phase.updated += u;
        phase.statements += s;
    }
    phase.seconds = began.elapsed().as_secs_f64();
    Ok(phase)
}

fn row(system: &str, a: &W3Args, load_seconds: f64, p: &Phase, profile: serde_json::Value) -> serde_json::Value {
    json!({
        "system": system, "collections": a.collections, "docs_per_collection": a.docs, "threads": a.threads,
        "load_seconds": load_seconds, "load_docs_per_sec": (a.docs * a.collections as u64) as f64 / load_seconds,
        "update_statements": p.statements, "docs_updated": p.updated, "update_seconds": p.seconds,
        "docs_updated_per_sec": p.updated as f64 / p.seconds,
        "server_cpu_us_per_doc_updated": p.server_cpu * 1e6 / p.updated.max(1) as f64,
        "profile": profile,
    })
}

async fn bench_arbordb(a: &W3Args) -> BenchResult<serde_json::Value> {
    let arbordb = start_arbordb(a.arbordb_bin.as_deref(), a.arbordb_cache_mib, "w3").await?;
    let client =
        mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{}/?directConnection=true", arbordb.port)).await?;
    let db = client.database("w3");
    let started = Instant::now();
    let mut loads = Vec::new();
    for c in 0..a.collections {
        let (coll, docs) = (db.collection::<Document>(&format!("c{c}")), a.docs);
        loads.push(tokio::spawn(async move {
            for (n, pair) in FIELDS.chunks(2).enumerate() {
                let keys = doc! { pair[0]: 1, pair[1]: 1 };
                let model = mongodb::IndexModel::builder().keys(keys).build();
                coll.create_index(model).await.map_err(|e| format!("index {n}: {e}"))?;
            }
            for first in (0..docs).step_by(LOAD_BATCH as usize) {
                let batch: Vec<Document> = (first..(first + LOAD_BATCH).min(docs))
                    .map(|i| {
                        let mut d = doc! { "_id": i as i64 };
                        for (f, name) in FIELDS.iter().enumerate() {
                            d.insert(*name, value(i, f));
                        }
                        d
                    })
                    .collect();
                coll.insert_many(batch).await?;
                if c == 0 && first % 50_000 == 0 {
                    eprintln!("  arbordb load: {first}/{docs} documents per collection");
                }
            }
            Ok::<_, crate::BenchError>(())
        }));
    }
    for l in loads {
        l.await??;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    eprintln!("  arbordb load with indexes: {load_seconds:.1} s");
    let pid = arbordb.server.0.id();
    let profiler = a.profile.then(|| start_perf(pid, a.seconds)).transpose()?;
    let cpu_before = measure::process_cpu_seconds(&pid.to_string()).unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let began = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..a.threads {
        let coll = db.collection::<Document>(&format!("c{}", t % a.collections));
        tasks.push(tokio::spawn(async move {
            let (mut updated, mut statements) = (0u64, 0u64);
            while Instant::now() < deadline {
                let r =
                    coll.update_many(doc! { "_id": { "$mod": [100, t as i64] } }, doc! { "$inc": { "a": 1 } }).await?;
                updated += r.modified_count;
                statements += 1;
            }
            Ok::<_, crate::BenchError>((updated, statements))
        }));
    }
    let mut phase = join(tasks, began).await?;
    phase.server_cpu = measure::process_cpu_seconds(&pid.to_string()).unwrap_or(0.0) - cpu_before;
    let profile = match profiler {
        Some(p) => profile_shares(p)?,
        None => serde_json::Value::Null,
    };
    eprintln!("  arbordb: {} documents updated in {:.1} s", phase.updated, phase.seconds);
    Ok(row("arbordb", a, load_seconds, &phase, profile))
}

/// `perf record` of process `pid` for `seconds`, into a temporary file.
fn start_perf(pid: u32, seconds: u64) -> BenchResult<(std::process::Child, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let child = Command::new("perf")
        .args(["record", "-F", "499", "-g", "-o"])
        .arg(dir.path().join("perf.data"))
        .args(["-p", &pid.to_string(), "--", "sleep", &seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok((child, dir))
}

/// Shares of the profile's samples (self time, by symbol) in eviction
/// and reconciliation, in index key generation, and the top symbols.
fn profile_shares((mut child, dir): (std::process::Child, tempfile::TempDir)) -> BenchResult<serde_json::Value> {
    child.wait()?;
    let out = Command::new("perf")
        .args(["report", "--no-children", "--stdio", "--sort", "symbol", "-g", "none", "-i"])
        .arg(dir.path().join("perf.data"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut symbols: Vec<(f64, String)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut parts = line.split_whitespace();
        let (Some(pct), Some(_kind)) = (parts.next(), parts.next()) else { continue };
        let Ok(pct) = pct.trim_end_matches('%').parse::<f64>() else { continue };
        symbols.push((pct, parts.collect::<Vec<_>>().join(" ")));
    }
    let share = |needles: &[&str]| -> f64 {
        symbols.iter().filter(|(_, s)| needles.iter().any(|n| s.contains(n))).map(|(p, _)| p).sum()
    };
    let eviction = share(&["evict", "reconcil", "cache::"]);
    let keys = share(&["doc_keys", "keystring", "key_string", "index::keys"]);
    let top: Vec<serde_json::Value> =
        symbols.iter().take(15).map(|(p, s)| json!({ "percent": p, "symbol": s })).collect();
    Ok(json!({ "eviction_and_reconciliation_percent": eviction, "index_key_generation_percent": keys, "top": top }))
}

async fn bench_postgres(a: &W3Args) -> BenchResult<serde_json::Value> {
    let (_peer, url) = start_postgres(&a.postgres_local)?;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let started = Instant::now();
    for c in 0..a.collections {
        let mut ddl = format!("CREATE TABLE t{c} (id bigint PRIMARY KEY, doc jsonb NOT NULL);");
        for pair in FIELDS.chunks(2) {
            let (x, y) = (pair[0], pair[1]);
            ddl.push_str(&format!("CREATE INDEX ON t{c} (((doc->>'{x}')::bigint), ((doc->>'{y}')::bigint));"));
        }
        client.batch_execute(&ddl).await?;
        for first in (0..a.docs).step_by(LOAD_BATCH as usize) {
            let mut sql = format!("INSERT INTO t{c} (id, doc) VALUES ");
            for (n, i) in (first..(first + LOAD_BATCH).min(a.docs)).enumerate() {
                let mut d = serde_json::Map::new();
                d.insert("_id".into(), json!(i));
                for (f, name) in FIELDS.iter().enumerate() {
                    d.insert((*name).into(), json!(value(i, f)));
                }
                sql.push_str(&format!("{}({i}, '{}')", if n > 0 { "," } else { "" }, serde_json::Value::Object(d)));
            }
            client.batch_execute(&sql).await?;
        }
        client.batch_execute(&format!("ANALYZE t{c}")).await?;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    eprintln!("  postgresql load with indexes: {load_seconds:.1} s");
    let cpu_before = measure::command_cpu_seconds("postgres");
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let began = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..a.threads {
        let (c, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let table = format!("t{}", t % a.collections);
        let update = c
            .prepare(&format!(
                "UPDATE {table} SET doc = jsonb_set(doc, '{{a}}', to_jsonb((doc->>'a')::bigint + 1)) WHERE id % 100 = $1"
            ))
            .await?;
        let c = Arc::new(c);
        tasks.push(tokio::spawn(async move {
            let (mut updated, mut statements) = (0u64, 0u64);
            while Instant::now() < deadline {
                updated += c.execute(&update, &[&(t as i64)]).await?;
                statements += 1;
            }
            Ok::<_, crate::BenchError>((updated, statements))
        }));
    }
    let mut phase = join(tasks, began).await?;
    phase.server_cpu = measure::command_cpu_seconds("postgres") - cpu_before;
    eprintln!("  postgresql: {} documents updated in {:.1} s", phase.updated, phase.seconds);
    Ok(row("postgresql", a, load_seconds, &phase, serde_json::Value::Null))
}

async fn run_async(a: W3Args) -> BenchResult<()> {
    let mut rows = vec![bench_arbordb(&a).await?];
    if !a.skip_peer {
        rows.push(bench_postgres(&a).await?);
    }
    println!("{:<11} {:>12} {:>14} {:>18}", "system", "load docs/s", "docs updated/s", "server cpu us/doc");
    for r in &rows {
        println!(
            "{:<11} {:>12.0} {:>14.0} {:>18.2}",
            r["system"].as_str().unwrap_or(""),
            r["load_docs_per_sec"].as_f64().unwrap_or(0.0),
            r["docs_updated_per_sec"].as_f64().unwrap_or(0.0),
            r["server_cpu_us_per_doc_updated"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(p) = rows[0].get("profile").filter(|p| !p.is_null()) {
        println!(
            "arbordb profile of the update phase: eviction and reconciliation {:.1}% of samples, index key generation {:.1}%",
            p["eviction_and_reconciliation_percent"].as_f64().unwrap_or(0.0),
            p["index_key_generation_percent"].as_f64().unwrap_or(0.0)
        );
    }
    let doc = json!({
        "benchmark": "w3 many-index update (issue 19)",
        "time": measure::utc_timestamp_compact(),
        "arbordb_cache_mib": a.arbordb_cache_mib, "seconds": a.seconds,
        "machine_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "results": rows,
    });
    report::save(&a.out, &doc)?;
    Ok(())
}

pub fn run(a: W3Args) -> BenchResult<()> {
    report::block_on(run_async(a))
}
