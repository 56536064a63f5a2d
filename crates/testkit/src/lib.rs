//! Test support for ArborDB: file systems that crash, tear and fail on
//! purpose, and a deterministic workload with its reference model, shared
//! by the storage engine's tests. A dev-dependency only; nothing here is
//! reachable from the product (the crash-writer binary exists only for the
//! kill -9 test).

pub mod bank;
pub mod fault;
pub mod history;
pub mod mem;
pub mod workload;

pub use fault::FaultVfs;
pub use mem::MemVfs;
