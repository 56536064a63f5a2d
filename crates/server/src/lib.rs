//! The MongoDB wire protocol, command dispatch, sessions, cursors and
//! transactions. The only crate that knows MongoDB error codes and opcodes.
//!
//! So far: the wire format (`wire.rs`, `compression.rs`), the handshake and administration
//! commands (`commands.rs`), the network server with a clean shutdown
//! (`server.rs`). Collections and the query language come next (issue 4).

pub mod commands;
pub mod compression;
pub mod crud;
pub mod durability;
pub mod error;
pub mod limits;
pub mod modify;
pub mod point;
pub mod read;
pub mod server;
pub mod wire;

pub use server::{parsed_options, Server, ServerOptions};
