//! Translates one leaf predicate into index intervals (MongoDB's `IndexBoundsBuilder`), in
//! ascending value order, with whether the bounds answer the predicate exactly.

use super::bounds::{complement_ascending, intersect_ascending, Interval};
use bson::{oid::ObjectId, Bson, Document, Timestamp};
use nidus_query::matcher::{CmpOp, ElemMatch, Leaf, Pred, RegexPred};

/// Intervals for one predicate; `exact` = no filter needs to run on what they return.
pub struct Translated {
    pub intervals: Vec<Interval>,
    pub exact: bool,
}

impl Translated {
    fn exact(intervals: Vec<Interval>) -> Translated {
        Translated {
            intervals,
            exact: true,
        }
    }

    fn inexact(intervals: Vec<Interval>) -> Translated {
        Translated {
            intervals,
            exact: false,
        }
    }

    fn all() -> Translated {
        Translated::inexact(vec![Interval::all()])
    }
}

/// Whether an index on the predicate's path can narrow the scan for it (what makes an index
/// relevant to a query).
pub fn is_indexable(leaf: &Leaf) -> bool {
    match leaf {
        Leaf::Eq(_)
        | Leaf::Cmp(..)
        | Leaf::In(_)
        | Leaf::Regex(_)
        | Leaf::Exists
        | Leaf::Type(_) => true,
        Leaf::ElemMatch(ElemMatch::Value(preds)) => preds
            .iter()
            .any(|p| matches!(p, Pred::Leaf(l) if is_indexable(l))),
        _ => false,
    }
}

/// [`is_indexable`], also for `$ne`/`$nin` (negated equality and `$in`).
pub fn is_indexable_or_negated(leaf: &Leaf, negated: bool) -> bool {
    if negated {
        matches!(leaf, Leaf::Eq(_) | Leaf::In(_))
    } else {
        is_indexable(leaf)
    }
}

/// Bounds of a leaf (`negated` for `$not`/`$ne`/`$nin`).
pub fn translate(leaf: &Leaf, negated: bool) -> Translated {
    if negated {
        return match leaf {
            Leaf::Eq(v)
                if !matches!(
                    v.bson,
                    Bson::Null | Bson::Array(_) | Bson::RegularExpression(_)
                ) =>
            {
                let t = equality(&v.bson);
                Translated {
                    intervals: complement_ascending(&t.intervals),
                    exact: t.exact,
                }
            }
            Leaf::In(list) if list.regexes.is_empty() => {
                let t = translate(leaf, false);
                let has_special = list
                    .values
                    .iter()
                    .any(|v| matches!(v.bson, Bson::Null | Bson::Array(_)));
                Translated {
                    intervals: complement_ascending(
                        &super::bounds::OrderedIntervalList::from_ascending("", t.intervals, false)
                            .intervals,
                    ),
                    exact: t.exact && !has_special,
                }
            }
            _ => Translated::all(),
        };
    }
    match leaf {
        Leaf::Eq(v) => equality(&v.bson),
        Leaf::Cmp(op, v) => comparison(*op, &v.bson),
        Leaf::In(list) => {
            let mut intervals = Vec::new();
            let mut exact = true;
            for v in &list.values {
                let t = equality(&v.bson);
                exact &= t.exact;
                intervals.extend(t.intervals);
            }
            for r in &list.regexes {
                intervals.extend(regex(r).intervals);
                exact = false;
            }
            Translated { intervals, exact }
        }
        Leaf::Regex(r) => regex(r),
        Leaf::ElemMatch(ElemMatch::Value(preds)) => {
            let mut acc = vec![Interval::all()];
            for p in preds {
                if let Pred::Leaf(l) = p {
                    if is_indexable(l) {
                        let t = translate(l, false);
                        let asc = super::bounds::OrderedIntervalList::from_ascending(
                            "",
                            t.intervals,
                            false,
                        );
                        acc = intersect_ascending(&acc, &asc.intervals);
                    }
                }
            }
            Translated::inexact(acc)
        }
        _ => Translated::all(),
    }
}

fn equality(v: &Bson) -> Translated {
    match v {
        // Missing fields are indexed as null too; a FETCH filter decides.
        Bson::Null => Translated::inexact(vec![Interval::point(Bson::Null)]),
        Bson::Array(items) => {
            let first = match items.first() {
                Some(f) => f.clone(),
                None => Bson::Undefined,
            };
            Translated::inexact(vec![Interval::point(first), Interval::point(v.clone())])
        }
        Bson::RegularExpression(re) => match RegexPred::new(&re.pattern, &re.options) {
            Ok(r) => regex(&r),
            Err(_) => Translated::all(),
        },
        other => Translated::exact(vec![Interval::point(other.clone())]),
    }
}

/// The smallest and largest values of `v`'s canonical type, each with inclusivity.
fn type_bracket(v: &Bson) -> Option<((Bson, bool), (Bson, bool))> {
    let b = match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => (
            (Bson::Double(f64::NEG_INFINITY), true),
            (Bson::Double(f64::INFINITY), true),
        ),
        Bson::String(_) | Bson::Symbol(_) => (
            (Bson::String(String::new()), true),
            (Bson::Document(Document::new()), false),
        ),
        Bson::Document(_) => (
            (Bson::Document(Document::new()), true),
            (Bson::Array(Vec::new()), false),
        ),
        Bson::ObjectId(_) => (
            (Bson::ObjectId(ObjectId::from_bytes([0; 12])), true),
            (Bson::ObjectId(ObjectId::from_bytes([0xFF; 12])), true),
        ),
        Bson::Boolean(_) => ((Bson::Boolean(false), true), (Bson::Boolean(true), true)),
        Bson::DateTime(_) => (
            (Bson::DateTime(bson::DateTime::from_millis(i64::MIN)), true),
            (Bson::DateTime(bson::DateTime::from_millis(i64::MAX)), true),
        ),
        Bson::Timestamp(_) => (
            (
                Bson::Timestamp(Timestamp {
                    time: 0,
                    increment: 0,
                }),
                true,
            ),
            (
                Bson::Timestamp(Timestamp {
                    time: u32::MAX,
                    increment: u32::MAX,
                }),
                true,
            ),
        ),
        _ => return None,
    };
    Some(b)
}

fn is_nan(v: &Bson) -> bool {
    matches!(v, Bson::Double(d) if d.is_nan())
}

fn comparison(op: CmpOp, v: &Bson) -> Translated {
    let inclusive = matches!(op, CmpOp::Gte | CmpOp::Lte);
    match v {
        Bson::MinKey => {
            return match op {
                CmpOp::Gt => {
                    Translated::exact(vec![Interval::new(Bson::MinKey, false, Bson::MaxKey, true)])
                }
                CmpOp::Gte => Translated::exact(vec![Interval::all()]),
                CmpOp::Lte => Translated::exact(vec![Interval::point(Bson::MinKey)]),
                CmpOp::Lt => Translated::exact(vec![]),
            }
        }
        Bson::MaxKey => {
            return match op {
                CmpOp::Lt => {
                    Translated::exact(vec![Interval::new(Bson::MinKey, true, Bson::MaxKey, false)])
                }
                CmpOp::Lte => Translated::exact(vec![Interval::all()]),
                CmpOp::Gte => Translated::exact(vec![Interval::point(Bson::MaxKey)]),
                CmpOp::Gt => Translated::exact(vec![]),
            }
        }
        Bson::Null => {
            return if inclusive {
                equality(&Bson::Null)
            } else {
                Translated::exact(vec![])
            }
        }
        _ if is_nan(v) => {
            return if inclusive {
                Translated::exact(vec![Interval::point(v.clone())])
            } else {
                Translated::exact(vec![])
            }
        }
        _ => {}
    }
    let Some(((lo, lo_inc), (hi, hi_inc))) = type_bracket(v) else {
        return Translated::all();
    };
    let iv = match op {
        CmpOp::Gt | CmpOp::Gte => Interval::new(v.clone(), inclusive, hi, hi_inc),
        CmpOp::Lt | CmpOp::Lte => Interval::new(lo, lo_inc, v.clone(), inclusive),
    };
    Translated::exact(vec![iv])
}

/// `^literal` prefixes give a string range; every regex also matches stored regexes equal
/// to it. The regex itself is always re-checked.
fn regex(r: &RegexPred) -> Translated {
    let regex_point = Interval::point(r.to_bson());
    let strings = match literal_prefix(&r.pattern, &r.options) {
        Some(prefix) if !prefix.is_empty() => {
            let mut end = prefix.clone();
            match end.pop().and_then(|c| char::from_u32(c as u32 + 1)) {
                Some(next) => {
                    end.push(next);
                    Interval::new(Bson::String(prefix), true, Bson::String(end), false)
                }
                None => Interval::new(
                    Bson::String(prefix),
                    true,
                    Bson::Document(Document::new()),
                    false,
                ),
            }
        }
        _ => Interval::new(
            Bson::String(String::new()),
            true,
            Bson::Document(Document::new()),
            false,
        ),
    };
    Translated::inexact(vec![strings, regex_point])
}

/// The literal text a `^`-anchored regex must start with (None for unanchored or
/// case-insensitive/multiline/extended ones).
fn literal_prefix(pattern: &str, options: &str) -> Option<String> {
    if options.contains('i') || options.contains('m') || options.contains('x') {
        return None;
    }
    let rest = pattern
        .strip_prefix('^')
        .or_else(|| pattern.strip_prefix("\\A"))?;
    let mut out = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if "\\^$.[]|()?*+{}".contains(c) {
            // A quantifier makes the previous character optional.
            if matches!(c, '?' | '*' | '{') {
                out.pop();
            }
            break;
        }
        if chars.peek().is_some_and(|n| matches!(n, '?' | '*' | '{')) {
            break;
        }
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_prefixes() {
        assert_eq!(literal_prefix("^abc", ""), Some("abc".into()));
        assert_eq!(literal_prefix("^ab*c", ""), Some("a".into()));
        assert_eq!(literal_prefix("^ab.c", ""), Some("ab".into()));
        assert_eq!(literal_prefix("abc", ""), None);
        assert_eq!(literal_prefix("^abc", "i"), None);
    }
}
