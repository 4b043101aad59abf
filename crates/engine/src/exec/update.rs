use super::{Member, Stage, StageImpl, StageState};
use bson::{oid::ObjectId, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use nidus_query::update::{Update, UpdateContext};
use std::collections::VecDeque;
use std::sync::Arc;

/// Which document a write stage hands back (findAndModify's `new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnDoc {
    None,
    Old,
    New,
}

/// What an update would do to one document, computed without writing it.
pub struct UpdateAction {
    pub matcher: Arc<Matcher>,
    pub update: Update,
    pub returns: ReturnDoc,
}

/// The outcome of applying an update to a copy of one document.
pub struct WouldUpdate {
    pub modified: bool,
    /// The document to return, per [`ReturnDoc`].
    pub returned: Option<Member>,
}

impl UpdateAction {
    /// Applies the update to a copy of the member's document (None when it no longer
    /// matches); errors the real update would raise (a changed `_id`, a bad operand) surface.
    pub fn apply(&self, m: &Member) -> Result<Option<WouldUpdate>> {
        let raw = m.doc()?;
        let Some(position) = self.matcher.matches_with_position(raw)? else {
            return Ok(None);
        };
        let old = raw
            .to_document()
            .map_err(|e| Error::internal(e.to_string()))?;
        let mut new = old.clone();
        let ctx = UpdateContext {
            matched_array_index: position,
            ..UpdateContext::default()
        };
        let modified = self.update.apply(&mut new, &ctx)?;
        if modified && new.get("_id") != old.get("_id") {
            return Err(Error::new(
                ErrorCode::ImmutableField,
                "Performing an update on the path '_id' would modify the immutable field '_id'",
            ));
        }
        let returned = match self.returns {
            ReturnDoc::None => None,
            ReturnDoc::Old => Some(Member::with_doc(m.rid, raw.clone())),
            ReturnDoc::New => Some(Member::with_doc(m.rid, to_raw(&new)?)),
        };
        Ok(Some(WouldUpdate { modified, returned }))
    }
}

fn to_raw(d: &Document) -> Result<RawDocumentBuf> {
    nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))
}

/// `UPDATE` as explain runs it: updates each document its child returns (one unless
/// `multi`) on a copy and counts what would change; nothing is written. With `upsert` and no
/// match it builds the document the upsert would insert (MongoDB's UpsertStage, also named
/// UPDATE).
pub struct UpdateExplain {
    child: Box<Stage>,
    /// Results the multi-planner's trial already produced, consumed before the child.
    pending: VecDeque<Member>,
    action: UpdateAction,
    multi: bool,
    /// The filter an upsert seeds its document from, when upserting.
    upsert: Option<Document>,
    n_matched: i64,
    n_modified: i64,
    n_upserted: i64,
}

impl UpdateExplain {
    pub fn new(
        child: Stage,
        pending: VecDeque<Member>,
        action: UpdateAction,
        multi: bool,
        upsert: Option<Document>,
    ) -> UpdateExplain {
        UpdateExplain {
            child: Box::new(child),
            pending,
            action,
            multi,
            upsert,
            n_matched: 0,
            n_modified: 0,
            n_upserted: 0,
        }
    }

    fn done_updating(&self) -> bool {
        (self.pending.is_empty() && self.child.common.is_eof) || (self.n_matched > 0 && !self.multi)
    }

    fn finished(&self) -> bool {
        self.done_updating() && (self.upsert.is_none() || self.n_matched > 0 || self.n_upserted > 0)
    }

    /// The end of the input: an upsert with no match would insert now.
    fn end(&mut self) -> Result<StageState> {
        let Some(filter) = &self.upsert else {
            return Ok(StageState::IsEof);
        };
        if self.n_matched > 0 || self.n_upserted > 0 {
            return Ok(StageState::IsEof);
        }
        self.n_upserted = 1;
        let mut doc = self
            .action
            .update
            .upsert_document(filter, &UpdateContext::default())?;
        if !doc.contains_key("_id") {
            let mut with_id = bson::doc! { "_id": ObjectId::new() };
            with_id.extend(doc);
            doc = with_id;
        }
        if self.action.returns == ReturnDoc::New {
            return Ok(StageState::Advanced(Member::with_doc(None, to_raw(&doc)?)));
        }
        Ok(StageState::IsEof)
    }
}

impl StageImpl for UpdateExplain {
    fn name(&self) -> &'static str {
        "UPDATE"
    }

    fn work(&mut self) -> Result<StageState> {
        if self.finished() {
            return Ok(StageState::IsEof);
        }
        if self.done_updating() {
            return self.end();
        }
        let m = match self.pending.pop_front() {
            Some(m) => m,
            None => match self.child.work()? {
                StageState::Advanced(m) => m,
                StageState::NeedTime => return Ok(StageState::NeedTime),
                StageState::IsEof => return self.end(),
            },
        };
        let Some(would) = self.action.apply(&m)? else {
            return Ok(StageState::NeedTime);
        };
        self.n_matched += 1;
        self.n_modified += i64::from(would.modified);
        Ok(match would.returned {
            Some(r) => StageState::Advanced(r),
            None => StageState::NeedTime,
        })
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("nMatched", self.n_matched);
        d.insert("nWouldModify", self.n_modified);
        d.insert("nWouldUpsert", self.n_upserted);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}

/// Whether the update uses the positional `$` (MongoDB then needs the query's match
/// details, which the `_id` express path does not keep).
pub fn has_positional(update: &Update) -> bool {
    match update {
        Update::Operators(u) => u
            .paths()
            .iter()
            .any(|p| p.split('.').any(|part| part == "$")),
        _ => false,
    }
}
