//! `min`/`max` on find: an index scan between two whole keys of the hinted index (min
//! inclusive, max exclusive), with MongoDB's validation of the two key documents.

use super::bounds::KeyRange;
use super::planner_error;
use crate::catalog::IndexMeta;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// Both given documents must name the same fields (51176), checked before planning.
pub fn check_same_fields(min: Option<&Document>, max: Option<&Document>) -> Result<()> {
    if let (Some(a), Some(b)) = (min, max) {
        if !a.keys().eq(b.keys()) {
            return Err(Error::new(
                ErrorCode::Location(51176),
                "min() and max() must have the same field names",
            ));
        }
    }
    Ok(())
}

/// The key range of `min`/`max` on `ix`: each must name the index's fields in key order
/// (51174); a missing side is the index's own end; min must come before max (51175).
pub fn key_range(
    ix: &IndexMeta,
    min: Option<&Document>,
    max: Option<&Document>,
) -> Result<KeyRange> {
    let compatible = |d: &Document| {
        d.len() == ix.pattern.len() && d.keys().zip(ix.pattern.iter()).all(|(k, (p, _))| k == p)
    };
    if !min.into_iter().chain(max).all(compatible) {
        return Err(planner_error(
            ErrorCode::Location(51174),
            "The index chosen is not compatible with min/max",
        ));
    }
    let descending: Vec<bool> = ix.pattern.iter().map(|(_, d)| *d).collect();
    // The first and last possible keys in index order.
    let edge = |first: bool| -> Vec<Bson> {
        descending
            .iter()
            .map(|desc| {
                if first != *desc {
                    Bson::MinKey
                } else {
                    Bson::MaxKey
                }
            })
            .collect()
    };
    let values = |d: &Document| d.values().cloned().collect::<Vec<Bson>>();
    let start = min.map(values).unwrap_or_else(|| edge(true));
    let end = max.map(values).unwrap_or_else(|| edge(false));
    if KeyRange::compare(&start, &end, &descending).is_ge() {
        return Err(planner_error(
            ErrorCode::Location(51175),
            "The value provided for min() does not come before the value provided for max() in the hinted index",
        ));
    }
    Ok(KeyRange { start, end })
}
