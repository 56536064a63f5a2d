//! The query language over documents: filters (`matcher.rs`), and later
//! update operators, projection, the planner, executor stages, explain and
//! aggregation. Performs no I/O of its own.

pub mod matcher;
pub mod pipeline;
pub mod regex;
pub mod update;

pub use matcher::{Filter, FilterError};
pub use pipeline::Pipeline;
pub use update::Update;
