//! Text search as MongoDB's text indexes do it (`textIndexVersion` 3): languages with
//! Snowball stemmers and stop words, the Unicode tokenizer, index specs with weights and
//! language overrides, term scores, and `$text` queries.

pub mod language;
pub mod query;
pub mod spec;
pub mod tokenizer;

pub use language::Language;
pub use query::TextQuery;
pub use spec::{fix_spec, is_text_key, term_key, TextSpec};
