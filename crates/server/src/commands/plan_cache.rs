//! `planCacheClear`: drops a collection's plan cache entries, or those of one query shape.

use super::find::check_fields;
use super::Ctx;
use bson::{doc, Document};
use nidus_common::{Error, Result};
use nidus_engine::plan::cache::CacheKey;
use nidus_query::matcher::Matcher;

const FIELDS: &[&str] = &["planCacheClear", "query", "sort", "projection", "collation"];

pub fn plan_cache_clear(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, FIELDS)?;
    let ns = ctx.namespace("planCacheClear")?;
    let query = ctx.opt_document("query")?;
    let sort = ctx.opt_document("sort")?;
    let projection = ctx.opt_document("projection")?;
    if query.is_none() && (sort.is_some() || projection.is_some()) {
        return Err(Error::bad_value(
            "sort or projection provided without query",
        ));
    }
    let shape = match &query {
        Some(q) => {
            let canonical = Matcher::parse(q)?.canonical_document();
            let non_empty = |d: &Option<Document>| d.as_ref().filter(|d| !d.is_empty()).cloned();
            let key = CacheKey::new(
                &canonical,
                non_empty(&sort).as_ref(),
                non_empty(&projection).as_ref(),
                &[],
            );
            Some(key.shape_hash)
        }
        None => None,
    };
    if let Some(coll) = ctx.state.engine.collection(&ns) {
        coll.plan_cache.clear(shape.as_deref());
    }
    Ok(doc! {})
}
