//! Applying a parsed projection tree to a raw document.

use super::PNode;
use bson::{Bson, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::{Bind, Expression, Variables};

pub struct ApplyCtx<'a> {
    /// `$$ROOT`: computed fields see the whole document at any depth.
    pub root: &'a RawDocument,
    /// The array index the query matched (for `field.$`).
    pub position: Option<usize>,
    /// Sets the variables (`let` values, `$$NOW`) computed fields see.
    pub binder: &'a dyn Bind,
    /// `{$meta: "textScore"}` of the document (a `$text` query's result).
    pub text_score: Option<f64>,
}

type Children = [(String, PNode)];

fn to_bson(v: RawBsonRef) -> Result<Bson> {
    Bson::try_from(v.to_raw_bson())
        .map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}")))
}

fn child<'a>(children: &'a Children, name: &str) -> Option<&'a PNode> {
    children.iter().find(|(k, _)| k == name).map(|(_, n)| n)
}

/// Inclusion: the fields of `doc` named in the tree, in document order, then the computed
/// fields the document did not have, in projection order.
pub fn include_doc(
    children: &Children,
    doc: &RawDocument,
    ctx: &ApplyCtx,
) -> Result<bson::Document> {
    let mut out = bson::Document::new();
    for item in doc {
        let (name, v) =
            item.map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}")))?;
        let Some(node) = child(children, name) else {
            continue;
        };
        let projected = match node {
            PNode::Include => Some(to_bson(v)?),
            PNode::Exclude | PNode::Computed(_) => None,
            PNode::Inner(sub) => include_value(sub, Some(v), ctx)?,
            other => special(other, v, ctx)?,
        };
        if let Some(p) = projected {
            out.insert(name, p);
        }
    }
    for (name, node) in children {
        let value = match node {
            PNode::Computed(e) => eval(e, ctx)?,
            PNode::Inner(sub)
                if node.has_computed()
                    && !out.contains_key(name)
                    && doc.get(name).ok().flatten().is_none() =>
            {
                include_value(sub, None, ctx)?
            }
            _ => continue,
        };
        if let Some(v) = value {
            out.insert(name.clone(), v);
        }
    }
    Ok(out)
}

/// Inclusion below a path: documents are projected, arrays element by element, other
/// values dropped (or replaced by the computed fields, when the subtree has some).
fn include_value(sub: &Children, v: Option<RawBsonRef>, ctx: &ApplyCtx) -> Result<Option<Bson>> {
    match v {
        Some(RawBsonRef::Document(d)) => Ok(Some(Bson::Document(include_doc(sub, d, ctx)?))),
        Some(RawBsonRef::Array(a)) => {
            let mut out = Vec::new();
            for e in a {
                let e = e.map_err(|e| {
                    Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
                })?;
                if let Some(p) = include_value(sub, Some(e), ctx)? {
                    out.push(p);
                }
            }
            Ok(Some(Bson::Array(out)))
        }
        _ if sub.iter().any(|(_, n)| n.has_computed()) => {
            let empty = bson::rawdoc! {};
            Ok(Some(Bson::Document(include_doc(sub, &empty, ctx)?)))
        }
        _ => Ok(None),
    }
}

/// Exclusion: every field but the excluded ones.
pub fn exclude_doc(
    children: &Children,
    doc: &RawDocument,
    ctx: &ApplyCtx,
) -> Result<bson::Document> {
    let mut out = bson::Document::new();
    for item in doc {
        let (name, v) =
            item.map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}")))?;
        let projected = match child(children, name) {
            None | Some(PNode::Include) => Some(to_bson(v)?),
            Some(PNode::Exclude) | Some(PNode::Computed(_)) => None,
            Some(PNode::Inner(sub)) => Some(exclude_value(sub, v, ctx)?),
            Some(other) => special(other, v, ctx)?,
        };
        if let Some(p) = projected {
            out.insert(name, p);
        }
    }
    // `$meta` fields, the only computed ones an exclusion allows, come last.
    for (name, node) in children {
        if let PNode::Computed(e) = node {
            if let Some(v) = eval(e, ctx)? {
                out.insert(name.clone(), v);
            }
        }
    }
    Ok(out)
}

fn exclude_value(sub: &Children, v: RawBsonRef, ctx: &ApplyCtx) -> Result<Bson> {
    match v {
        RawBsonRef::Document(d) => Ok(Bson::Document(exclude_doc(sub, d, ctx)?)),
        RawBsonRef::Array(a) => {
            let mut out = Vec::new();
            for e in a {
                let e = e.map_err(|e| {
                    Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
                })?;
                out.push(exclude_value(sub, e, ctx)?);
            }
            Ok(Bson::Array(out))
        }
        other => to_bson(other),
    }
}

/// `$slice`, `$elemMatch` and positional nodes (the same in both kinds of projection).
fn special(node: &PNode, v: RawBsonRef, ctx: &ApplyCtx) -> Result<Option<Bson>> {
    match node {
        PNode::Slice { skip, limit } => Ok(Some(slice(to_bson(v)?, *skip, *limit))),
        PNode::ElemMatch(m) => {
            let RawBsonRef::Array(arr) = v else {
                return Ok(None);
            };
            match m.matches_with_position(ctx.root)?.flatten() {
                Some(i) => match arr.into_iter().nth(i) {
                    Some(Ok(e)) => Ok(Some(Bson::Array(vec![to_bson(e)?]))),
                    _ => Ok(None),
                },
                None => Ok(None),
            }
        }
        PNode::Positional => positional(v, ctx),
        _ => Ok(None),
    }
}

fn positional_error() -> Error {
    Error::new(
        ErrorCode::from_code(51246),
        "positional operator '.$' couldn't find a matching element in the array",
    )
}

fn positional(v: RawBsonRef, ctx: &ApplyCtx) -> Result<Option<Bson>> {
    let RawBsonRef::Array(arr) = v else {
        return Ok(Some(to_bson(v)?));
    };
    let i = ctx.position.ok_or_else(positional_error)?;
    match arr.into_iter().nth(i) {
        Some(Ok(e)) => Ok(Some(Bson::Array(vec![to_bson(e)?]))),
        _ => Err(positional_error()),
    }
}

/// `$slice: n` / `[skip, limit]` of a find projection; non-arrays are kept as they are.
fn slice(v: Bson, skip: Option<i32>, limit: i32) -> Bson {
    let Bson::Array(a) = v else {
        return v;
    };
    let len = a.len() as i64;
    let (start, count) = match skip {
        None if limit >= 0 => (0, i64::from(limit)),
        None => ((len + i64::from(limit)).max(0), len),
        Some(s) if s >= 0 => (i64::from(s).min(len), i64::from(limit)),
        Some(s) => ((len + i64::from(s)).max(0), i64::from(limit)),
    };
    let start = usize::try_from(start).unwrap_or(0);
    let count = usize::try_from(count.max(0)).unwrap_or(0);
    Bson::Array(a.into_iter().skip(start).take(count).collect())
}

fn eval(e: &Expression, ctx: &ApplyCtx) -> Result<Option<Bson>> {
    let mut vars = Variables::for_raw(ctx.root);
    ctx.binder.bind(&mut vars);
    vars.set_text_score(ctx.text_score);
    e.evaluate(&mut vars)
}
