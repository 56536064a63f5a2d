//! The MongoDB wire protocol, command dispatch, sessions, cursors and
//! transactions. The only crate that knows MongoDB error codes and opcodes.
//!
//! Empty for now: the work starts with the server issue.
