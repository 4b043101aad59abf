use super::{Member, Stage, StageImpl, StageState};
use crate::catalog::IndexMeta;
use bson::Document;
use nidus_common::Result;
use nidus_query::matcher::geo::NearQuery;
use std::collections::VecDeque;

/// `GEO_NEAR_2DSPHERE`: reads every document its child (FETCH over the 2dsphere index's cells
/// within `$maxDistance`) returns, measures the distance from the query point to the nearest
/// geometry at the geo path, keeps those within `$minDistance`/`$maxDistance` and returns
/// them nearest first (ties in the child's order). Over a 2d index it is `GEO_NEAR_2D`.
pub struct GeoNear2dSphere {
    child: Box<Stage>,
    flat: bool,
    near: NearQuery,
    path: String,
    index: IndexMeta,
    pending: Vec<(f64, Member)>,
    buffered: Option<VecDeque<(f64, Member)>>,
}

impl GeoNear2dSphere {
    pub fn new(child: Stage, near: NearQuery, path: String, index: IndexMeta) -> GeoNear2dSphere {
        GeoNear2dSphere {
            child: Box::new(child),
            flat: index.twod.is_some(),
            near,
            path,
            index,
            pending: Vec::new(),
            buffered: None,
        }
    }
}

/// The distance from the query point to the nearest geometry at `path` in `doc`, if any.
pub fn nearest_distance(
    near: &NearQuery,
    doc: &bson::RawDocument,
    path: &str,
) -> Option<(f64, bson::Bson)> {
    crate::geo_keys::geometries_at(doc, path)
        .into_iter()
        .map(|(v, g)| (near.distance(&g), v))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

impl StageImpl for GeoNear2dSphere {
    fn name(&self) -> &'static str {
        if self.flat {
            "GEO_NEAR_2D"
        } else {
            "GEO_NEAR_2DSPHERE"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        if self.buffered.is_none() {
            match self.child.work()? {
                StageState::Advanced(m) => {
                    if let Some((d, _)) = nearest_distance(&self.near, m.doc()?, &self.path) {
                        if self.near.in_range(d) {
                            self.pending.push((d, m));
                        }
                    }
                    return Ok(StageState::NeedTime);
                }
                StageState::NeedTime => return Ok(StageState::NeedTime),
                StageState::IsEof => {
                    let mut all = std::mem::take(&mut self.pending);
                    all.sort_by(|a, b| a.0.total_cmp(&b.0));
                    self.buffered = Some(all.into());
                }
            }
        }
        match self.buffered.as_mut().and_then(VecDeque::pop_front) {
            Some((_, m)) => Ok(StageState::Advanced(m)),
            None => Ok(StageState::IsEof),
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("keyPattern", self.index.key_document());
        d.insert("indexName", self.index.name.clone());
        d.insert("indexVersion", self.index.spec.get_i32("v").unwrap_or(2));
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
