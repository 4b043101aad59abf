//! `$group`: one output document per distinct `_id` value, with accumulator fields.
//!
//! Blocking: the whole input is consumed first. Groups come out in the order their keys
//! first appeared (MongoDB leaves the order unspecified). Keys are compared with BSON
//! comparison, so `1`, `1.0` and `NumberLong(1)` are one group (the first spelling seen is
//! the output `_id`). Memory is counted per group key and accumulator state against the
//! blocking-stage limit.

use super::context::{bson_bytes, check_size};
use super::{DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
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

    /// Groups the whole input.
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Vec<Document>> {
        let mut index: BTreeMap<Ordered, usize> = BTreeMap::new();
        let mut groups: Vec<(Bson, Vec<Box<dyn Accumulator>>)> = Vec::new();
        let mut memory = ctx.memory("$group");
        while let Some(doc) = input.next()? {
            ctx.check_interrupt()?;
            let mut vars = ctx.variables(&doc);
            let key = self.id.evaluate(&mut vars)?.unwrap_or(Bson::Null);
            let slot = match index.get(&Ordered(key.clone())) {
                Some(i) => *i,
                None => {
                    memory.add(bson_bytes(&key))?;
                    let accs = self.create_accumulators(&key, ctx)?;
                    groups.push((key.clone(), accs));
                    index.insert(Ordered(key), groups.len() - 1);
                    groups.len() - 1
                }
            };
            let accs = &mut groups[slot].1;
            for ((spec, _), acc) in self.accumulators.iter().zip(accs.iter_mut()) {
                let before = acc.mem_usage();
                acc.process(spec.input(&mut vars)?)?;
                memory.add(acc.mem_usage().saturating_sub(before))?;
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for (key, mut accs) in groups {
            let mut d = Document::new();
            d.insert("_id", key);
            for ((spec, _), acc) in self.accumulators.iter().zip(accs.iter_mut()) {
                d.insert(spec.field.clone(), acc.finalize()?);
            }
            check_size(&d)?;
            out.push(d);
        }
        Ok(out)
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
            |stage: &Group, input, ctx| Ok(VecStream::boxed(stage.run(input, ctx)?)),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
