use super::{Member, RecordIdDedup, Stage, StageImpl, StageState};
use bson::{Bson, Document};
use nidus_common::Result;
use nidus_query::sort::SortPattern;
use std::collections::VecDeque;

/// `SORT_MERGE`: merges children that each return results in sort order (the index scans of
/// an exploded `$in`/`$or`), dropping record ids already returned. As MongoDB's
/// MergeSortStage, each work either pulls one result from a child that has none waiting
/// (NEED_TIME) or, once every live child has one waiting, returns the smallest.
pub struct SortMerge {
    children: Vec<Stage>,
    pattern: SortPattern,
    pattern_doc: Document,
    /// Children with no result waiting, in the order they will be worked.
    no_result: VecDeque<usize>,
    /// One waiting result per child at most: (sort key, child, result).
    waiting: Vec<(Vec<Bson>, usize, Member)>,
    dedup: RecordIdDedup,
}

impl SortMerge {
    pub fn new(children: Vec<Stage>, pattern: SortPattern, pattern_doc: Document) -> SortMerge {
        SortMerge {
            no_result: (0..children.len()).collect(),
            children,
            pattern,
            pattern_doc,
            waiting: Vec::new(),
            dedup: RecordIdDedup::default(),
        }
    }

    /// The sort key of a result: from its index key when that holds every sort path, else
    /// from its document.
    fn sort_key(&self, m: &Member) -> Result<Vec<Bson>> {
        if let Some(key) = &m.key {
            let values: Option<Vec<Bson>> = self
                .pattern
                .fields
                .iter()
                .map(|f| key.value_of(f.path.as_str()).cloned())
                .collect();
            if let Some(v) = values {
                return Ok(v);
            }
        }
        Ok(self.pattern.sort_key(&m.doc_or_key()?))
    }

    /// Works the next child that has no result waiting.
    fn fill(&mut self, child: usize) -> Result<StageState> {
        match self.children[child].work()? {
            StageState::Advanced(m) => {
                if let Some(rid) = m.rid {
                    if !self.dedup.first_time(rid) {
                        return Ok(StageState::NeedTime);
                    }
                }
                let key = self.sort_key(&m)?;
                self.waiting.push((key, child, m));
                self.no_result.pop_front();
            }
            StageState::IsEof => {
                self.no_result.pop_front();
            }
            StageState::NeedTime => {}
        }
        Ok(StageState::NeedTime)
    }
}

impl StageImpl for SortMerge {
    fn name(&self) -> &'static str {
        "SORT_MERGE"
    }

    fn work(&mut self) -> Result<StageState> {
        if let Some(&child) = self.no_result.front() {
            return self.fill(child);
        }
        // Ties go to the earlier child, so equal keys come out in a fixed order.
        let best = (0..self.waiting.len()).min_by(|&a, &b| {
            let (ka, ca, _) = &self.waiting[a];
            let (kb, cb, _) = &self.waiting[b];
            self.pattern.compare_keys(ka, kb).then(ca.cmp(cb))
        });
        let Some(best) = best else {
            return Ok(StageState::IsEof);
        };
        let (_, child, m) = self.waiting.swap_remove(best);
        self.no_result.push_back(child);
        Ok(StageState::Advanced(m))
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("sortPattern", self.pattern_doc.clone());
        self.dedup.add_stats(&mut d);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        self.children.iter().collect()
    }
}
