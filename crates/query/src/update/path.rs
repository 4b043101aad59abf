//! Update paths: dotted field names with the positional `$`, all-positional `$[]` and
//! filtered `$[<identifier>]` components, validated as MongoDB's `fieldchecker` does.

use nidus_common::{Error, ErrorCode, Result};

/// One component of an update path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comp {
    Field(String),
    /// `$`: the array index the query matched.
    Positional,
    /// `$[]`: every element.
    All,
    /// `$[id]`: the elements matching array filter `id`.
    Filter(String),
}

impl Comp {
    /// Whether the component selects elements of an array node.
    pub fn is_array_selector(&self) -> bool {
        matches!(self, Comp::All | Comp::Filter(_))
    }

    pub fn is_dynamic(&self) -> bool {
        !matches!(self, Comp::Field(_))
    }
}

/// Splits and validates an update path.
pub fn parse_path(path: &str) -> Result<Vec<Comp>> {
    if path.is_empty() {
        return Err(Error::new(
            ErrorCode::EmptyFieldName,
            "An empty update path is not valid.",
        ));
    }
    let mut comps = Vec::new();
    for part in path.split('.') {
        if part.is_empty() {
            return Err(Error::new(
                ErrorCode::EmptyFieldName,
                format!(
                    "The update path '{path}' contains an empty field name, which is not allowed."
                ),
            ));
        }
        comps.push(parse_comp(part));
    }
    check_positionals(path, &comps)?;
    Ok(comps)
}

fn parse_comp(part: &str) -> Comp {
    if part == "$" {
        Comp::Positional
    } else if part == "$[]" {
        Comp::All
    } else if let Some(id) = part.strip_prefix("$[").and_then(|s| s.strip_suffix(']')) {
        Comp::Filter(id.to_string())
    } else {
        Comp::Field(part.to_string())
    }
}

fn check_positionals(path: &str, comps: &[Comp]) -> Result<()> {
    let positionals = comps.iter().filter(|c| **c == Comp::Positional).count();
    if positionals > 1 {
        return Err(Error::bad_value(format!(
            "Too many positional (i.e. '$') elements found in path '{path}'"
        )));
    }
    match comps.first() {
        Some(Comp::Positional) => Err(Error::bad_value(format!(
            "Cannot have positional (i.e. '$') element in the first position in path '{path}'"
        ))),
        Some(Comp::All | Comp::Filter(_)) => Err(Error::bad_value(format!(
            "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in path '{path}'"
        ))),
        Some(Comp::Field(f)) if f.starts_with('$') => Err(Error::new(
            ErrorCode::DollarPrefixedFieldName,
            format!("The dollar ($) prefixed field '{f}' in '{path}' is not valid for storage."),
        )),
        _ => Ok(()),
    }
}

/// Whether one path is a prefix of the other (component-wise, or equal).
pub fn on_same_path(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short || (long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b'.'))
}
