//! `$rand`: a random double in [0, 1), a new one per evaluation.

use crate::expression::{Expression, Nary, Parser};
use crate::value::{err, Value};
use crate::variables::{ParseContext, Variables};
use bson::Bson;
use nidus_common::Result;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

pub(crate) const OPS: &[(&str, Parser)] = &[("$rand", parse_rand)];

fn parse_rand(name: &'static str, arg: &Bson, _ctx: &ParseContext) -> Result<Expression> {
    match arg {
        Bson::Document(d) if d.is_empty() => Ok(Expression::op(Nary {
            name,
            args: Vec::new(),
            f: rand,
        })),
        _ => Err(err(3040500, "$rand does not currently accept arguments")),
    }
}

/// Each `RandomState` has fresh keys (the standard library seeds them from the OS and steps
/// them per instance), so hashing a constant gives an unpredictable 64-bit value; its top 53
/// bits make the double.
fn rand(_n: &Nary, _vars: &mut Variables) -> Result<Value> {
    let bits = RandomState::new().hash_one(0x006e_6964_7573_u64) >> 11;
    Ok(Some(Bson::Double(bits as f64 / (1u64 << 53) as f64)))
}

#[cfg(test)]
mod tests {
    use crate::{Expression, ParseContext};
    use bson::{bson, doc, Bson};

    #[test]
    fn rand_is_a_double_in_unit_interval_and_varies() {
        let e = Expression::parse(&bson!({"$rand": {}}), &ParseContext::new()).expect("parse");
        let values: Vec<f64> = (0..20)
            .map(|_| match e.evaluate_doc(&doc! {}) {
                Ok(Some(Bson::Double(x))) => x,
                other => panic!("not a double: {other:?}"),
            })
            .collect();
        assert!(values.iter().all(|x| (0.0..1.0).contains(x)));
        assert!(values.windows(2).any(|w| w[0] != w[1]));
        let bad = Expression::parse(&bson!({"$rand": {"a": 1}}), &ParseContext::new());
        assert_eq!(bad.expect_err("args").code.code(), 3040500);
    }
}
