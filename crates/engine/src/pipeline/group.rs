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
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::accumulators::{Accumulator, AccumulatorSpec, Ordered};
use nidus_expr::Expression;
use std::any::Any;
use std::collections::BTreeMap;
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
        while let Some(doc) = input.next()? {
            ctx.check_interrupt()?;
            let mut vars = ctx.variables(&doc);
            let key = self.id.evaluate(&mut vars)?.unwrap_or(Bson::Null);
            let slot = match table.index.get(&Ordered(key.clone())) {
                Some(i) => *i,
                None => {
                    table.memory += bson_bytes(&key) + 64;
                    let accs = self.create_accumulators(&key, ctx)?;
                    table.groups.push((key.clone(), accs));
                    table.index.insert(Ordered(key), table.groups.len() - 1);
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

/// The groups held in memory.
#[derive(Default)]
struct Table {
    index: BTreeMap<Ordered, usize>,
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
