//! MongoDB's multi-planner: candidate plans take turns doing one unit of work until one
//! finishes, one produces a full first batch, or the work budget runs out; the most
//! productive plan wins and keeps the results it produced.

use crate::exec::{Member, Stage, StageState};
use nidus_common::Result;
use std::collections::VecDeque;

/// MongoDB's `internalQueryPlanEvaluationMaxResults`.
const MAX_RESULTS: u64 = 101;
/// MongoDB's `internalQueryPlanEvaluationWorks` and `...CollFraction`.
const MIN_WORKS: u64 = 10_000;
const COLL_FRACTION: f64 = 0.3;

/// The winner (its stage tree and the results it already produced) and the losers.
pub struct TrialOutcome {
    pub winner: Stage,
    /// The winner's position among the candidates.
    pub winner_index: usize,
    pub buffered: VecDeque<Member>,
    pub rejected: Vec<Stage>,
    /// The ranker's score of each plan, the winner first, then the rejected in order.
    pub scores: Vec<f64>,
    /// Whether the plan cache may keep the winner: not when it produced nothing and another
    /// plan tied with it (the race told nothing).
    pub cacheable: bool,
}

/// How a cached plan's trial went.
pub enum CachedRun {
    Kept(TrialOutcome),
    /// It needed more than its allowance of works (or failed): race the candidates again.
    Replan,
}

/// Runs a cached plan until it finishes or fills a first batch within `max_works`, as
/// MongoDB's CachedPlanStage does before trusting it.
pub fn run_cached(mut plan: Stage, max_works: u64, limit: u64) -> CachedRun {
    let target = if limit > 0 {
        limit.min(MAX_RESULTS)
    } else {
        MAX_RESULTS
    };
    let mut buffered = VecDeque::new();
    for _ in 0..max_works {
        match plan.work() {
            Ok(StageState::Advanced(m)) => {
                buffered.push_back(m);
                if buffered.len() as u64 >= target {
                    break;
                }
            }
            Ok(StageState::NeedTime) => continue,
            Ok(StageState::IsEof) => break,
            Err(_) => return CachedRun::Replan,
        }
    }
    let done = plan.common.is_eof || buffered.len() as u64 >= target;
    if !done {
        return CachedRun::Replan;
    }
    CachedRun::Kept(TrialOutcome {
        winner: plan,
        winner_index: 0,
        buffered,
        rejected: Vec::new(),
        scores: Vec::new(),
        cacheable: false,
    })
}

/// Runs the trial over `candidates` (at least one) and picks the winner.
pub fn choose_plan(
    mut candidates: Vec<Stage>,
    num_records: u64,
    limit: u64,
) -> Result<TrialOutcome> {
    if candidates.len() == 1 {
        let winner = candidates.remove(0);
        return Ok(TrialOutcome {
            winner,
            winner_index: 0,
            buffered: VecDeque::new(),
            rejected: Vec::new(),
            scores: Vec::new(),
            cacheable: false,
        });
    }
    let budget = MIN_WORKS.max((num_records as f64 * COLL_FRACTION) as u64);
    let target = if limit > 0 {
        limit.min(MAX_RESULTS)
    } else {
        MAX_RESULTS
    };
    let mut results: Vec<VecDeque<Member>> = candidates.iter().map(|_| VecDeque::new()).collect();
    let mut failed = vec![false; candidates.len()];
    // As MongoDB's `workAllPlans`: every candidate works once per round; a plan reaching EOF
    // or a full batch ends the trial after the round, so plans finishing in the same round
    // are ranked on equal terms.
    for _ in 0..budget {
        let mut done = false;
        for (i, c) in candidates.iter_mut().enumerate() {
            if failed[i] {
                continue;
            }
            match c.work() {
                Ok(StageState::Advanced(m)) => {
                    results[i].push_back(m);
                    done |= results[i].len() as u64 >= target;
                }
                Ok(StageState::NeedTime) => {}
                Ok(StageState::IsEof) => done = true,
                // A plan that fails (e.g. a sort over the memory limit) drops out of the race.
                Err(e) => {
                    failed[i] = true;
                    if failed.iter().all(|f| *f) {
                        return Err(e);
                    }
                }
            }
        }
        if done {
            break;
        }
    }
    let best = (0..candidates.len())
        .filter(|i| !failed[*i])
        .max_by(|&a, &b| {
            score(&candidates[a])
                .partial_cmp(&score(&candidates[b]))
                .unwrap_or(std::cmp::Ordering::Equal)
                // Ties go to the earlier candidate.
                .then(b.cmp(&a))
        })
        .unwrap_or(0);
    let mut scores: Vec<f64> = candidates.iter().map(score).collect();
    let best_score = scores.remove(best);
    let tied = scores.contains(&best_score);
    scores.insert(0, best_score);
    let winner = candidates.remove(best);
    let buffered = std::mem::take(&mut results[best]);
    let cacheable = !(buffered.is_empty() && tied);
    Ok(TrialOutcome {
        winner,
        winner_index: best,
        buffered,
        rejected: candidates,
        scores,
        cacheable,
    })
}

/// MongoDB's plan ranker: 1 + productivity + small bonuses for needing no FETCH and no SORT,
/// and a bonus for finishing during the trial.
fn score(root: &Stage) -> f64 {
    let works = root.common.works.max(1) as f64;
    let productivity = root.common.advanced as f64 / works;
    let epsilon = (1.0 / (10.0 * works)).min(1e-4);
    let no_fetch = if has_stage(root, "FETCH") {
        0.0
    } else {
        epsilon
    };
    let no_sort = if has_stage(root, "SORT") {
        0.0
    } else {
        epsilon
    };
    let eof = if root.common.is_eof { 1.0 } else { 0.0 };
    1.0 + productivity + no_fetch + no_sort + epsilon + eof
}

fn has_stage(s: &Stage, name: &str) -> bool {
    s.name() == name || s.children().iter().any(|c| has_stage(c, name))
}
