//! The network side: wire messages, compression, the connection loop and
//! the point-read fast path that answers a `find` by `_id` from the bytes.

pub mod compression;
pub mod connection;
pub mod point;
pub mod wire;
