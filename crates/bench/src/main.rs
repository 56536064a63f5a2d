//! `arbordb-bench`: the benchmarks, one subcommand per workload, each
//! comparing ArborDB with a peer in the same run (see `bench/` for results
//! and charts, and `../shared/workloads/` for the workloads).
//!
//! A binary of its own, not a subcommand or a cargo feature of `arbordb`:
//! the peers (redb, LMDB through heed, PostgreSQL through
//! `tokio-postgres`), the `mongodb` driver and the test kit are then never
//! linked into the server, whatever features a build turns on, and
//! `cargo tree -p arbordb -e normal` shows it. `ycsb` starts the server as
//! a separate process (`arbordb serve`), as a user would.

mod arbor;
mod canned;
mod engine;
mod indexed;
mod lmdb_peer;
mod many_index;
mod measure;
mod multikey;
mod procs;
mod redb_peer;
mod report;
#[cfg(feature = "rocksdb")]
mod rocksdb_peer;
mod smallbank;
mod smallbank_wire;
mod tpcb;
mod txn_check;
mod workload;
mod ycsb;
mod ycsb_io;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Errors of the benchmarks: engines and drivers have unrelated error
/// types, and the benchmarks only report them.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = Result<T, BenchError>;

/// mimalloc, as the server uses: the harness's own allocations should not
/// weigh on the comparison more than the server's do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "arbordb-bench", version, about = "ArborDB benchmarks against their peers")]
struct Cli {
    #[command(subcommand)]
    target: Target,
}

#[derive(Subcommand, Debug)]
enum Target {
    /// Raw storage engine benchmark (W6): ArborDB vs redb vs LMDB.
    Engine(engine::EngineBenchArgs),
    /// SmallBank (W5) at engine level: snapshot isolation vs serializable.
    Smallbank(smallbank::SmallBankArgs),
    /// YCSB A and C (W2) through the network: ArborDB vs PostgreSQL.
    Ycsb(ycsb::YcsbArgs),
    /// Indexed equality, range and covered queries: ArborDB vs PostgreSQL.
    Index(indexed::IndexArgs),
    /// Many-index updates under a small cache (W3): ArborDB vs PostgreSQL.
    W3(many_index::W3Args),
    /// Multikey inserts into a huge array index (W1): ArborDB's B+tree
    /// index under a small cache against PostgreSQL's GIN.
    W1(multikey::W1Args),
    /// SmallBank (W5) over the wire: snapshot vs serializable transactions.
    SmallbankWire(smallbank_wire::SmallBankWireArgs),
    /// pgbench's TPC-B-like transaction (W4), multi-document and
    /// single-document designs: ArborDB vs pgbench on PostgreSQL.
    Tpcb(tpcb::TpcbArgs),
    /// Random multi-document transactions over the wire, their history
    /// checked (snapshot isolation; serializable: no cycle).
    TxnCheck(txn_check::TxnCheckArgs),
    /// The prepared-reply server of `ycsb --driver-ceiling` (no database).
    #[command(hide = true)]
    CannedServer(canned::CannedArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().target {
        Target::Engine(a) => engine::run(a),
        Target::Smallbank(a) => smallbank::run(a),
        Target::Ycsb(a) => ycsb::run(a),
        Target::Index(a) => indexed::run(a),
        Target::W3(a) => many_index::run(a),
        Target::W1(a) => multikey::run(a),
        Target::TxnCheck(a) => txn_check::run(a),
        Target::SmallbankWire(a) => smallbank_wire::run(a),
        Target::Tpcb(a) => tpcb::run(a),
        Target::CannedServer(a) => canned::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("arbordb-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
