//! The document layer's limits.
#![allow(non_upper_case_globals)]

/// Deepest nesting (objects, arrays, code scopes) any decoded document
/// may have, whatever a caller's own limit: it bounds the recursion of
/// converting bytes to a document (`bson_bytes`).
pub const decode_depth_max: usize = 1024;

/// Deepest nesting a stored document may have, the top level counting as
/// one (mongod's `BSONDepth::getMaxDepthForUserStorage()`). Every write
/// checks it, so every stored record decodes again.
pub const stored_depth_max: usize = 180;

const _: () = assert!(stored_depth_max <= decode_depth_max);

/// Index keys (KeyStrings) up to this many bytes are stored whole; a
/// longer one as its first `key_inline_max_bytes` followed by a digest of
/// the whole (`keystring::storable`), so keys of any size fit the storage
/// engine's key limit.
pub const key_inline_max_bytes: usize = 4096;

/// Bytes of SHA-256 kept as a long key's digest.
pub const key_digest_bytes: usize = 16;

// A long key with its record id fits the engine's key limit.
const _: () = assert!(key_inline_max_bytes + key_digest_bytes + 8 <= storage::limits::key_size_max_bytes);

/// The most keys one document may give a `parallelArrays` index (the
/// product of its arrays' sizes); past it the write fails, changing
/// nothing.
pub const index_keys_parallel_max: usize = 10_000;
