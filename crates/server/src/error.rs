//! Command errors as MongoDB reports them: `{ok: 0, errmsg, code,
//! codeName, errorLabels}`. Every code the server returns is named here,
//! so the mapping lives in one place.

use bson::{doc, Document};
use doc::catalog::DocError;
use std::borrow::Cow;

/// Our own code (past MongoDB's, which stay under eight digits): a
/// document would give a `parallelArrays` index more keys than
/// `doc::limits::index_keys_parallel_max`.
pub const TOO_MANY_PARALLEL_ARRAY_KEYS: i32 = 22_000_001;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code_name} ({code}): {errmsg}")]
pub struct CommandError {
    pub code: i32,
    pub code_name: Cow<'static, str>,
    pub errmsg: String,
    pub labels: Vec<&'static str>,
    /// More fields for the reply (e.g. `keyPattern` and `keyValue`).
    pub extra: Option<Box<Document>>,
}

macro_rules! codes {
    ($($fn_name:ident => $code:expr, $name:literal;)*) => {
        impl CommandError {
            $(
                pub fn $fn_name(errmsg: impl Into<String>) -> CommandError {
                    CommandError { code: $code, code_name: Cow::Borrowed($name), errmsg: errmsg.into(), labels: Vec::new(), extra: None }
                }
            )*

            /// An error with MongoDB's name for `code` (this table's, else
            /// `code_names`'); a code MongoDB does not name is an assertion
            /// site, which it names "Location<code>".
            pub fn with_code(code: i32, errmsg: impl Into<String>) -> CommandError {
                let code_name = match code {
                    $($code => Cow::Borrowed($name),)*
                    _ => match crate::code_names::known(code) {
                        Some(name) => Cow::Borrowed(name),
                        None => Cow::Owned(format!("Location{code}")),
                    },
                };
                CommandError { code, code_name, errmsg: errmsg.into(), labels: Vec::new(), extra: None }
            }
        }
    };
}

codes! {
    internal_error => 1, "InternalError";
    bad_value => 2, "BadValue";
    no_such_key => 4, "NoSuchKey";
    failed_to_parse => 9, "FailedToParse";
    unauthorized => 13, "Unauthorized";
    type_mismatch => 14, "TypeMismatch";
    invalid_length => 16, "InvalidLength";
    cursor_not_found => 43, "CursorNotFound";
    capped_position_lost => 136, "CappedPositionLost";
    query_plan_killed => 175, "QueryPlanKilled";
    command_not_supported_on_view => 166, "CommandNotSupportedOnView";
    graph_contains_cycle => 5, "GraphContainsCycle";
    option_not_supported_on_view => 167, "OptionNotSupportedOnView";
    view_depth_limit_exceeded => 165, "ViewDepthLimitExceeded";
    namespace_exists => 48, "NamespaceExists";
    not_implemented => 238, "NotImplemented";
    command_not_supported => 115, "CommandNotSupported";
    bson_object_too_large => 10334, "BSONObjectTooLarge";
    duplicate_key => 11000, "DuplicateKey";
    invalid_bson => 22, "InvalidBSON";
    invalid_namespace => 73, "InvalidNamespace";
    command_not_found => 59, "CommandNotFound";
    invalid_options => 72, "InvalidOptions";
    shutdown_in_progress => 91, "ShutdownInProgress";
    unsupported_op_query_command => 352, "UnsupportedOpQueryCommand";
    unknown_parameter => 40415, "Location40415";
    missing_required_field => 40414, "Location40414";
    path_not_viable => 28, "PathNotViable";
    document_validation_failure => 121, "DocumentValidationFailure";
    conflicting_update_operators => 40, "ConflictingUpdateOperators";
    max_time_ms_expired => 50, "MaxTimeMSExpired";
    dollar_prefixed_field_name => 52, "DollarPrefixedFieldName";
    not_single_value_field => 54, "NotSingleValueField";
    empty_field_name => 56, "EmptyFieldName";
    immutable_field => 66, "ImmutableField";
    namespace_not_found => 26, "NamespaceNotFound";
    illegal_operation => 20, "IllegalOperation";
    query_exceeded_memory_limit => 292, "QueryExceededMemoryLimitNoDiskUseAllowed";
    document_too_large_after_update => 17419, "Location17419";
    invalid_id_field => 53, "InvalidIdField";
    regex_options_twice => 51075, "Location51075";
    regex_invalid => 51091, "Location51091";
    regex_bad_option => 51108, "Location51108";
    projection_inclusion_in_exclusion => 31253, "Location31253";
    projection_exclusion_in_inclusion => 31254, "Location31254";
    projection_path_collision => 31249, "Location31249";
    projection_positional_mismatch => 51246, "Location51246";
    projection_bad_value => 31308, "Location31308";
    bad_sort => 15974, "Location15974";
    bad_sort_value => 15975, "Location15975";
    invalid_distinct_key => 40352, "Location40352";
    invalid_uuid => 207, "InvalidUUID";
    transaction_too_old => 225, "TransactionTooOld";
    not_a_retryable_write_command => 50768, "NotARetryableWriteCommand";
    write_conflict => 112, "WriteConflict";
    no_such_transaction => 251, "NoSuchTransaction";
    transaction_committed => 256, "TransactionCommitted";
    operation_not_supported_in_transaction => 263, "OperationNotSupportedInTransaction";
    conflicting_operation_in_progress => 117, "ConflictingOperationInProgress";
    getmore_outside_its_transaction => 50740, "Location50740";
}

impl From<doc::bson_bytes::EncodeError> for CommandError {
    fn from(e: doc::bson_bytes::EncodeError) -> Self {
        CommandError::bad_value(e.to_string())
    }
}

impl From<query::FilterError> for CommandError {
    fn from(e: query::FilterError) -> CommandError {
        CommandError::with_code(e.code, e.message)
    }
}

impl CommandError {
    /// The reply document.
    pub fn to_document(&self) -> Document {
        let mut d = doc! { "ok": 0.0, "errmsg": &self.errmsg, "code": self.code, "codeName": self.code_name.as_ref() };
        if let Some(extra) = &self.extra {
            d.extend((**extra).clone());
        }
        if !self.labels.is_empty() {
            d.insert("errorLabels", self.labels.clone());
        }
        d
    }
}

impl From<DocError> for CommandError {
    fn from(e: DocError) -> CommandError {
        match e {
            DocError::DuplicateKey { ref key, ref collation, .. } => {
                let msg = e.to_string();
                let mut err = CommandError::duplicate_key(msg);
                // keyValue is the `_id` given, also under a collation (where
                // mongod shows the collation key).
                let mut extra = doc! { "keyPattern": { "_id": 1 }, "keyValue": { "_id": (**key).clone() } };
                if let Some(c) = collation {
                    extra.insert("collation", c.0.clone());
                }
                err.extra = Some(Box::new(extra));
                err
            }
            DocError::DuplicateIndexKey(ref dup) => {
                let mut err = CommandError::duplicate_key(e.to_string());
                let mut extra = doc! { "keyPattern": dup.key_pattern.clone(), "keyValue": dup.key_value.clone() };
                if let Some(c) = &dup.collation {
                    extra.insert("collation", c.clone());
                }
                err.extra = Some(Box::new(extra));
                err
            }
            DocError::ParallelArrays(m) => CommandError::with_code(171, m),
            DocError::TooManyIndexKeys(m) => CommandError::with_code(TOO_MANY_PARALLEL_ARRAY_KEYS, m),
            DocError::HashedArray(m) => CommandError::with_code(16766, m),
            DocError::IndexNotFound(_) => CommandError::with_code(27, e.to_string()),
            DocError::IndexExists(_) => CommandError::with_code(85, e.to_string()),
            // BackgroundOperationInProgressForNamespace.
            DocError::BuildInProgress(_) => CommandError::with_code(12587, e.to_string()),
            DocError::NamespaceExists(_) => CommandError::namespace_exists(e.to_string()),
            DocError::NamespaceNotFound(_) => CommandError::namespace_not_found(e.to_string()),
            DocError::InvalidNamespace(m) => CommandError::invalid_namespace(m),
            DocError::Unencodable(why) => CommandError::bad_value(why.to_string()),
            DocError::TooDeep { .. } => CommandError::with_code(15, e.to_string()),
            // OperationNotSupportedInTransaction, as mongod answers it.
            DocError::CappedInTransaction | DocError::IndexOnNonEmptyInTransaction(_) => {
                CommandError::with_code(263, e.to_string())
            }
            DocError::ExceedsCappedSize => CommandError::bad_value(e.to_string()),
            DocError::Storage(ref s) if s.is_retryable() => conflict_error(s),
            DocError::Storage(storage::StorageError::TransactionTooLarge { .. }) => {
                CommandError::with_code(257, format!("Transaction is too large: {e}"))
            }
            DocError::TimeLimit => CommandError::max_time_ms_expired(e.to_string()),
            DocError::Interrupted => CommandError::with_code(11601, e.to_string()),
            DocError::Corrupt(_) | DocError::Storage(_) => CommandError::internal_error(e.to_string()),
        }
    }
}

/// A write conflict, a serialization failure or a cache rollback as
/// MongoDB's WriteConflict (112): the one error drivers retry a
/// transaction on (the caller adds TransientTransactionError inside one).
pub(crate) fn conflict_error(e: &storage::StorageError) -> CommandError {
    match e {
        storage::StorageError::SerializationFailure { other, detail, .. } => CommandError::write_conflict(format!(
            "Serializable isolation refused this transaction: it could not be ordered with concurrent \
             transaction {other} ({detail}). Please retry your operation or multi-document transaction."
        )),
        _ => CommandError::write_conflict(
            "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or \
             multi-document transaction.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_render_as_mongodb_does() {
        let e = CommandError::command_not_found("no such command: 'frob'");
        assert_eq!(
            e.to_document(),
            doc! { "ok": 0.0, "errmsg": "no such command: 'frob'", "code": 59, "codeName": "CommandNotFound" }
        );
    }

    #[test]
    fn codes_outside_the_table_are_named_as_mongodb_names_them() {
        assert_eq!(CommandError::with_code(11000, "dup").code_name, "DuplicateKey");
        assert_eq!(CommandError::with_code(31368, "x").code_name, "Location31368");
        assert_eq!(CommandError::with_code(9999, "x").code_name, "Location9999");
        assert_eq!(CommandError::with_code(8, "x").code_name, "UnknownError");
        assert_eq!(CommandError::with_code(15, "x").code_name, "Overflow");
        assert_eq!(CommandError::with_code(168, "x").code_name, "InvalidPipelineOperator");
        assert_eq!(CommandError::with_code(10107, "x").code_name, "NotWritablePrimary");
        assert_eq!(CommandError::with_code(13113, "x").code_name, "MergeStageNoMatchingDocument");
    }
}
