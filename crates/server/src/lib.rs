//! The MongoDB wire protocol, command dispatch, sessions, cursors and
//! transactions. The only crate that knows opcodes and the shape of an
//! error reply (`error.rs`: code names, labels); lower layers carry
//! MongoDB's codes as data in their errors.
//!
//! Folders show the layers inside: `net/` (wire messages, compression, the
//! connection loop, the point-read fast path), `commands/` (the dispatch
//! table and one file per command family; a command file never imports
//! another), `exec/` (what commands share: cursors, scans, views, writes),
//! and beside them `args.rs` (mongod-style argument parsing), `error.rs`,
//! `session.rs` (sessions and retryable writes), `durability.rs` (group
//! commit), `ttl.rs`, `failpoint.rs` and `server.rs` (the shared state and
//! the listener with a clean shutdown).

pub mod args;
pub mod code_names;
pub mod commands;
pub mod durability;
pub mod error;
pub mod exec;
pub mod failpoint;
pub mod limits;
pub mod net;
pub mod profiler;
pub mod read_concern;
pub mod reply;
pub mod server;
pub mod session;
pub mod snapshots;
pub mod transactions;
pub mod ttl;

pub use server::{parsed_options, Server, ServerOptions};
