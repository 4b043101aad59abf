//! `$addFields` (and its alias `$set`): computes fields and sets them at their paths,
//! keeping the rest of the document.
//!
//! A nested object without operators (`{a: {b: <expr>}}`) sets `a.b`, like the dotted
//! spelling. Every expression is evaluated against the input document. Setting a path
//! through an array sets it in every element (a non-document element becomes a document
//! holding only the new field), as MongoDB's projection executor does; a missing result
//! (`$$REMOVE`) removes the field.

use super::{DocStream, DocumentSource, ExpCtx, Modified, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::{Expression, Value};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Node {
    Value(Expression),
    Inner(Vec<(String, Node)>),
}

#[derive(Debug, Clone)]
pub struct AddFields {
    /// `$addFields` or `$set` (explain prints the name used).
    name: &'static str,
    pub fields: Vec<(String, Node)>,
}

pub fn parse_add_fields(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(AddFields::parse("$addFields", arg, pcx)?)])
}

pub fn parse_set(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(AddFields::parse("$set", arg, pcx)?)])
}

impl AddFields {
    fn parse(name: &'static str, arg: &Bson, pcx: &ParseCtx) -> Result<AddFields> {
        let Bson::Document(spec) = arg else {
            return Err(Error::new(
                ErrorCode::Location(40272),
                format!(
                    "{name} specification stage must be an object, got {}",
                    super::type_name(arg)
                ),
            ));
        };
        let mut fields = Vec::new();
        add_all(name, &mut fields, spec, "", pcx)?;
        Ok(AddFields { name, fields })
    }

    /// Sets computed fields on `doc` (shared with `$bucketAuto`-style builders).
    pub fn apply(&self, doc: Document, ctx: &ExpCtx) -> Result<Document> {
        let mut values = Vec::new();
        evaluate_all(&self.fields, &doc, ctx, &mut values)?;
        let mut out = doc;
        let mut it = values.into_iter();
        set_all(&self.fields, &mut out, &mut it);
        Ok(out)
    }
}

fn add_all(
    stage: &str,
    fields: &mut Vec<(String, Node)>,
    spec: &Document,
    prefix: &str,
    pcx: &ParseCtx,
) -> Result<()> {
    for (k, v) in spec {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        check_field(k)?;
        let node = match v {
            Bson::Document(d) if d.keys().next().is_some_and(|f| !f.starts_with('$')) => {
                let mut inner = Vec::new();
                add_all(stage, &mut inner, d, &full, pcx)?;
                Node::Inner(inner)
            }
            other => Node::Value(Expression::parse(other, &pcx.exprs)?),
        };
        insert(stage, fields, k, node, &full)?;
    }
    Ok(())
}

fn check_field(k: &str) -> Result<()> {
    for part in k.split('.') {
        if part.is_empty() {
            return Err(Error::new(
                ErrorCode::Location(15998),
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') {
            return Err(Error::new(
                ErrorCode::Location(16410),
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ));
        }
    }
    Ok(())
}

fn insert(
    stage: &str,
    fields: &mut Vec<(String, Node)>,
    path: &str,
    node: Node,
    full: &str,
) -> Result<()> {
    let collision = || {
        Error::new(
            ErrorCode::Location(31250),
            format!("Invalid {stage} :: caused by :: Path collision at {full}"),
        )
    };
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let existing = fields.iter_mut().find(|(k, _)| k == head);
    match (existing, rest) {
        (None, None) => fields.push((head.to_string(), node)),
        (None, Some(r)) => {
            let mut inner = Vec::new();
            insert(stage, &mut inner, r, node, full)?;
            fields.push((head.to_string(), Node::Inner(inner)));
        }
        (Some((_, Node::Inner(inner))), Some(r)) => insert(stage, inner, r, node, full)?,
        (Some((_, Node::Inner(inner))), None) => match node {
            Node::Inner(more) => {
                for (k, n) in more {
                    insert(stage, inner, &k, n, full)?;
                }
            }
            Node::Value(_) => return Err(collision()),
        },
        (Some(_), _) => return Err(collision()),
    }
    Ok(())
}

fn evaluate_all(
    fields: &[(String, Node)],
    doc: &Document,
    ctx: &ExpCtx,
    out: &mut Vec<Value>,
) -> Result<()> {
    for (_, n) in fields {
        match n {
            Node::Value(e) => out.push(ctx.evaluate(e, doc)?),
            Node::Inner(inner) => evaluate_all(inner, doc, ctx, out)?,
        }
    }
    Ok(())
}

/// Sets the values (in tree order) into `doc`.
fn set_all(
    fields: &[(String, Node)],
    doc: &mut Document,
    values: &mut impl Iterator<Item = Value>,
) {
    for (k, n) in fields {
        match n {
            Node::Value(_) => match values.next().flatten() {
                Some(v) => {
                    doc.insert(k.clone(), v);
                }
                None => {
                    doc.remove(k);
                }
            },
            Node::Inner(inner) => {
                let mut taken: Vec<Value> = Vec::new();
                count_values(inner, values, &mut taken);
                let current = doc.get(k).cloned();
                let updated = set_in_value(inner, current, &taken);
                doc.insert(k.clone(), updated);
            }
        }
    }
}

fn count_values(
    fields: &[(String, Node)],
    values: &mut impl Iterator<Item = Value>,
    out: &mut Vec<Value>,
) {
    for (_, n) in fields {
        match n {
            Node::Value(_) => out.push(values.next().flatten()),
            Node::Inner(inner) => count_values(inner, values, out),
        }
    }
}

/// Applies a nested part of the spec to the value at its path: documents get the fields,
/// arrays apply it to each element, anything else becomes a new document.
fn set_in_value(fields: &[(String, Node)], current: Option<Bson>, values: &[Value]) -> Bson {
    match current {
        Some(Bson::Array(items)) => Bson::Array(
            items
                .into_iter()
                .map(|e| set_in_value(fields, Some(e), values))
                .collect(),
        ),
        Some(Bson::Document(mut d)) => {
            set_all(fields, &mut d, &mut values.iter().cloned());
            Bson::Document(d)
        }
        _ => {
            let mut d = Document::new();
            set_all(fields, &mut d, &mut values.iter().cloned());
            Bson::Document(d)
        }
    }
}

fn serialize_fields(fields: &[(String, Node)]) -> Document {
    let mut d = Document::new();
    for (k, n) in fields {
        match n {
            Node::Value(e) => d.insert(k.clone(), e.serialize()),
            Node::Inner(inner) => d.insert(k.clone(), serialize_fields(inner)),
        };
    }
    d
}

fn leaf_paths(fields: &[(String, Node)], prefix: &str, out: &mut Vec<String>) {
    for (k, n) in fields {
        let p = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match n {
            Node::Value(_) => out.push(p),
            Node::Inner(inner) => leaf_paths(inner, &p, out),
        }
    }
}

impl DocumentSource for AddFields {
    fn name(&self) -> &'static str {
        self.name
    }

    fn serialize(&self) -> Bson {
        Bson::Document(serialize_fields(&self.fields))
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(AddFieldsStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn modified(&self) -> Modified {
        let mut out = Vec::new();
        leaf_paths(&self.fields, "", &mut out);
        Modified::Paths(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct AddFieldsStream {
    input: Stream,
    stage: AddFields,
    ctx: ExpCtx,
}

impl DocStream for AddFieldsStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        let out = self.stage.apply(d, &self.ctx)?;
        super::context::check_size(&out)?;
        Ok(Some(out))
    }
}
