//! `arrayFilters`: one filter per identifier, applied to an array element as `{id: element}`.

use crate::matcher::Matcher;
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub struct ArrayFilters {
    filters: HashMap<String, Matcher>,
}

impl ArrayFilters {
    pub fn parse(filters: Option<&[Document]>) -> Result<ArrayFilters> {
        let mut out = ArrayFilters::default();
        for f in filters.unwrap_or_default() {
            let id = identifier(f)?;
            if out.filters.contains_key(&id) {
                return Err(Error::failed_to_parse(format!(
                    "Found multiple array filters with the same top-level field name {id}"
                )));
            }
            out.filters.insert(id, Matcher::parse(f)?);
        }
        Ok(out)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.filters.contains_key(id)
    }

    pub fn identifiers(&self) -> impl Iterator<Item = &String> {
        self.filters.keys()
    }

    /// Whether the element matches the filter of `id` (false for an unknown identifier).
    pub fn matches(&self, id: &str, element: &Bson) -> Result<bool> {
        let Some(m) = self.filters.get(id) else {
            return Ok(false);
        };
        let mut d = Document::new();
        d.insert(id, element.clone());
        match nidus_common::encode::document_to_raw(&d) {
            Ok(raw) => m.matches(&raw),
            Err(_) => Ok(false),
        }
    }
}

/// The single top-level field name of a filter (looking inside `$and`/`$or`/`$nor`).
fn identifier(filter: &Document) -> Result<String> {
    let mut names = Vec::new();
    collect_names(filter, &mut names);
    let Some(first) = names.first().cloned() else {
        return Err(Error::failed_to_parse(
            "Cannot use an expression without a top-level field name in arrayFilters",
        ));
    };
    if let Some(other) = names.iter().find(|n| **n != first) {
        return Err(Error::failed_to_parse(format!(
            "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{first}' and '{other}'"
        )));
    }
    let valid = first.starts_with(|c: char| c.is_ascii_lowercase())
        && first.chars().all(|c| c.is_ascii_alphanumeric());
    if !valid {
        return Err(Error::bad_value(format!(
            "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{first}'"
        )));
    }
    Ok(first)
}

fn collect_names(filter: &Document, out: &mut Vec<String>) {
    for (k, v) in filter {
        if k.starts_with('$') {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect_names(d, out);
                    }
                }
            }
        } else {
            let head = k.split('.').next().unwrap_or_default();
            out.push(head.to_string());
        }
    }
}
