//! Rewrites MongoDB applies to a parsed filter before planning, so that `parsedQuery`, the
//! plans and the index bounds are those of the rewritten form.

use super::comparison::InList;
use super::{Expr, Leaf};
use bson::Bson;
use nidus_common::Result;
use nidus_doc::path::FieldPath;

/// `$or` clauses that are equalities (or `$in`s) on one path become one `$in` on that path,
/// as MongoDB's `$or`-to-`$in` rewrite does; an `$or` left with one clause is that clause.
/// `{$eq: /re/}` stays apart: inside `$in` a regex would match as a pattern.
pub fn or_to_in(children: Vec<Expr>) -> Result<Expr> {
    let mut out: Vec<Expr> = Vec::with_capacity(children.len());
    // Per path: its `$in` items so far, how many clauses gave them, where the first one sits.
    let mut groups: Vec<(FieldPath, Vec<Bson>, usize, usize)> = Vec::new();
    for child in children {
        match in_items(&child) {
            Some((path, items)) => match groups.iter_mut().find(|g| g.0 == *path) {
                Some(g) => {
                    g.1.extend(items);
                    g.2 += 1;
                }
                None => {
                    groups.push((path.clone(), items, 1, out.len()));
                    out.push(child);
                }
            },
            None => out.push(child),
        }
    }
    for (path, items, clauses, at) in groups {
        if clauses > 1 {
            let leaf = Leaf::In(InList::parse("$in", &Bson::Array(items))?);
            out[at] = Expr::Path { path, leaf };
        }
    }
    Ok(if out.len() == 1 {
        out.remove(0)
    } else {
        Expr::Or(out)
    })
}

/// The path and `$in` items of an equality or `$in` clause.
fn in_items(e: &Expr) -> Option<(&FieldPath, Vec<Bson>)> {
    let Expr::Path { path, leaf } = e else {
        return None;
    };
    match leaf {
        Leaf::Eq(v) if !matches!(v.bson, Bson::RegularExpression(_)) => {
            Some((path, vec![v.bson.clone()]))
        }
        Leaf::In(list) => {
            let mut items: Vec<Bson> = list.values.iter().map(|v| v.bson.clone()).collect();
            items.extend(list.regexes.iter().map(|r| r.to_bson()));
            Some((path, items))
        }
        _ => None,
    }
}
