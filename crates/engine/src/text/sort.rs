//! `SORT` of a `$text` query's results, where a `{$meta: "textScore"}` field orders by the
//! score (highest first, as MongoDB always sorts it) and other fields as usual. In memory,
//! under the blocking sort memory limit.

use crate::exec::{Member, Stage, StageImpl, StageState, MAX_SORT_MEMORY_BYTES};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::collation::Collation;
use nidus_query::sort::SortPattern;
use std::cmp::Ordering;

enum Field {
    Score,
    Path(SortPattern),
}

pub struct TextSort {
    fields: Vec<Field>,
    spec: Document,
}

impl TextSort {
    pub fn parse(spec: &Document, collation: Option<Collation>) -> Result<TextSort> {
        let mut fields = Vec::new();
        for (k, v) in spec {
            match v {
                Bson::Document(d)
                    if d.len() == 1
                        && matches!(d.get("$meta"), Some(Bson::String(s)) if s == "textScore") =>
                {
                    fields.push(Field::Score)
                }
                _ => {
                    let one = doc! {k.clone(): v.clone()};
                    let p = SortPattern::parse(&one)?.with_collation(collation.clone());
                    if p.natural.is_none() {
                        fields.push(Field::Path(p));
                    }
                }
            }
        }
        Ok(TextSort {
            fields,
            spec: spec.clone(),
        })
    }

    pub fn into_stage(self, child: Stage, limit: u64) -> TextSortStage {
        TextSortStage {
            child: Box::new(child),
            sort: self,
            limit,
            buffered: Vec::new(),
            bytes: 0,
            output: None,
        }
    }

    fn key(&self, m: &Member) -> Result<Vec<Bson>> {
        let doc = m.doc()?;
        Ok(self
            .fields
            .iter()
            .map(|f| match f {
                Field::Score => Bson::Double(m.text_score.unwrap_or(0.0)),
                Field::Path(p) => p.sort_key(doc).pop().unwrap_or(Bson::Null),
            })
            .collect())
    }

    fn compare(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for ((f, x), y) in self.fields.iter().zip(a).zip(b) {
            let o = match f {
                Field::Score => nidus_doc::compare::cmp_bson(y, x),
                Field::Path(p) => p.compare_keys(std::slice::from_ref(x), std::slice::from_ref(y)),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

pub struct TextSortStage {
    child: Box<Stage>,
    sort: TextSort,
    limit: u64,
    buffered: Vec<(Vec<Bson>, usize, Member)>,
    bytes: usize,
    output: Option<std::vec::IntoIter<(Vec<Bson>, usize, Member)>>,
}

impl StageImpl for TextSortStage {
    fn name(&self) -> &'static str {
        "SORT"
    }

    fn work(&mut self) -> Result<StageState> {
        if let Some(out) = &mut self.output {
            return Ok(match out.next() {
                Some((_, _, m)) => StageState::Advanced(m),
                None => StageState::IsEof,
            });
        }
        match self.child.work()? {
            StageState::Advanced(m) => {
                let key = self.sort.key(&m)?;
                self.bytes += m.doc.as_ref().map(|d| d.as_bytes().len()).unwrap_or(0);
                if self.bytes > MAX_SORT_MEMORY_BYTES {
                    return Err(Error::new(
                        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                        "Sort exceeded memory limit of 104857600 bytes, but did not opt in to external sorting.",
                    ));
                }
                let seq = self.buffered.len();
                self.buffered.push((key, seq, m));
                Ok(StageState::NeedTime)
            }
            StageState::NeedTime => Ok(StageState::NeedTime),
            StageState::IsEof => {
                let mut all = std::mem::take(&mut self.buffered);
                all.sort_by(|a, b| self.sort.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
                if self.limit > 0 {
                    all.truncate(self.limit as usize);
                }
                self.output = Some(all.into_iter());
                Ok(StageState::NeedTime)
            }
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("sortPattern", self.sort.spec.clone());
        d.insert("memLimit", MAX_SORT_MEMORY_BYTES as i64);
        if self.limit > 0 {
            d.insert("limitAmount", self.limit as i64);
        }
        d.insert("type", "default");
        d.insert("totalDataSizeSorted", self.bytes as i64);
        d.insert("usedDisk", false);
        d.insert("spills", 0_i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
