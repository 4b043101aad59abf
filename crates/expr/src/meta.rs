//! `$meta`: a document's metadata (text score, index key, record id, sort key, ...).
//!
//! Nidus computes none of these yet, so evaluation yields *missing* — what MongoDB yields
//! for metadata a query did not produce, except `textScore`, which MongoDB refuses up front
//! (`Location40218`) when the query has no `$text`; callers check
//! [`Dependencies::metadata`](crate::Dependencies) for that.

use crate::expression::{Expression, Operator};
use crate::value::{err, Value};
use crate::variables::{ParseContext, Variables};
use bson::{doc, Bson};
use nidus_common::Result;

pub(crate) const OPS: &[(&str, crate::expression::Parser)] = &[("$meta", parse_meta)];

/// MongoDB's metadata names (`DocumentMetadataFields::parseMetaType`).
const NAMES: &[&str] = &[
    "textScore",
    "randVal",
    "searchScore",
    "searchHighlights",
    "geoNearDistance",
    "geoNearPoint",
    "recordId",
    "indexKey",
    "sortKey",
    "searchScoreDetails",
    "searchSortValues",
    "searchSequenceToken",
    "timeseriesBucketMinTime",
    "timeseriesBucketMaxTime",
    "vectorSearchScore",
    "score",
    "scoreDetails",
];

/// `{$meta: "<name>"}`.
#[derive(Debug)]
pub struct Meta {
    name: &'static str,
}

fn parse_meta(_name: &'static str, arg: &Bson, _ctx: &ParseContext) -> Result<Expression> {
    let Bson::String(s) = arg else {
        return Err(err(17307, "$meta only supports string arguments"));
    };
    match NAMES.iter().find(|n| **n == s.as_str()) {
        Some(name) => Ok(Expression::op(Meta { name })),
        None => Err(err(17308, format!("Unsupported argument to $meta: {s}"))),
    }
}

impl Operator for Meta {
    fn name(&self) -> &str {
        "$meta"
    }
    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        if self.name == "textScore" {
            return Ok(vars.text_score().map(bson::Bson::Double));
        }
        Ok(None)
    }
    fn serialize(&self) -> Bson {
        Bson::Document(doc! {"$meta": self.name})
    }
    fn children(&self) -> Vec<&Expression> {
        Vec::new()
    }
    fn metadata(&self) -> Option<&'static str> {
        Some(self.name)
    }
}

/// The error for a `textScore` the query cannot produce.
pub fn text_score_unavailable() -> nidus_common::Error {
    err(
        40218,
        "query requires text score metadata, but it is not available",
    )
}

#[cfg(test)]
mod tests {
    use crate::{Expression, ParseContext};
    use bson::{bson, doc};

    #[test]
    fn parses_names_and_rejects_others() {
        let ctx = ParseContext::new();
        let e = Expression::parse(&bson!({"$meta": "indexKey"}), &ctx).expect("indexKey");
        assert_eq!(e.dependencies().metadata.len(), 1);
        assert_eq!(e.evaluate_doc(&doc! {"a": 1}).expect("eval"), None);
        let cases = [
            (bson!({"$meta": "foo"}), 17308),
            (bson!({"$meta": 1}), 17307),
        ];
        for (arg, code) in cases {
            let e = Expression::parse(&arg, &ctx).expect_err("bad $meta");
            assert_eq!(e.code.code(), code, "{arg}");
        }
    }
}
