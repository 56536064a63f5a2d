//! Documents over storage: BSON comparison order, KeyString encoding, the
//! catalog, record stores, index key generation and maintenance.
//!
//! So far: MongoDB's value order (`compare.rs`), the order-preserving key
//! encoding that agrees with it (`keystring.rs`), and the catalog with
//! record stores and `_id` indexes (`catalog.rs`). Depends only on
//! `storage` (arrows point down; see ARCHITECTURE.md).

pub mod bson_bytes;
pub mod catalog;
pub mod compare;
pub mod decimal;
pub mod decimal_math;
pub mod format;
pub mod index;
pub mod keystring;
pub mod limits;
pub mod sessions;
pub mod stored;
