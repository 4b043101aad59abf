use super::{IndexScan, Stage, StageImpl, StageState};
use crate::catalog::IndexMeta;
use crate::plan::bounds::IndexBounds;
use crate::txn::ReadSource;
use bson::Document;
use nidus_common::Result;

/// `COUNT_SCAN`: counts the keys between a start key and an end key of one index (a count
/// whose filter the index answers as a single interval), without fetching documents or
/// keeping key values. It reads keys as IXSCAN does and reports its bounds as MongoDB
/// prints a count scan's: `{startKey, startKeyInclusive, endKey, endKeyInclusive}`.
pub struct CountScan {
    scan: IndexScan,
    bounds: Document,
}

impl CountScan {
    /// `bounds` must be a single interval (points, then at most one range, then all values).
    pub fn new(src: ReadSource, index: IndexMeta, bounds: IndexBounds) -> CountScan {
        let printed = key_range_document(&index, &bounds);
        CountScan {
            scan: IndexScan::new(src, index, bounds, true),
            bounds: printed,
        }
    }
}

/// The start and end keys of single-interval bounds, named by the key pattern.
fn key_range_document(index: &IndexMeta, bounds: &IndexBounds) -> Document {
    let mut start = Document::new();
    let mut end = Document::new();
    let (mut start_inclusive, mut end_inclusive) = (true, true);
    for ((path, _), field) in index.pattern.iter().zip(&bounds.fields) {
        let Some(iv) = field.intervals.first() else {
            continue;
        };
        start.insert(path.clone(), iv.start.clone());
        end.insert(path.clone(), iv.end.clone());
        if !iv.is_point() {
            start_inclusive &= iv.start_inclusive;
            end_inclusive &= iv.end_inclusive;
        }
    }
    let mut d = Document::new();
    d.insert("startKey", start);
    d.insert("startKeyInclusive", start_inclusive);
    d.insert("endKey", end);
    d.insert("endKeyInclusive", end_inclusive);
    d
}

impl StageImpl for CountScan {
    fn name(&self) -> &'static str {
        "COUNT_SCAN"
    }

    fn work(&mut self) -> Result<StageState> {
        Ok(match self.scan.work()? {
            StageState::Advanced(mut m) => {
                m.key = None;
                StageState::Advanced(m)
            }
            other => other,
        })
    }

    fn specific_stats(&self) -> Document {
        let scan = self.scan.specific_stats();
        let mut d = self.scan.index().explain_fields();
        d.insert("indexBounds", self.bounds.clone());
        for k in ["keysExamined", "dupsTested", "dupsDropped"] {
            if let Some(v) = scan.get(k) {
                d.insert(k, v.clone());
            }
        }
        d
    }

    fn children(&self) -> Vec<&Stage> {
        Vec::new()
    }
}
