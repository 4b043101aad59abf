//! TODO
use crate::expression::Parser;
pub(crate) const OPS: &[(&str, Parser)] = &[];
