//! What stages share: at parse time the variables in scope ([`ParseCtx`]), at run time the
//! engine, the variable values, the deadline and the memory rules ([`ExpCtx`], MongoDB's
//! ExpressionContext).

use crate::Engine;
use bson::{Bson, DateTime, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::{Bind, ParseContext, Value, VarId, Variables};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A blocking stage (`$group`, `$sort`, `$bucketAuto`, ...) may hold this much without
/// `allowDiskUse` (MongoDB's 100 MiB per stage).
pub const MAX_BLOCKING_STAGE_BYTES: usize = 100 * 1024 * 1024;

/// The largest document a stage may produce (`BSONObjMaxUserSize`).
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// How deeply `$lookup` and `$unionWith` sub-pipelines may nest, views' pipelines included:
/// MongoDB's `internalMaxSubPipelineViewDepth` (default 20, a server-wide parameter the
/// server sets with [`set_max_sub_pipeline_depth`]).
static MAX_SUB_PIPELINE_DEPTH: AtomicUsize = AtomicUsize::new(20);

/// Sets `internalMaxSubPipelineViewDepth` (at start-up and by `setParameter`).
pub fn set_max_sub_pipeline_depth(n: usize) {
    MAX_SUB_PIPELINE_DEPTH.store(n, Ordering::Relaxed);
}

/// A user variable: its name, its slot, and (at run time) its value.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub id: VarId,
    pub value: Value,
}

/// Parse-time state: the expression parser's scope plus the user variables visible to the
/// stage being parsed and the values already known (the command's `let`).
pub struct ParseCtx {
    pub exprs: ParseContext,
    /// Variables in scope, innermost last; `value` is set when known at parse time.
    scope: RefCell<Vec<Binding>>,
    /// The database the command runs in (`$lookup`'s `from` is relative to it).
    pub db: String,
    /// How many `$lookup`/`$unionWith` sub-pipelines enclose the one being parsed.
    depth: Cell<usize>,
    /// Resolves views named by sub-pipelines, so their pipelines count towards the depth
    /// (None where no engine is at hand, e.g. when a view definition is validated).
    views: Option<Arc<Engine>>,
}

impl ParseCtx {
    pub fn new(db: &str) -> ParseCtx {
        ParseCtx {
            exprs: ParseContext::new(),
            scope: RefCell::new(Vec::new()),
            db: db.to_string(),
            depth: Cell::new(0),
            views: None,
        }
    }

    /// This context, resolving the views that `$lookup`/`$unionWith` read from at parse
    /// time (their pipelines count towards the sub-pipeline depth).
    pub fn with_views(mut self, engine: Arc<Engine>) -> ParseCtx {
        self.views = Some(engine);
        self
    }

    /// Parses the sub-pipeline of a `$lookup` or `$unionWith` reading `from`, one level
    /// deeper than this one. MongoDB gives each such stage an expression context one level
    /// deeper than its parent's and refuses a 21st level with MaxSubPipelineDepthExceeded
    /// (232) "Maximum number of nested sub-pipelines exceeded. Limit is 20" (source:
    /// `makeCopyForSubPipelineFromExpressionContext` in mongo's expression_context.cpp and
    /// jstests/aggregation/sources/lookup/max_subpipeline_depth.js: 20 nested levels run,
    /// 21 fail). The stage counts whether or not it has a `pipeline`; `$facet` shares its
    /// parent's context and does not count. When `from` is a view, the view's own pipeline
    /// is parsed at the new level too (its `$lookup`s nest further), as MongoDB resolves
    /// views into the sub-pipeline.
    pub fn parse_sub_pipeline(
        &self,
        from: Option<&crate::namespace::Namespace>,
        items: &[Bson],
    ) -> Result<Vec<super::StageRef>> {
        let depth = self.depth.get();
        let max = MAX_SUB_PIPELINE_DEPTH.load(Ordering::Relaxed);
        if depth >= max {
            return Err(Error::new(
                ErrorCode::MaxSubPipelineDepthExceeded,
                format!("Maximum number of nested sub-pipelines exceeded. Limit is {max}"),
            ));
        }
        self.depth.set(depth + 1);
        let parsed = self
            .check_view_depth(from)
            .and_then(|()| super::parse_pipeline(items, self));
        self.depth.set(depth);
        parsed
    }

    /// Parses the pipeline of the view `from` (if it is one) at this context's depth, for
    /// the depth check only: the stage resolves the view again when it runs.
    fn check_view_depth(&self, from: Option<&crate::namespace::Namespace>) -> Result<()> {
        let (Some(engine), Some(from)) = (&self.views, from) else {
            return Ok(());
        };
        let Some(view) = engine.resolve_view(from)? else {
            return Ok(());
        };
        let inner = ParseCtx::new(&view.ns.db).with_views(engine.clone());
        inner.depth.set(self.depth.get());
        let docs: Vec<Bson> = view.pipeline.into_iter().map(Bson::Document).collect();
        super::parse_pipeline(&docs, &inner).map(|_| ())
    }

    /// Defines a variable (`let`); `value` when it is known now.
    pub fn define(&self, name: &str, value: Option<Value>) -> Result<VarId> {
        let id = self.exprs.define_variable(name)?;
        self.scope.borrow_mut().push(Binding {
            name: name.to_string(),
            id,
            value: value.unwrap_or(None),
        });
        Ok(id)
    }

    /// Defines the command's `let` variables: each expression is evaluated once (it may use
    /// `$$NOW` and the variables before it, not document fields).
    pub fn define_command_let(&self, lets: &Document, exp: &ExpCtx) -> Result<()> {
        for (name, e) in lets {
            let expr = nidus_expr::Expression::parse(e, &self.exprs)?;
            let known = exp.clone().with_bindings(self);
            let value = known.evaluate(&expr, &Document::new())?;
            self.define(name, Some(value))?;
        }
        Ok(())
    }

    /// The variables in scope (for binding them into `$match` filters).
    pub fn bindings(&self) -> Vec<Binding> {
        self.scope.borrow().clone()
    }

    /// The scope depth of both the bindings and the expression parser.
    pub(crate) fn mark(&self) -> (usize, usize) {
        (self.scope.borrow().len(), self.exprs.mark())
    }

    /// Ends a scope: its variables are no longer visible to what is parsed next.
    pub(crate) fn restore(&self, mark: (usize, usize)) {
        self.scope.borrow_mut().truncate(mark.0);
        self.exprs.restore(mark.1);
    }
}

/// The deadline of the operation (`maxTimeMS`), shared by every stream of one pipeline and
/// reset by each `getMore`.
#[derive(Default)]
struct Interrupt {
    deadline: Mutex<Option<Instant>>,
    ticks: AtomicU32,
}

/// Run-time state every stage sees.
#[derive(Clone)]
pub struct ExpCtx {
    pub engine: Arc<Engine>,
    pub db: String,
    pub allow_disk_use: bool,
    /// `$$NOW`: one value for the whole command.
    pub now: DateTime,
    /// The user variables and their values.
    pub bindings: Vec<Binding>,
    /// The collection the pipeline reads (None for `aggregate: 1`).
    pub namespace: Option<crate::namespace::Namespace>,
    /// Where the pipeline reads: a transaction or a snapshot (None: the latest data).
    pub source: Option<crate::txn::ReadSource>,
    /// The server's sessions, for a pipeline starting with `$listLocalSessions`.
    pub local_sessions: Option<Arc<Vec<bson::Document>>>,
    /// `internalQueryMaxBlockingSortMemoryUsageBytes`: what `$sort` holds before spilling.
    pub sort_max_memory: usize,
    /// `internalDocumentSourceGroupMaxMemoryBytes`: what `$group` holds before spilling.
    pub group_max_memory: usize,
    /// `internalDocumentSourceBucketAutoMaxMemoryBytes`: what `$bucketAuto` sorts in memory.
    pub bucket_auto_max_memory: usize,
    /// `internalDocumentSourceSetWindowFieldsMaxMemoryBytes`: what `$setWindowFields` holds of
    /// one partition before spilling its documents.
    pub window_max_memory: usize,
    /// `internalQuerySlotBasedExecutionHashLookupApproxMemoryUseInBytesBeforeSpill`: what
    /// a `$lookup` hash join holds of the foreign collection before spilling its documents.
    pub lookup_max_memory: usize,
    /// False: every equality `$lookup` without a usable foreign index runs as a nested
    /// loop join (tests compare the two strategies).
    pub lookup_hash_join: bool,
    /// The command's `collation` (None: simple): the pushed-down find and `$lookup`'s
    /// foreign equality compare strings under it.
    pub collation: Option<Document>,
    /// Where the stage being opened reports its execution statistics (explain).
    pub stats: Option<StageStats>,
    /// The aggregate command's `hint`: the index (or `$natural`) of the pipeline's own
    /// cursor; sub-pipelines do not inherit it.
    pub hint: Option<bson::Bson>,
    /// Set when the pipeline runs on a secondary: `$out` and `$merge` send their writes to
    /// the primary through it (MongoDB's ReplicaSetNodeProcessInterface) and read only
    /// locally. None: they write through `engine`.
    pub primary: Option<Arc<dyn PrimaryWrites>>,
    /// How many threads a stage may read its input with (a `$group` or a spilling `$sort`
    /// straight over a collection scan splits the scan). 1: everything runs on the command's thread, as
    /// explain does, so its counters are one plan's.
    pub parallelism: usize,
    interrupt: Arc<Interrupt>,
}

/// Commands run on the replica set's primary on behalf of a pipeline running on a secondary.
pub trait PrimaryWrites: Send + Sync {
    /// Runs `cmd` on database `db` of the primary. A reply with `ok: 0` is its error (code
    /// and message); a write command's first write error is returned as the error too.
    fn run(&self, db: &str, cmd: Document) -> Result<Document>;
}

/// A stage's execution statistics for explain (`usedDisk`, `spills`, ...), filled while it
/// runs.
pub type StageStats = Arc<Mutex<Document>>;

impl ExpCtx {
    pub fn new(engine: Arc<Engine>, db: &str) -> ExpCtx {
        ExpCtx {
            engine,
            db: db.to_string(),
            allow_disk_use: false,
            now: DateTime::now(),
            bindings: Vec::new(),
            namespace: None,
            source: None,
            local_sessions: None,
            sort_max_memory: MAX_BLOCKING_STAGE_BYTES,
            group_max_memory: MAX_BLOCKING_STAGE_BYTES,
            bucket_auto_max_memory: MAX_BLOCKING_STAGE_BYTES,
            window_max_memory: MAX_BLOCKING_STAGE_BYTES,
            lookup_max_memory: MAX_BLOCKING_STAGE_BYTES,
            lookup_hash_join: true,
            collation: None,
            stats: None,
            hint: None,
            primary: None,
            parallelism: 1,
            interrupt: Arc::new(Interrupt::default()),
        }
    }

    /// The same context for a pipeline over `ns`.
    pub fn on_namespace(&self, ns: &crate::namespace::Namespace) -> ExpCtx {
        let mut c = self.clone();
        c.namespace = Some(ns.clone());
        c
    }

    /// Takes the values of the variables known at parse time (the command's `let`).
    pub fn with_bindings(mut self, pcx: &ParseCtx) -> ExpCtx {
        self.bindings = pcx.bindings();
        self
    }

    /// A context for a sub-pipeline with more variables bound (`$lookup`'s `let`).
    pub fn with_more(&self, more: Vec<Binding>) -> ExpCtx {
        let mut c = self.clone();
        c.bindings.extend(more);
        c
    }

    pub fn set_deadline(&self, deadline: Option<Instant>) {
        *self.interrupt.deadline.lock() = deadline;
    }

    pub fn deadline(&self) -> Option<Instant> {
        *self.interrupt.deadline.lock()
    }

    /// MongoDB's `checkForInterrupt`: fails with MaxTimeMSExpired once the deadline passed.
    /// Reads the clock every 64 calls so per-document calls stay cheap.
    pub fn check_interrupt(&self) -> Result<()> {
        let n = self.interrupt.ticks.fetch_add(1, Ordering::Relaxed);
        if !n.is_multiple_of(64) {
            return Ok(());
        }
        crate::opctx::check_interrupt()?;
        match self.deadline() {
            Some(d) if Instant::now() >= d => Err(Error::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            )),
            _ => Ok(()),
        }
    }

    /// Variables for evaluating expressions against `doc` (`$$ROOT`, `$$NOW`, user variables).
    pub fn variables<'a>(&self, doc: &'a Document) -> Variables<'a> {
        let mut vars = Variables::for_doc(doc);
        self.bind(&mut vars);
        vars
    }

    /// Evaluates an expression against a document.
    pub fn evaluate(&self, e: &nidus_expr::Expression, doc: &Document) -> Result<Value> {
        e.evaluate(&mut self.variables(doc))
    }

    /// A memory budget for one blocking stage.
    pub fn memory(&self, stage: &'static str) -> MemoryBudget {
        MemoryBudget {
            stage,
            used: 0,
            allow_disk_use: self.allow_disk_use,
        }
    }

    /// Where a stage may write temporary files (`<dbpath>/_tmp`), or None without
    /// `allowDiskUse`.
    pub fn spill_dir(&self) -> Option<std::path::PathBuf> {
        self.allow_disk_use.then(|| self.engine.spill_dir())
    }

    /// Records execution statistics of the stage being run (merged into explain's entry).
    pub fn report(&self, stats: Document) {
        if let Some(slot) = &self.stats {
            slot.lock().extend(stats);
        }
    }
}

impl Bind for ExpCtx {
    /// `$$NOW` and the user variables in scope.
    fn bind(&self, vars: &mut Variables) {
        vars.set_now(self.now);
        for b in &self.bindings {
            vars.set(b.id, b.value.clone());
        }
    }
}

/// The bytes a blocking stage holds. Past [`MAX_BLOCKING_STAGE_BYTES`] the stage fails
/// unless `allowDiskUse` is true; with it, the stage keeps going in memory (nothing spills
/// to disk yet).
pub struct MemoryBudget {
    stage: &'static str,
    used: usize,
    allow_disk_use: bool,
}

impl MemoryBudget {
    pub fn add(&mut self, bytes: usize) -> Result<()> {
        self.used += bytes;
        if self.used > MAX_BLOCKING_STAGE_BYTES && !self.allow_disk_use {
            return Err(exceeded(self.stage));
        }
        Ok(())
    }

    pub fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }
}

pub(crate) fn exceeded(stage: &str) -> Error {
    let msg = match stage {
        "$sort" => format!(
            "Sort exceeded memory limit of {MAX_BLOCKING_STAGE_BYTES} bytes, but did not opt in to external sorting."
        ),
        _ => format!(
            "Exceeded memory limit for {stage}, but didn't allow external spilling. Pass allowDiskUse:true to opt in."
        ),
    };
    Error::new(ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed, msg)
}

/// Approximate memory of a document (its BSON size).
pub fn doc_bytes(d: &Document) -> usize {
    8 + d
        .iter()
        .map(|(k, v)| 2 + k.len() + bson_bytes(v))
        .sum::<usize>()
}

/// Approximate memory of a value, without serializing it.
pub fn bson_bytes(v: &Bson) -> usize {
    match v {
        Bson::String(s) => 8 + s.len(),
        Bson::Array(a) => 8 + a.iter().map(|e| 4 + bson_bytes(e)).sum::<usize>(),
        Bson::Document(d) => {
            8 + d
                .iter()
                .map(|(k, v)| 2 + k.len() + bson_bytes(v))
                .sum::<usize>()
        }
        Bson::Binary(b) => 8 + b.bytes.len(),
        _ => 8,
    }
}

/// Fails with BSONObjectTooLarge when a produced document exceeds 16 MiB.
pub fn check_size(d: &Document) -> Result<()> {
    let approx = doc_bytes(d);
    if approx <= MAX_DOCUMENT_BYTES / 2 {
        return Ok(());
    }
    let mut buf = Vec::new();
    d.to_writer(&mut buf)
        .map_err(|e| Error::internal(e.to_string()))?;
    if buf.len() > MAX_DOCUMENT_BYTES {
        return Err(Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!(
                "BSONObj size: {} (0x{:X}) is invalid. Size must be between 0 and 16793600(16MB)",
                buf.len(),
                buf.len()
            ),
        ));
    }
    Ok(())
}
