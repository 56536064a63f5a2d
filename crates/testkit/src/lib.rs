//! Test support for ArborDB: file systems that crash, tear and fail on
//! purpose, shared by the storage engine's tests. A dev-dependency only;
//! nothing here is reachable from the product.

pub mod fault;
pub mod mem;
pub mod workload;

pub use fault::FaultVfs;
pub use mem::MemVfs;
