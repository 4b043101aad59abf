//! `$jsonSchema`: matches documents that satisfy a JSON Schema (draft 4, as MongoDB reads it).
//!
//! MongoDB's dialect: `bsonType` beside `type` (whose `"integer"` is refused), boolean
//! `exclusiveMinimum`/`exclusiveMaximum`, no `$ref`/`$schema`/`default`/`definitions`/
//! `format`/`id`, and an error for every unknown keyword. As in JSON Schema, a restriction
//! keyword only constrains values of its own type (`minimum` accepts a string, `required`
//! accepts an array), and a missing property only fails `required`.
//!
//! [`parse`] builds the [`keywords`] tree once; [`evaluate`] runs it over raw BSON without
//! deserializing the document; [`details`] explains a failure as MongoDB's document
//! validation errors do. The filter prints back as `{$jsonSchema: <spec as given>}`.

pub mod details;
pub mod equality;
pub mod evaluate;
pub mod keywords;
pub mod multiple_of;
pub mod parse;

#[cfg(test)]
mod details_tests;
#[cfg(test)]
mod tests;

use bson::{Bson, Document, RawBsonRef, RawDocument};
use keywords::Schema;
use nidus_common::{Error, Result};
use parse::{parse_schema, Level};

/// A parsed `$jsonSchema` argument.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    root: Schema,
}

impl JsonSchema {
    /// Parses the argument of `$jsonSchema` (an object) with MongoDB's errors.
    pub fn parse(arg: &Bson) -> Result<JsonSchema> {
        let Bson::Document(spec) = arg else {
            return Err(Error::type_mismatch("$jsonSchema must be an object"));
        };
        Ok(JsonSchema {
            root: parse_schema(spec, Level::Root)?,
        })
    }

    /// The schema document as given.
    pub fn spec(&self) -> &Document {
        &self.root.spec
    }

    /// True when the document satisfies the schema.
    pub fn matches(&self, doc: &RawDocument) -> bool {
        self.root.matches(RawBsonRef::Document(doc))
    }
}
