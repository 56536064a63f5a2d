//! The query language over documents: filters (`matcher.rs`), update
//! operators, projection, sorts, aggregation expressions (`expr/`) and
//! pipelines. Performs no I/O of its own, but for the runs of an external
//! sort (`external.rs`).
//!
//! Leaves under everything: `error.rs` (the layer's error and its
//! codes), `types.rs` (type names and other shared type helpers) and
//! `reads.rs` (the top-level fields an operation reads). What
//! an evaluation reads besides the document (the collation) travels as a
//! parameter, the evaluation context (`context.rs`).

pub mod bounds;
pub mod collation;
pub(crate) mod context;
pub mod error;
pub mod expr;
pub mod external;
pub mod field_names;
pub mod hooks;
pub use hooks::hooks;
pub(crate) mod integer;
pub mod matcher;
pub mod pipeline;
pub mod plan;
pub mod projection;
pub(crate) mod reads;
pub mod regex;
pub mod schema;
pub mod sort;
pub mod types;
pub mod update;
pub mod update_pipeline;
pub mod validation_error;

pub use collation::Collation;
pub use error::FilterError;
pub use matcher::Filter;
pub use pipeline::{MemoryLimits, Pipeline};
pub use projection::Projection;
pub use sort::Sort;
pub use types::type_name;
pub use update::Update;
