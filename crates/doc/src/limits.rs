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
