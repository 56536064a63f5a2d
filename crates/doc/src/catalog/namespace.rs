//! Namespaces (`db.collection`) and the checks on their names.

use super::*;

/// A database and collection name, checked as MongoDB checks them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Result<Namespace, DocError> {
        check_db_name(db)?;
        if coll.is_empty() {
            return Err(DocError::InvalidNamespace(format!("Invalid namespace specified '{db}.'")));
        }
        if coll.contains('\0') || coll.contains('$') {
            return Err(DocError::InvalidNamespace(format!("Invalid collection name: {coll}")));
        }
        if db.len() + 1 + coll.len() > 255 {
            return Err(DocError::InvalidNamespace(format!(
                "Fully qualified namespace is too long. Namespace: {db}.{coll} Max: 255"
            )));
        }
        Ok(Namespace { db: db.to_string(), coll: coll.to_string() })
    }

    pub(crate) fn parse(full: &str) -> Option<Namespace> {
        let (db, coll) = full.split_once('.')?;
        Namespace::new(db, coll).ok()
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

pub fn check_db_name(db: &str) -> Result<(), DocError> {
    if db.is_empty() || db.len() >= 64 || db.chars().any(|c| "/\\. \"$\0".contains(c)) {
        return Err(DocError::InvalidNamespace(format!("Invalid database name: '{db}'")));
    }
    Ok(())
}
