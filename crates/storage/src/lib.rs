//! ArborDB's storage engine: bytes in, bytes out. A copy-on-write B+tree per
//! table over a checksummed block manager, a journal with group commit, and
//! checkpoints that publish a new consistent image atomically.
//!
//! Knows nothing of BSON or MongoDB. See ARCHITECTURE.md for the map.
#![allow(non_upper_case_globals)]

pub mod block;
pub mod btree;
pub mod cache;
pub mod codec;
pub mod compress;
pub mod engine;
pub mod entries;
pub mod error;
pub mod journal;
pub mod limits;
pub mod page;
pub mod reader;
pub mod runs;
pub mod ssi;
pub mod stats;
pub mod txn;
pub mod verify;
pub mod vfs;

pub use block::{AllocPolicy, BlockAddr};
pub use btree::{Cursor, TableFormat};
pub use bytes::Bytes;
pub use compress::Compressor;
pub use engine::{Config, Engine, Table, TableConfig, TableIoEntry, WriteBatch};
pub use error::{Result, StorageError};
pub use journal::SyncMode;
pub use reader::{Read, ReadCursor, Reader};
pub use stats::{Stats, TableIoStats};
pub use txn::{Isolation, Txn, TxnCursor, TxnOptions};
pub use vfs::{DirectVfs, OsVfs, Vfs, VfsFile};
