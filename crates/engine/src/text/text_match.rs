//! `TEXT_MATCH`: keeps the documents that satisfy the text query beyond its index scans
//! (phrases, negated terms and phrases, case- and diacritic-sensitive terms).

use crate::exec::{Stage, StageImpl, StageState};
use bson::{doc, Document};
use nidus_common::Result;
use nidus_doc::text::{TextQuery, TextSpec};
use std::sync::Arc;

pub struct TextMatch {
    child: Box<Stage>,
    query: TextQuery,
    spec: Arc<TextSpec>,
    index_name: String,
    index_prefix: Document,
    docs_rejected: i64,
}

impl TextMatch {
    pub fn new(
        child: Stage,
        query: TextQuery,
        spec: Arc<TextSpec>,
        index_name: String,
        index_prefix: Document,
    ) -> TextMatch {
        TextMatch {
            child: Box::new(child),
            query,
            spec,
            index_name,
            index_prefix,
            docs_rejected: 0,
        }
    }
}

impl StageImpl for TextMatch {
    fn name(&self) -> &'static str {
        "TEXT_MATCH"
    }

    fn work(&mut self) -> Result<StageState> {
        match self.child.work()? {
            StageState::Advanced(m) => {
                if self.query.matches(&self.spec, m.doc()?)? {
                    Ok(StageState::Advanced(m))
                } else {
                    self.docs_rejected += 1;
                    Ok(StageState::NeedTime)
                }
            }
            other => Ok(other),
        }
    }

    fn specific_stats(&self) -> Document {
        doc! {
            "indexPrefix": self.index_prefix.clone(),
            "indexName": self.index_name.clone(),
            "parsedTextQuery": self.query.to_document(),
            "textIndexVersion": 3,
            "docsRejected": self.docs_rejected,
        }
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
