//! Plans for explaining `update`, `delete` and `findAndModify`: the write stage MongoDB 8.0's
//! classic engine would run (UPDATE, DELETE, BATCHED_DELETE, or the `_id` express path's
//! EXPRESS_UPDATE/EXPRESS_DELETE) over the read plan, built so that running it counts what
//! the write would do and writes nothing.

use crate::catalog::CollectionRef;
use crate::exec::{
    has_positional, DeleteExplain, Eof, Executor, ExpressIxscan, ExpressWrite, ExpressWriteKind,
    ProjectionStage, ReturnDoc, Stage, UpdateAction, UpdateExplain,
};
use crate::find::FindSpec;
use crate::write::WriteOpts;
use crate::Engine;
use bson::Document;
use nidus_common::Result;
use nidus_query::projection::{Policy, Projection};
use nidus_query::update::Update;
use std::sync::Arc;

/// The write being explained.
pub enum WriteOp {
    Update {
        update: Box<Update>,
        multi: bool,
        upsert: bool,
        returns: ReturnDoc,
    },
    Delete {
        multi: bool,
        return_deleted: bool,
    },
}

/// One write statement to explain: its read part (`filter`, `sort`, `hint`, `collation`,
/// `let_vars`, `deadline` of `find`; limit and projection are ignored) and what it writes.
pub struct WriteExplainSpec {
    pub find: FindSpec,
    pub op: WriteOp,
    /// findAndModify's `fields`: a PROJECTION_DEFAULT over the write stage.
    pub fields: Option<Document>,
}

impl WriteOp {
    fn multi(&self) -> bool {
        match self {
            WriteOp::Update { multi, .. } | WriteOp::Delete { multi, .. } => *multi,
        }
    }
}

impl Engine {
    /// The executor whose run explains the write (None = the collection does not exist:
    /// an EOF plan, as MongoDB shows it, and nothing is created).
    pub fn plan_write_explain(
        &self,
        coll: Option<&CollectionRef>,
        spec: WriteExplainSpec,
    ) -> Result<Executor> {
        let opts = WriteOpts {
            deadline: spec.find.deadline,
            let_vars: spec.find.let_vars.clone(),
            collation: spec.find.collation.clone(),
            ..WriteOpts::default()
        };
        let matcher = Arc::new(opts.filter_matcher(&spec.find.filter)?);
        let fields = match &spec.fields {
            Some(f) if !f.is_empty() => Some((
                Arc::new(Projection::parse_with(
                    f,
                    Policy::Find,
                    &nidus_expr::LetScope::new(spec.find.let_vars.as_ref())?,
                )?),
                f.clone(),
            )),
            _ => None,
        };
        let Some(coll) = coll else {
            return Ok(Executor::new(Stage::new(Eof), spec.find.deadline));
        };
        let sorted = spec.find.sort.as_ref().is_some_and(|s| !s.is_empty());
        let multi = spec.op.multi();
        // MongoDB's `_id` fast paths: an `{_id: <scalar>}` filter without hint or collation
        // on a collection with an `_id` index skips planning (isSimpleIdQuery).
        let id_index = coll.meta.read().indexes.iter().find(|i| i.is_id()).cloned();
        let simple_id = match (&id_index, matcher.id_equality()) {
            (Some(ix), Some(id)) if spec.find.hint.is_none() && spec.find.collation.is_none() => {
                Some((ix.clone(), id))
            }
            _ => None,
        };
        let upsert = matches!(spec.op, WriteOp::Update { upsert: true, .. });
        let positional =
            matches!(&spec.op, WriteOp::Update { update, .. } if has_positional(update));
        if let Some((ix, id)) = &simple_id {
            if fields.is_none() && !upsert && !positional {
                let lookup = ExpressIxscan::new(
                    self.read_source(None),
                    coll.records,
                    ix.clone(),
                    id.clone(),
                );
                let kind = match spec.op {
                    WriteOp::Update {
                        update, returns, ..
                    } => ExpressWriteKind::Update(Box::new(UpdateAction {
                        matcher,
                        update: *update,
                        returns,
                    })),
                    WriteOp::Delete { return_deleted, .. } => {
                        ExpressWriteKind::Delete { return_deleted }
                    }
                };
                return Ok(Executor::new(
                    Stage::new(ExpressWrite::new(lookup, kind)),
                    spec.find.deadline,
                ));
            }
        }
        let mut exec = match simple_id {
            Some((ix, id)) => Executor::new(
                Stage::new(ExpressIxscan::idhack(
                    self.read_source(None),
                    coll.records,
                    ix,
                    id,
                )),
                spec.find.deadline,
            ),
            None => {
                // A single-document write with a sort keeps only the first result: the limit
                // goes to the SORT (top-k), as MongoDB passes it; otherwise the write stage
                // itself stops after its first document.
                let find = FindSpec {
                    limit: u64::from(!multi && sorted),
                    skip: 0,
                    projection: None,
                    explain: true,
                    ..spec.find.clone()
                };
                self.plan_find(Some(coll), &find)?
            }
        };
        let filter = spec.find.filter.clone();
        exec.wrap_root(|root, pending| match spec.op {
            WriteOp::Update {
                update,
                multi,
                upsert,
                returns,
            } => Stage::new(UpdateExplain::new(
                root,
                pending,
                UpdateAction {
                    matcher,
                    update: *update,
                    returns,
                },
                multi,
                upsert.then_some(filter),
            )),
            WriteOp::Delete {
                multi,
                return_deleted,
            } => Stage::new(DeleteExplain::new(
                root,
                pending,
                multi,
                return_deleted,
                sorted,
            )),
        });
        if let Some((p, doc)) = fields {
            // findAndModify always projects with PROJECTION_DEFAULT.
            exec.wrap_root(|root, _| Stage::new(ProjectionStage::new(root, p, doc, false)));
        }
        Ok(exec)
    }
}
