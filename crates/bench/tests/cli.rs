//! `arbordb-bench` end to end, small: the benchmarks run, check what they
//! read, and write their JSON.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbordb-bench")).args(args).output().unwrap()
}

/// The server binary `cargo test --workspace` built beside this one.
fn arbordb_bin() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_arbordb-bench")).with_file_name("arbordb")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `arbordb-bench ycsb` end to end on a small load, with the driver ceiling: every
/// read finds its record and every update matches one (the harness fails
/// otherwise), and the prepared-reply server answers the same driver code.
#[test]
fn bench_ycsb_runs_arbordb_and_the_driver_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ycsb.json");
    let o = bench(&[
        "ycsb",
        "--records",
        "300",
        "--seconds",
        "1",
        "--threads",
        "2",
        "--skip-peer",
        "--driver-ceiling",
        "--arbordb-cache-mib",
        "64",
        "--dir",
        dir.path().to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--arbordb-bin",
        arbordb_bin().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let rows = report["results"].as_array().unwrap();
    for system in ["arbordb", "driver-ceiling"] {
        for workload in ["a", "c"] {
            let row = rows.iter().find(|r| r["system"] == system && r["workload"] == workload).unwrap();
            assert!(row["ops"].as_u64().unwrap() > 0, "{system} {workload}: {row}");
            if workload == "a" {
                assert!(row["updates"].as_u64().unwrap() > 0, "{system}: {row}");
            }
        }
    }
    let ceiling = rows.iter().find(|r| r["system"] == "driver-ceiling").unwrap();
    assert!(ceiling["load_seconds"].is_null(), "the ceiling stores nothing: {ceiling}");
}
