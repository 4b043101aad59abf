//! `aggregate`, limited for now to the stages drivers use for counting and simple reads:
//! `$match`, `$sort`, `$skip`, `$limit`, `$project`, `$count`, `$group` with `$sum`, `$avg`,
//! `$min`, `$max`, `$first`, `$last`, `$push`, `$addToSet` over constants and field paths.
//! Leading `$match`/`$sort`/`$skip`/`$limit` run in the find plan. Other stages are refused
//! with MongoDB's error for an unknown stage until the pipeline engine lands.

use super::find::{batch_reply, check_fields};
use super::{wrong_type, Ctx};
use crate::cursor::{Cursor, DEFAULT_FIRST_BATCH};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_engine::exec::{Executor, QueuedData, Stage};
use nidus_engine::find::FindSpec;
use nidus_query::projection::Projection;
use std::time::Instant;

const FIELDS: &[&str] = &[
    "aggregate",
    "pipeline",
    "cursor",
    "explain",
    "allowDiskUse",
    "collation",
    "hint",
    "let",
    "bypassDocumentValidation",
];

pub fn aggregate(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, FIELDS)?;
    let ns = match ctx.body.get("aggregate") {
        Some(Bson::String(_)) => ctx.namespace("aggregate")?,
        _ => {
            return Err(Error::new(
                ErrorCode::InvalidNamespace,
                "collectionless aggregations are not supported yet by this server",
            ))
        }
    };
    let pipeline = match ctx.body.get("pipeline") {
        Some(Bson::Array(a)) => a
            .iter()
            .map(|s| match s {
                Bson::Document(d) if d.len() == 1 => Ok(d.clone()),
                Bson::Document(_) => Err(Error::new(
                    ErrorCode::Location(40323),
                    "A pipeline stage specification object must contain exactly one field.",
                )),
                other => Err(wrong_type("aggregate", "pipeline", other, "object")),
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => return Err(wrong_type("aggregate", "pipeline", other, "array")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'aggregate.pipeline' is missing but a required field",
            ))
        }
    };
    let batch_size =
        match ctx.body.get("cursor") {
            Some(Bson::Document(c)) => super::opt_i64("aggregate", c, "batchSize")?,
            Some(other) => return Err(wrong_type("aggregate", "cursor", other, "object")),
            None => return Err(Error::new(
                ErrorCode::FailedToParse,
                "The 'cursor' option is required, except for aggregate with the explain argument",
            )),
        };
    let (spec, rest) = push_down(&pipeline, ctx.deadline)?;
    let stages = rest.iter().map(parse_stage).collect::<Result<Vec<_>>>()?;
    let coll = ctx.state.engine.collection(&ns);
    let mut exec = ctx.state.engine.plan_find(coll.as_ref(), &spec)?;
    if !stages.is_empty() {
        let mut docs = Vec::new();
        while let Some(d) = exec.next_doc()? {
            docs.push(
                d.to_document()
                    .map_err(|e| Error::internal(e.to_string()))?,
            );
        }
        for stage in &stages {
            docs = stage.run(docs)?;
        }
        let raw = docs
            .iter()
            .map(|d| RawDocumentBuf::from_document(d).map_err(|e| Error::internal(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        exec = Executor::new(Stage::new(QueuedData::new(raw)), None);
    }
    let mut cursor = Cursor {
        ns: ns.clone(),
        exec,
        limit: None,
        returned: 0,
        last_used: Instant::now(),
        no_timeout: false,
        pending: None,
    };
    let first = batch_size
        .map(|n| n.max(0) as u64)
        .unwrap_or(DEFAULT_FIRST_BATCH);
    let (batch, done) = cursor.next_batch(Some(first))?;
    let id = if done {
        0
    } else {
        cursor.exec.set_deadline(None);
        ctx.state.cursors.register(cursor)
    };
    Ok(batch_reply(&ns, id, "firstBatch", batch))
}

/// Moves the leading `$match`, `$sort`, `$skip`, `$limit` into the find plan.
fn push_down(pipeline: &[Document], deadline: Option<Instant>) -> Result<(FindSpec, &[Document])> {
    let mut spec = FindSpec {
        deadline,
        ..FindSpec::default()
    };
    let mut i = 0;
    while let Some(stage) = pipeline.get(i) {
        let (name, arg) = stage
            .iter()
            .next()
            .ok_or_else(|| Error::bad_value("empty stage"))?;
        match (name.as_str(), arg) {
            ("$match", Bson::Document(f))
                if spec.filter.is_empty()
                    && spec.sort.is_none()
                    && spec.skip == 0
                    && spec.limit == 0 =>
            {
                spec.filter = f.clone();
            }
            ("$sort", Bson::Document(s))
                if spec.sort.is_none() && spec.skip == 0 && spec.limit == 0 =>
            {
                spec.sort = Some(s.clone());
            }
            ("$skip", v) if spec.limit == 0 => spec.skip += non_negative("$skip", v)?,
            ("$limit", v) => {
                let n = positive(v)?;
                spec.limit = if spec.limit == 0 {
                    n
                } else {
                    spec.limit.min(n)
                };
            }
            _ => break,
        }
        i += 1;
    }
    Ok((spec, &pipeline[i..]))
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 => Some(*f as i64),
        _ => None,
    }
}

fn non_negative(stage: &str, v: &Bson) -> Result<u64> {
    match as_i64(v) {
        Some(n) if n >= 0 => Ok(n as u64),
        Some(n) => Err(Error::new(
            ErrorCode::Location(15956),
            format!("invalid argument to {stage} stage: Cannot be negative, value: {n}"),
        )),
        None => Err(Error::new(
            ErrorCode::Location(15972),
            format!("invalid argument to {stage} stage: Argument must be a number"),
        )),
    }
}

fn positive(v: &Bson) -> Result<u64> {
    match as_i64(v) {
        Some(n) if n > 0 => Ok(n as u64),
        _ => Err(Error::new(
            ErrorCode::Location(15958),
            "the limit must be positive",
        )),
    }
}

enum PipelineStage {
    Match(nidus_query::matcher::Matcher),
    Sort(nidus_query::sort::SortPattern),
    Skip(u64),
    Limit(u64),
    Project(Projection),
    Count(String),
    Group(Group),
}

struct Group {
    id: Bson,
    accumulators: Vec<(String, String, Bson)>,
}

fn parse_stage(stage: &Document) -> Result<PipelineStage> {
    let (name, arg) = stage
        .iter()
        .next()
        .ok_or_else(|| Error::bad_value("empty stage"))?;
    let doc_arg = |what: &str| match arg {
        Bson::Document(d) => Ok(d.clone()),
        _ => Err(Error::new(
            ErrorCode::Location(15959),
            format!("the {what} must be specified as an object"),
        )),
    };
    Ok(match name.as_str() {
        "$match" => PipelineStage::Match(nidus_query::matcher::Matcher::parse(&doc_arg(
            "match filter",
        )?)?),
        "$sort" => PipelineStage::Sort(nidus_query::sort::SortPattern::parse(&doc_arg(
            "$sort key specification",
        )?)?),
        "$skip" => PipelineStage::Skip(non_negative("$skip", arg)?),
        "$limit" => PipelineStage::Limit(positive(arg)?),
        "$project" => PipelineStage::Project(Projection::parse(&doc_arg("projection")?)?),
        "$count" => match arg {
            Bson::String(f) if !f.is_empty() && !f.starts_with('$') && !f.contains('.') => {
                PipelineStage::Count(f.clone())
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(40156),
                    "the count field must be a non-empty string",
                ))
            }
        },
        "$group" => PipelineStage::Group(parse_group(&doc_arg("group")?)?),
        other => {
            return Err(Error::new(
                ErrorCode::Location(40324),
                format!("Unrecognized pipeline stage name: '{other}'"),
            ))
        }
    })
}

fn parse_group(spec: &Document) -> Result<Group> {
    let id = spec.get("_id").cloned().ok_or_else(|| {
        Error::new(
            ErrorCode::Location(15955),
            "a group specification must include an _id",
        )
    })?;
    let mut accumulators = Vec::new();
    for (field, acc) in spec.iter().filter(|(k, _)| k.as_str() != "_id") {
        let Bson::Document(acc) = acc else {
            return Err(Error::new(
                ErrorCode::Location(40234),
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        let Some((op, arg)) = acc.iter().next().filter(|_| acc.len() == 1) else {
            return Err(Error::new(
                ErrorCode::Location(40238),
                format!("The field '{field}' must specify one accumulator"),
            ));
        };
        if !matches!(
            op.as_str(),
            "$sum" | "$avg" | "$min" | "$max" | "$first" | "$last" | "$push" | "$addToSet"
        ) {
            return Err(Error::new(
                ErrorCode::Location(15952),
                format!("unknown group operator '{op}'"),
            ));
        }
        accumulators.push((field.clone(), op.clone(), arg.clone()));
    }
    Ok(Group { id, accumulators })
}

/// Evaluates a constant or a `$field.path` (arrays along the path map over their elements).
fn eval(doc: &Document, expr: &Bson) -> Option<Bson> {
    match expr {
        Bson::String(s) if s.starts_with('$') => {
            let mut cur = Bson::Document(doc.clone());
            for part in s[1..].split('.') {
                cur = step(&cur, part)?;
            }
            Some(cur)
        }
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k, v) in d {
                if let Some(v) = eval(doc, v) {
                    out.insert(k.clone(), v);
                }
            }
            Some(Bson::Document(out))
        }
        other => Some(other.clone()),
    }
}

fn step(v: &Bson, part: &str) -> Option<Bson> {
    match v {
        Bson::Document(d) => d.get(part).cloned(),
        Bson::Array(a) => Some(Bson::Array(
            a.iter().filter_map(|e| step(e, part)).collect(),
        )),
        _ => None,
    }
}

fn raw(doc: &Document) -> Result<RawDocumentBuf> {
    RawDocumentBuf::from_document(doc).map_err(|e| Error::internal(e.to_string()))
}

impl PipelineStage {
    fn run(&self, docs: Vec<Document>) -> Result<Vec<Document>> {
        Ok(match self {
            PipelineStage::Match(m) => {
                let mut out = Vec::new();
                for d in docs {
                    if m.matches(&raw(&d)?)? {
                        out.push(d);
                    }
                }
                out
            }
            PipelineStage::Sort(p) => {
                let mut keyed = docs
                    .into_iter()
                    .map(|d| Ok((p.sort_key(&raw(&d)?), d)))
                    .collect::<Result<Vec<_>>>()?;
                keyed.sort_by(|a, b| p.compare_keys(&a.0, &b.0));
                keyed.into_iter().map(|(_, d)| d).collect()
            }
            PipelineStage::Skip(n) => docs.into_iter().skip(*n as usize).collect(),
            PipelineStage::Limit(n) => docs.into_iter().take(*n as usize).collect(),
            PipelineStage::Project(p) => docs
                .iter()
                .map(|d| p.apply(&raw(d)?))
                .collect::<Result<_>>()?,
            PipelineStage::Count(field) => {
                if docs.is_empty() {
                    Vec::new()
                } else {
                    let mut d = Document::new();
                    d.insert(field.clone(), docs.len() as i32);
                    vec![d]
                }
            }
            PipelineStage::Group(g) => g.run(docs),
        })
    }
}

impl Group {
    fn run(&self, docs: Vec<Document>) -> Vec<Document> {
        let mut groups: Vec<(Bson, Vec<Document>)> = Vec::new();
        for d in docs {
            let key = eval(&d, &self.id).unwrap_or(Bson::Null);
            match groups.iter_mut().find(|(k, _)| cmp_bson(k, &key).is_eq()) {
                Some((_, members)) => members.push(d),
                None => groups.push((key, vec![d])),
            }
        }
        groups
            .into_iter()
            .map(|(key, members)| {
                let mut out = Document::new();
                out.insert("_id", key);
                for (field, op, arg) in &self.accumulators {
                    out.insert(field.clone(), accumulate(op, arg, &members));
                }
                out
            })
            .collect()
    }
}

fn accumulate(op: &str, arg: &Bson, members: &[Document]) -> Bson {
    let values: Vec<Bson> = members.iter().filter_map(|d| eval(d, arg)).collect();
    match op {
        "$sum" | "$avg" => {
            let nums: Vec<&Bson> = values
                .iter()
                .filter(|v| matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)))
                .collect();
            let all_int = nums
                .iter()
                .all(|v| matches!(v, Bson::Int32(_) | Bson::Int64(_)));
            let total: f64 = nums
                .iter()
                .map(|v| match v {
                    Bson::Int32(n) => *n as f64,
                    Bson::Int64(n) => *n as f64,
                    Bson::Double(f) => *f,
                    _ => 0.0,
                })
                .sum();
            if op == "$avg" {
                if nums.is_empty() {
                    Bson::Null
                } else {
                    Bson::Double(total / nums.len() as f64)
                }
            } else if all_int {
                let sum: i64 = nums
                    .iter()
                    .map(|v| match v {
                        Bson::Int32(n) => *n as i64,
                        Bson::Int64(n) => *n,
                        _ => 0,
                    })
                    .sum();
                if nums.iter().all(|v| matches!(v, Bson::Int32(_))) && i32::try_from(sum).is_ok() {
                    Bson::Int32(sum as i32)
                } else {
                    Bson::Int64(sum)
                }
            } else {
                Bson::Double(total)
            }
        }
        "$min" => values
            .into_iter()
            .filter(|v| !matches!(v, Bson::Null))
            .min_by(cmp_bson)
            .unwrap_or(Bson::Null),
        "$max" => values.into_iter().max_by(cmp_bson).unwrap_or(Bson::Null),
        "$first" => members
            .first()
            .and_then(|d| eval(d, arg))
            .unwrap_or(Bson::Null),
        "$last" => members
            .last()
            .and_then(|d| eval(d, arg))
            .unwrap_or(Bson::Null),
        "$push" => Bson::Array(values),
        _ => {
            let mut set: Vec<Bson> = Vec::new();
            for v in values {
                if !set.iter().any(|s| cmp_bson(s, &v).is_eq()) {
                    set.push(v);
                }
            }
            Bson::Array(set)
        }
    }
}
