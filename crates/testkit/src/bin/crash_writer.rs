//! Child process of the kill -9 test: opens the data directory, continues
//! the deterministic workload from where the table stands, and prints
//! `ack N` after batch N's commit returned (fsync on commit). The parent
//! kills it at a random moment.

use std::io::Write;
use storage::{Config, Engine, SyncMode, TableConfig};
use testkit::workload;

fn main() {
    // Any panic, on any thread, must end the process so the parent sees it.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
    let args: Vec<String> = std::env::args().collect();
    let dir = &args[1];
    let seed: u64 = args[2].parse().unwrap();
    let config = Config {
        sync_mode: SyncMode::Fsync,
        // Small, so kills also land inside checkpoints and journal rotations.
        checkpoint_journal_bytes: 256 * 1024,
        journal_file_max_bytes: 128 * 1024,
        // Smaller than the data, so eviction writes and drops pages throughout.
        cache_size_bytes: 256 * 1024,
        cache_pinned_max_percent: 100,
        ..Config::default()
    };
    let engine = Engine::open(dir, config).expect("open");
    let table = match engine.table("crash") {
        Ok(t) => t,
        Err(_) => {
            let cfg = TableConfig {
                leaf_page_max_bytes: 4096,
                internal_page_max_bytes: 1024,
                overflow_min_bytes: 1024,
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
