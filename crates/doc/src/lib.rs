//! Documents over storage: BSON comparison order, KeyString encoding, the
//! catalog, record stores, index key generation and maintenance.
//!
//! Empty for now: the work starts with the server issue. Depends only on
//! `storage` (arrows point down; see ARCHITECTURE.md).
