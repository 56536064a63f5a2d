//! The query language over documents: filters (`matcher.rs`), and later
//! update operators, projection, the planner, executor stages, explain and
//! aggregation. Performs no I/O of its own, but for the runs of an external
//! sort (`external.rs`).

pub mod collation;
pub mod expr;
pub mod external;
pub mod field_names;
pub(crate) mod integer;
pub mod matcher;
pub mod pipeline;
pub mod projection;
pub mod regex;
pub mod schema;
pub mod sort;
pub mod update;
pub mod update_pipeline;
pub mod validation_error;

pub use collation::Collation;
pub use matcher::{Filter, FilterError};
pub use pipeline::{MemoryLimits, Pipeline};
pub use projection::Projection;
pub use sort::Sort;
pub use update::{type_name, Update};
