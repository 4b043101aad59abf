//! Match expressions, projection, sort patterns and update operators: pure functions of BSON.

// `nidus_common::Error` carries MongoDB reply fields; it is returned by value everywhere.

pub mod matcher;
pub mod projection;
pub mod sort;
pub mod update;

pub use matcher::Matcher;
pub use sort::SortPattern;
