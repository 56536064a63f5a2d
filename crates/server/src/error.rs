//! Command errors as MongoDB reports them: `{ok: 0, errmsg, code,
//! codeName, errorLabels}`. Every code the server returns is named here,
//! so the mapping lives in one place.

use bson::{doc, Document};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code_name} ({code}): {errmsg}")]
pub struct CommandError {
    pub code: i32,
    pub code_name: &'static str,
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
                    CommandError { code: $code, code_name: $name, errmsg: errmsg.into(), labels: Vec::new(), extra: None }
                }
            )*
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
    namespace_exists => 48, "NamespaceExists";
    not_implemented => 238, "NotImplemented";
    bson_object_too_large => 10334, "BSONObjectTooLarge";
    duplicate_key => 11000, "DuplicateKey";
    invalid_bson => 22, "InvalidBSON";
    invalid_namespace => 73, "InvalidNamespace";
    command_not_found => 59, "CommandNotFound";
    invalid_options => 72, "InvalidOptions";
    shutdown_in_progress => 91, "ShutdownInProgress";
    unsupported_op_query_command => 352, "UnsupportedOpQueryCommand";
    unknown_parameter => 40415, "Location40415";
}

impl CommandError {
    /// The reply document.
    pub fn to_document(&self) -> Document {
        let mut d = doc! { "ok": 0.0, "errmsg": &self.errmsg, "code": self.code, "codeName": self.code_name };
        if let Some(extra) = &self.extra {
            d.extend((**extra).clone());
        }
        if !self.labels.is_empty() {
            d.insert("errorLabels", self.labels.clone());
        }
        d
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
}
