//! `arbordb-bench w1`: the multikey-insert workload (W1 in
//! `../shared/workloads/README.md`, issue 22), each variant in turn on a
//! fresh server.
//!
//! Documents `{_id, ts, customerid, productid, price, uri: [100 distinct
//! strings of 59 bytes]}` with an index on `uri` (multikey: 100 entries
//! per document at random positions) and one on `ts`, inserted by one
//! client in batches of 100 documents until `--docs` or `--seconds`.
//! Variants: `btree` (ArborDB's index as a B+tree, the cache `--arbordb-
//! cache-mib`, data files by direct I/O unless `--buffered`), `wo` (the
//! same with the `uri` index write-optimized: `storageEngine: {arbordb:
//! {format: "write-optimized"}}`) and `gin` (PostgreSQL 15, the array in
//! a GIN index with its default `fastupdate`). Reported per variant: the
//! insert rate over time (every 1% of the documents), the exit velocity
//! (the rate over the last 10% of the documents inserted), batch latency
//! percentiles, bytes written and server CPU per document (a closing
//! checkpoint included), the index's size, for ArborDB the leaf pages it
//! read per document, and then the time of `--lookups` element lookups
//! `{uri: X}` of inserted elements.

use crate::measure;
use crate::procs::{percentile, postmaster_pid, start_arbordb_with, start_postgres, MemoryCage};
use crate::report;
use crate::ycsb_io::{self, IoReading};
use crate::BenchResult;
use clap::Args;
use mongodb::bson::{doc, DateTime, Document};
use mongodb::Database;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug, Clone)]
pub struct W1Args {
    /// Documents to insert per variant (each stops earlier at `--seconds`).
    #[arg(long, default_value_t = 200_000)]
    docs: u64,
    /// Longest a variant inserts, in seconds.
    #[arg(long, default_value_t = 300)]
    seconds: u64,
    /// Documents per insert command.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Strings in each document's `uri` array.
    #[arg(long, default_value_t = 100)]
    uris: u64,
    /// ArborDB's cache in MiB (W1 wants it at most 1/20 of the index's final
    /// size; the index takes about 12 KB per document).
    #[arg(long, default_value_t = 64)]
    arbordb_cache_mib: u64,
    /// ArborDB's data files through the OS page cache (default: direct I/O,
    /// so its cache misses read the device).
    #[arg(long)]
    buffered: bool,
    /// Variants to run, comma separated: btree, wo (ArborDB), gin (PostgreSQL).
    #[arg(long, value_delimiter = ',', default_value = "btree,wo,gin")]
    variants: Vec<String>,
    /// Element lookups `{uri: X}` after the inserts, each of one element
    /// of a random inserted document.
    #[arg(long, default_value_t = 2000)]
    lookups: u64,
    #[arg(long, default_value = "../shared/tools/postgres-local")]
    postgres_local: PathBuf,
    /// Hold PostgreSQL (its processes, shared buffers and the page cache
    /// of its files) to this many MiB with a memory cgroup, as ArborDB is
    /// held to its cache by direct I/O: a number, `arbordb` (the largest
    /// peak RSS of the ArborDB variants run before it), or `off` (the
    /// machine's memory).
    #[arg(long, default_value = "off", value_parser = parse_memory_limit)]
    postgres_memory_mib: MemoryLimit,
    #[arg(long, default_value = "bench/results/w1.json")]
    out: PathBuf,
    #[arg(long)]
    arbordb_bin: Option<PathBuf>,
}

/// Bits of document `i`'s field `f`, spread and repeatable.
fn mix(i: u64, f: u64) -> u64 {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ f.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Element `j` of document `i`'s `uri`: 59 bytes, distinct within the
/// document, at a random place in the index.
fn uri(i: u64, j: u64) -> String {
    format!("https://shop.example.com/p/{:016x}{:016x}", mix(i, j), mix(j, i))
}

/// Start time of the documents' `ts` (2026-01-01), in milliseconds.
const TS_START_MS: i64 = 1_767_225_600_000;

fn document(i: u64, uris: u64) -> Document {
    let (id, ts_ms, customerid, productid, price, uri) = order(i, uris);
    doc! {
        "_id": id,
        "ts": DateTime::from_millis(ts_ms as i64),
        "customerid": customerid,
        "productid": productid,
        "price": price,
        "uri": uri,
    }
}

/// What one variant's insert loop saw.
#[derive(Default)]
struct Inserted {
    docs: u64,
    seconds: f64,
    batch_latency_us: Vec<u32>,
    /// (seconds since the start, documents inserted) every 1% of `--docs`.
    timeline: Vec<(f64, u64)>,
}

impl Inserted {
    /// Documents per second over the last 10% of the documents inserted.
    fn exit_velocity(&self) -> f64 {
        self.exit_velocity_settled(0.0)
    }

    /// The same, the index work deferred past the last insert (`settle`
    /// seconds: merges, a pending list) charged to those documents.
    fn exit_velocity_settled(&self, settle: f64) -> f64 {
        let from = self.docs - self.docs / 10;
        let Some(&(t0, d0)) = self.timeline.iter().rev().find(|(_, d)| *d <= from) else { return 0.0 };
        let span = self.seconds - t0 + settle;
        if span > 0.0 {
            (self.docs - d0) as f64 / span
        } else {
            0.0
        }
    }

    fn json(&self) -> serde_json::Value {
        let mut lat = self.batch_latency_us.clone();
        lat.sort_unstable();
        let rates: Vec<serde_json::Value> = self
            .timeline
            .windows(2)
            .map(|w| {
                let ((t0, d0), (t1, d1)) = (w[0], w[1]);
                json!({ "t_s": t1, "docs": d1, "docs_per_sec": (d1 - d0) as f64 / (t1 - t0).max(1e-9) })
            })
            .collect();
        json!({
            "docs": self.docs,
            "seconds": self.seconds,
            "docs_per_sec": self.docs as f64 / self.seconds.max(1e-9),
            "exit_velocity_docs_per_sec": self.exit_velocity(),
            "batch_latency_p50_us": percentile(&lat, 0.50),
            "batch_latency_p99_us": percentile(&lat, 0.99),
            "batch_latency_max_us": lat.last().copied().unwrap_or(0),
            "timeline": rates,
        })
    }
}

/// Insert batches through `insert` until `--docs` or `--seconds`,
/// printing progress every 1% of the documents.
async fn insert_loop<F, Fut>(name: &str, a: &W1Args, mut insert: F) -> BenchResult<Inserted>
where
    F: FnMut(u64, u64) -> Fut,
    Fut: std::future::Future<Output = BenchResult<()>>,
{
    let started = Instant::now();
    let step = (a.docs / 100).max(a.batch);
    let mut done = Inserted { timeline: vec![(0.0, 0)], ..Inserted::default() };
    while done.docs < a.docs && started.elapsed().as_secs() < a.seconds {
        let n = a.batch.min(a.docs - done.docs);
        let t = Instant::now();
        insert(done.docs, n).await?;
        done.batch_latency_us.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        done.docs += n;
        if done.docs % step < n || done.docs == a.docs {
            let now = started.elapsed().as_secs_f64();
            let &(t0, d0) = done.timeline.last().expect("the timeline starts at zero");
            eprintln!(
                "  {name}: {} documents in {now:.1} s ({:.0} documents/s lately)",
                done.docs,
                (done.docs - d0) as f64 / (now - t0).max(1e-9)
            );
            done.timeline.push((now, done.docs));
        }
    }
    done.seconds = started.elapsed().as_secs_f64();
    if done.timeline.last().is_some_and(|&(_, d)| d < done.docs) {
        done.timeline.push((done.seconds, done.docs));
    }
    Ok(done)
}

/// Run `a.lookups` lookups of random inserted elements through `lookup`
/// (which returns how many documents it found), timing each.
async fn lookup_loop<F, Fut>(a: &W1Args, docs: u64, mut lookup: F) -> BenchResult<serde_json::Value>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = BenchResult<u64>>,
{
    let mut lat = Vec::with_capacity(a.lookups as usize);
    let started = Instant::now();
    for k in 0..a.lookups {
        let (i, j) = (mix(k, 77) % docs.max(1), mix(k, 78) % a.uris.max(1));
        let t = Instant::now();
        let found = lookup(uri(i, j)).await?;
        lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        if found == 0 {
            return Err(format!("lookup of document {i}'s element {j} found nothing").into());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    Ok(json!({
        "lookups": a.lookups,
        "lookup_mean_us": seconds * 1e6 / a.lookups.max(1) as f64,
        "lookup_p50_us": percentile(&lat, 0.50),
        "lookup_p99_us": percentile(&lat, 0.99),
    }))
}

/// ArborDB with the `uri` index as `variant` says: `btree` or `wo`.
async fn bench_arbordb(a: &W1Args, variant: &str) -> BenchResult<serde_json::Value> {
    let cache = a.arbordb_cache_mib.to_string();
    let mut flags = vec!["--cache-mib", cache.as_str()];
    if !a.buffered {
        flags.push("--direct-io");
    }
    let arbordb = start_arbordb_with(a.arbordb_bin.as_deref(), "w1", &flags).await?;
    let client =
        mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{}/?directConnection=true", arbordb.port)).await?;
    let db = client.database("w1");
    let coll = db.collection::<Document>("orders");
    let format = if variant == "wo" { "write-optimized" } else { "btree" };
    let uri_options =
        mongodb::options::IndexOptions::builder().storage_engine(doc! { "arbordb": { "format": format } }).build();
    coll.create_index(mongodb::IndexModel::builder().keys(doc! { "uri": 1 }).options(uri_options).build()).await?;
    coll.create_index(mongodb::IndexModel::builder().keys(doc! { "ts": 1 }).build()).await?;
    let admin = client.database("admin");
    let status = || async { Ok::<_, crate::BenchError>(admin.run_command(doc! { "serverStatus": 1 }).await?) };
    let first = status().await?;
    let (before, leaf_reads_before) = (IoReading::arbordb(&first, &arbordb.dbpath())?, leaf_pages_read(&first));
    let pid = arbordb.server.0.id().to_string();
    let cpu = || measure::process_cpu_seconds(&pid).ok_or("the server is gone");
    let cpu_before = cpu()?;
    let done = insert_loop(&format!("arbordb {variant}"), a, |first, n| {
        let (coll, uris) = (coll.clone(), a.uris);
        async move {
            coll.insert_many((first..first + n).map(|i| document(i, uris))).await?;
            Ok(())
        }
    })
    .await?;
    let inserted = Instant::now();
    // A checkpoint writes what the inserts left dirty: counted in bytes
    // written and server CPU, and the index's size on disk is then whole.
    admin.run_command(doc! { "fsync": 1 }).await?;
    let checkpointed = inserted.elapsed().as_secs_f64();
    let server_cpu = cpu()? - cpu_before;
    let after = status().await?;
    let io = IoReading::arbordb(&after, &arbordb.dbpath())?.per_op_since(&before, done.docs);
    let leaf_reads = leaf_pages_read(&after) - leaf_reads_before;
    let stats = db.run_command(doc! { "collStats": "orders" }).await?;
    let index_bytes = stats.get_document("indexSizes").ok().and_then(|s| s.get("uri_1")).map(ycsb_io::as_u64);
    let runs = uri_index_runs(&stats);
    let lookup = |x| {
        let coll = coll.clone();
        async move { Ok(coll.count_documents(doc! { "uri": x }).await?) }
    };
    let cpu_before_lookups = cpu()?;
    let lookups = lookup_loop(a, done.docs, lookup).await?;
    let lookup_cpu = cpu()? - cpu_before_lookups;
    // Again once the table is quiet: the merges a write-optimized index
    // makes when writes stop (its idle merge included) done.
    let (waited, runs_quiet) = wait_for_merges(&db, &admin).await?;
    let again = lookup_loop(a, done.docs, lookup).await?;
    let mut row = done.json();
    merge(&mut row, lookups);
    merge(
        &mut row,
        json!({
            "checkpoint_seconds": checkpointed,
            "quiet_wait_seconds": waited,
            "uri_index_runs_quiet": runs_quiet.as_ref().map(Vec::len),
            "lookup_quiet_mean_us": again["lookup_mean_us"],
            "lookup_quiet_p99_us": again["lookup_p99_us"],
        }),
    );
    let extra = json!({
        "variant": variant, "system": "arbordb", "cache_mib": a.arbordb_cache_mib,
        "uri_index_runs": runs.as_ref().map(Vec::len),
        "lookup_server_cpu_us": lookup_cpu * 1e6 / a.lookups.max(1) as f64,
        // As the server reports it.
        "direct_io": after.get_document("arbordb").ok().and_then(|o| o.get_bool("directIO").ok()),
        "server_cpu_us_per_doc": server_cpu * 1e6 / done.docs.max(1) as f64,
        "server_peak_rss_mib": measure::peak_rss_bytes(&pid).map(|b| b >> 20),
        "leaf_pages_read_per_doc": leaf_reads as f64 / done.docs.max(1) as f64,
        "uri_index_bytes": index_bytes,
        "written": io,
    });
    merge(&mut row, extra);
    Ok(row)
}

/// The bytes of the `uri` index's runs, memtable first, as `collStats`
/// reports them; `None` for a B+tree.
fn uri_index_runs(stats: &Document) -> Option<Vec<i64>> {
    let runs = stats
        .get_document("indexDetails")
        .ok()
        .and_then(|d| d.get_document("uri_1").ok())
        .and_then(|d| d.get_document("arbordb").ok())
        .and_then(|d| d.get_array("runBytes").ok())?;
    Some(runs.iter().map(ycsb_io::as_u64).map(|b| b as i64).collect())
}

/// Wait until no merge has been running and the `uri` index's runs have
/// not changed for longer than the server's idle time (so that an idle
/// merge due has begun by then), at most two minutes; the seconds waited
/// and the runs then.
async fn wait_for_merges(db: &Database, admin: &Database) -> BenchResult<(f64, Option<Vec<i64>>)> {
    let settled = std::time::Duration::from_millis(storage::limits::runs_idle_merge_ms + 500);
    let started = Instant::now();
    let (mut last, mut since) = (None, Instant::now());
    while started.elapsed().as_secs() < 120 {
        let runs = uri_index_runs(&db.run_command(doc! { "collStats": "orders" }).await?);
        let status = admin.run_command(doc! { "serverStatus": 1 }).await?;
        let merging = status.get_document("arbordb").ok().and_then(|o| o.get_i64("runs_merging").ok()).unwrap_or(0);
        if merging > 0 || runs != last {
            (last, since) = (runs, Instant::now());
        } else if since.elapsed() >= settled {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok((started.elapsed().as_secs_f64(), last))
}

fn leaf_pages_read(status: &Document) -> i64 {
    status.get_document("arbordb").ok().and_then(|o| o.get_i64("leaf_pages_read").ok()).unwrap_or(0)
}

fn merge(row: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(r), serde_json::Value::Object(e)) = (row.as_object_mut(), extra) {
        r.extend(e);
    }
}

const PG_SCHEMA: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, ts timestamptz NOT NULL, \
     customerid int NOT NULL, productid int NOT NULL, price float8 NOT NULL, uri text[] NOT NULL);\
     CREATE INDEX orders_uri ON orders USING gin (uri); CREATE INDEX orders_ts ON orders (ts);";

/// `--postgres-memory-mib`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLimit {
    Off,
    /// The largest peak RSS of the ArborDB variants run before.
    Arbordb,
    Mib(u64),
}

/// The smallest limit taken: PostgreSQL's default shared buffers (128
/// MB) and its processes need about this much before any page cache.
const POSTGRES_MEMORY_MIN_MIB: u64 = 192;

fn parse_memory_limit(s: &str) -> Result<MemoryLimit, String> {
    match s {
        "off" => Ok(MemoryLimit::Off),
        "arbordb" => Ok(MemoryLimit::Arbordb),
        n => match n.parse::<u64>() {
            Ok(mib) if (POSTGRES_MEMORY_MIN_MIB..=1 << 30).contains(&mib) => Ok(MemoryLimit::Mib(mib)),
            _ => Err(format!("{n:?}: a number of MiB from {POSTGRES_MEMORY_MIN_MIB}, arbordb or off")),
        },
    }
}

/// PostgreSQL's memory limit in MiB as `--postgres-memory-mib` says,
/// given the rows of the variants run before; `None`: unlimited.
fn postgres_memory_mib(a: &W1Args, before: &[serde_json::Value]) -> BenchResult<Option<u64>> {
    match a.postgres_memory_mib {
        MemoryLimit::Off => Ok(None),
        MemoryLimit::Mib(mib) => Ok(Some(mib)),
        MemoryLimit::Arbordb => {
            let peak = before.iter().filter_map(|r| r["server_peak_rss_mib"].as_u64()).max();
            let peak = peak.ok_or("--postgres-memory-mib arbordb needs an ArborDB variant before gin")?;
            Ok(Some(peak.max(POSTGRES_MEMORY_MIN_MIB)))
        }
    }
}

async fn bench_gin(a: &W1Args, memory_mib: Option<u64>) -> BenchResult<serde_json::Value> {
    let (peer, url) = start_postgres(&a.postgres_local)?;
    let postmaster = postmaster_pid()?;
    let cage = memory_mib.map(|mib| MemoryCage::hold(&postmaster, mib << 20)).transpose()?;
    // Fields drop in order: the server stops before its cgroup goes.
    let guard = (peer, cage);
    let cage = guard.1.as_ref();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client.batch_execute(PG_SCHEMA).await?;
    let before = ycsb_io::postgres(&client, "orders").await?;
    let cpu = || measure::tree_cpu_seconds(&postmaster).ok_or("the postmaster is gone");
    let cpu_before = cpu()?;
    let client = &client;
    let done = insert_loop("postgresql gin", a, |first, n| {
        let uris = a.uris;
        async move {
            // One statement per batch, as the driver's insert_many is one
            // command: a multi-row INSERT.
            let rows: Vec<Order> = (first..first + n).map(|i| order(i, uris)).collect();
            type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
            let mut params: Vec<Param> = Vec::with_capacity(rows.len() * 6);
            for r in &rows {
                params.extend::<[Param; 6]>([&r.0, &r.1, &r.2, &r.3, &r.4, &r.5]);
            }
            client.execute(&pg_insert(rows.len()), &params).await?;
            Ok(())
        }
    })
    .await?;
    // The pending list merged into the index, then written, as ArborDB's
    // closing checkpoint writes its pages. Autovacuum may have taken the
    // merge over meanwhile: inserts then skip it and only append to the
    // pending list, which grows without bound, so the exit velocity is
    // also given with this merge charged ("settled"). (The write-optimized
    // format's backlog is bounded by its write stall, which inserts pay
    // as they go; merging its runs into one once quiet is for reads.)
    let inserted = Instant::now();
    let pending = client.query_one("SELECT gin_clean_pending_list('orders_uri')", &[]).await?;
    let settle = inserted.elapsed().as_secs_f64();
    client.batch_execute("CHECKPOINT").await?;
    let server_cpu = cpu()? - cpu_before;
    let vacuums =
        client.query_one("SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'orders'", &[]).await?;
    let after = ycsb_io::postgres(client, "orders").await?;
    let size = client.query_one("SELECT pg_relation_size('orders_uri')::bigint", &[]).await?;
    let cpu_before_lookups = cpu()?;
    let statement = client.prepare("SELECT count(*) FROM orders WHERE uri @> ARRAY[$1::text]").await?;
    let lookups = lookup_loop(a, done.docs, |x| {
        let statement = statement.clone();
        async move { Ok(client.query_one(&statement, &[&x]).await?.get::<_, i64>(0) as u64) }
    })
    .await?;
    let lookup_cpu = cpu()? - cpu_before_lookups;
    let mut row = done.json();
    merge(&mut row, lookups);
    merge(
        &mut row,
        json!({
            "variant": "gin", "system": "postgresql",
            "settle_seconds": settle,
            "exit_velocity_settled_docs_per_sec": done.exit_velocity_settled(settle),
            "pending_list_pages_merged_at_end": pending.get::<_, i64>(0),
            "memory_limit_mib": memory_mib,
            "memory_peak_mib": cage.and_then(MemoryCage::peak_bytes).map(|b| b >> 20),
            "memory_oom_kills": cage.and_then(MemoryCage::oom_kills),
            "autovacuums": vacuums.get::<_, i64>(0),
            "lookup_server_cpu_us": lookup_cpu * 1e6 / a.lookups.max(1) as f64,
            "server_cpu_us_per_doc": server_cpu * 1e6 / done.docs.max(1) as f64,
            "uri_index_bytes": size.get::<_, i64>(0),
            "written": after.per_op_since(&before, done.docs),
        }),
    );
    drop(guard);
    Ok(row)
}

/// `INSERT INTO orders VALUES (...), ...` for `rows` rows of parameters.
fn pg_insert(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let p = r * 6;
            format!(
                "(${}, to_timestamp(${}::float8 / 1000), ${}, ${}, ${}, ${})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6
            )
        })
        .collect();
    format!("INSERT INTO orders VALUES {}", values.join(", "))
}

/// Order `i`'s fields: `_id`, `ts` in milliseconds, customer, product,
/// price and `uri`, as both systems store them.
type Order = (i64, f64, i32, i32, f64, Vec<String>);

fn order(i: u64, uris: u64) -> Order {
    (
        i as i64,
        (TS_START_MS + i as i64 * 10) as f64,
        (mix(i, 1_000) % 100_000) as i32,
        (mix(i, 1_001) % 10_000) as i32,
        (mix(i, 1_002) % 100_000) as f64 / 100.0,
        (0..uris).map(|j| uri(i, j)).collect(),
    )
}

fn print_rows(rows: &[serde_json::Value]) {
    println!(
        "{:<8} {:>9} {:>8} {:>10} {:>12} {:>9} {:>12} {:>12} {:>14} {:>12} {:>12} {:>15}",
        "variant",
        "docs",
        "secs",
        "docs/s",
        "exit docs/s",
        "settled",
        "p99 batch ms",
        "server us/doc",
        "written B/doc",
        "index MiB",
        "lookup us",
        "quiet lookup us"
    );
    for r in rows {
        let written: f64 = r["written"]
            .as_object()
            .map(|w| w.iter().filter(|(k, _)| k.starts_with("file.")).filter_map(|(_, v)| v.as_f64()).sum())
            .unwrap_or(0.0);
        println!(
            "{:<8} {:>9} {:>8.1} {:>10.1} {:>12.1} {:>9} {:>12.1} {:>12.0} {:>14.0} {:>12.1} {:>12.0} {:>15.0}",
            r["variant"].as_str().unwrap_or(""),
            r["docs"].as_u64().unwrap_or(0),
            r["seconds"].as_f64().unwrap_or(0.0),
            r["docs_per_sec"].as_f64().unwrap_or(0.0),
            r["exit_velocity_docs_per_sec"].as_f64().unwrap_or(0.0),
            r["exit_velocity_settled_docs_per_sec"].as_f64().map_or("-".to_string(), |v| format!("{v:.1}")),
            r["batch_latency_p99_us"].as_f64().unwrap_or(0.0) / 1000.0,
            r["server_cpu_us_per_doc"].as_f64().unwrap_or(0.0),
            written,
            r["uri_index_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
            r["lookup_mean_us"].as_f64().unwrap_or(0.0),
            r["lookup_quiet_mean_us"].as_f64().unwrap_or(0.0),
        );
    }
}

async fn run_async(a: W1Args) -> BenchResult<()> {
    if a.batch == 0 || a.batch > 10_000 || a.docs == 0 {
        return Err("--batch must be within 1..=10000 (PostgreSQL's 65,535 parameters) and --docs positive".into());
    }
    if let Some(other) = a.variants.iter().find(|v| !["btree", "wo", "gin"].contains(&v.as_str())) {
        return Err(format!("unknown variant {other:?} (btree, wo, gin)").into());
    }
    if a.postgres_memory_mib != MemoryLimit::Off && a.variants.iter().any(|v| v == "gin") {
        MemoryCage::probe()?;
    }
    let mut rows = Vec::new();
    let mut failed = None;
    for v in &a.variants {
        let row = match v.as_str() {
            "gin" => match postgres_memory_mib(&a, &rows) {
                Ok(mib) => bench_gin(&a, mib).await,
                Err(e) => Err(e),
            },
            _ => bench_arbordb(&a, v).await,
        };
        match row {
            Ok(row) => rows.push(row),
            Err(e) => {
                // The variants that finished are still saved.
                failed = Some(format!("variant {v}: {e}"));
                break;
            }
        }
    }
    print_rows(&rows);
    let doc = json!({
        "benchmark": "w1 multikey insert (issue 22)",
        "time": measure::utc_timestamp_compact(),
        "commit": measure::git_commit(),
        "docs": a.docs, "seconds_max": a.seconds, "batch": a.batch, "uris_per_doc": a.uris,
        "arbordb_cache_mib": a.arbordb_cache_mib, "arbordb_direct_io": !a.buffered,
        "postgres_memory_mib": format!("{:?}", a.postgres_memory_mib),
        "error": failed,
        "machine_cpus": measure::cpus(),
        "results": rows,
    });
    report::save(&a.out, &doc)?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

pub fn run(a: W1Args) -> BenchResult<()> {
    report::block_on(run_async(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_59_bytes_and_distinct_within_a_document() {
        let d = document(7, 100);
        let uris: Vec<&str> = d.get_array("uri").unwrap().iter().map(|u| u.as_str().unwrap()).collect();
        assert_eq!(uris.len(), 100);
        assert!(uris.iter().all(|u| u.len() == 59), "{uris:?}");
        let distinct: std::collections::BTreeSet<_> = uris.iter().collect();
        assert_eq!(distinct.len(), 100);
        assert_ne!(uri(7, 0), uri(8, 0));
    }

    #[test]
    fn exit_velocity_is_the_rate_over_the_last_tenth() {
        let i = Inserted {
            docs: 1000,
            seconds: 20.0,
            batch_latency_us: vec![],
            timeline: vec![(0.0, 0), (5.0, 500), (10.0, 900), (20.0, 1000)],
        };
        assert_eq!(i.exit_velocity(), 10.0);
        // 100 documents over the last 10 s, and 10 s of deferred work.
        assert_eq!(i.exit_velocity_settled(10.0), 5.0);
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        w1: W1Args,
    }

    fn memory_limit(flag: &str, before: &[serde_json::Value]) -> BenchResult<Option<u64>> {
        use clap::Parser;
        let cli = Cli::try_parse_from(["w1", "--postgres-memory-mib", flag])?;
        postgres_memory_mib(&cli.w1, before)
    }

    #[test]
    fn postgres_memory_is_a_number_the_arbordb_peak_or_off() {
        let rows = [json!({ "server_peak_rss_mib": 300 }), json!({ "server_peak_rss_mib": 420 }), json!({})];
        assert_eq!(memory_limit("off", &rows).unwrap(), None);
        assert_eq!(memory_limit("512", &rows).unwrap(), Some(512));
        assert_eq!(memory_limit("arbordb", &rows).unwrap(), Some(420));
        // Never below what PostgreSQL's shared buffers need.
        assert_eq!(memory_limit("arbordb", &[json!({ "server_peak_rss_mib": 100 })]).unwrap(), Some(192));
        assert!(memory_limit("arbordb", &[]).is_err(), "no ArborDB variant ran before");
        for bad in ["lots", "0", "100", "-5"] {
            assert!(memory_limit(bad, &rows).is_err(), "{bad} was taken");
        }
    }
}
