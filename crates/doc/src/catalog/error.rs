//! The document layer's error type.

use bson::{Bson, Document};
use storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum DocError {
    #[error("{}", duplicate_key_message(ns, *clustered, key, collation.as_deref()))]
    DuplicateKey {
        ns: String,
        /// A clustered collection's: its message names no index, as mongod's.
        clustered: bool,
        key: Box<Bson>,
        /// The `_id` index's collation and the key's collated form.
        collation: Option<Box<(Document, Bson)>>,
    },
    /// A key a unique secondary index already holds for another record.
    #[error("{0}")]
    DuplicateIndexKey(Box<DuplicateIndexKey>),
    /// A document whose indexed paths meet two arrays (171).
    #[error("{0}")]
    ParallelArrays(String),
    /// A `parallelArrays` index's keys of one document past the cap.
    #[error("{0}")]
    TooManyIndexKeys(String),
    /// A hashed index's path holds an array (mongod's 16766).
    #[error("{0}")]
    HashedArray(String),
    /// A rename of a collection whose index is being built.
    #[error("cannot perform operation: an index build is currently running for collection '{0}'")]
    BuildInProgress(String),
    #[error("index not found with name [{0}]")]
    IndexNotFound(String),
    #[error("An index with name {0} already exists")]
    IndexExists(String),
    #[error("Collection {0} already exists.")]
    NamespaceExists(String),
    #[error("Source collection {0} does not exist")]
    NamespaceNotFound(String),
    #[error("{0}")]
    InvalidNamespace(String),
    #[error("stored document is corrupt: {0}")]
    Corrupt(String),
    /// A document larger than its capped collection.
    #[error("object to insert exceeds cappedMaxSize")]
    ExceedsCappedSize,
    /// A write to a capped collection in a caller's transaction: its size
    /// accounting needs transactions of its own.
    #[error("writes in a transaction are not allowed on capped collections")]
    CappedInTransaction,
    /// An index asked for, in a transaction, on a collection the
    /// transaction created and has written to.
    #[error("Cannot create new indexes on non-empty collection {0} in a multi-document transaction.")]
    IndexOnNonEmptyInTransaction(String),
    /// A document nested deeper than `limits::stored_depth_max` (`max`),
    /// in mongod's words for an insert or an update.
    #[error("{}", if *update {
        format!("Document exceeds maximum nesting depth of {max}")
    } else {
        format!("cannot insert document because it exceeds {max} levels of nesting")
    })]
    TooDeep { max: usize, update: bool },
    /// A document BSON cannot hold (a field name with a null byte).
    #[error(transparent)]
    Unencodable(#[from] crate::bson_bytes::EncodeError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A write that waited on conflicts until its deadline (`maxTimeMS`).
    #[error("operation exceeded time limit")]
    TimeLimit,
    /// A write that waited on conflicts until it was killed (`killOp`).
    #[error("operation was interrupted")]
    Interrupted,
}

/// A stored record that does not decode is corruption (only records this
/// process wrote are decoded through `Stored`).
impl From<crate::bson_bytes::DecodeError> for DocError {
    fn from(e: crate::bson_bytes::DecodeError) -> DocError {
        DocError::Corrupt(e.to_string())
    }
}

/// A key a unique secondary index already holds.
#[derive(Debug)]
pub struct DuplicateIndexKey {
    pub ns: String,
    pub index: String,
    pub key_pattern: Document,
    pub key_value: Document,
    /// The index's collation, in full (`None`: binary).
    pub collation: Option<Document>,
}

impl std::fmt::Display for DuplicateIndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = crate::format::spaced(&Bson::Document(self.key_value.clone()));
        write!(f, "E11000 duplicate key error collection: {} index: {}", self.ns, self.index)?;
        if let Some(c) = &self.collation {
            write!(f, " collation: {}", crate::format::spaced(&Bson::Document(c.clone())))?;
        }
        write!(f, " dup key: {key}")
    }
}

/// mongod's E11000 message. Under a collation it names the collation and
/// shows a string key as its collation key, hex encoded.
pub(crate) fn duplicate_key_message(
    ns: &str,
    clustered: bool,
    key: &Bson,
    collation: Option<&(Document, Bson)>,
) -> String {
    let index = if clustered { "" } else { " index: _id_" };
    let Some((spec, collated)) = collation else {
        return format!(
            "E11000 duplicate key error collection: {ns}{index} dup key: {{ _id: {} }}",
            crate::format::spaced(key)
        );
    };
    let shown = match collated {
        Bson::String(hex) => format!("\"0x{hex}\""),
        _ => crate::format::spaced(key),
    };
    format!(
        "E11000 duplicate key error collection: {ns}{index} collation: {} dup key: {{ _id: {shown} }}",
        crate::format::spaced(&Bson::Document(spec.clone()))
    )
}
