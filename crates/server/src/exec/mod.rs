//! What commands share to carry out their work: cursors, scans, views,
//! deadlines, spilling, write acknowledgement, the update and delete
//! statement machinery, `$out`/`$merge`. Commands call into these; these
//! never call a command.

pub mod access;
pub mod agg_write;
pub mod call;
pub mod ctx;
pub mod cursors;
pub mod deadline;
pub mod id_index;
pub mod index_builds;
pub mod index_mod;
pub mod index_scan;
pub mod index_spec;
pub mod modify;
pub mod ops;
pub mod plan_cache;
pub mod scan;
pub mod spill;
pub mod storage_stats;
pub mod views;
pub mod write;
