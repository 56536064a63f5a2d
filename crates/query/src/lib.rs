//! Filter matching, update operators, projection, planning, execution,
//! explain and aggregation. Performs no I/O of its own.
//!
//! Empty for now: the work starts with the server issue.
