//! The MongoDB wire protocol, command dispatch, sessions, cursors and
//! transactions. The only crate that knows MongoDB error codes and opcodes.
//!
//! The wire format (`wire.rs`, `compression.rs`), the handshake and
//! administration commands (`commands.rs`), collections and writes
//! (`crud.rs`, `modify.rs`, `bulk.rs` for the 8.0 `bulkWrite`, `indexes.rs`), reads and cursors (`read.rs`, `point.rs`),
//! sessions and retryable writes (`session.rs`), group commit
//! (`durability.rs`), the network server with a clean shutdown
//! (`server.rs`).

pub mod agg_write;
pub mod bulk;
pub mod code_names;
pub mod commands;
pub mod compression;
pub mod crud;
pub mod durability;
pub mod error;
pub mod failpoint;
pub mod indexes;
pub mod limits;
pub mod modify;
pub mod point;
pub mod read;
pub mod server;
pub mod session;
pub mod spill;
pub mod ttl;
pub mod wire;

pub use server::{parsed_options, Server, ServerOptions};
