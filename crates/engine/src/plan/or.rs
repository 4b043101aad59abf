//! Indexed `$or` (MongoDB's `OR` plans): when an index answers each clause of a top-level
//! `$or`, the clauses' index scans run one after another under an `OR` stage that drops
//! repeated documents, and a `FETCH` above applies the query's other conjuncts.

use super::{canonical_conjuncts, enumerate, IndexSolution, Query};
use crate::catalog::IndexMeta;
use nidus_query::matcher::{Expr, Matcher};

/// One clause's scan and the clause as a filter (for what its bounds leave over).
pub struct OrBranch {
    pub solution: IndexSolution,
    pub clause: Matcher,
}

pub struct OrSolution {
    pub branches: Vec<OrBranch>,
    /// The query's other canonical conjuncts (the `FETCH` filter above the `OR`).
    pub residual: Vec<usize>,
}

impl OrSolution {
    /// The plan cache's name for this solution.
    pub fn key(&self) -> String {
        let names: Vec<&str> = self
            .branches
            .iter()
            .map(|b| b.solution.index.name.as_str())
            .collect();
        format!("or:{}", names.join(","))
    }
}

/// The OR solution of the first top-level `$or` whose every clause some index answers; per
/// clause the index leaving the least filter (the first such index on a tie).
pub fn enumerate_or(indexes: &[IndexMeta], query: &Query) -> Option<OrSolution> {
    let conjuncts = canonical_conjuncts(query.matcher.expr());
    conjuncts.iter().enumerate().find_map(|(at, c)| {
        let Expr::Or(clauses) = c else {
            return None;
        };
        let branches = clauses
            .iter()
            .map(|clause| branch(indexes, clause, query))
            .collect::<Option<Vec<_>>>()?;
        Some(OrSolution {
            branches,
            residual: (0..conjuncts.len()).filter(|&i| i != at).collect(),
        })
    })
}

fn branch(indexes: &[IndexMeta], clause: &Expr, outer: &Query) -> Option<OrBranch> {
    let matcher = Matcher::from_expr(clause.clone());
    let query = Query {
        matcher: &matcher,
        sort: None,
        projection: None,
        count: false,
        return_key: false,
        collation: outer.collation,
    };
    let solution = enumerate(indexes, &query, None)
        .into_iter()
        .min_by_key(|s| s.residual.len())?;
    Some(OrBranch {
        solution,
        clause: matcher,
    })
}
