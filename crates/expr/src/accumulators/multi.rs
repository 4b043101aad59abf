//! The n-valued accumulators: `$firstN $lastN` (`{input, n}`), `$maxN $minN` (`{input, n}`,
//! nullish values ignored), `$top $bottom` (`{sortBy, output}`) and `$topN $bottomN`
//! (`{n, sortBy, output}`).

use super::{collect::approx_size, Accumulator, MEMORY_LIMIT_BYTES};
use crate::expression::{named_raw, Expression};
use crate::value::{display, err, integral64, nullish, to_i64, Value};
use crate::variables::{ParseContext, Variables};
use bson::Bson;
use nidus_common::{Error, Result};
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiKind {
    FirstN,
    LastN,
    MaxN,
    MinN,
    Top,
    Bottom,
    TopN,
    BottomN,
}

impl MultiKind {
    pub fn from_name(name: &str) -> Option<MultiKind> {
        Some(match name {
            "$firstN" => MultiKind::FirstN,
            "$lastN" => MultiKind::LastN,
            "$maxN" => MultiKind::MaxN,
            "$minN" => MultiKind::MinN,
            "$top" => MultiKind::Top,
            "$bottom" => MultiKind::Bottom,
            "$topN" => MultiKind::TopN,
            "$bottomN" => MultiKind::BottomN,
            _ => return None,
        })
    }

    fn sorted(self) -> bool {
        matches!(
            self,
            MultiKind::Top | MultiKind::Bottom | MultiKind::TopN | MultiKind::BottomN
        )
    }

    fn single(self) -> bool {
        matches!(self, MultiKind::Top | MultiKind::Bottom)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct MultiSpec {
    kind: MultiKind,
    name: String,
    n: Option<Expression>,
    sort_by: Vec<(Vec<String>, bool)>,
}

pub(crate) fn parse(
    kind: MultiKind,
    name: &str,
    arg: &Bson,
    ctx: &ParseContext,
) -> Result<(Expression, MultiSpec)> {
    let allowed: &[&'static str] = if kind.sorted() {
        if kind.single() {
            &["sortBy", "output"]
        } else {
            &["n", "sortBy", "output"]
        }
    } else {
        &["input", "n"]
    };
    let raw = named_raw(
        arg,
        allowed,
        || {
            err(
                5787900,
                format!(
                    "specification must be an object; found {}",
                    display(&Some(arg.clone()))
                ),
            )
        },
        |k| err(5787901, format!("Unknown argument for 'n' operator: {k}")),
    )?;
    let get = |k: &str| allowed.iter().position(|a| *a == k).and_then(|i| raw[i]);
    let n = if kind.single() {
        None
    } else {
        let n = get("n").ok_or_else(|| err(5787906, "Missing value for 'n'"))?;
        Some(Expression::parse(n, ctx)?)
    };
    let (input, sort_by) = if kind.sorted() {
        let output = get("output").ok_or_else(|| err(5788004, "Missing value for 'output'"))?;
        let sort = get("sortBy").ok_or_else(|| err(5788005, "Missing value for 'sortBy'"))?;
        let Bson::Document(sd) = sort else {
            return Err(err(
                5788604,
                format!("expected 'sortBy' to already be an object in the arguments to {name}"),
            ));
        };
        let mut fields = Vec::new();
        for (k, v) in sd {
            let desc = match v {
                Bson::Int32(1) | Bson::Int64(1) => false,
                Bson::Double(d) if *d == 1.0 => false,
                Bson::Int32(-1) | Bson::Int64(-1) => true,
                Bson::Double(d) if *d == -1.0 => true,
                _ => {
                    return Err(Error::bad_value(
                        "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                    ))
                }
            };
            fields.push((k.split('.').map(str::to_string).collect(), desc));
        }
        (Expression::parse(output, ctx)?, fields)
    } else {
        let input = get("input").ok_or_else(|| err(5787907, "Missing value for 'input'"))?;
        (Expression::parse(input, ctx)?, Vec::new())
    };
    Ok((
        input,
        MultiSpec {
            kind,
            name: name.to_string(),
            n,
            sort_by,
        },
    ))
}

impl MultiSpec {
    /// The per-document input: the value, or `[sortKey, output]` for the sorted kinds.
    pub(crate) fn input(&self, input: &Expression, vars: &mut Variables) -> Result<Value> {
        let v = input.evaluate(vars)?;
        if !self.kind.sorted() {
            return Ok(v);
        }
        let mut key = Vec::with_capacity(self.sort_by.len());
        for (path, _) in &self.sort_by {
            key.push(vars.root_path(path).unwrap_or(Bson::Null));
        }
        Ok(Some(Bson::Array(vec![
            Bson::Array(key),
            v.unwrap_or(Bson::Null),
        ])))
    }

    pub(crate) fn create(&self, vars: &mut Variables) -> Result<Box<dyn Accumulator>> {
        let n = match &self.n {
            None => 1,
            Some(e) => {
                let v = e.evaluate(vars)?;
                let Some(b) = v.as_ref().filter(|b| integral64(b)) else {
                    return Err(err(
                        5787902,
                        format!(
                            "Value for 'n' must be of integral type, but found {}",
                            display(&v)
                        ),
                    ));
                };
                let n = to_i64(b);
                if n <= 0 {
                    return Err(err(
                        5787908,
                        format!("'n' must be greater than 0, found {n}"),
                    ));
                }
                n as usize
            }
        };
        Ok(Box::new(MultiN {
            kind: self.kind,
            name: self.name.clone(),
            n,
            desc: self.sort_by.iter().map(|(_, d)| *d).collect(),
            items: Vec::new(),
            bytes: 0,
        }))
    }
}

/// The state of an n-valued accumulator.
#[derive(Debug, Clone)]
pub struct MultiN {
    kind: MultiKind,
    name: String,
    n: usize,
    desc: Vec<bool>,
    items: Vec<Bson>,
    bytes: usize,
}

impl MultiN {
    fn cmp_keys(&self, a: &Bson, b: &Bson) -> Ordering {
        let key = |x: &Bson| match x {
            Bson::Array(p) => p.first().cloned(),
            _ => None,
        };
        let (Some(Bson::Array(ka)), Some(Bson::Array(kb))) = (key(a), key(b)) else {
            return Ordering::Equal;
        };
        for (i, (x, y)) in ka.iter().zip(kb.iter()).enumerate() {
            let mut o = cmp_bson(x, y);
            if self.desc.get(i).copied().unwrap_or(false) {
                o = o.reverse();
            }
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    fn output_of(pair: &Bson) -> Bson {
        match pair {
            Bson::Array(p) => p.get(1).cloned().unwrap_or(Bson::Null),
            _ => Bson::Null,
        }
    }
}

impl Accumulator for MultiN {
    fn process(&mut self, v: Value) -> Result<()> {
        match self.kind {
            MultiKind::FirstN => {
                if self.items.len() < self.n {
                    self.items.push(v.unwrap_or(Bson::Null));
                }
            }
            MultiKind::LastN => {
                self.items.push(v.unwrap_or(Bson::Null));
                if self.items.len() > self.n {
                    self.items.remove(0);
                }
            }
            MultiKind::MaxN | MultiKind::MinN => {
                if nullish(&v) {
                    return Ok(());
                }
                let v = v.unwrap_or(Bson::Null);
                let want = if self.kind == MultiKind::MaxN {
                    Ordering::Greater
                } else {
                    Ordering::Less
                };
                let pos = self
                    .items
                    .iter()
                    .position(|x| cmp_bson(&v, x) == want)
                    .unwrap_or(self.items.len());
                if pos < self.n {
                    self.items.insert(pos, v);
                    self.items.truncate(self.n);
                }
            }
            _ => {
                let v = v.unwrap_or(Bson::Null);
                let bottom = matches!(self.kind, MultiKind::Bottom | MultiKind::BottomN);
                // Keep the items sorted; ties keep arrival order.
                let pos = self
                    .items
                    .iter()
                    .position(|x| self.cmp_keys(&v, x) == Ordering::Less)
                    .unwrap_or(self.items.len());
                self.items.insert(pos, v);
                if self.items.len() > self.n {
                    if bottom {
                        self.items.remove(0);
                    } else {
                        self.items.pop();
                    }
                }
            }
        }
        self.bytes = self.items.iter().map(approx_size).sum();
        if self.bytes > MEMORY_LIMIT_BYTES {
            return Err(super::collect::too_much_memory(&self.name));
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(Bson::Array(self.items.clone()))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        if let Bson::Array(a) = partial {
            for v in a {
                self.process(Some(v))?;
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        if self.kind.sorted() {
            let outs: Vec<Bson> = self.items.iter().map(MultiN::output_of).collect();
            if self.kind.single() {
                return Ok(outs.into_iter().next().unwrap_or(Bson::Null));
            }
            return Ok(Bson::Array(outs));
        }
        Ok(Bson::Array(self.items.clone()))
    }

    fn mem_usage(&self) -> usize {
        self.bytes
    }
}
