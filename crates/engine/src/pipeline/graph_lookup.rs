//! `$graphLookup`: a breadth-first search over another collection.
//!
//! The values of `startWith` (array elements one by one) are looked up with
//! `{connectToField: {$in: values}}` (and `restrictSearchWithMatch`) through the foreign
//! collection's find plan, so an index on `connectToField` serves each step; the
//! `connectFromField` values of the documents found form the next step's values. Documents
//! are visited once (by `_id`), at the depth they were first reached (`depthField`); the
//! search stops after `maxDepth`. Visited documents and the pending values count against
//! 100 MiB (`$graphLookup reached maximum memory consumption`, 40099).

use super::context::{bson_bytes, doc_bytes, MAX_BLOCKING_STAGE_BYTES};
use super::r#match::Match;
use super::unwind::set_nested;
use super::{run, DocStream, DocumentSource, ExpCtx, Modified, ParseCtx, StageRef, Stream};
use crate::namespace::Namespace;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::accumulators::Ordered;
use nidus_expr::Expression;
use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct GraphLookup {
    from: Namespace,
    as_field: String,
    start_with: Expression,
    connect_from: String,
    connect_to: String,
    depth_field: Option<String>,
    max_depth: Option<i64>,
    restrict: Option<Document>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!(
                "the $graphLookup stage specification must be an object, but found {}",
                super::type_name(arg)
            ),
        ));
    };
    let mut from = None;
    let mut as_field = None;
    let mut start_with = None;
    let mut connect_from = None;
    let mut connect_to = None;
    let mut depth_field = None;
    let mut max_depth = None;
    let mut restrict = None;
    for (k, v) in spec {
        match k.as_str() {
            "startWith" => {
                start_with = Some(Expression::parse(v, &pcx.exprs)?);
                continue;
            }
            "maxDepth" => {
                if !super::is_number(v) {
                    return Err(Error::location(
                        40100,
                        format!(
                            "maxDepth must be numeric, found type: {}",
                            super::type_name(v)
                        ),
                    ));
                }
                let f = nidus_expr::value::to_f64(v);
                let n = f as i64;
                if n < 0 {
                    return Err(Error::location(
                        40101,
                        format!("maxDepth requires a nonnegative argument, found: {n}"),
                    ));
                }
                if n as f64 != f {
                    return Err(Error::location(
                        40102,
                        format!("maxDepth could not be represented as a long long: {n}"),
                    ));
                }
                max_depth = Some(n);
                continue;
            }
            "restrictSearchWithMatch" => {
                let Bson::Document(d) = v else {
                    return Err(Error::location(
                        40185,
                        format!(
                            "restrictSearchWithMatch must be an object, found {}",
                            super::type_name(v)
                        ),
                    ));
                };
                // Parsed now so a bad filter fails the command before it runs.
                Match::new(d.clone())?;
                restrict = Some(d.clone());
                continue;
            }
            "from" | "as" | "connectFromField" | "connectToField" | "depthField" => {}
            other => {
                return Err(Error::location(
                    40104,
                    format!("Unknown argument to $graphLookup: {other}"),
                ))
            }
        }
        let Bson::String(s) = v else {
            return Err(Error::location(
                40103,
                format!(
                    "expected string as argument for {k}, found: {}",
                    super::type_name(v)
                ),
            ));
        };
        match k.as_str() {
            "from" => from = Some(s.clone()),
            "as" => as_field = Some(s.clone()),
            "connectFromField" => connect_from = Some(s.clone()),
            "connectToField" => connect_to = Some(s.clone()),
            _ => depth_field = Some(s.clone()),
        }
    }
    let nonempty = |s: &Option<String>| s.as_ref().is_some_and(|s| !s.is_empty());
    if !nonempty(&from)
        || !nonempty(&as_field)
        || start_with.is_none()
        || !nonempty(&connect_from)
        || !nonempty(&connect_to)
    {
        return Err(Error::location(
            40105,
            "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and 'connectToField' to be specified.",
        ));
    }
    let (Some(from), Some(as_field), Some(start_with), Some(connect_from), Some(connect_to)) =
        (from, as_field, start_with, connect_from, connect_to)
    else {
        return Err(Error::location(40105, "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and 'connectToField' to be specified."));
    };
    Ok(vec![Arc::new(GraphLookup {
        from: Namespace::new(&pcx.db, &from),
        as_field,
        start_with,
        connect_from,
        connect_to,
        depth_field,
        max_depth,
        restrict,
    })])
}

/// The values at a dotted path, array elements one by one (missing adds nothing).
fn values_at(v: &Bson, path: &[&str], out: &mut Vec<Bson>) {
    match path.split_first() {
        None => match v {
            Bson::Array(items) => out.extend(items.iter().cloned()),
            other => out.push(other.clone()),
        },
        Some((first, rest)) => match v {
            Bson::Document(d) => {
                if let Some(x) = d.get(*first) {
                    values_at(x, rest, out);
                }
            }
            Bson::Array(items) => {
                for e in items {
                    values_at(e, path, out);
                }
            }
            _ => {}
        },
    }
}

impl GraphLookup {
    fn search(&self, doc: Document, ctx: &ExpCtx) -> Result<Document> {
        let mut frontier: Vec<Bson> = match ctx.evaluate(&self.start_with, &doc)? {
            Some(Bson::Array(a)) => a,
            Some(v) => vec![v],
            None => vec![Bson::Null],
        };
        let mut queried: BTreeSet<Ordered> = BTreeSet::new();
        let mut visited: BTreeSet<Ordered> = BTreeSet::new();
        let mut found: Vec<Document> = Vec::new();
        let mut memory = 0usize;
        let from_parts: Vec<&str> = self.connect_from.split('.').collect();
        let mut depth = 0i64;
        loop {
            let values: Vec<Bson> = frontier
                .drain(..)
                .filter(|v| queried.insert(Ordered(v.clone())))
                .collect();
            if values.is_empty() || self.max_depth.is_some_and(|m| depth > m) {
                break;
            }
            memory += values.iter().map(bson_bytes).sum::<usize>();
            let mut filter = Document::new();
            filter.insert(self.connect_to.clone(), bson::bson!({"$in": values}));
            if let Some(r) = &self.restrict {
                filter = bson::doc! {"$and": [filter, r.clone()]};
            }
            let stages = vec![Arc::new(Match::new(filter)?) as StageRef];
            for mut d in run::collect(ctx, Some(&self.from), &stages, None)? {
                ctx.check_interrupt()?;
                let id = d.get("_id").cloned().unwrap_or(Bson::Null);
                if !visited.insert(Ordered(id)) {
                    continue;
                }
                values_at(&Bson::Document(d.clone()), &from_parts, &mut frontier);
                if let Some(f) = &self.depth_field {
                    let parts: Vec<String> = f.split('.').map(str::to_string).collect();
                    set_nested(&mut d, &parts, Bson::Int64(depth));
                }
                memory += doc_bytes(&d);
                if memory >= MAX_BLOCKING_STAGE_BYTES {
                    return Err(Error::location(
                        40099,
                        "$graphLookup reached maximum memory consumption",
                    ));
                }
                found.push(d);
            }
            depth += 1;
        }
        super::lookup::attach_as(doc, &self.as_field, found)
    }
}

impl DocumentSource for GraphLookup {
    fn name(&self) -> &'static str {
        "$graphLookup"
    }

    fn serialize(&self) -> Bson {
        let mut d = bson::doc! {
            "from": self.from.coll.clone(),
            "as": self.as_field.clone(),
            "connectToField": self.connect_to.clone(),
            "connectFromField": self.connect_from.clone(),
            "startWith": self.start_with.serialize(),
        };
        if let Some(m) = self.max_depth {
            d.insert("maxDepth", m);
        }
        if let Some(f) = &self.depth_field {
            d.insert("depthField", f.clone());
        }
        if let Some(r) = &self.restrict {
            d.insert("restrictSearchWithMatch", r.clone());
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(GraphStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn modified(&self) -> Modified {
        Modified::Paths(vec![self.as_field.clone()])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct GraphStream {
    input: Stream,
    stage: GraphLookup,
    ctx: ExpCtx,
}

impl DocStream for GraphStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        self.ctx.check_interrupt()?;
        Ok(Some(self.stage.search(d, &self.ctx)?))
    }
}
