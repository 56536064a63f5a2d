//! The query layer's error, [`FilterError`]: MongoDB's error code and
//! message, as parsing or evaluating a filter, update, projection, sort,
//! pipeline or collation reports it; the server turns it into a reply.
//! With its constructors and, by mongod's names, the codes the crate
//! refers to by name. A leaf: it uses no other module of the crate.

/// An error of the query layer: MongoDB's code and message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct FilterError {
    /// MongoDB's error code (2 BadValue for most parse errors).
    pub code: i32,
    pub message: String,
}

pub(crate) const BAD_VALUE: i32 = 2;
pub(crate) const FAILED_TO_PARSE: i32 = 9;
pub(crate) const DBREF_INVALID: i32 = 10;
pub(crate) const TYPE_MISMATCH: i32 = 14;
pub(crate) const PATH_NOT_VIABLE: i32 = 28;
pub(crate) const CONFLICTING_UPDATE_OPERATORS: i32 = 40;
pub(crate) const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;
pub(crate) const ID_FIELD_INVALID: i32 = 53;
pub(crate) const NOT_SINGLE_VALUE_FIELD: i32 = 54;
pub(crate) const EMPTY_FIELD_NAME: i32 = 56;
pub(crate) const IMMUTABLE_FIELD: i32 = 66;

pub(crate) fn err(code: i32, message: impl Into<String>) -> FilterError {
    FilterError { code, message: message.into() }
}

pub(crate) fn bad_value(message: impl Into<String>) -> FilterError {
    err(BAD_VALUE, message)
}
