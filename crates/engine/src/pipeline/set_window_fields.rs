//! `$setWindowFields`: window functions over partitions of sorted documents.
//!
//! As in MongoDB, the stage parses into a `$sort` on the partition field and `sortBy` (which
//! the optimizer may hand to the find plan) followed by `$_internalSetWindowFields`, which
//! reads one partition at a time (consecutive documents with an equal partition value),
//! computes every output field over it (`window::WindowOutput::compute`) and returns the
//! documents with the fields set. A `partitionBy` that is not a plain field path is first set
//! into a temporary field by an `$addFields` (and projected away after), as MongoDB desugars
//! it, so the `$sort` (and its spilling) serves every partitioning.
//!
//! Reading a partition, each output takes what it uses from each document (`read`); the
//! documents are kept in memory up to `internalDocumentSourceSetWindowFieldsMaxMemoryBytes`
//! (with those values) and beyond it, with `allowDiskUse`, written in order to spill files
//! under `<dbpath>/_tmp` and read back as the results are returned. Without disk use the
//! stage fails with 5643011; values read over the limit fail with 5414201 either way.

use super::context::{check_size, doc_bytes};
use super::window::{Inputs, SortInfo, WindowOutput};
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, Sort, StageRef, Stream};
use crate::exec::spill::{SpillRun, SpillWriter};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::{Expression, Value};
use nidus_query::sort::SortPattern;
use std::any::Any;
use std::sync::Arc;

const NAME: &str = "$setWindowFields";

/// Where a computed `partitionBy` is set for the `$sort` (MongoDB's name).
const PARTITION_KEY: &str = "__internal_setWindowFields_partition_key";

#[derive(Debug, Clone)]
pub struct SetWindowFields {
    /// None: one partition (no `partitionBy`, or a constant).
    partition_by: Option<Expression>,
    sort_by: Option<Document>,
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
    if let Some(s) = &sort_by {
        SortPattern::parse(s)?; // sortBy's own errors
    }
    let info = SortInfo {
        fields: sort_by.as_ref(),
    };
    let mut outputs = Vec::new();
    for (field, v) in output {
        outputs.push(WindowOutput::parse(field, v, &info, &pcx.exprs)?);
    }
    let mut partition_by = match partition {
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
    let mut simple_path = match &partition_by {
        Some(Expression::FieldPath(fp)) if fp.var_name == "CURRENT" && !fp.path.is_empty() => {
            Some(fp.dotted())
        }
        _ => None,
    };
    let mut out: Vec<StageRef> = Vec::new();
    let computed = partition_by.is_some() && simple_path.is_none();
    if computed {
        if let Some(p) = partition {
            let mut set = Document::new();
            set.insert(PARTITION_KEY, p.clone());
            out.extend(super::add_fields::parse_add_fields(
                &Bson::Document(set),
                pcx,
            )?);
            partition_by = Some(Expression::parse(
                &Bson::String(format!("${PARTITION_KEY}")),
                &pcx.exprs,
            )?);
            simple_path = Some(PARTITION_KEY.to_string());
        }
    }
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
        partition_by,
        sort_by: sort_by.clone(),
        sort_value,
        descending,
        outputs,
    };
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
    out.push(Arc::new(stage));
    if computed {
        out.extend(super::project::parse(
            &bson::bson!({ PARTITION_KEY: false }),
            pcx,
        )?);
    }
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

    /// Computes every output over one partition read by [`WindowStream::read_partition`].
    fn finish(&self, buf: PartitionBuf, ctx: &ExpCtx) -> Result<PartitionOut> {
        let part = super::window::Partition {
            sort_values: buf.sort_values,
            descending: self.descending,
        };
        let mut columns = Vec::with_capacity(self.outputs.len());
        for (o, inputs) in self.outputs.iter().zip(buf.inputs) {
            columns.push(o.compute(&part, inputs, ctx)?.into_iter());
        }
        Ok(PartitionOut {
            spilled: buf.spilled.map(SpillWriter::finish).transpose()?,
            memory: buf.docs.into_iter(),
            columns,
        })
    }
}

/// One partition being read: its documents (in memory, the first ones in a spill file once
/// it went over the limit), their sortBy values and what each output read from them.
struct PartitionBuf {
    docs: Vec<Document>,
    spilled: Option<SpillWriter>,
    sort_values: Vec<Value>,
    inputs: Vec<Inputs>,
}

/// A computed partition returned in order: the spilled documents, then those in memory,
/// each with its output fields set.
struct PartitionOut {
    spilled: Option<SpillRun>,
    memory: std::vec::IntoIter<Document>,
    columns: Vec<std::vec::IntoIter<Value>>,
}

impl PartitionOut {
    fn next(&mut self, stage: &SetWindowFields) -> Result<Option<Document>> {
        let spilled = match &mut self.spilled {
            Some(run) => run.next()?,
            None => None,
        };
        let mut d = match spilled {
            Some((_, raw)) => raw
                .to_document()
                .map_err(|e| Error::internal(e.to_string()))?,
            None => {
                self.spilled = None; // removes the file
                match self.memory.next() {
                    Some(d) => d,
                    None => return Ok(None),
                }
            }
        };
        for (o, col) in stage.outputs.iter().zip(self.columns.iter_mut()) {
            if let Some(Some(v)) = col.next() {
                nidus_doc::path::set_path(&mut d, &o.field, v);
            }
        }
        check_size(&d)?;
        Ok(Some(d))
    }
}

struct WindowStream {
    stage: Arc<SetWindowFields>,
    ctx: ExpCtx,
    input: Stream,
    /// The first document of the next partition, with its key.
    pending: Option<(Bson, Document)>,
    out: Option<PartitionOut>,
    done: bool,
    spills: i64,
    spilled_bytes: u64,
    spilled_records: u64,
}

impl WindowStream {
    /// Reads the next partition (None at the end of the input).
    fn read_partition(&mut self) -> Result<Option<PartitionBuf>> {
        let stage = self.stage.clone();
        let limit = self.ctx.window_max_memory;
        let mut buf = PartitionBuf {
            docs: Vec::new(),
            spilled: None,
            sort_values: Vec::new(),
            inputs: stage.outputs.iter().map(|_| Inputs::default()).collect(),
        };
        let (mut doc_memory, mut value_memory) = (0usize, 0usize);
        let mut key = None;
        let mut next = self.pending.take();
        loop {
            let (k, d) = match next.take() {
                Some(e) => e,
                None => {
                    if self.done {
                        break;
                    }
                    let Some(d) = self.input.next()? else {
                        self.done = true;
                        break;
                    };
                    self.ctx.check_interrupt()?;
                    (stage.partition_key(&d, &self.ctx)?, d)
                }
            };
            match &key {
                Some(cur) if !cmp_bson(cur, &k).is_eq() => {
                    self.pending = Some((k, d));
                    break;
                }
                Some(_) => {}
                None => key = Some(k),
            }
            let sort_value = match &stage.sort_value {
                Some(e) => self.ctx.evaluate(e, &d)?,
                None => None,
            };
            value_memory += sort_value.as_ref().map_or(16, super::context::bson_bytes);
            buf.sort_values.push(sort_value);
            for (o, inputs) in stage.outputs.iter().zip(buf.inputs.iter_mut()) {
                value_memory += o.read(&d, &self.ctx, inputs)?;
            }
            doc_memory += doc_bytes(&d);
            buf.docs.push(d);
            if value_memory > limit {
                return Err(Error::new(
                    ErrorCode::Location(5414201),
                    format!(
                        "Exceeded memory limit in DocumentSourceSetWindowFields, used {value_memory} bytes but max allowed is {limit}"
                    ),
                ));
            }
            // Spilling a small remainder would only make many small files: the values read
            // already hold most of the memory then.
            if doc_memory + value_memory > limit && doc_memory >= limit / 16 {
                self.spill(&mut buf)?;
                doc_memory = 0;
            }
        }
        Ok((!buf.sort_values.is_empty()).then_some(buf))
    }

    /// Appends the partition's documents in memory to its spill file (they come back in
    /// order, before those still in memory).
    fn spill(&mut self, buf: &mut PartitionBuf) -> Result<()> {
        let Some(dir) = self.ctx.spill_dir() else {
            return Err(Error::new(
                ErrorCode::Location(5643011),
                "Exceeded max memory. Set 'allowDiskUse: true' to spill to disk",
            ));
        };
        let file = match &mut buf.spilled {
            Some(f) => f,
            None => buf.spilled.insert(SpillWriter::create(&dir)?),
        };
        let before = file.bytes;
        for d in std::mem::take(&mut buf.docs) {
            let raw = nidus_common::encode::document_to_raw(&d)
                .map_err(|e| Error::internal(e.to_string()))?;
            file.append(None, &raw)?;
            self.spilled_records += 1;
        }
        self.spills += 1;
        self.spilled_bytes += file.bytes - before;
        Ok(())
    }
}

impl DocStream for WindowStream {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(out) = &mut self.out {
                if let Some(d) = out.next(&self.stage)? {
                    return Ok(Some(d));
                }
                self.out = None;
            }
            match self.read_partition()? {
                Some(buf) => self.out = Some(self.stage.finish(buf, &self.ctx)?),
                None => {
                    self.ctx.report(bson::doc! {
                        "usedDisk": self.spills > 0,
                        "spills": self.spills,
                        "spilledDataStorageSize": self.spilled_bytes as i64,
                        "spilledRecords": self.spilled_records as i64,
                    });
                    return Ok(None);
                }
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
            out: None,
            done: false,
            spills: 0,
            spilled_bytes: 0,
            spilled_records: 0,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
