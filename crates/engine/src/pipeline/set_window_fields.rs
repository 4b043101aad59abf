//! `$setWindowFields`: window functions over partitions of sorted documents.
//!
//! As in MongoDB, the stage parses into a `$sort` on the partition field and `sortBy` (which
//! the optimizer may hand to the find plan) followed by `$_internalSetWindowFields`, which
//! reads one partition at a time (consecutive documents with an equal partition value),
//! computes every output field over it (`window::WindowOutput::compute`) and returns the
//! documents with the fields set. A `partitionBy` that is not a plain field path is
//! evaluated and sorted inside the internal stage. A partition holds at most 100 MiB
//! (`Exceeded memory limit in DocumentSourceSetWindowFields`, 5414201).

use super::context::{doc_bytes, MAX_BLOCKING_STAGE_BYTES};
use super::window::{SortInfo, WindowOutput};
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, Sort, StageRef, Stream};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::Expression;
use nidus_query::sort::SortPattern;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

const NAME: &str = "$setWindowFields";

#[derive(Debug, Clone)]
pub struct SetWindowFields {
    /// None: one partition (no `partitionBy`, or a constant).
    partition_by: Option<Expression>,
    /// True when `partitionBy` is not a field path: the stage sorts its input itself.
    sorts_itself: bool,
    sort_by: Option<Document>,
    sort_pattern: Option<SortPattern>,
    /// `"$<first sortBy field>"`.
    sort_value: Option<Expression>,
    descending: bool,
    outputs: Vec<WindowOutput>,
}

fn wrong_type(field: &str, v: &Bson, want: &str) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '{NAME}.{field}' is the wrong type '{}', expected type '{want}'",
            super::type_name(v)
        ),
    )
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!(
                "the {NAME} stage specification must be an object, found {}",
                super::type_name(arg)
            ),
        ));
    };
    let mut partition = None;
    let mut sort_by = None;
    let mut output = None;
    for (k, v) in spec {
        match k.as_str() {
            "partitionBy" => partition = Some(v),
            "sortBy" => match v {
                Bson::Document(d) => sort_by = Some(d.clone()),
                other => return Err(wrong_type("sortBy", other, "object")),
            },
            "output" => match v {
                Bson::Document(d) => output = Some(d),
                other => return Err(wrong_type("output", other, "object")),
            },
            other => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field '{NAME}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let Some(output) = output else {
        return Err(Error::new(
            ErrorCode::Location(40414),
            format!("BSON field '{NAME}.output' is missing but a required field"),
        ));
    };
    let sort_pattern = match &sort_by {
        Some(s) => Some(SortPattern::parse(s)?),
        None => None,
    };
    let info = SortInfo {
        fields: sort_by.as_ref(),
    };
    let mut outputs = Vec::new();
    for (field, v) in output {
        outputs.push(WindowOutput::parse(field, v, &info, &pcx.exprs)?);
    }
    let partition_by = match partition {
        Some(p) => {
            let e = Expression::parse(p, &pcx.exprs)?;
            match &e {
                Expression::Constant(Bson::Array(_)) => {
                    return Err(partition_array());
                }
                Expression::Constant(_) => None,
                _ => Some(e),
            }
        }
        None => None,
    };
    let simple_path = match &partition_by {
        Some(Expression::FieldPath(fp)) if fp.var_name == "CURRENT" && !fp.path.is_empty() => {
            Some(fp.dotted())
        }
        _ => None,
    };
    let (sort_value, descending) = match sort_by.as_ref().and_then(|s| s.iter().next()) {
        Some((f, dir)) => (
            Some(Expression::parse(
                &Bson::String(format!("${f}")),
                &pcx.exprs,
            )?),
            matches!(dir, Bson::Int32(n) if *n < 0)
                || matches!(dir, Bson::Int64(n) if *n < 0)
                || matches!(dir, Bson::Double(n) if *n < 0.0),
        ),
        None => (None, false),
    };
    let stage = SetWindowFields {
        sorts_itself: partition_by.is_some() && simple_path.is_none(),
        partition_by,
        sort_by: sort_by.clone(),
        sort_pattern,
        sort_value,
        descending,
        outputs,
    };
    let mut out: Vec<StageRef> = Vec::new();
    if !stage.sorts_itself {
        let mut combined = Document::new();
        if let Some(p) = &simple_path {
            combined.insert(p.clone(), 1);
        }
        for (k, v) in sort_by.iter().flatten() {
            if !combined.contains_key(k) {
                combined.insert(k.clone(), v.clone());
            }
        }
        if !combined.is_empty() {
            out.push(Arc::new(Sort::new(&combined)?));
        }
    }
    out.push(Arc::new(stage));
    Ok(out)
}

fn partition_array() -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        "An expression used to partition cannot evaluate to value of type array",
    )
}

impl SetWindowFields {
    fn partition_key(&self, d: &Document, ctx: &ExpCtx) -> Result<Bson> {
        let Some(p) = &self.partition_by else {
            return Ok(Bson::Null);
        };
        match ctx.evaluate(p, d)? {
            Some(Bson::Array(_)) => Err(partition_array()),
            Some(v) => Ok(v),
            None => Ok(Bson::Null),
        }
    }

    /// Computes every output over one partition and sets the fields.
    fn finish(&self, docs: Vec<Document>, ctx: &ExpCtx) -> Result<Vec<Document>> {
        let sort_values = match &self.sort_value {
            Some(e) => docs
                .iter()
                .map(|d| ctx.evaluate(e, d))
                .collect::<Result<Vec<_>>>()?,
            None => vec![None; docs.len()],
        };
        let part = super::window::Partition {
            docs: &docs,
            sort_values,
            descending: self.descending,
        };
        let mut columns = Vec::with_capacity(self.outputs.len());
        for o in &self.outputs {
            columns.push(o.compute(&part, ctx)?);
        }
        let mut out = Vec::with_capacity(docs.len());
        for (i, mut d) in docs.iter().cloned().enumerate() {
            for (o, col) in self.outputs.iter().zip(&columns) {
                if let Some(v) = &col[i] {
                    set_path(&mut d, &o.field, v.clone());
                }
            }
            super::context::check_size(&d)?;
            out.push(d);
        }
        Ok(out)
    }
}

/// Sets a dotted path, creating (or replacing non-object values by) objects on the way.
fn set_path(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(doc.get(head), Some(Bson::Document(_))) {
                doc.insert(head, Document::new());
            }
            if let Some(Bson::Document(sub)) = doc.get_mut(head) {
                set_path(sub, rest, value);
            }
        }
    }
}

struct WindowStream {
    stage: Arc<SetWindowFields>,
    ctx: ExpCtx,
    input: Stream,
    /// The first document of the next partition, with its key.
    pending: Option<(Bson, Document)>,
    out: VecDeque<Document>,
    done: bool,
    sorted: bool,
}

impl WindowStream {
    /// For a computed `partitionBy`: sorts the whole input by (partition value, sortBy).
    fn sort_input(&mut self) -> Result<()> {
        let mut all = Vec::new();
        let mut memory = self.ctx.memory("$setWindowFields");
        while let Some(d) = self.input.next()? {
            self.ctx.check_interrupt()?;
            memory.add(doc_bytes(&d))?;
            let key = self.stage.partition_key(&d, &self.ctx)?;
            let sort_key = match &self.stage.sort_pattern {
                Some(p) => {
                    let raw = RawDocumentBuf::from_document(&d)
                        .map_err(|e| Error::internal(e.to_string()))?;
                    p.sort_key(&raw)
                }
                None => Vec::new(),
            };
            all.push((key, sort_key, d));
        }
        let pattern = self.stage.sort_pattern.clone();
        all.sort_by(|a, b| {
            cmp_bson(&a.0, &b.0).then_with(|| match &pattern {
                Some(p) => p.compare_keys(&a.1, &b.1),
                None => std::cmp::Ordering::Equal,
            })
        });
        self.input = super::VecStream::boxed(all.into_iter().map(|(_, _, d)| d).collect());
        Ok(())
    }
}

impl DocStream for WindowStream {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(d) = self.out.pop_front() {
                return Ok(Some(d));
            }
            if self.done {
                return Ok(None);
            }
            if !self.sorted {
                self.sorted = true;
                if self.stage.sorts_itself {
                    self.sort_input()?;
                }
            }
            let mut docs = Vec::new();
            let mut bytes = 0usize;
            let mut key = None;
            if let Some((k, d)) = self.pending.take() {
                bytes += doc_bytes(&d);
                docs.push(d);
                key = Some(k);
            }
            loop {
                let Some(d) = self.input.next()? else {
                    self.done = true;
                    break;
                };
                self.ctx.check_interrupt()?;
                let k = self.stage.partition_key(&d, &self.ctx)?;
                match &key {
                    Some(cur) if !cmp_bson(cur, &k).is_eq() => {
                        self.pending = Some((k, d));
                        break;
                    }
                    _ => {}
                }
                key = Some(k);
                bytes += doc_bytes(&d);
                if bytes > MAX_BLOCKING_STAGE_BYTES {
                    return Err(Error::new(
                        ErrorCode::Location(5414201),
                        format!(
                            "Exceeded memory limit in DocumentSourceSetWindowFields, used {bytes} bytes but max allowed is {MAX_BLOCKING_STAGE_BYTES}"
                        ),
                    ));
                }
                docs.push(d);
            }
            if !docs.is_empty() {
                self.out = self.stage.finish(docs, &self.ctx)?.into();
            }
        }
    }
}

impl DocumentSource for SetWindowFields {
    fn name(&self) -> &'static str {
        "$_internalSetWindowFields"
    }

    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        if let Some(p) = &self.partition_by {
            d.insert("partitionBy", p.serialize());
        }
        if let Some(s) = &self.sort_by {
            d.insert("sortBy", s.clone());
        }
        let mut out = Document::new();
        for o in &self.outputs {
            out.insert(o.field.clone(), o.serialize());
        }
        d.insert("output", out);
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(WindowStream {
            stage: Arc::new(self.clone()),
            ctx: ctx.clone(),
            input,
            pending: None,
            out: VecDeque::new(),
            done: false,
            sorted: false,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
