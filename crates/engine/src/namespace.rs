//! Database and collection names, validated as MongoDB validates them.

use nidus_common::{Error, ErrorCode, Result};
use std::fmt;

/// `db.collection`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Namespace {
        Namespace {
            db: db.to_string(),
            coll: coll.to_string(),
        }
    }

    /// Splits `db.coll.with.dots` at the first dot.
    pub fn parse(full: &str) -> Result<Namespace> {
        match full.split_once('.') {
            Some((db, coll)) if !db.is_empty() && !coll.is_empty() => Ok(Namespace::new(db, coll)),
            _ => Err(Error::new(
                ErrorCode::InvalidNamespace,
                format!("Invalid namespace specified '{full}'"),
            )),
        }
    }

    pub fn full(&self) -> String {
        // On every reply's cursor `ns`: concatenated, not through `format!`'s machinery.
        let mut ns = String::with_capacity(self.db.len() + 1 + self.coll.len());
        ns.push_str(&self.db);
        ns.push('.');
        ns.push_str(&self.coll);
        ns
    }

    pub fn is_system(&self) -> bool {
        self.coll.starts_with("system.")
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// MongoDB's rules for database names (`NamespaceString::validDBName`).
pub fn validate_db_name(db: &str) -> Result<()> {
    let bad = db.is_empty()
        || db.len() >= 64
        || db
            .chars()
            .any(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '\0'));
    if bad {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid database name: '{db}'"),
        ));
    }
    Ok(())
}

/// MongoDB's rules for collection names a user may create.
pub fn validate_coll_name(db: &str, coll: &str) -> Result<()> {
    validate_db_name(db)?;
    if coll.is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid namespace specified '{db}.'"),
        ));
    }
    if coll.contains('\0')
        || coll.starts_with('.')
        || (coll.contains('$') && !coll.starts_with("$cmd"))
    {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid collection name: {coll}"),
        ));
    }
    if db.len() + 1 + coll.len() > 255 {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Fully qualified namespace is too long. Namespace: {db}.{coll} Max: 255"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_coll_name("test", "c").is_ok());
        assert!(validate_coll_name("test", "a.b").is_ok());
        assert_eq!(
            validate_coll_name("test", "").unwrap_err().code,
            ErrorCode::InvalidNamespace
        );
        assert_eq!(
            validate_coll_name("test", "a$b").unwrap_err().code,
            ErrorCode::InvalidNamespace
        );
        assert_eq!(
            validate_db_name("a.b").unwrap_err().code,
            ErrorCode::InvalidNamespace
        );
        assert_eq!(
            Namespace::parse("db.c.d").unwrap(),
            Namespace::new("db", "c.d")
        );
        assert!(Namespace::parse("nodot").is_err());
    }
}
