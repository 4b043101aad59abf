//! `$unwind`: one output document per element of the array at a path.
//!
//! The path is followed through documents only (an array on the way means "missing"). A
//! non-array value is one element; null, missing and empty arrays produce nothing unless
//! `preserveNullAndEmptyArrays` (an empty array is then removed from the output, null is
//! kept). `includeArrayIndex` names a field receiving the element's index as a long, or
//! null when the value was not an array.

use super::{DocStream, DocumentSource, ExpCtx, Modified, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Unwind {
    pub path: Vec<String>,
    pub include_array_index: Option<Vec<String>>,
    pub preserve: bool,
}

fn split_path(p: &str) -> Result<Vec<String>> {
    let parts: Vec<String> = p.split('.').map(str::to_string).collect();
    if parts.iter().any(|s| s.is_empty()) {
        return Err(Error::location(
            15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if parts.iter().any(|s| s.starts_with('$')) {
        return Err(Error::location(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(parts)
}

fn parse_path(p: &str) -> Result<Vec<String>> {
    match p.strip_prefix('$') {
        Some(rest) if !rest.is_empty() => split_path(rest),
        _ => Err(Error::location(
            28818,
            format!("path option to $unwind stage should be prefixed with a '$': {p}"),
        )),
    }
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let unwind = match arg {
        Bson::String(p) => Unwind {
            path: parse_path(p)?,
            include_array_index: None,
            preserve: false,
        },
        Bson::Document(spec) => parse_object(spec)?,
        other => {
            return Err(Error::location(
                15981,
                format!(
                "expected either a string or an object as specification for $unwind stage, got {}",
                super::type_name(other)
            ),
            ))
        }
    };
    Ok(vec![Arc::new(unwind)])
}

fn parse_object(spec: &Document) -> Result<Unwind> {
    let mut path = None;
    let mut index = None;
    let mut preserve = false;
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("path", Bson::String(p)) => path = Some(parse_path(p)?),
            ("path", other) => {
                return Err(Error::location(
                    28808,
                    format!(
                        "expected a string as the path for $unwind stage, got {}",
                        super::type_name(other)
                    ),
                ))
            }
            ("includeArrayIndex", Bson::String(s)) if !s.is_empty() => {
                if s.starts_with('$') {
                    return Err(Error::location(
                        28822,
                        format!("includeArrayIndex option to $unwind stage should not be prefixed with a '$': {s}"),
                    ));
                }
                index = Some(split_path(s)?);
            }
            ("includeArrayIndex", other) => {
                return Err(Error::location(
                    28810,
                    format!(
                        "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}",
                        super::type_name(other)
                    ),
                ))
            }
            ("preserveNullAndEmptyArrays", Bson::Boolean(b)) => preserve = *b,
            ("preserveNullAndEmptyArrays", other) => {
                return Err(Error::location(
                    28809,
                    format!(
                        "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}",
                        super::type_name(other)
                    ),
                ))
            }
            (other, _) => {
                return Err(Error::location(
                    28811,
                    format!("unrecognized option to $unwind stage: {other}"),
                ))
            }
        }
    }
    let path = path.ok_or_else(|| Error::location(28812, "No path specified to $unwind stage"))?;
    Ok(Unwind {
        path,
        include_array_index: index,
        preserve,
    })
}

/// The value at a path through documents only.
fn get_nested<'a>(d: &'a Document, path: &[String]) -> Option<&'a Bson> {
    let (first, rest) = path.split_first()?;
    let v = d.get(first)?;
    if rest.is_empty() {
        return Some(v);
    }
    match v {
        Bson::Document(sub) => get_nested(sub, rest),
        _ => None,
    }
}

/// Sets a path, creating (or replacing non-documents with) documents on the way.
pub(crate) fn set_nested(d: &mut Document, path: &[String], value: Bson) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        d.insert(first.clone(), value);
        return;
    }
    if !matches!(d.get(first), Some(Bson::Document(_))) {
        d.insert(first.clone(), Document::new());
    }
    if let Some(Bson::Document(sub)) = d.get_mut(first) {
        set_nested(sub, rest, value);
    }
}

fn remove_nested(d: &mut Document, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            d.remove(last);
        }
        [first, rest @ ..] => {
            if let Some(Bson::Document(sub)) = d.get_mut(first) {
                remove_nested(sub, rest);
            }
        }
    }
}

impl Unwind {
    /// The documents one input produces.
    pub(crate) fn unwind(&self, mut doc: Document, out: &mut VecDeque<Document>) {
        let value = get_nested(&doc, &self.path).cloned();
        match value {
            Some(Bson::Array(items)) if !items.is_empty() => {
                for (i, item) in items.into_iter().enumerate() {
                    let mut d = doc.clone();
                    set_nested(&mut d, &self.path, item);
                    if let Some(ix) = &self.include_array_index {
                        set_nested(&mut d, ix, Bson::Int64(i as i64));
                    }
                    out.push_back(d);
                }
            }
            Some(Bson::Array(_)) => {
                if self.preserve {
                    remove_nested(&mut doc, &self.path);
                    self.with_null_index(doc, out);
                }
            }
            None | Some(Bson::Null) | Some(Bson::Undefined) => {
                if self.preserve {
                    self.with_null_index(doc, out);
                }
            }
            Some(_) => self.with_null_index(doc, out),
        }
    }

    fn with_null_index(&self, mut doc: Document, out: &mut VecDeque<Document>) {
        if let Some(ix) = &self.include_array_index {
            set_nested(&mut doc, ix, Bson::Null);
        }
        out.push_back(doc);
    }
}

impl DocumentSource for Unwind {
    fn name(&self) -> &'static str {
        "$unwind"
    }

    fn serialize(&self) -> Bson {
        let mut d = bson::doc! {"path": format!("${}", self.path.join("."))};
        if let Some(ix) = &self.include_array_index {
            d.insert("includeArrayIndex", ix.join("."));
        }
        if self.preserve {
            d.insert("preserveNullAndEmptyArrays", true);
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(UnwindStream {
            input,
            stage: self.clone(),
            pending: VecDeque::new(),
            ctx: ctx.clone(),
        }))
    }

    fn modified(&self) -> Modified {
        let mut paths = vec![self.path.join(".")];
        if let Some(ix) = &self.include_array_index {
            paths.push(ix.join("."));
        }
        Modified::Paths(paths)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct UnwindStream {
    input: Stream,
    stage: Unwind,
    pending: VecDeque<Document>,
    ctx: ExpCtx,
}

impl DocStream for UnwindStream {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(d) = self.pending.pop_front() {
                return Ok(Some(d));
            }
            let Some(d) = self.input.next()? else {
                return Ok(None);
            };
            self.ctx.check_interrupt()?;
            self.stage.unwind(d, &mut self.pending);
        }
    }
}
