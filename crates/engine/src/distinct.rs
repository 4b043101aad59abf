//! Plans for `distinct`: a DISTINCT_SCAN over an index that holds the key, returning one
//! index key per value under PROJECTION_COVERED `{_id: 0, <key>: 1}`, when the index answers
//! the whole filter; otherwise the query's ordinary plan.

use crate::catalog::{CollectionRef, IndexMeta};
use crate::exec::{DistinctScan, Executor, IndexScan, ProjectionCovered, Stage};
use crate::find::FindSpec;
use crate::plan::{self, IndexSolution};
use crate::Engine;
use bson::doc;
use nidus_common::Result;
use nidus_query::matcher::Matcher;
use nidus_query::projection::Projection;
use std::sync::Arc;

impl Engine {
    /// The executor whose documents hold the values `distinct` collects for `key`.
    pub fn plan_distinct(
        &self,
        coll: Option<&CollectionRef>,
        spec: &FindSpec,
        key: &str,
    ) -> Result<Executor> {
        if let Some(exec) = self.distinct_scan(coll, spec, key)? {
            return Ok(exec);
        }
        self.plan_find(coll, spec)
    }

    fn distinct_scan(
        &self,
        coll: Option<&CollectionRef>,
        spec: &FindSpec,
        key: &str,
    ) -> Result<Option<Executor>> {
        let Some(coll) = coll else {
            return Ok(None);
        };
        if spec.collation.is_some() || spec.hint.is_some() || spec.let_vars.is_some() {
            return Ok(None);
        }
        let matcher = Matcher::parse(&spec.filter)?;
        let transform = doc! {"_id": 0, key: 1};
        let projection = Arc::new(Projection::parse(&transform)?);
        let query = plan::Query {
            matcher: &matcher,
            sort: None,
            projection: Some(&projection),
            count: false,
            return_key: false,
            collation: None,
        };
        let meta = coll.meta.read();
        let best = meta
            .indexes
            .iter()
            .filter(|ix| {
                // A collated index holds collation keys, not the values distinct returns.
                // A hashed index holds hashes.
                !ix.is_hidden()
                    && !ix.is_partial()
                    && !ix.sparse
                    && ix.collation.is_none()
                    && ix.hashed.is_none()
                    && ix.geo.is_none()
                    && ix.twod.is_none()
                    && ix.text.is_none()
            })
            .filter_map(|ix| {
                let field = ix.pattern.iter().position(|(p, _)| p == key)?;
                let sol =
                    plan::enumerate(std::slice::from_ref(ix), &query, Some(&ix.name)).pop()?;
                distinct_scannable(ix, &sol, field).then_some((sol, field))
            })
            .min_by_key(|(sol, _)| sol.index.pattern.len());
        let Some((sol, field)) = best else {
            return Ok(None);
        };
        let scan = IndexScan::new(
            self.read_source(spec.source.as_ref()),
            sol.index.clone(),
            sol.bounds.clone(),
            true,
        );
        let distinct = Stage::new(DistinctScan::new(scan, field));
        let root = Stage::new(ProjectionCovered::new(distinct, projection, transform));
        Ok(Some(Executor::new(root, spec.deadline)))
    }
}

/// A DISTINCT_SCAN on `field` of the solution's index returns every distinct value when the
/// bounds answer the whole filter, every earlier field is one point (so skipping past a value
/// skips only keys of that value), and no array holds the field. As in MongoDB, a document
/// missing the field is keyed as null, so the scan reports null for it.
fn distinct_scannable(ix: &IndexMeta, sol: &IndexSolution, field: usize) -> bool {
    let points_before = sol.bounds.fields[..field]
        .iter()
        .all(|f| f.intervals.len() == 1 && f.intervals[0].is_point());
    sol.residual.is_empty() && points_before && ix.multikey_components(field).is_empty()
}
