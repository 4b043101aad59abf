//! `planCacheClear`: drops a collection's plan cache entries, or those of one query shape;
//! the index filter commands (`planCacheSetFilter`, `planCacheListFilters`,
//! `planCacheClearFilters`).

use super::find::check_fields;
use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::{Error, Result};
use nidus_engine::plan::cache::{filter_shape, CacheKey, IndexFilter};
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
                ctx.opt_document("collation")?.as_ref(),
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

/// The query shape of an index filter command: `query` (required), `sort`, `projection`,
/// `collation`, checked as MongoDB's `plan_cache_commands::canonicalize`.
struct FilterShape {
    query: Document,
    sort: Document,
    projection: Document,
    collation: Option<Document>,
}

impl FilterShape {
    fn parse(ctx: &Ctx) -> Result<FilterShape> {
        let query = match ctx.body.get("query") {
            None => return Err(Error::bad_value("required field query missing")),
            Some(Bson::Document(d)) => d.clone(),
            Some(_) => return Err(Error::bad_value("required field query must be an object")),
        };
        let optional = |field: &str| match ctx.body.get(field) {
            None => Ok(None),
            Some(Bson::Document(d)) => Ok(Some(d.clone())),
            Some(_) => Err(Error::bad_value(format!(
                "optional field {field} must be an object"
            ))),
        };
        let sort = optional("sort")?.unwrap_or_default();
        let projection = optional("projection")?.unwrap_or_default();
        let collation = optional("collation")?;
        Ok(FilterShape {
            query,
            sort,
            projection,
            collation,
        })
    }

    /// The shape key the planner looks filters up by, and the plan cache shape hash.
    fn keys(&self) -> Result<(String, String)> {
        let collation = nidus_engine::find::parse_collation(self.collation.as_ref())?;
        // Parsed as a find parses it, so the canonical form is the planner's.
        nidus_query::projection::Projection::parse_with(
            &self.projection,
            nidus_query::projection::Policy::Find,
            &nidus_expr::LetScope::new(None)?,
        )?;
        let opts = nidus_query::matcher::ParseOptions {
            collation: collation.as_ref(),
            ..Default::default()
        };
        let canonical = Matcher::parse_with(&self.query, &opts)?.canonical_document();
        let non_empty = |d: &Document| (!d.is_empty()).then(|| d.clone());
        let shape = filter_shape(
            &canonical,
            non_empty(&self.sort).as_ref(),
            non_empty(&self.projection).as_ref(),
            self.collation.as_ref(),
        );
        let hash = CacheKey::new(
            &canonical,
            non_empty(&self.sort).as_ref(),
            non_empty(&self.projection).as_ref(),
            self.collation.as_ref(),
            &[],
        )
        .shape_hash;
        Ok((shape, hash))
    }
}

/// `planCacheSetFilter`: the indexes (key patterns or names) the planner may use for one
/// query shape, replacing any earlier filter of that shape.
pub fn plan_cache_set_filter(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("planCacheSetFilter")?;
    let coll = ctx
        .state
        .engine
        .collection(&ns)
        .ok_or_else(|| Error::bad_value("no such collection"))?;
    let indexes = match ctx.body.get("indexes") {
        None => return Err(Error::bad_value("required field indexes missing")),
        Some(Bson::Array(a)) => a.clone(),
        Some(_) => return Err(Error::bad_value("required field indexes must be an array")),
    };
    if indexes.is_empty() {
        return Err(Error::bad_value(
            "required field indexes must contain at least one index",
        ));
    }
    let (mut key_patterns, mut names) = (Vec::<Document>::new(), Vec::<String>::new());
    for ix in indexes {
        match ix {
            Bson::Document(d) if d.is_empty() => {
                return Err(Error::bad_value("index specification cannot be empty"))
            }
            Bson::Document(d) => {
                if !key_patterns.contains(&d) {
                    key_patterns.push(d);
                }
            }
            Bson::String(s) => {
                if !names.contains(&s) {
                    names.push(s);
                }
            }
            _ => {
                return Err(Error::bad_value(
                    "each item in indexes must be an object or string",
                ))
            }
        }
    }
    let shape = FilterShape::parse(ctx)?;
    let (key, shape_hash) = shape.keys()?;
    coll.plan_cache.set_filter(IndexFilter {
        shape: key,
        shape_hash,
        query: shape.query,
        sort: shape.sort,
        projection: shape.projection,
        collation: shape.collation,
        key_patterns,
        names,
    });
    Ok(doc! {})
}

/// `planCacheListFilters`: `{filters: [{query, sort, projection, [collation], indexes}]}`.
pub fn plan_cache_list_filters(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("planCacheListFilters")?;
    let filters: Vec<Bson> = ctx
        .state
        .engine
        .collection(&ns)
        .map(|c| {
            c.plan_cache
                .list_filters()
                .iter()
                .map(|f| Bson::Document(f.list_document()))
                .collect()
        })
        .unwrap_or_default();
    Ok(doc! { "filters": filters })
}

/// `planCacheClearFilters`: the filter of one query shape, or every filter of the collection.
pub fn plan_cache_clear_filters(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("planCacheClearFilters")?;
    let Some(coll) = ctx.state.engine.collection(&ns) else {
        return Ok(doc! {});
    };
    if ctx.body.contains_key("query") {
        let (key, _) = FilterShape::parse(ctx)?.keys()?;
        coll.plan_cache.clear_filters(Some(&key));
        return Ok(doc! {});
    }
    if ["sort", "projection", "collation"]
        .iter()
        .any(|f| ctx.body.contains_key(*f))
    {
        return Err(Error::bad_value(
            "sort, projection, or collation provided without query",
        ));
    }
    coll.plan_cache.clear_filters(None);
    Ok(doc! {})
}
