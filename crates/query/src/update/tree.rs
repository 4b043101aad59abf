//! The update tree (MongoDB's `UpdateObjectNode` / `UpdateArrayNode` / leaf nodes): every
//! operator path is merged into one tree, which detects conflicting paths at parse time and
//! is applied to a document in field-name order (array indexes numerically).

use super::fields::unset_in;
use super::leaf::{Env, Op};
use super::path::Comp;
use super::util::{cmp_field_names, elem, join};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::path::array_index;

/// Arrays are padded with nulls up to this index at most (beyond it the document could not
/// be stored anyway).
const MAX_PAD_INDEX: usize = 1 << 22;

#[derive(Debug, Clone)]
pub enum Node {
    Leaf(Leaf),
    Object(ObjectNode),
    Array(ArrayNode),
}

#[derive(Debug, Clone)]
pub struct Leaf {
    pub op: Op,
    /// The path as written (for messages).
    pub path: String,
}

/// Children by field name, sorted, plus the positional `$` child.
#[derive(Debug, Clone, Default)]
pub struct ObjectNode {
    pub children: Vec<(String, Node)>,
    pub positional: Option<Box<Node>>,
}

/// Children selecting array elements: `$[]` (None) or `$[id]`.
#[derive(Debug, Clone, Default)]
pub struct ArrayNode {
    pub children: Vec<(Option<String>, Node)>,
}

fn conflict(path: &str, upto: usize) -> Error {
    let at = path.split('.').take(upto).collect::<Vec<_>>().join(".");
    Error::new(
        ErrorCode::ConflictingUpdateOperators,
        format!("Updating the path '{path}' would create a conflict at '{at}'"),
    )
}

fn node_for(next: &Comp) -> Node {
    if next.is_array_selector() {
        Node::Array(ArrayNode::default())
    } else {
        Node::Object(ObjectNode::default())
    }
}

fn kind_matches(node: &Node, next: &Comp) -> bool {
    match node {
        Node::Leaf(_) => false,
        Node::Object(_) => !next.is_array_selector(),
        Node::Array(_) => next.is_array_selector(),
    }
}

impl Node {
    /// Inserts a leaf at `comps[depth..]` below this node (which sits at `comps[..depth]`).
    pub fn insert(&mut self, path: &str, comps: &[Comp], depth: usize, leaf: Leaf) -> Result<()> {
        let comp = &comps[depth];
        let next = comps.get(depth + 1);
        let fresh = |leaf: Leaf| match next {
            None => Node::Leaf(leaf),
            Some(n) => node_for(n),
        };
        let child: &mut Node = match self {
            Node::Object(o) => match comp {
                Comp::Positional => match &mut o.positional {
                    Some(_) if next.is_none() => return Err(conflict(path, depth + 1)),
                    Some(p) => p.as_mut(),
                    None => {
                        let p = o.positional.insert(Box::new(fresh(leaf.clone())));
                        if next.is_none() {
                            return Ok(());
                        }
                        p.as_mut()
                    }
                },
                Comp::Field(name) => {
                    match o
                        .children
                        .binary_search_by(|(n, _)| cmp_field_names(n, name))
                    {
                        Ok(_) if next.is_none() => return Err(conflict(path, depth + 1)),
                        Ok(i) => &mut o.children[i].1,
                        Err(i) => {
                            o.children.insert(i, (name.clone(), fresh(leaf.clone())));
                            if next.is_none() {
                                return Ok(());
                            }
                            &mut o.children[i].1
                        }
                    }
                }
                _ => return Err(conflict(path, depth)),
            },
            Node::Array(a) => {
                let sel = match comp {
                    Comp::All => None,
                    Comp::Filter(id) => Some(id.clone()),
                    _ => return Err(conflict(path, depth)),
                };
                match a.children.iter().position(|(s, _)| *s == sel) {
                    Some(_) if next.is_none() => return Err(conflict(path, depth + 1)),
                    Some(i) => &mut a.children[i].1,
                    None => {
                        a.children.push((sel, fresh(leaf.clone())));
                        if next.is_none() {
                            return Ok(());
                        }
                        let i = a.children.len() - 1;
                        &mut a.children[i].1
                    }
                }
            }
            Node::Leaf(_) => return Err(conflict(path, depth)),
        };
        match next {
            Some(n) if kind_matches(child, n) => child.insert(path, comps, depth + 1, leaf),
            _ => Err(conflict(path, depth + 1)),
        }
    }

    /// Whether applying this subtree to a missing path would create something.
    pub fn creates(&self, env: &Env) -> bool {
        match self {
            Node::Leaf(l) => l.op.creates(env),
            Node::Object(o) => {
                o.children.iter().any(|(_, n)| n.creates(env))
                    || o.positional.as_ref().is_some_and(|p| p.creates(env))
            }
            Node::Array(a) => a.children.iter().any(|(_, n)| n.creates(env)),
        }
    }

    /// All leaf paths (for the immutable `_id` check).
    pub fn leaf_paths<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Node::Leaf(l) => out.push(&l.path),
            Node::Object(o) => {
                o.children.iter().for_each(|(_, n)| n.leaf_paths(out));
                if let Some(p) = &o.positional {
                    p.leaf_paths(out);
                }
            }
            Node::Array(a) => a.children.iter().for_each(|(_, n)| n.leaf_paths(out)),
        }
    }
}

fn positional_index(env: &Env) -> Result<String> {
    env.ctx
        .matched_array_index
        .map(|i| i.to_string())
        .ok_or_else(|| {
            Error::bad_value(
                "The positional operator did not find the match needed from the query.",
            )
        })
}

/// Applies an object node to a document or array value `cur` named `name` at `path`.
pub fn apply_object(
    o: &ObjectNode,
    cur: &mut Bson,
    name: &str,
    path: &str,
    env: &Env,
) -> Result<bool> {
    let pos_name = match &o.positional {
        Some(_) => Some(positional_index(env)?),
        None => None,
    };
    let mut modified = false;
    let mut pos_done = false;
    for (child_name, child) in &o.children {
        modified |= apply_child(child, cur, child_name, name, path, env)?;
        if let (Some(p), Some(pn)) = (&o.positional, &pos_name) {
            if pn == child_name {
                check_mergeable(child, p, &join(path, child_name))?;
                modified |= apply_child(p, cur, child_name, name, path, env)?;
                pos_done = true;
            }
        }
    }
    if let (Some(p), Some(pn), false) = (&o.positional, &pos_name, pos_done) {
        modified |= apply_child(p, cur, pn, name, path, env)?;
    }
    Ok(modified)
}

fn check_mergeable(a: &Node, b: &Node, path: &str) -> Result<()> {
    let compatible = matches!(
        (a, b),
        (Node::Object(_), Node::Object(_)) | (Node::Array(_), Node::Array(_))
    );
    if compatible {
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::ConflictingUpdateOperators,
            format!("Update created a conflict at '{path}'"),
        ))
    }
}

fn lookup_mut<'a>(cur: &'a mut Bson, name: &str) -> Option<&'a mut Bson> {
    match cur {
        Bson::Document(d) => d.get_mut(name),
        Bson::Array(a) => array_index(name).and_then(|i| a.get_mut(i)),
        _ => None,
    }
}

fn apply_child(
    child: &Node,
    cur: &mut Bson,
    child_name: &str,
    cur_name: &str,
    cur_path: &str,
    env: &Env,
) -> Result<bool> {
    let child_path = join(cur_path, child_name);
    if let Node::Leaf(Leaf { op: Op::Unset, .. }) = child {
        return Ok(unset_in(cur, child_name));
    }
    match lookup_mut(cur, child_name) {
        Some(v) => apply_existing(child, v, child_name, &child_path, env),
        None => apply_missing(child, cur, child_name, cur_name, &child_path, env),
    }
}

/// Applies a node to an existing value.
pub fn apply_existing(
    node: &Node,
    v: &mut Bson,
    name: &str,
    path: &str,
    env: &Env,
) -> Result<bool> {
    match node {
        Node::Leaf(l) => l.op.apply_existing(v, name, path, env),
        Node::Object(o) => match v {
            Bson::Document(_) | Bson::Array(_) => apply_object(o, v, name, path, env),
            _ => non_viable(o, v, name, env),
        },
        Node::Array(a) => apply_array(a, v, name, path, env),
    }
}

/// An object node over a scalar: an error if anything below would be created.
fn non_viable(o: &ObjectNode, v: &Bson, name: &str, env: &Env) -> Result<bool> {
    let first = o
        .children
        .iter()
        .find(|(_, n)| n.creates(env))
        .map(|(k, _)| k.clone())
        .or_else(|| {
            o.positional
                .as_ref()
                .filter(|p| p.creates(env))
                .map(|_| positional_index(env).unwrap_or_else(|_| "$".to_string()))
        });
    match first {
        Some(field) => Err(path_not_viable(&field, name, v)),
        None => Ok(false),
    }
}

fn path_not_viable(field: &str, name: &str, v: &Bson) -> Error {
    Error::new(
        ErrorCode::PathNotViable,
        format!(
            "Cannot create field '{field}' in element {{{}}}",
            elem(name, v)
        ),
    )
}

fn apply_missing(
    node: &Node,
    parent: &mut Bson,
    name: &str,
    parent_name: &str,
    path: &str,
    env: &Env,
) -> Result<bool> {
    if let Node::Array(_) = node {
        return Err(Error::bad_value(format!(
            "The path '{path}' must exist in the document in order to apply array updates."
        )));
    }
    if !node.creates(env) {
        return Ok(false);
    }
    let index = match parent {
        Bson::Array(_) => match array_index(name) {
            Some(i) => Some(i),
            None => return Err(path_not_viable(name, parent_name, parent)),
        },
        Bson::Document(_) => None,
        other => return Err(path_not_viable(name, parent_name, other)),
    };
    let value = match node {
        Node::Leaf(l) => match l.op.create(env)? {
            Some(v) => v,
            None => return Ok(false),
        },
        Node::Object(o) => {
            let mut fresh = Bson::Document(Document::new());
            if !apply_object(o, &mut fresh, name, path, env)? {
                return Ok(false);
            }
            fresh
        }
        Node::Array(_) => return Ok(false),
    };
    insert_value(parent, name, index, value)?;
    Ok(true)
}

fn insert_value(parent: &mut Bson, name: &str, index: Option<usize>, value: Bson) -> Result<()> {
    match (parent, index) {
        (Bson::Array(a), Some(i)) => {
            if i > MAX_PAD_INDEX {
                return Err(Error::bad_value(format!(
                    "can't pad an array to index {i}: the document would be too large"
                )));
            }
            a.resize(i, Bson::Null);
            a.push(value);
        }
        (Bson::Document(d), _) => {
            d.insert(name, value);
        }
        _ => return Err(Error::internal("update created a field in a non-container")),
    }
    Ok(())
}

/// Applies `$[]` / `$[id]` children to the elements of an array.
fn apply_array(a: &ArrayNode, v: &mut Bson, name: &str, path: &str, env: &Env) -> Result<bool> {
    let Bson::Array(arr) = v else {
        return Err(Error::bad_value(format!(
            "Cannot apply array updates to non-array element {}",
            elem(name, v)
        )));
    };
    let mut plan: Vec<Vec<&Node>> = Vec::with_capacity(arr.len());
    for e in arr.iter() {
        let mut nodes = Vec::new();
        for (sel, n) in &a.children {
            let selected = match sel {
                None => true,
                Some(id) => env.filters.matches(id, e)?,
            };
            if selected {
                nodes.push(n);
            }
        }
        plan.push(nodes);
    }
    let mut modified = false;
    for (i, (e, nodes)) in arr.iter_mut().zip(plan).enumerate() {
        let idx = i.to_string();
        let elem_path = join(path, &idx);
        if nodes.len() > 1 {
            for w in nodes.windows(2) {
                check_mergeable(w[0], w[1], &elem_path)?;
            }
        }
        for n in nodes {
            if let Node::Leaf(Leaf { op: Op::Unset, .. }) = n {
                *e = Bson::Null;
                modified = true;
                continue;
            }
            modified |= apply_existing(n, e, &idx, &elem_path, env)?;
        }
    }
    Ok(modified)
}
