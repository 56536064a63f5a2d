//! Test support for ArborDB: file systems that crash, tear and fail on
//! purpose, and a deterministic workload with its reference model, shared
//! by the storage engine's tests. Nothing here is reachable from the
//! server; the `arbordb-bench` tool uses `history` to count the anomalies of a
//! benchmark run. The crash-writer binaries exist only for the kill -9 tests.

pub mod bank;
pub mod crash;
pub mod fault;
pub mod history;
pub mod mem;
pub mod workload;

pub use fault::FaultVfs;
pub use mem::MemVfs;
