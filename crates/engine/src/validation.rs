//! Document validation (`create`'s `validator`, `validationLevel`, `validationAction`).
//!
//! The validator is a query filter (`$jsonSchema`, query operators, `$expr`) parsed once
//! when the collection's metadata is built. Inserts must satisfy it; updates must too under
//! `strict`, and under `moderate` only when the document satisfied it before. `warn` accepts
//! the write; `off` checks nothing. A failure is `DocumentValidationFailure` (121)
//! with `errInfo: {failingDocumentId, details}`.

use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::{Expr, Matcher};
use std::sync::{Arc, OnceLock};

/// What `validationAction: "warn"` reports for a document that fails validation: the
/// namespace, the document and MongoDB's `errInfo`. The server logs it (id 20294);
/// the engine only calls the sink.
pub type WarningSink = Box<dyn Fn(&str, &Document, &Document) + Send + Sync>;

static WARNING_SINK: OnceLock<WarningSink> = OnceLock::new();

/// Installs the sink for validation warnings (once per process; later calls are ignored).
pub fn set_warning_sink(sink: WarningSink) {
    let _ = WARNING_SINK.set(sink);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Off,
    Strict,
    Moderate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Error,
    Warn,
}

/// A collection's parsed validator.
#[derive(Debug)]
pub struct Validator {
    matcher: Matcher,
    level: Level,
    action: Action,
}

fn enum_error(field: &str, v: &Bson) -> Error {
    Error::bad_value(format!(
        "Enumeration value '{}' for field '{field}' is not a valid value.",
        match v {
            Bson::String(s) => s.clone(),
            other => other.to_string(),
        }
    ))
}

fn parse_level(v: Option<&Bson>) -> Result<Level> {
    match v {
        None => Ok(Level::Strict),
        Some(Bson::String(s)) if s == "strict" => Ok(Level::Strict),
        Some(Bson::String(s)) if s == "moderate" => Ok(Level::Moderate),
        Some(Bson::String(s)) if s == "off" => Ok(Level::Off),
        Some(other) => Err(enum_error("validationLevel", other)),
    }
}

fn parse_action(v: Option<&Bson>) -> Result<Action> {
    match v {
        None => Ok(Action::Error),
        Some(Bson::String(s)) if s == "error" || s == "errorAndLog" => Ok(Action::Error),
        Some(Bson::String(s)) if s == "warn" => Ok(Action::Warn),
        Some(other) => Err(enum_error("validationAction", other)),
    }
}

impl Validator {
    /// The validator of a collection's options (None without one, or an empty one).
    pub fn from_options(options: &Document) -> Result<Option<Arc<Validator>>> {
        let level = parse_level(options.get("validationLevel"))?;
        let action = parse_action(options.get("validationAction"))?;
        let filter = match options.get("validator") {
            None => return Ok(None),
            Some(Bson::Document(d)) if d.is_empty() => return Ok(None),
            Some(Bson::Document(d)) => d,
            Some(other) => {
                return Err(Error::new(
                    ErrorCode::TypeMismatch,
                    format!(
                    "BSON field 'create.validator' is the wrong type '{}', expected type 'object'",
                    nidus_doc::compare::type_name(other)
                ),
                ))
            }
        };
        let matcher = Matcher::parse(filter)?;
        Ok(Some(Arc::new(Validator {
            matcher,
            level,
            action,
        })))
    }

    /// Checks a document an insert (or an upsert) writes.
    pub fn check_insert(&self, ns: &impl std::fmt::Display, doc: &RawDocument) -> Result<()> {
        if self.level == Level::Off {
            return Ok(());
        }
        self.check(ns, doc)
    }

    /// Checks the new version of an updated document.
    pub fn check_update(
        &self,
        ns: &impl std::fmt::Display,
        old: &RawDocument,
        new: &RawDocument,
    ) -> Result<()> {
        match self.level {
            Level::Off => Ok(()),
            Level::Moderate if !self.matcher.matches(old)? => Ok(()),
            _ => self.check(ns, new),
        }
    }

    fn check(&self, ns: &impl std::fmt::Display, doc: &RawDocument) -> Result<()> {
        if self.matcher.matches(doc)? {
            return Ok(());
        }
        let id = doc
            .get("_id")
            .ok()
            .flatten()
            .and_then(|v| Bson::try_from(v).ok());
        let mut info = Document::new();
        if let Some(id) = id {
            info.insert("failingDocumentId", id);
        }
        if let Some(details) = self.details(doc) {
            info.insert("details", details);
        }
        if self.action == Action::Warn {
            // The write is accepted; MongoDB logs "Document would fail validation" (20294).
            if let Some(sink) = WARNING_SINK.get() {
                let document = Document::try_from(doc).unwrap_or_default();
                sink(&ns.to_string(), &document, &info);
            }
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::DocumentValidationFailure,
            "Document failed validation",
        )
        .with_extra("errInfo", info))
    }

    /// MongoDB's `details`: for a `$jsonSchema` validator its rules not satisfied, for any
    /// other the failing operator (`operatorName`, `specifiedAs`, `reason`, the value seen)
    /// or, for `$and`/`$or`, the clauses not satisfied.
    fn details(&self, doc: &RawDocument) -> Option<Document> {
        Some(match self.matcher.expr() {
            Expr::Schema(s) => s.validation_details(doc),
            e => nidus_query::matcher::details::validation_details(e, self.matcher.filter(), doc),
        })
    }
}
