//! Child process of the kill -9 test: opens the data directory, continues
//! the deterministic workload from where the table stands, and prints
//! `ack N` after batch N's commit returned (fsync on commit). The parent
//! kills it at a random moment. Further arguments: `direct-io` opens the
//! engine with direct I/O, `write-optimized` makes the table write-optimized.

use std::io::Write;
use storage::{Engine, TableConfig, TableFormat};
use testkit::workload;

fn main() {
    testkit::crash::abort_on_panic();
    let args: Vec<String> = std::env::args().collect();
    let dir = &args[1];
    let seed: u64 = args[2].parse().unwrap();
    let flag = |f: &str| args[3..].iter().any(|a| a == f);
    let direct_io = flag("direct-io");
    let format = if flag("write-optimized") { TableFormat::WriteOptimized } else { TableFormat::BTree };
    let config = storage::Config { direct_io, ..testkit::crash::writer_config() };
    let engine = Engine::open(dir, config).expect("open");
    let table = match engine.table("crash") {
        Ok(t) => t,
        Err(_) => {
            let cfg = TableConfig {
                leaf_page_max_bytes: 4096,
                internal_page_max_bytes: 1024,
                overflow_min_bytes: 1024,
                format,
                ..TableConfig::default()
            };
            engine.create_table("crash", cfg).expect("create table")
        }
    };
    let start = workload::batches_in(&engine, &table).expect("read last");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "start {start}").unwrap();
    out.flush().unwrap();
    for n in start.. {
        workload::commit(&engine, &table, seed, n).expect("commit");
        writeln!(out, "ack {n}").unwrap();
        out.flush().unwrap();
    }
}
