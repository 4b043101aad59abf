//! Turns a find request into a plan. For now: the `_id` express path, collection scans, and
//! SORT / SKIP / LIMIT / PROJECTION above them; index selection arrives with the planner.

use crate::catalog::CollectionRef;
use crate::exec::{
    CollScan, Eof, Executor, ExpressIxscan, Limit, ProjectionStage, Skip, Sort, Stage,
};
use crate::Engine;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use nidus_query::projection::Projection;
use nidus_query::sort::SortPattern;
use std::sync::Arc;
use std::time::Instant;

/// What `find`, `count`, `distinct`, `update` and `delete` ask of the read path.
#[derive(Debug, Clone, Default)]
pub struct FindSpec {
    pub filter: Document,
    pub sort: Option<Document>,
    pub projection: Option<Document>,
    pub skip: u64,
    /// 0 = no limit.
    pub limit: u64,
    pub hint: Option<Bson>,
    pub deadline: Option<Instant>,
}

/// Natural order requested through `sort` or `hint` (`{$natural: -1}`).
fn natural_direction(d: &Document) -> Option<bool> {
    match d.get("$natural")? {
        Bson::Int32(n) => Some(*n >= 0),
        Bson::Int64(n) => Some(*n >= 0),
        Bson::Double(n) => Some(*n >= 0.0),
        _ => None,
    }
}

impl Engine {
    /// Builds the executor for a query over `coll` (None = the collection does not exist).
    pub fn plan_find(&self, coll: Option<&CollectionRef>, spec: &FindSpec) -> Result<Executor> {
        let matcher = Arc::new(Matcher::parse(&spec.filter)?);
        let sort_spec = spec.sort.as_ref().filter(|s| !s.is_empty());
        let natural_sort = sort_spec.and_then(natural_direction);
        let pattern = match sort_spec {
            Some(s) if natural_sort.is_none() => Some(SortPattern::parse(s)?),
            _ => None,
        };
        let projection = match &spec.projection {
            Some(p) if !p.is_empty() => Some(Arc::new(Projection::parse(p)?)),
            _ => None,
        };
        let Some(coll) = coll else {
            return Ok(Executor::new(Stage::new(Eof), spec.deadline));
        };
        let mut stage = self.access_stage(coll, spec, &matcher, natural_sort, pattern.is_some())?;
        if let (Some(p), Some(doc)) = (pattern, sort_spec) {
            let top_k = if spec.limit > 0 {
                spec.limit.saturating_add(spec.skip)
            } else {
                0
            };
            stage = Stage::new(Sort::new(stage, p, doc.clone(), top_k));
        }
        if spec.skip > 0 {
            stage = Stage::new(Skip::new(stage, spec.skip));
        }
        if spec.limit > 0 {
            stage = Stage::new(Limit::new(stage, spec.limit));
        }
        if let (Some(p), Some(doc)) = (projection, &spec.projection) {
            stage = Stage::new(ProjectionStage::new(stage, p, doc.clone()));
        }
        Ok(Executor::new(stage, spec.deadline))
    }

    fn access_stage(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        matcher: &Arc<Matcher>,
        natural_sort: Option<bool>,
        sorted: bool,
    ) -> Result<Stage> {
        let meta = coll.meta.read();
        let hinted_natural = match &spec.hint {
            Some(Bson::Document(h)) if h.contains_key("$natural") => natural_direction(h),
            Some(h) => {
                self.check_hint(&meta.indexes, h)?;
                None
            }
            None => None,
        };
        if spec.hint.is_none() && natural_sort.is_none() && !sorted {
            if let Some(id) = matcher.id_equality() {
                if let Some(ix) = meta.indexes.iter().find(|i| i.is_id()) {
                    return Ok(Stage::new(ExpressIxscan::new(
                        self.kv_arc(),
                        coll.id,
                        ix.clone(),
                        id,
                    )));
                }
            }
        }
        let forward = hinted_natural.or(natural_sort).unwrap_or(true);
        let filter = (!spec.filter.is_empty()).then(|| (matcher.clone(), spec.filter.clone()));
        Ok(Stage::new(CollScan::new(
            self.kv_arc(),
            coll.id,
            forward,
            filter,
        )))
    }

    /// A hint must name an existing index (by name or key pattern).
    fn check_hint(&self, indexes: &[crate::catalog::IndexMeta], hint: &Bson) -> Result<()> {
        let found = match hint {
            Bson::String(name) => indexes.iter().any(|i| &i.name == name),
            Bson::Document(key) => indexes.iter().any(|i| &i.key_document() == key),
            _ => false,
        };
        if found {
            Ok(())
        } else {
            Err(Error::new(
                ErrorCode::BadValue,
                "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index",
            ))
        }
    }
}
