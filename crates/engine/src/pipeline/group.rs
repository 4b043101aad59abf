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
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// with `allowDiskUse`, as runs of partial states sorted by key, merged at the end. A
    /// large collection scan is read by up to `ctx.parallelism` threads (see
    /// [`Group::run_parts`]).
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        // Only with disk use: the parts count a key once each, so together they may pass the
        // memory limit where one thread would not, and must then spill rather than fail.
        let parts = if ctx.parallelism > 1 && self.parallel_safe() && ctx.allow_disk_use {
            input.split(ctx.parallelism)
        } else {
            None
        };
        let (mut table, mut spiller) = match parts {
            Some(parts) => self.run_parts(parts, ctx)?,
            None => self.consume(&mut input, ctx, None)?,
        };
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

    /// Groups `input` into a table, spilling it whenever the memory held passes the limit:
    /// this table's alone, or, for one part of a parallel run, `shared`, what all the parts'
    /// tables hold (each part publishes its growth in steps, so the sum may pass the limit
    /// by a step per part before one of them spills).
    fn consume(
        &self,
        input: &mut Stream,
        ctx: &ExpCtx,
        shared: Option<&AtomicUsize>,
    ) -> Result<(Table, Spiller)> {
        const STEP: usize = 64 * 1024;
        let mut table = Table::default();
        let mut spiller = Spiller::default();
        let mut key_bytes = Vec::new();
        let mut published = 0usize;
        while let Some(doc) = input.next()? {
            ctx.check_interrupt()?;
            self.add(&mut table, &doc, ctx, &mut key_bytes)?;
            let held = match shared {
                None => table.memory,
                Some(all) if table.memory >= published + STEP => {
                    let grown = table.memory - published;
                    published = table.memory;
                    all.fetch_add(grown, Ordering::Relaxed) + grown
                }
                Some(_) => continue,
            };
            if held > ctx.group_max_memory {
                if let Some(all) = shared {
                    all.fetch_sub(published, Ordering::Relaxed);
                    published = 0;
                }
                spiller.spill(ctx, &mut table)?;
            }
        }
        Ok((table, spiller))
    }

    /// Adds one document to its group.
    fn add(
        &self,
        table: &mut Table,
        doc: &Document,
        ctx: &ExpCtx,
        key_bytes: &mut Vec<u8>,
    ) -> Result<()> {
        let mut vars = ctx.variables(doc);
        let key = self.id.evaluate(&mut vars)?.unwrap_or(Bson::Null);
        key_bytes.clear();
        encode_key(&key, key_bytes)?;
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
        Ok(())
    }

    /// Whether groups computed over consecutive parts of the input and folded together in
    /// input order equal the groups of the whole input.
    fn parallel_safe(&self) -> bool {
        let folds = nidus_expr::accumulators::FOLD_EXACTLY;
        self.accumulators
            .iter()
            .all(|(spec, _)| folds.contains(&spec.name.as_str()))
    }

    /// Groups each part on a thread of its own and folds the parts' tables in input order:
    /// a key's group takes the place and the `_id` spelling of its first appearance, and
    /// each accumulator absorbs the later parts' states, so the result is the one thread's.
    /// Parts that spilled hand over their runs, which merge after the earlier parts' (run
    /// order is input order, as [`GroupMerge`] needs). The first part's error in input
    /// order is the error.
    fn run_parts(&self, parts: Vec<Stream>, ctx: &ExpCtx) -> Result<(Table, Spiller)> {
        let shared = AtomicUsize::new(0);
        let shared = &shared;
        let results = crate::opctx::run_parts("group-part", parts, |mut part| {
            self.consume(&mut part, ctx, Some(shared))
        });
        let mut done = Vec::with_capacity(results.len());
        for result in results {
            done.push(result?);
        }
        // Runs merge in run order as input order: once a part spilled, every part's table
        // becomes its last run, and the parts' runs go in part order.
        let spilled = done.iter().any(|(_, s)| !s.spilled.runs.is_empty());
        let mut table = Table::default();
        let mut spiller = Spiller::default();
        for (mut part, mut part_spiller) in done {
            if spilled {
                if !part.groups.is_empty() {
                    part_spiller.spill(ctx, &mut part)?;
                }
                spiller.spilled.extend(part_spiller.spilled);
                continue;
            }
            let mut keys = vec![Vec::new(); part.groups.len()];
            for (k, i) in part.index {
                keys[i] = k;
            }
            for ((key, accs), bytes) in part.groups.into_iter().zip(keys) {
                match table.index.get(bytes.as_slice()) {
                    Some(&i) => {
                        for (acc, later) in table.groups[i].1.iter_mut().zip(accs) {
                            acc.absorb(later)?;
                        }
                    }
                    None => {
                        table.groups.push((key, accs));
                        table.index.insert(bytes, table.groups.len() - 1);
                    }
                }
            }
        }
        Ok((table, spiller))
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
