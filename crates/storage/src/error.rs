//! The storage engine's error type. Data goes in variants, not strings.

use std::path::PathBuf;

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A checksum, size, or structural check failed: the bytes on disk are not
    /// what the engine wrote there. Never returned as data.
    #[error("corruption in {path} at offset {offset}: {detail}")]
    Corruption { path: PathBuf, offset: u64, detail: String },
    /// An earlier failure (corruption, failed write or fsync) makes further
    /// writes unsafe; the engine refuses them until it is reopened.
    #[error("engine is poisoned and refuses writes: {reason}")]
    Poisoned { reason: String },
    #[error("table not found: {0}")]
    TableNotFound(String),
    #[error("table already exists: {0}")]
    TableExists(String),
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("the data directory {path} is locked by another process")]
    Locked { path: PathBuf },
    #[error("engine is closed")]
    Closed,
    /// First updater wins: `key` has a version this transaction cannot see
    /// (uncommitted by transaction `holder`, or committed after our
    /// snapshot). Nothing was written; retry the transaction.
    #[error(
        "WriteConflict: key {} in table {table:?} was written by concurrent transaction {holder}",
        crate::error::show_key(key)
    )]
    WriteConflict { table: String, key: Vec<u8>, holder: u64 },
    /// Serializable isolation: committing (or continuing) `txn` could make
    /// the history non-serializable. The transaction is rolled back; retry it.
    #[error("serialization failure: transaction {txn} conflicts with transaction {other}: {detail}")]
    SerializationFailure { txn: u64, other: u64, detail: String },
    /// The cache could not hold the old versions open snapshots pin; the
    /// oldest transaction is rolled back so the rest can go on.
    #[error(
        "transaction {txn} rolled back under cache pressure: snapshots pin {pinned} bytes of old versions, over \
         the limit of {limit} bytes; use shorter transactions or a larger cache"
    )]
    CachePressure { txn: u64, pinned: usize, limit: usize },
    /// A transaction changes more pages than the cache can hold for it
    /// (`bytes`: what the pages counted before the limit was passed need).
    #[error(
        "transaction too large for the cache: the pages it changes need at least {bytes} bytes, over the limit \
         of {limit} bytes; split it into smaller transactions or use a larger cache"
    )]
    TransactionTooLarge { bytes: usize, limit: usize },
    #[error("transaction {txn} is read-only")]
    ReadOnlyTransaction { txn: u64 },
}

/// A key for messages: printable ASCII as is, anything else in hex.
pub fn show_key(key: &[u8]) -> String {
    if !key.is_empty() && key.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("{:?}", String::from_utf8_lossy(key))
    } else {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    }
}

impl StorageError {
    pub fn corruption(path: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        StorageError::Corruption { path: path.into(), offset, detail: detail.into() }
    }

    /// Before retrying after this error: a cache rollback waits a little
    /// (the pinned versions need the oldest snapshots to end), a
    /// conflict only yields.
    pub fn pause_before_retry(&self) {
        match self {
            StorageError::CachePressure { .. } => std::thread::sleep(std::time::Duration::from_millis(1)),
            _ => std::thread::yield_now(),
        }
    }

    pub fn is_corruption(&self) -> bool {
        matches!(self, StorageError::Corruption { .. })
    }

    /// A conflict the caller resolves by retrying the whole transaction:
    /// a write conflict, a serialization failure, or a rollback to free
    /// the cache (the retry is the newest transaction, not the oldest the
    /// cache rolls back).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StorageError::WriteConflict { .. }
                | StorageError::SerializationFailure { .. }
                | StorageError::CachePressure { .. }
        )
    }
}
