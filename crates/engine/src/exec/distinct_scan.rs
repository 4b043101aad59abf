use super::{IndexScan, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;

/// `DISTINCT_SCAN`: an index scan that returns one key per distinct value of a key field,
/// seeking past the other keys with that value (`distinct` over an indexed field).
pub struct DistinctScan {
    scan: IndexScan,
}

impl DistinctScan {
    /// `field`: the position of the distinct key in the key pattern.
    pub fn new(scan: IndexScan, field: usize) -> DistinctScan {
        DistinctScan {
            scan: scan.distinct_on(field),
        }
    }
}

impl StageImpl for DistinctScan {
    fn name(&self) -> &'static str {
        "DISTINCT_SCAN"
    }

    fn work(&mut self) -> Result<StageState> {
        self.scan.work()
    }

    fn specific_stats(&self) -> Document {
        let mut d = self.scan.specific_stats();
        d.remove("dupsTested");
        d.remove("dupsDropped");
        d
    }
}
