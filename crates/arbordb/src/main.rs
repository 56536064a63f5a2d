//! The `arbordb` command-line tool: one binary, one subcommand per job.
//!
//! `arbordb serve` (the server, `serve.rs`), `arbordb verify` and `arbordb
//! dump` (in `tools.rs`). Each subcommand lives in its own module and this
//! file only parses arguments and dispatches. The benchmarks are another
//! binary, `arbordb-bench` (`crates/bench`), so this one links no peer.

mod serve;
mod tools;

use clap::{Parser, Subcommand};

/// mimalloc: the server allocates and frees many small BSON values per
/// request from many threads; glibc's malloc spent 30% of the server's CPU
/// on that in the YCSB profile (`bench/results/ycsb.json` notes).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "arbordb", version, about = "ArborDB tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the MongoDB-compatible server.
    Serve(serve::ServeArgs),
    /// Check every page, checksum, key range and extent list of a data directory.
    Verify(tools::VerifyArgs),
    /// Print tables, pages and journal records of a data directory.
    Dump(tools::DumpArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), String> = match cli.command {
        Command::Serve(args) => serve::run(args).map_err(|e| e.to_string()),
        Command::Verify(args) => match tools::verify(args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Dump(args) => tools::dump(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("arbordb: {e}");
            ExitCode::FAILURE
        }
    }
}
