//! The document layer's limits.
#![allow(non_upper_case_globals)]

/// Deepest nesting (objects, arrays, code scopes) any decoded document
/// may have, whatever a caller's own limit: it bounds the recursion of
/// converting bytes to a document (`bson_bytes`).
pub const decode_depth_max: usize = 1024;
