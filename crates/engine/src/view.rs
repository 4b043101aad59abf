//! Views: read-only namespaces defined by a source (`viewOn`, a collection or another view
//! in the same database) and an aggregation pipeline.
//!
//! A view is a catalog entry of its own (`view\0<db>\0<name>` in the catalog space), loaded
//! at start-up into `Engine::views` and changed under the DDL lock like collections. Reads
//! resolve a view to its backing collection and the concatenation of the pipelines on the
//! way (innermost first, as MongoDB's `resolveView`), which `pipeline::run::open` prepends
//! to the reader's own stages before optimizing them together.

use crate::namespace::{self, Namespace};
use crate::pipeline::{self, ParseCtx, Position};
use crate::Engine;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::Space;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const VIEW_PREFIX: &[u8] = b"view\0";
/// MongoDB's `ViewGraph::kMaxViewDepth`.
pub const MAX_VIEW_DEPTH: usize = 20;

/// One view's definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewDef {
    pub ns: Namespace,
    /// The collection or view it reads, in the same database.
    pub view_on: String,
    pub pipeline: Vec<Document>,
    pub collation: Option<Document>,
}

/// Checks that an operation's collation (`op`; None: simple) is the view's own (`view`;
/// None: simple), as MongoDB requires of every view an operation reads: a view's
/// collation cannot be overridden (OptionNotSupportedOnView).
pub fn check_view_collation(view: Option<&Document>, op: Option<&Document>) -> Result<()> {
    let parse = |c: Option<&Document>| match c {
        Some(c) => nidus_doc::collation::Collation::parse(c),
        None => Ok(None),
    };
    if parse(view)? == parse(op)? {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::OptionNotSupportedOnView,
        "Cannot override a view's default collation",
    ))
}

/// A view resolved to the collection that holds its data.
#[derive(Debug, Clone)]
pub struct ResolvedView {
    pub ns: Namespace,
    /// Every view's pipeline on the way, the innermost view's first.
    pub pipeline: Vec<Document>,
    pub collation: Option<Document>,
}

fn catalog_key(ns: &Namespace) -> Vec<u8> {
    let mut k = VIEW_PREFIX.to_vec();
    k.extend_from_slice(ns.db.as_bytes());
    k.push(0);
    k.extend_from_slice(ns.coll.as_bytes());
    k
}

fn corrupt<E: std::fmt::Display>(e: E) -> Error {
    Error::internal(format!("corrupt view entry: {e}"))
}

/// `Namespace <ns> is a view, not a collection` (CommandNotSupportedOnView).
pub fn not_a_collection(ns: &Namespace) -> Error {
    Error::new(
        ErrorCode::CommandNotSupportedOnView,
        format!("Namespace {ns} is a view, not a collection"),
    )
}

impl ViewDef {
    /// The options `listCollections` shows.
    pub fn options(&self) -> Document {
        let mut d = doc! {
            "viewOn": self.view_on.clone(),
            "pipeline": self.pipeline.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
        };
        if let Some(c) = &self.collation {
            d.insert("collation", c.clone());
        }
        d
    }

    /// The view `options` describe (`viewOn`, `pipeline`, `collation`, as [`ViewDef::options`]
    /// writes them, `listCollections` lists them and a `create` entry logs them).
    pub fn from_options(ns: &Namespace, options: &Document) -> ViewDef {
        ViewDef {
            ns: ns.clone(),
            view_on: options.get_str("viewOn").unwrap_or_default().to_string(),
            pipeline: options
                .get_array("pipeline")
                .map(|p| p.iter().filter_map(|s| s.as_document().cloned()).collect())
                .unwrap_or_default(),
            collation: options.get_document("collation").ok().cloned(),
        }
    }

    fn to_entry(&self) -> Document {
        let mut d = self.options();
        d.insert("ns", self.ns.full());
        d
    }

    fn from_entry(d: &Document) -> Result<ViewDef> {
        let ns = Namespace::parse(d.get_str("ns").map_err(corrupt)?)?;
        let view_on = d.get_str("viewOn").map_err(corrupt)?.to_string();
        let pipeline = d
            .get_array("pipeline")
            .map_err(corrupt)?
            .iter()
            .map(|s| match s {
                Bson::Document(s) => Ok(s.clone()),
                _ => Err(corrupt("pipeline stage")),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ViewDef {
            ns,
            view_on,
            pipeline,
            collation: d.get_document("collation").ok().cloned(),
        })
    }

    /// The namespaces the view reads: `viewOn`, and the sources of `$lookup`,
    /// `$graphLookup`, `$unionWith` (also inside sub-pipelines and `$facet`).
    pub fn references(&self) -> Vec<Namespace> {
        let mut out = vec![Namespace::new(&self.ns.db, &self.view_on)];
        let stages: Vec<Bson> = self.pipeline.iter().cloned().map(Bson::Document).collect();
        pipeline_references(&self.ns.db, &stages, &mut out);
        out
    }
}

fn pipeline_references(db: &str, stages: &[Bson], out: &mut Vec<Namespace>) {
    for stage in stages {
        let Bson::Document(stage) = stage else {
            continue;
        };
        for (name, arg) in stage {
            match (name.as_str(), arg) {
                ("$lookup" | "$graphLookup", Bson::Document(a)) => {
                    if let Ok(from) = a.get_str("from") {
                        out.push(Namespace::new(db, from));
                    }
                    if let Ok(p) = a.get_array("pipeline") {
                        pipeline_references(db, p, out);
                    }
                }
                ("$unionWith", Bson::String(c)) => out.push(Namespace::new(db, c)),
                ("$unionWith", Bson::Document(a)) => {
                    if let Ok(c) = a.get_str("coll") {
                        out.push(Namespace::new(db, c));
                    }
                    if let Ok(p) = a.get_array("pipeline") {
                        pipeline_references(db, p, out);
                    }
                }
                ("$facet", Bson::Document(f)) => {
                    for p in f.values() {
                        if let Bson::Array(p) = p {
                            pipeline_references(db, p, out);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Checks a view's pipeline parses and holds no stage a view may not (MongoDB's
/// `validatePipeline`).
fn validate_pipeline(def: &ViewDef) -> Result<()> {
    let stages: Vec<Bson> = def.pipeline.iter().cloned().map(Bson::Document).collect();
    let parsed = pipeline::parse_pipeline(&stages, &ParseCtx::new(&def.ns.db))?;
    if let Some(i) = parsed.iter().position(|s| s.position() == Position::Last) {
        return Err(Error::new(
            ErrorCode::OptionNotSupportedOnView,
            format!(
                "The aggregation stage {} in location {i} of the pipeline cannot be used in the view definition of {} because it writes to disk",
                parsed[i].name(),
                def.ns
            ),
        ));
    }
    if let Some(s) = parsed.iter().find(|s| s.is_source()) {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("'{}' cannot be used in a view definition", s.name()),
        ));
    }
    Ok(())
}

impl Engine {
    /// Reads every view entry (at start-up).
    pub(crate) fn load_views(&self) -> Result<()> {
        let snap = self.kv.snapshot();
        let mut upper = VIEW_PREFIX.to_vec();
        if let Some(last) = upper.last_mut() {
            *last += 1;
        }
        let mut map = self.views.write();
        let mut c = snap.cursor(Space::Catalog, VIEW_PREFIX, &upper);
        c.seek_to_first();
        while c.valid() {
            let d = Document::from_reader(c.value()).map_err(corrupt)?;
            let def = ViewDef::from_entry(&d)?;
            map.insert(def.ns.clone(), Arc::new(def));
            c.next();
        }
        c.status()?;
        Ok(())
    }

    pub fn view(&self, ns: &Namespace) -> Option<Arc<ViewDef>> {
        self.views.read().get(ns).cloned()
    }

    pub fn views_in(&self, db: &str) -> Vec<Arc<ViewDef>> {
        self.views
            .read()
            .values()
            .filter(|v| v.ns.db == db)
            .cloned()
            .collect()
    }

    /// Fails with CommandNotSupportedOnView when `ns` is a view (writes, index commands).
    pub fn check_not_view(&self, ns: &Namespace) -> Result<()> {
        match self.views.read().contains_key(ns) {
            true => Err(not_a_collection(ns)),
            false => Ok(()),
        }
    }

    /// The collection a view reads and the pipeline to run over it (None: not a view).
    pub fn resolve_view(&self, ns: &Namespace) -> Result<Option<ResolvedView>> {
        let views = self.views.read();
        let Some(first) = views.get(ns) else {
            return Ok(None);
        };
        let collation = first.collation.clone();
        let mut pipeline: Vec<Document> = Vec::new();
        let mut current = ns.clone();
        for _ in 0..MAX_VIEW_DEPTH {
            let Some(view) = views.get(&current) else {
                return Ok(Some(ResolvedView {
                    ns: current,
                    pipeline,
                    collation,
                }));
            };
            let mut p = view.pipeline.clone();
            p.extend(pipeline);
            pipeline = p;
            current = Namespace::new(&current.db, &view.view_on);
        }
        Err(Error::new(
            ErrorCode::ViewDepthLimitExceeded,
            format!(
                "View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"
            ),
        ))
    }

    /// `create` with `viewOn`: NamespaceExists when a collection or view has the name.
    pub fn create_view(&self, def: ViewDef) -> Result<()> {
        namespace::validate_coll_name(&def.ns.db, &def.ns.coll)?;
        validate_pipeline(&def)?;
        let _ddl = self.ddl.lock();
        if self.collection(&def.ns).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("Collection {} already exists.", def.ns),
            ));
        }
        if let Some(existing) = self.view(&def.ns) {
            // As for collections, re-creating with identical options succeeds.
            if *existing == def {
                return Ok(());
            }
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!(
                    "namespace {} already exists, but with different options: {}",
                    def.ns,
                    nidus_common::shell::format(&Bson::Document(existing.options()))
                ),
            ));
        }
        self.put_view_locked(def, "create")
    }

    /// `collMod` of a view: a new `viewOn` and/or `pipeline`.
    pub fn modify_view(
        &self,
        ns: &Namespace,
        view_on: Option<String>,
        pipeline: Option<Vec<Document>>,
    ) -> Result<()> {
        let _ddl = self.ddl.lock();
        let Some(old) = self.view(ns) else {
            return Err(crate::catalog::namespace_not_found(ns));
        };
        let mut def = (*old).clone();
        if let Some(v) = view_on {
            def.view_on = v;
        }
        if let Some(p) = pipeline {
            def.pipeline = p;
        }
        validate_pipeline(&def)?;
        self.put_view_locked(def, "collMod")
    }

    /// Checks the graph with `def` in it, then persists it (DDL lock held).
    /// `cmd` (`create` or `collMod`) names the oplog entry.
    fn put_view_locked(&self, def: ViewDef, cmd: &str) -> Result<()> {
        {
            let views = self.views.read();
            let mut graph: BTreeMap<Namespace, Vec<Namespace>> = views
                .iter()
                .map(|(ns, v)| (ns.clone(), v.references()))
                .collect();
            graph.insert(def.ns.clone(), def.references());
            check_graph(&graph, &def.ns)?;
            // MongoDB's `validateCollation`: every view this one reads (its `viewOn`, and
            // those its pipeline's `$lookup`/`$graphLookup`/`$unionWith` name) has its
            // collation.
            for other in def.references() {
                let Some(other) = views.get(&other) else {
                    continue;
                };
                if check_view_collation(other.collation.as_ref(), def.collation.as_ref()).is_err() {
                    return Err(Error::new(
                        ErrorCode::OptionNotSupportedOnView,
                        format!(
                            "View {} has conflicting collation with view {}",
                            def.ns, other.ns
                        ),
                    ));
                }
            }
        }
        let bytes = bson::to_vec(&def.to_entry()).map_err(|e| Error::internal(e.to_string()))?;
        let mut txn = self.kv.begin();
        txn.put(Space::Catalog, &catalog_key(&def.ns), &bytes)?;
        let ops = self.ddl_ops(&def.ns, || {
            // MongoDB's entry: `{create|collMod: <name>, viewOn, pipeline}`, and a `create`
            // carries the view's collation (a `collMod` cannot change it).
            let mut o = bson::doc! { cmd: def.ns.coll.clone() };
            o.extend(def.options());
            if cmd != "create" {
                o.remove("collation");
            }
            crate::oplog::OplogEntry::command(&def.ns.db, None, o)
        });
        self.commit_logged(txn, ops)?;
        self.views.write().insert(def.ns.clone(), Arc::new(def));
        Ok(())
    }

    /// Drops a view; false when there is none.
    pub fn drop_view(&self, ns: &Namespace) -> Result<bool> {
        let _ddl = self.ddl.lock();
        self.drop_view_locked(ns)
    }

    /// `drop_view` with the DDL lock held by the caller.
    pub(crate) fn drop_view_locked(&self, ns: &Namespace) -> Result<bool> {
        if self.view(ns).is_none() {
            return Ok(false);
        }
        let mut txn = self.kv.begin();
        txn.delete(Space::Catalog, &catalog_key(ns))?;
        let ops = self.ddl_ops(ns, || {
            crate::oplog::OplogEntry::command(&ns.db, None, bson::doc! { "drop": ns.coll.clone() })
        });
        self.commit_logged(txn, ops)?;
        self.views.write().remove(ns);
        Ok(true)
    }
}

/// MongoDB's `ViewGraph::insertAndValidate` for the view `start`: no cycle through it, and
/// the longest chain of views through it at most `MAX_VIEW_DEPTH`.
fn check_graph(graph: &BTreeMap<Namespace, Vec<Namespace>>, start: &Namespace) -> Result<()> {
    let depth_error = || {
        Error::new(
            ErrorCode::ViewDepthLimitExceeded,
            format!("View depth limit exceeded; maximum depth is {MAX_VIEW_DEPTH}"),
        )
    };
    // Downwards: cycles, and the height of the views below (including `start`).
    fn down(
        graph: &BTreeMap<Namespace, Vec<Namespace>>,
        start: &Namespace,
        node: &Namespace,
        path: &mut Vec<Namespace>,
        heights: &mut BTreeMap<Namespace, usize>,
    ) -> Result<usize> {
        path.push(node.clone());
        if path.len() > 1 && node == start {
            let names: Vec<String> = path.iter().rev().map(|n| n.full()).collect();
            return Err(Error::new(
                ErrorCode::GraphContainsCycle,
                format!("View cycle detected: {} => {}", start, names.join(" => ")),
            ));
        }
        if path.len() > MAX_VIEW_DEPTH + 1 {
            return Err(Error::new(
                ErrorCode::ViewDepthLimitExceeded,
                format!("View depth limit exceeded; maximum depth is {MAX_VIEW_DEPTH}"),
            ));
        }
        let mut h = 0;
        if let Some(children) = graph.get(node) {
            for c in children {
                let ch = match heights.get(c) {
                    Some(h) if c != start => *h,
                    _ => down(graph, start, c, path, heights)?,
                };
                h = h.max(ch);
            }
        }
        path.pop();
        let own = usize::from(graph.contains_key(node)) + h;
        heights.insert(node.clone(), own);
        Ok(own)
    }
    let below = down(graph, start, start, &mut Vec::new(), &mut BTreeMap::new())?;
    // Upwards: the longest chain of views that read `start`.
    let mut parents: BTreeMap<&Namespace, BTreeSet<&Namespace>> = BTreeMap::new();
    for (v, refs) in graph {
        for r in refs {
            parents.entry(r).or_default().insert(v);
        }
    }
    fn up(
        parents: &BTreeMap<&Namespace, BTreeSet<&Namespace>>,
        node: &Namespace,
        depth: usize,
    ) -> Option<usize> {
        if depth > MAX_VIEW_DEPTH {
            return None;
        }
        let mut h = 0;
        for p in parents.get(node).into_iter().flatten() {
            h = h.max(up(parents, p, depth + 1)?);
        }
        Some(h + 1)
    }
    let above = up(&parents, start, 0).ok_or_else(depth_error)?;
    if below + above - 1 > MAX_VIEW_DEPTH {
        return Err(depth_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> BTreeMap<Namespace, Vec<Namespace>> {
        let mut g: BTreeMap<Namespace, Vec<Namespace>> = BTreeMap::new();
        for (v, on) in edges {
            g.entry(Namespace::new("t", v))
                .or_default()
                .push(Namespace::new("t", on));
        }
        g
    }

    #[test]
    fn cycles_name_the_path() {
        let g = graph(&[("v1", "v4"), ("v4", "v1")]);
        let e = check_graph(&g, &Namespace::new("t", "v1")).unwrap_err();
        assert_eq!(e.code, ErrorCode::GraphContainsCycle);
        assert_eq!(
            e.message,
            "View cycle detected: t.v1 => t.v1 => t.v4 => t.v1"
        );
    }

    #[test]
    fn depth_limit_counts_views_through_the_node() {
        let mut edges: Vec<(String, String)> = vec![("v1".into(), "c".into())];
        for i in 2..=21 {
            edges.push((format!("v{i}"), format!("v{}", i - 1)));
        }
        let refs: Vec<(&str, &str)> = edges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let g = graph(&refs[..20]);
        assert!(check_graph(&g, &Namespace::new("t", "v20")).is_ok());
        let g = graph(&refs);
        let e = check_graph(&g, &Namespace::new("t", "v21")).unwrap_err();
        assert_eq!(e.code, ErrorCode::ViewDepthLimitExceeded);
        // Inserting in the middle counts the views above too.
        let e = check_graph(&g, &Namespace::new("t", "v10")).unwrap_err();
        assert_eq!(e.code, ErrorCode::ViewDepthLimitExceeded);
    }
}
