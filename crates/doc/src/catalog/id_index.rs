//! The `_id` index: keys by KeyString (under the collection's default
//! collation when it has one), its table configuration, duplicate-key errors.

use super::*;
use crate::keystring;
use bson::{Bson, Document};
use std::sync::Arc;
use storage::TableConfig;

/// A collation as an index applies it: the `_id` index under its
/// collection's default collation, a secondary index under its own (the
/// query layer implements it with ICU; this crate only stores its keys).
pub trait KeyCollation: Send + Sync {
    /// `v` with every string replaced so that the binary order of its
    /// KeyString is the collation's order: two values the collation finds
    /// equal get one key.
    fn key_of(&self, v: &Bson) -> Bson;
    /// The collation in full, as the `_id` index entry records it.
    fn full_spec(&self) -> Document;
    /// Names the code and data that make the keys: an index whose entry
    /// names another is not opened (its keys may not match this build's).
    fn key_format(&self) -> &'static str;
}

/// Makes the `KeyCollation` of a collation specification (`None`: the
/// simple collation, binary keys).
pub type KeyCollations = fn(&Document) -> Option<Arc<dyn KeyCollation>>;

/// Index tables get smaller leaves than record tables (16 KiB against
/// 32 KiB, as MongoDB configures WiredTiger): their entries are small and
/// many, and a commit copies each leaf it changes whole while a reader's
/// version still holds it, so smaller leaves copy fewer entries per insert.
pub(crate) fn index_table_config(engine: &Engine) -> TableConfig {
    TableConfig {
        leaf_page_max_bytes: INDEX_LEAF_BYTES,
        overflow_min_bytes: INDEX_LEAF_BYTES / 4,
        ..engine.default_table_config()
    }
}

pub(crate) const INDEX_LEAF_BYTES: u32 = 16 * 1024;

impl Collection {
    /// The `_id` index's collation (`None`: binary).
    pub fn id_collation(&self) -> Option<&Arc<dyn KeyCollation>> {
        self.id_collation.as_ref()
    }

    /// The `_id` index key of `id`: its KeyString, strings by their
    /// collation keys under the index's collation.
    pub fn id_key(&self, id: &Bson) -> Vec<u8> {
        let key = match &self.id_collation {
            Some(c) => keystring::encode(&c.key_of(id)),
            None => keystring::encode(id),
        };
        if self.long_ids {
            keystring::storable(key)
        } else {
            key
        }
    }

    pub(crate) fn duplicate(&self, id: Bson) -> DocError {
        let collation = self.id_collation.as_ref().map(|c| Box::new((c.full_spec(), c.key_of(&id))));
        DocError::DuplicateKey { ns: self.ns.to_string(), clustered: self.is_clustered(), key: Box::new(id), collation }
    }
}
