//! `$group`: one output document per distinct `_id` value, with accumulator fields.
//!
//! Blocking: the whole input is consumed first. Groups come out in the order their keys
//! first appeared (MongoDB leaves the order unspecified). Keys are compared with BSON
//! comparison, so `1`, `1.0` and `NumberLong(1)` are one group (the first spelling seen is
//! the output `_id`). Memory is counted per group key and accumulator state against the
//! blocking-stage limit.

use super::context::{bson_bytes, check_size};
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
use crate::exec::spill::{SpillRun, SpilledRuns};
use bson::{Bson, Document, RawBsonRef};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::accumulators::{Accumulator, AccumulatorSpec};
use nidus_expr::Expression;
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Group {
    pub id: Expression,
    pub accumulators: Vec<(AccumulatorSpec, Bson)>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(Group::parse(arg, pcx)?)])
}

impl Group {
    pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Group> {
        let Bson::Document(spec) = arg else {
            return Err(Error::new(
                ErrorCode::Location(15947),
                "a group's fields must be specified in an object",
            ));
        };
        let mut id = None;
        let mut accumulators = Vec::new();
        for (field, v) in spec {
            if field == "_id" {
                id = Some(Expression::parse(v, &pcx.exprs)?);
                continue;
            }
            if field.starts_with('$') {
                return Err(Error::new(
                    ErrorCode::Location(40236),
                    format!("The field name '{field}' cannot be an operator name"),
                ));
            }
            if field.contains('.') {
                return Err(Error::new(
                    ErrorCode::Location(40235),
                    format!("The field name '{field}' cannot contain '.'"),
                ));
            }
            let acc = AccumulatorSpec::parse_field(field, v, &pcx.exprs)?;
            accumulators.push((acc, v.clone()));
        }
        let id = id.ok_or_else(|| {
            Error::new(
                ErrorCode::Location(15955),
                "a group specification must include an _id",
            )
        })?;
        Ok(Group { id, accumulators })
    }

    /// Groups the whole input: in memory, or, past `internalDocumentSourceGroupMaxMemoryBytes`
    /// with `allowDiskUse`, as runs of partial states sorted by key, merged at the end.
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let mut table = Table::default();
        let mut spiller = Spiller::default();
        let mut key_bytes = Vec::new();
        while let Some(doc) = input.next()? {
            ctx.check_interrupt()?;
            let mut vars = ctx.variables(&doc);
            let key = self.id.evaluate(&mut vars)?.unwrap_or(Bson::Null);
            key_bytes.clear();
            encode_key(&key, &mut key_bytes)?;
            let slot = match table.index.get(key_bytes.as_slice()) {
                Some(i) => *i,
                None => {
                    table.memory += bson_bytes(&key) + key_bytes.len() + 64;
                    let accs = self.create_accumulators(&key, ctx)?;
                    table.groups.push((key, accs));
                    table
                        .index
                        .insert(key_bytes.clone(), table.groups.len() - 1);
                    table.groups.len() - 1
                }
            };
            let accs = &mut table.groups[slot].1;
            for ((spec, _), acc) in self.accumulators.iter().zip(accs.iter_mut()) {
                let before = acc.mem_usage();
                acc.process(spec.input(&mut vars)?)?;
                table.memory += acc.mem_usage().saturating_sub(before) + 8;
            }
            if table.memory > ctx.group_max_memory {
                spiller.spill(ctx, &mut table)?;
            }
        }
        if spiller.spilled.runs.is_empty() {
            spiller.report(ctx);
            let mut out = Vec::with_capacity(table.groups.len());
            for (key, mut accs) in table.groups {
                let mut d = Document::new();
                d.insert("_id", key);
                for ((spec, _), acc) in self.accumulators.iter().zip(accs.iter_mut()) {
                    d.insert(spec.field.clone(), acc.finalize()?);
                }
                check_size(&d)?;
                out.push(d);
            }
            return Ok(VecStream::boxed(out));
        }
        // The remainder becomes the last run, so every group merges from disk in key order.
        if !table.groups.is_empty() {
            spiller.spill(ctx, &mut table)?;
        }
        spiller.report(ctx);
        let mut merge = GroupMerge {
            stage: self.clone(),
            ctx: ctx.clone(),
            runs: std::mem::take(&mut spiller.spilled.runs),
            heads: Vec::new(),
        };
        for i in 0..merge.runs.len() {
            let head = merge.pull(i)?;
            merge.heads.push(head);
        }
        Ok(Box::new(merge))
    }

    fn create_accumulators(&self, key: &Bson, ctx: &ExpCtx) -> Result<Vec<Box<dyn Accumulator>>> {
        let key_doc = bson::doc! {"_id": key.clone()};
        let mut vars = ctx.variables(&key_doc);
        self.accumulators
            .iter()
            .map(|(spec, _)| spec.create(&mut vars))
            .collect()
    }
}

impl DocumentSource for Group {
    fn name(&self) -> &'static str {
        "$group"
    }

    fn serialize(&self) -> Bson {
        let mut d = bson::doc! {"_id": self.id.serialize()};
        for (spec, raw) in &self.accumulators {
            let v = match spec.name.as_str() {
                "$count" => bson::bson!({"$sum": {"$const": 1}}),
                name if nidus_expr::accumulators::create(name).is_some() => {
                    let mut a = Document::new();
                    a.insert(name, spec.input.serialize());
                    Bson::Document(a)
                }
                _ => raw.clone(),
            };
            d.insert(spec.field.clone(), v);
        }
        Bson::Document(d)
    }

    /// The top-level fields the key and the accumulators read (all of the document when
    /// one reads `$$ROOT` or is an accumulator with more inputs, such as `$top`'s
    /// `sortBy`).
    fn input_fields(&self) -> Option<Vec<String>> {
        let mut deps = self.id.dependencies();
        for (spec, _) in &self.accumulators {
            if spec.name != "$count" && nidus_expr::accumulators::create(&spec.name).is_none() {
                return None;
            }
            let d = spec.input.dependencies();
            deps.need_whole_document |= d.need_whole_document;
            deps.fields.extend(d.fields);
        }
        if deps.need_whole_document {
            return None;
        }
        let mut heads: Vec<String> = deps
            .fields
            .iter()
            .map(|f| f.split('.').next().unwrap_or_default().to_string())
            .collect();
        heads.dedup();
        Some(heads)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(super::stream::Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Group, input, ctx| stage.run(input, ctx),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

type Groups = Vec<(Bson, Vec<Box<dyn Accumulator>>)>;

/// A group key's index key encoding (`keystring`): equal exactly when the keys compare
/// equal (`1`, `1.0` and `NumberLong(1)` share one), so a hash table finds the group
/// without comparing values.
fn encode_key(key: &Bson, out: &mut Vec<u8>) -> Result<()> {
    let scalar = match key {
        Bson::String(s) => Some(RawBsonRef::String(s)),
        Bson::Int32(n) => Some(RawBsonRef::Int32(*n)),
        Bson::Int64(n) => Some(RawBsonRef::Int64(*n)),
        Bson::Double(f) => Some(RawBsonRef::Double(*f)),
        Bson::Boolean(b) => Some(RawBsonRef::Boolean(*b)),
        Bson::Null => Some(RawBsonRef::Null),
        _ => None,
    };
    match scalar {
        Some(r) => nidus_doc::keystring::encode_value(out, r, false),
        None => {
            let raw = bson::RawBson::try_from(key.clone())
                .map_err(|e| Error::internal(format!("$group key: {e}")))?;
            nidus_doc::keystring::encode_value(out, raw.as_raw_bson_ref(), false);
        }
    }
    Ok(())
}

/// The groups held in memory.
#[derive(Default)]
struct Table {
    index: HashMap<Vec<u8>, usize>,
    groups: Groups,
    memory: usize,
}

/// The runs a `$group` spilled: each holds `{_id: key, p: [partial states]}` sorted by key.
#[derive(Default)]
struct Spiller {
    spilled: SpilledRuns,
}

impl Spiller {
    fn spill(&mut self, ctx: &ExpCtx, table: &mut Table) -> Result<()> {
        let Some(dir) = ctx.spill_dir() else {
            return Err(super::context::exceeded("$group"));
        };
        let mut groups = std::mem::take(&mut table.groups);
        table.index.clear();
        table.memory = 0;
        groups.sort_by(|a, b| nidus_doc::compare::cmp_bson(&a.0, &b.0));
        self.spilled.write(
            &dir,
            groups.into_iter().map(|(key, accs)| {
                let partials = accs
                    .iter()
                    .map(|a| a.partial())
                    .collect::<Result<Vec<Bson>>>()?;
                Ok(bson::doc! {"_id": key, "p": partials})
            }),
        )
    }

    fn report(&self, ctx: &ExpCtx) {
        ctx.report(self.spilled.stats());
    }
}

/// Merges the spilled runs: the smallest key among the runs' heads, with the partial states
/// of every run holding it (in run order, which is input order) merged into fresh
/// accumulators.
struct GroupMerge {
    stage: Group,
    ctx: ExpCtx,
    runs: Vec<SpillRun>,
    heads: Vec<Option<(Bson, Vec<Bson>)>>,
}

impl GroupMerge {
    fn pull(&mut self, i: usize) -> Result<Option<(Bson, Vec<Bson>)>> {
        let Some(raw) = self.runs[i].next()?.map(|(_, r)| r) else {
            return Ok(None);
        };
        let mut d = raw
            .to_document()
            .map_err(|e| Error::internal(e.to_string()))?;
        let key = d.remove("_id").unwrap_or(Bson::Null);
        let partials = match d.remove("p") {
            Some(Bson::Array(a)) => a,
            _ => Vec::new(),
        };
        Ok(Some((key, partials)))
    }
}

impl DocStream for GroupMerge {
    fn next(&mut self) -> Result<Option<Document>> {
        let mut key: Option<Bson> = None;
        for (k, _) in self.heads.iter().flatten() {
            if key
                .as_ref()
                .is_none_or(|best| nidus_doc::compare::cmp_bson(k, best).is_lt())
            {
                key = Some(k.clone());
            }
        }
        let Some(key) = key else {
            return Ok(None);
        };
        let mut accs = self.stage.create_accumulators(&key, &self.ctx)?;
        for i in 0..self.heads.len() {
            let same = matches!(&self.heads[i], Some((k, _)) if nidus_doc::compare::cmp_bson(k, &key).is_eq());
            if !same {
                continue;
            }
            if let Some((_, partials)) = self.heads[i].take() {
                for (acc, p) in accs.iter_mut().zip(partials) {
                    acc.merge(p)?;
                }
            }
            self.heads[i] = self.pull(i)?;
        }
        let mut d = Document::new();
        d.insert("_id", key);
        for ((spec, _), acc) in self.stage.accumulators.iter().zip(accs.iter_mut()) {
            d.insert(spec.field.clone(), acc.finalize()?);
        }
        check_size(&d)?;
        Ok(Some(d))
    }
}
