//! `$addFields`/`$set` (aggregation stage and update pipelines): computed fields added to the
//! whole document.
//!
//! The spec is a tree like an inclusion projection's, but every field of the input is kept:
//! an existing field named in the spec is replaced in place, new fields are appended in spec
//! order, and a value of `$$REMOVE` (missing) drops the field. A dotted path or a
//! sub-document descends: through arrays (element by element, nested arrays included) and
//! into documents; a scalar in the way becomes a new document. Expressions see the whole
//! input as `$$ROOT`/`$$CURRENT`, whatever their depth.

use super::{add_node, check_field_path, err, PNode};
use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::{Bind, Bindings, Expression, LetScope, ParseContext, Variables};
use std::sync::Arc;

/// A parsed `$addFields` specification.
#[derive(Debug, Clone)]
pub struct AddFields {
    root: Vec<(String, PNode)>,
    bindings: Option<Arc<Bindings>>,
}

impl AddFields {
    /// Parses the argument of `$addFields`/`$set` (`stage` names it in errors).
    pub fn parse(stage: &str, spec: &Document, scope: &LetScope) -> Result<AddFields> {
        let mut a = Self::parse_in_context(stage, spec, scope.parse_context())?;
        a.bindings = Some(scope.bindings().clone());
        Ok(a)
    }

    /// Parses in an expression scope whose values the caller binds at apply time.
    pub fn parse_in_context(
        stage: &str,
        spec: &Document,
        exprs: &ParseContext,
    ) -> Result<AddFields> {
        if spec.is_empty() {
            return Err(err(
                40177,
                format!(
                    "Invalid {stage} :: caused by :: specification must have at least one field"
                ),
            ));
        }
        let mut root = Vec::new();
        parse_fields(spec, "", &mut root, exprs).map_err(|e| caused_by(stage, e))?;
        Ok(AddFields {
            root,
            bindings: None,
        })
    }

    /// The input with the fields set.
    pub fn apply(&self, doc: &RawDocument) -> Result<Document> {
        self.apply_bound(doc, nidus_expr::binder(self.bindings.as_deref()))
    }

    /// [`AddFields::apply`] with variables set by `binder`.
    pub fn apply_bound(&self, doc: &RawDocument, binder: &dyn Bind) -> Result<Document> {
        let mut vars = Variables::for_raw(doc);
        binder.bind(&mut vars);
        add_to_doc(&self.root, doc, &mut vars)
    }

    /// The spec as MongoDB prints it (dotted paths nested, expressions serialized).
    pub fn serialize(&self) -> Document {
        serialize_nodes(&self.root)
    }

    /// The dotted paths the stage sets.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_paths(&self.root, "", &mut out);
        out
    }
}

/// `Invalid $stage :: caused by :: ...` around a parse error, as MongoDB words stage errors.
fn caused_by(stage: &str, e: Error) -> Error {
    Error::new(
        e.code,
        format!("Invalid {stage} :: caused by :: {}", e.message),
    )
}

fn serialize_nodes(nodes: &[(String, PNode)]) -> Document {
    let mut d = Document::new();
    for (k, n) in nodes {
        match n {
            PNode::Computed(e) => d.insert(k.clone(), e.serialize()),
            PNode::Inner(sub) => d.insert(k.clone(), serialize_nodes(sub)),
            _ => None,
        };
    }
    d
}

fn collect_paths(nodes: &[(String, PNode)], prefix: &str, out: &mut Vec<String>) {
    for (k, n) in nodes {
        let p = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match n {
            PNode::Inner(sub) => collect_paths(sub, &p, out),
            _ => out.push(p),
        }
    }
}

fn parse_fields(
    spec: &Document,
    prefix: &str,
    root: &mut Vec<(String, PNode)>,
    exprs: &ParseContext,
) -> Result<()> {
    for (k, v) in spec {
        check_field_path(k)?;
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Bson::Document(d) if !d.is_empty() && !d.keys().any(|f| f.starts_with('$')) => {
                parse_fields(d, &path, root, exprs)?
            }
            other => {
                let e = Expression::parse(other, exprs)?;
                add_node(root, &path, PNode::Computed(e))?
            }
        }
    }
    Ok(())
}

fn child<'a>(children: &'a [(String, PNode)], name: &str) -> Option<&'a PNode> {
    children.iter().find(|(k, _)| k == name).map(|(_, n)| n)
}

fn to_bson(v: RawBsonRef) -> Result<Bson> {
    Bson::try_from(v.to_raw_bson())
        .map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}")))
}

fn add_to_doc(
    children: &[(String, PNode)],
    doc: &RawDocument,
    vars: &mut Variables,
) -> Result<Document> {
    let mut out = Document::new();
    for item in doc {
        let (name, v) =
            item.map_err(|e| Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}")))?;
        let value = match child(children, name) {
            None => Some(to_bson(v)?),
            Some(node) => add_value(node, Some(v), vars)?,
        };
        if let Some(value) = value {
            out.insert(name, value);
        }
    }
    for (name, node) in children {
        if doc.get(name).ok().flatten().is_some() {
            continue;
        }
        if let Some(value) = add_value(node, None, vars)? {
            out.insert(name.clone(), value);
        }
    }
    Ok(out)
}

/// The new value of a field named in the spec (`None` = the field is dropped).
fn add_value(node: &PNode, v: Option<RawBsonRef>, vars: &mut Variables) -> Result<Option<Bson>> {
    match node {
        PNode::Computed(e) => e.evaluate(vars),
        PNode::Inner(sub) => match v {
            Some(RawBsonRef::Document(d)) => Ok(Some(Bson::Document(add_to_doc(sub, d, vars)?))),
            Some(RawBsonRef::Array(a)) => {
                let mut out = Vec::new();
                for e in a {
                    let e = e.map_err(|e| {
                        Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
                    })?;
                    out.extend(add_value(node, Some(e), vars)?);
                }
                Ok(Some(Bson::Array(out)))
            }
            _ => {
                let empty = bson::rawdoc! {};
                Ok(Some(Bson::Document(add_to_doc(sub, &empty, vars)?)))
            }
        },
        _ => Err(Error::internal(
            "$addFields tree holds only computed fields",
        )),
    }
}
