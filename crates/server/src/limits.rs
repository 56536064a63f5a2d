//! The server's limits, MongoDB's where a driver can see them (`hello`
//! reports the first three).
#![allow(non_upper_case_globals)]

/// Largest BSON document a client may store.
pub const bson_object_size_max_bytes: usize = 16 * 1024 * 1024;
/// Largest document of a message (a command, or one of its statements):
/// room for a largest stored document and the statement around it, as
/// mongod's `BSONObjMaxInternalSize`.
pub const bson_object_internal_max_bytes: usize = bson_object_size_max_bytes + 16 * 1024;

/// The `_id`s CannotConvertIndexToUnique lists, at most (mongod's).
pub const violations_max_bytes: usize = bson_object_size_max_bytes / 2;
/// Largest wire message (a batch of documents plus framing).
pub const message_size_max_bytes: usize = 48_000_000;
/// Most write operations in one insert, update or delete command.
pub const write_batch_size_max: usize = 100_000;
/// Deepest nesting of objects and arrays MongoDB accepts in a document.
pub const bson_depth_max: usize = 100;
/// The wire header: length, request id, response to, op code.
pub const header_bytes: usize = 16;
/// MongoDB 8.0's wire version, so drivers enable everything 8.0 offers.
pub const wire_version_max: i32 = 25;
/// Most documents a `find` on exact index bounds may skip and return in
/// its first batch on a network thread, without handing the thread's
/// other connections to another thread first.
pub const quick_read_docs_max: usize = 128;
/// Most keys a transaction may have written for its commit to run on a
/// network thread without handing the thread's other connections off
/// first (a commit applies its write set to the trees).
pub const quick_commit_writes_max: usize = 64;
/// Most snapshots kept for reads at `atClusterTime` (`snapshots.rs`);
/// the oldest goes first.
pub const snapshots_kept_max: usize = 64;
/// Seconds an idle cursor lives.
pub const cursor_idle_timeout_secs: u64 = 600;
/// Minutes an idle session lives (drivers turn sessions on when set).
pub const session_timeout_minutes: i32 = 30;
/// A command that takes longer is logged as a slow query (mongod's
/// `slowms` default; the `profile` command changes it).
pub const slow_ms_default: i64 = 100;

const _: () = assert!(bson_object_internal_max_bytes < message_size_max_bytes);
