//! The Raft driver: one thread per member owns the `RawNode`, ticks it, steps incoming
//! messages, persists and sends what each `Ready` holds, applies committed entries and
//! publishes the member's state.

use crate::config::ReplSetConfig;
use crate::state::{MemberState, OpTime};
use crate::storage::{LogStore, SnapshotData};
use crate::{Coordinator, Input, View};
use bson::{doc, Document};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, ConfState, Entry, EntryType, MessageType};
use raft::{GetEntriesContext, RawNode, SnapshotStatus, StateRole, Storage};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Raft's election timeout in ticks; a tick is `electionTimeoutMillis / ELECTION_TICKS`.
const ELECTION_TICKS: usize = 20;
/// The leader's Raft heartbeat every `electionTimeoutMillis / 5`.
const HEARTBEAT_TICKS: usize = 4;
/// Campaigning starts between `ELECTION_TICKS + 2` and `ELECTION_TICKS * 1.2 + 2` ticks
/// without a leader (MongoDB adds up to 15% random offset to `electionTimeoutMillis`). The 2
/// spare ticks let a member that must not campaign (priority 0, frozen) leave the leader
/// lease, so it still votes, while its election clock is held below its timeout.
const MIN_ELECTION_TICKS: usize = ELECTION_TICKS + 2;
const MAX_ELECTION_TICKS: usize = ELECTION_TICKS + ELECTION_TICKS / 5 + 2;
/// After a failed campaign while the primary's process is gone, the next one starts 4 to 7
/// ticks later (Raft's own randomized timeout, shortened by a constant).
const RETRY_ELAPSED: usize = MIN_ELECTION_TICKS - HEARTBEAT_TICKS;
/// How long a report that the primary's process is gone holds (reports repeat at every
/// refused connection attempt, at least every second).
const LEADER_GONE_FOR: Duration = Duration::from_secs(3);
/// How far behind (in log entries) a member may be and still be handed the primary role;
/// Raft's leader transfer brings it fully up to date before it campaigns.
const TRANSFER_LAG: u64 = 1000;
/// Raft's commit broadcast is skipped (`skip_bcast_commit`): a follower learns a new commit
/// index from the next append the primary sends it, which under a stream of writes follows
/// within the client's round trip. When none has gone out this long after the commit index
/// moved (the writes stopped), the primary sends an append carrying just the commit index, so
/// secondaries apply the last writes at most this late.
const COMMIT_FORWARD_DELAY: Duration = Duration::from_millis(2);

pub(crate) fn conf_state(config: &ReplSetConfig) -> ConfState {
    let mut cs = ConfState::default();
    for m in &config.members {
        if m.is_voter() {
            cs.voters.push(m.raft_id());
        } else {
            cs.learners.push(m.raft_id());
        }
    }
    cs
}

fn parse_config(bytes: &[u8]) -> Option<ReplSetConfig> {
    let d = Document::from_reader(bytes).ok()?;
    ReplSetConfig::from_stored(&d).ok()
}

fn entry_optime(e: &Entry) -> Option<OpTime> {
    if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
        return None;
    }
    OpTime::of_raw(bson::RawDocument::from_bytes(&e.data[..]).ok()?)
}

pub(crate) fn spawn(
    coord: Arc<Coordinator>,
    store: LogStore,
    id: u64,
) -> raft::Result<mpsc::Sender<Input>> {
    let config = store.config()?.and_then(|b| parse_config(&b));
    let applied = store.applied()?;
    // Committed entries are applied before the hard state carrying their commit index is
    // persisted; a member stopped in between restarts with applied past its stored commit
    // index, which Raft refuses. Applied entries were committed: the commit index is raised.
    if applied > store.initial_state()?.hard_state.commit {
        store.set_commit(applied)?;
    }
    let priority = config
        .as_ref()
        .and_then(|c| c.member_by_raft_id(id))
        .map_or(0, |m| m.raft_priority());
    let cfg = raft::Config {
        id,
        election_tick: ELECTION_TICKS,
        heartbeat_tick: HEARTBEAT_TICKS,
        min_election_tick: MIN_ELECTION_TICKS,
        max_election_tick: MAX_ELECTION_TICKS,
        applied,
        check_quorum: true,
        pre_vote: true,
        skip_bcast_commit: true,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        priority,
        ..Default::default()
    };
    cfg.validate()?;
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let raw = RawNode::new(&cfg, store.clone(), &logger)?;
    let (tx, rx) = mpsc::channel();
    // A member stopped during an initial sync starts it again from scratch.
    let syncing = store.initial_sync_pending()?.is_some();
    let sync_applied = store.sync_applied()?;
    let applied_optime = optime_at_or_before(&store, applied);
    let durable_optime = optime_at_or_before(&store, store.last_index_cached());
    if let Some(c) = &config {
        coord.ensure_links(c, id);
    }
    let mut driver = Driver {
        coord: Arc::downgrade(&coord),
        raw,
        store,
        rx,
        config,
        last_tick: Instant::now(),
        frozen_until: None,
        leader_since: None,
        leader_first_index: 0,
        election_date: None,
        election_optime: OpTime::default(),
        applied: applied_optime,
        durable: durable_optime,
        last_takeover_check: Instant::now(),
        proposed_through: None,
        index_ts: Default::default(),
        was_writable: false,
        forced_config: None,
        delayed: Default::default(),
        last_applied: applied,
        rollback_to: crate::rollback::pending(coord.engine()),
        rolling_back: false,
        rollback_retry_at: None,
        min_valid: None,
        check_local_only_until: Some(Instant::now()),
        syncing,
        held: None,
        sync_applied,
        last_conf_index: applied,
        leader_gone: None,
        sent_commit: Default::default(),
        commit_forward_at: None,
        commit_to_save: None,
        noted_applied: 0,
    };
    coord.observe_timestamp(driver.applied.ts);
    coord.observe_timestamp(driver.durable.ts);
    driver.note_local_only(&coord);
    driver.publish(&coord);
    if syncing {
        crate::initial_sync::spawn(Arc::downgrade(&coord));
    }
    drop(coord);
    std::thread::Builder::new()
        .name("repl-raft".to_string())
        .spawn(move || driver.run())
        .map_err(|e| raft::Error::Store(raft::StorageError::Other(Box::new(e))))?;
    Ok(tx)
}

/// The optime of the newest oplog entry at or before `index` (a short look back: entries
/// without an optime are Raft's own and configuration changes).
fn optime_at_or_before(store: &LogStore, index: u64) -> OpTime {
    let first = store.first_index().unwrap_or(1);
    let mut i = index;
    while i >= first && index - i < 256 {
        if let Ok(Some(e)) = store.entry(i) {
            if let Some(op) = entry_optime(&e) {
                return op;
            }
        }
        i -= 1;
    }
    // The entries before the first one are compacted: the snapshot names the last one's.
    if i < first {
        if let Some(op) = store.snapshot_data().optime {
            return op;
        }
    }
    OpTime::default()
}

struct Driver {
    coord: Weak<Coordinator>,
    raw: RawNode<LogStore>,
    store: LogStore,
    rx: Receiver<Input>,
    config: Option<ReplSetConfig>,
    last_tick: Instant,
    frozen_until: Option<Instant>,
    leader_since: Option<Instant>,
    /// The first index of this member's term as leader: once applied, it may accept writes.
    leader_first_index: u64,
    election_date: Option<bson::DateTime>,
    election_optime: OpTime,
    applied: OpTime,
    durable: OpTime,
    last_takeover_check: Instant,
    /// On a writable primary: the newest local oplog entry proposed to Raft.
    proposed_through: Option<bson::Timestamp>,
    /// On the primary: the Raft index of each proposed entry's `ts` (pruned as members
    /// acknowledge them), for `w: N`.
    index_ts: std::collections::BTreeMap<u64, u64>,
    was_writable: bool,
    /// A configuration forced on this member (`replSetReconfig` with `force`), proposed to
    /// the set once this member leads.
    forced_config: Option<ReplSetConfig>,
    /// Committed entries not applied yet: a member with `secondaryDelaySecs` applies an
    /// entry once its `wall` time is that old (in log order).
    delayed: std::collections::VecDeque<Entry>,
    /// The newest Raft index applied (Raft is told only this much is applied).
    last_applied: u64,
    /// Rollback: the common point (the newest oplog entry the set holds) when this member's
    /// oplog holds entries past it that the set does not.
    rollback_to: Option<bson::Timestamp>,
    /// A rollback started and is not done (ROLLBACK): committed entries are held, the
    /// member does not stand for election.
    rolling_back: bool,
    /// After a failed rollback (the source went away): when to try again.
    rollback_retry_at: Option<Instant>,
    /// After a rollback: the sync source's newest entry when its documents were fetched;
    /// the member is RECOVERING until it applied that far.
    min_valid: Option<bson::Timestamp>,
    /// Until when to look for entries written as primary and never proposed: at start and
    /// for a while after stepping down (writes that raced the stepdown commit late).
    check_local_only_until: Option<Instant>,
    /// An initial sync runs (`initial_sync`): STARTUP2, committed entries are held.
    syncing: bool,
    /// The committed entries held during an initial sync (first and last index): read back
    /// from the log in chunks once it is done, so holding them costs no memory.
    held: Option<(u64, u64)>,
    /// The newest oplog `ts` (u64) the last initial sync applied: committed entries at or
    /// before it are in the copied data and are skipped.
    sync_applied: u64,
    /// The newest configuration entry applied (at start: the applied index); compaction
    /// waits until that entry is applied.
    last_conf_index: u64,
    /// The primary this member followed is gone (connections to it are refused): the
    /// election clock is advanced (`hurry_election`).
    leader_gone: Option<LeaderGone>,
    /// On the primary: the newest commit index sent to each member (in an append or a
    /// heartbeat).
    sent_commit: std::collections::HashMap<u64, u64>,
    /// On the primary: when to forward the commit index to members no append carried it to
    /// (`COMMIT_FORWARD_DELAY`).
    commit_forward_at: Option<Instant>,
    /// A newer commit index from the `Ready` being handled, not saved yet: `apply_now` writes
    /// it with the applied index, else `on_ready` alone at its end.
    commit_to_save: Option<u64>,
    /// The applied `ts` (as u64) last handed to the coordinator ahead of the pass's view
    /// (`report_applied`).
    noted_applied: u64,
}

struct LeaderGone {
    id: u64,
    /// Until when the last report holds.
    until: Instant,
    /// The first campaign was scheduled (by priority rank); later ones are retries.
    scheduled: bool,
}

impl Driver {
    fn tick_interval(&self) -> Duration {
        let ms = self
            .config
            .as_ref()
            .map_or(10_000, |c| c.settings.election_timeout_millis);
        Duration::from_millis((ms as u64 / ELECTION_TICKS as u64).max(5))
    }

    fn id(&self) -> u64 {
        self.raw.raft.id
    }

    fn run(mut self) {
        loop {
            let tick = self.tick_interval();
            // A proposal made while publishing (the new primary's no-op) is handled at once.
            let wait = if self.raw.has_ready() {
                Duration::ZERO
            } else {
                let next_tick = tick.saturating_sub(self.last_tick.elapsed());
                self.commit_forward_at.map_or(next_tick, |t| {
                    next_tick.min(t.saturating_duration_since(Instant::now()))
                })
            };
            match self.rx.recv_timeout(wait) {
                Ok(input) => {
                    self.handle(input);
                    let mut n = 0;
                    while let Ok(more) = self.rx.try_recv() {
                        self.handle(more);
                        n += 1;
                        if n > 4096 {
                            break;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let Some(coord) = self.coord.upgrade() else {
                return;
            };
            if transport_stopping(&coord) {
                return;
            }
            if self.last_tick.elapsed() >= tick {
                self.last_tick = Instant::now();
                self.tick(&coord);
            }
            self.propose_new_entries(&coord);
            self.propose_forced_config();
            self.note_local_only(&coord);
            let rolled = self.maybe_rollback(&coord).map(|_| ());
            let released = rolled.and_then(|()| {
                if self.delayed.is_empty() && self.held.is_none() {
                    Ok(())
                } else {
                    self.apply(&coord, Vec::new())
                        .map(|()| self.advance_apply())
                }
            });
            self.forward_commit();
            let ready = released.and_then(|()| self.on_ready(&coord));
            if let Err(e) = ready.and_then(|()| self.maybe_compact(&coord)) {
                // MongoDB stops a member that cannot persist its replication state; this one
                // stops taking part (it no longer votes, leads or acknowledges).
                eprintln!("replication: stopping the Raft driver: {e}");
                return;
            }
            self.publish(&coord);
        }
    }

    fn me(&self) -> Option<&crate::config::MemberConfig> {
        self.config.as_ref()?.member_by_raft_id(self.id())
    }

    fn frozen(&self) -> bool {
        self.frozen_until.is_some_and(|t| Instant::now() < t)
    }

    fn may_campaign(&self, coord: &Coordinator) -> bool {
        self.me().is_some_and(|m| m.electable())
            && !self.frozen()
            && !coord.in_maintenance()
            && !self.syncing
            && !self.rolling_back
    }

    fn tick(&mut self, coord: &Coordinator) {
        let leader = self.raw.raft.state == StateRole::Leader;
        let may_campaign = self.may_campaign(coord);
        // Raft refuses its vote to a candidate of lower priority whose log is no longer than
        // its own: a member that may not stand (in ROLLBACK, initial sync, frozen, in
        // maintenance) must not hold up the election of the others that way.
        let priority = if may_campaign {
            self.me().map_or(0, |m| m.raft_priority())
        } else {
            0
        };
        if self.raw.raft.priority != priority {
            self.raw.raft.set_priority(priority);
        }
        self.hurry_election(coord);
        if !leader && !may_campaign {
            let timeout = self.raw.raft.randomized_election_timeout();
            if self.raw.raft.election_elapsed + 1 >= timeout {
                self.raw.raft.election_elapsed = timeout.saturating_sub(2);
            }
        }
        self.raw.tick();
        if leader {
            self.maybe_priority_takeover(coord);
            self.maybe_clear_newly_added(coord);
        }
    }

    /// MongoDB's term (Raft's bootstrap term 1 is MongoDB's 0).
    fn term(&self) -> i64 {
        self.raw.raft.term.saturating_sub(1) as i64
    }

    /// MongoDB's automatic reconfiguration on the primary: a newly added member heard to be
    /// past initial sync (SECONDARY, RECOVERING or ROLLBACK) loses its `newlyAdded` mark, one
    /// member per configuration, which the Raft configuration change turns from learner into
    /// voter.
    fn maybe_clear_newly_added(&mut self, coord: &Coordinator) {
        if !self.was_writable || self.raw.raft.has_pending_conf() {
            return;
        }
        let Some(config) = &self.config else { return };
        let synced = config.members.iter().position(|m| {
            m.newly_added
                && coord.peer_info(m.raft_id()).is_some_and(|p| {
                    p.healthy
                        && matches!(
                            p.state,
                            MemberState::Secondary
                                | MemberState::Recovering
                                | MemberState::Rollback
                        )
                })
        });
        let Some(i) = synced else { return };
        let mut next = config.clone();
        next.members[i].newly_added = false;
        next.version += 1;
        next.term = self.term();
        match crate::membership::propose(&mut self.raw, &next) {
            Ok(()) => eprintln!(
                "replication: member {} finished its initial sync: configuration version {} makes it a voter",
                next.members[i].host, next.version
            ),
            Err(e) => eprintln!(
                "replication: cannot propose the configuration that makes member {} a voter: {}",
                next.members[i].host, e.message
            ),
        }
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Messages(msgs) => {
                let id = self.id();
                // A member in initial sync or rollback does not take the primary role
                // (leader transfer).
                let syncing = self.syncing || self.rolling_back;
                for m in msgs.into_iter().filter(|m| {
                    m.to == id && !(syncing && m.get_msg_type() == MessageType::MsgTimeoutNow)
                }) {
                    // Errors are messages from unknown peers or stale terms: dropped.
                    let _ = self.raw.step(m);
                }
            }
            Input::Campaign => {
                let _ = self.raw.campaign();
            }
            Input::StepDown { freeze, force } => {
                if self.raw.raft.state == StateRole::Leader {
                    let target = self
                        .coord
                        .upgrade()
                        .and_then(|c| self.transfer_target(&c, None));
                    if let Some(target) = target {
                        self.frozen_until = Some(Instant::now() + freeze);
                        self.raw.transfer_leader(target);
                    } else if force {
                        // MongoDB's forced stepdown: no member is caught up, so none takes
                        // over now; the others elect one once their election timeout passes
                        // (this member, frozen, does not stand).
                        self.frozen_until = Some(Instant::now() + freeze);
                        let term = self.raw.raft.term;
                        self.raw.raft.become_follower(term, raft::INVALID_ID);
                    }
                }
            }
            Input::Freeze(d) => {
                self.frozen_until = (!d.is_zero()).then(|| Instant::now() + d);
            }
            Input::Wake => {}
            Input::Reconfig(req) => {
                let result = self.reconfig(req.config, req.force);
                let _ = req.reply.send(result);
            }
            Input::ReadIndex(id) => self.raw.read_index(id.to_be_bytes().to_vec()),
            Input::InitialSyncDone(out) => self.initial_sync_done(out),
            Input::Unreachable(id) => self.raw.report_unreachable(id),
            Input::PeerGone(id) => {
                let raft = &self.raw.raft;
                if raft.state == StateRole::Leader {
                    return;
                }
                let until = Instant::now() + LEADER_GONE_FOR;
                match &mut self.leader_gone {
                    Some(g) if g.id == id => g.until = until,
                    _ if raft.leader_id == id => {
                        self.leader_gone = Some(LeaderGone {
                            id,
                            until,
                            scheduled: false,
                        })
                    }
                    _ => return,
                }
                if let Some(coord) = self.coord.upgrade() {
                    self.hurry_election(&coord);
                }
            }
            Input::SnapshotDone(id, ok) => self.raw.report_snapshot(
                id,
                if ok {
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                },
            ),
        }
    }

    /// The primary's process is gone (`Input::PeerGone`): instead of waiting out the election
    /// timeout, this member leaves the primary's lease at once (so it grants votes) and, if it
    /// may stand, campaigns at its next tick when no healthy electable member has a higher
    /// priority, one tick later per such member; a campaign that fails is retried after 4 to 7
    /// ticks while the primary stays gone. Only the election clock moves: Raft's pre-vote and
    /// election (log comparison, priorities, a majority of votes) decide as always. A silent
    /// primary (stopped, partitioned) refuses nothing and keeps the full timeout.
    fn hurry_election(&mut self, coord: &Coordinator) {
        let Some(g) = &self.leader_gone else { return };
        let raft = &self.raw.raft;
        let led_by_other = raft.leader_id != raft::INVALID_ID && raft.leader_id != g.id;
        if Instant::now() >= g.until || raft.state == StateRole::Leader || led_by_other {
            self.leader_gone = None;
            return;
        }
        let (gone, scheduled) = (g.id, g.scheduled);
        let may_campaign = self.may_campaign(coord);
        let timeout = raft.election_timeout();
        let randomized = raft.randomized_election_timeout();
        let target = if raft.leader_id == gone {
            // Still following the gone primary: out of its lease now.
            let mut target = timeout;
            if may_campaign && !scheduled {
                let mine = self.me().map_or(0, |m| m.raft_priority());
                let rank = self.config.as_ref().map_or(0, |c| {
                    c.members
                        .iter()
                        .filter(|m| {
                            let id = m.raft_id();
                            id != self.id()
                                && id != gone
                                && m.electable()
                                && m.raft_priority() > mine
                                && coord.peer_info(id).is_some_and(|p| p.healthy)
                        })
                        .count()
                });
                target = target.max(randomized.saturating_sub(1 + rank));
                if let Some(g) = &mut self.leader_gone {
                    g.scheduled = true;
                }
            }
            target
        } else if may_campaign {
            // A campaign since the primary left failed (or is under way): retry sooner.
            RETRY_ELAPSED
        } else {
            return;
        };
        let raft = &mut self.raw.raft;
        raft.election_elapsed = raft.election_elapsed.max(target);
    }

    /// Installs a configuration `replSetReconfig` validated: proposed through Raft on the
    /// leader; with `force` on another member, installed here at once (and proposed to the
    /// set when this member leads).
    fn reconfig(&mut self, config: ReplSetConfig, force: bool) -> nidus_common::Result<()> {
        if self.raw.raft.state == StateRole::Leader {
            // The command checked `config` against the configuration it saw; this member may
            // have installed a newer one of its own since (an automatic reconfiguration).
            if let (false, Some(current)) = (force, &self.config) {
                let mut current = current.clone();
                if current.term >= 0 {
                    current.term = self.term();
                }
                crate::membership::check_compatible(&current, &config, false)?;
            }
            return crate::membership::propose(&mut self.raw, &config);
        }
        if !force {
            return Err(nidus_common::Error::new(
                nidus_common::ErrorCode::NotWritablePrimary,
                "New config is rejected :: caused by :: replSetReconfig should only be run on a writable PRIMARY. Current state SECONDARY;",
            ));
        }
        let coord = self
            .coord
            .upgrade()
            .ok_or_else(|| nidus_common::Error::internal("stopping"))?;
        let bytes = bson::to_vec(&config.to_document())
            .map_err(|e| nidus_common::Error::internal(e.to_string()))?;
        let internal = |e: raft::Error| nidus_common::Error::internal(e.to_string());
        let cs = crate::membership::install_locally(&mut self.raw, &config).map_err(internal)?;
        self.store
            .set_applied(
                self.raw.raft.raft_log.applied,
                None,
                Some(&bytes),
                Some(&cs),
            )
            .map_err(internal)?;
        let sole_voter = cs.voters == [self.id()];
        self.set_config(&coord, config.clone());
        self.forced_config = Some(config);
        if sole_voter {
            let _ = self.raw.campaign();
        }
        Ok(())
    }

    /// Once a member that forced a configuration is a writable primary, the set receives
    /// the configuration through the log.
    fn propose_forced_config(&mut self) {
        if !self.was_writable || self.raw.raft.state != StateRole::Leader {
            return;
        }
        if let Some(c) = self.forced_config.take() {
            if let Err(e) = crate::membership::propose(&mut self.raw, &c) {
                if e.code == nidus_common::ErrorCode::ConfigurationInProgress {
                    self.forced_config = Some(c);
                }
            }
        }
    }

    /// The member to hand the primary role to: electable, heard from lately, not frozen,
    /// nearly caught up, of priority above `above` when given; the highest priority wins,
    /// then the most entries.
    fn transfer_target(&self, coord: &Coordinator, above: Option<i64>) -> Option<u64> {
        let config = self.config.as_ref()?;
        let last = self.raw.raft.raft_log.last_index();
        let prs = self.raw.raft.prs();
        let mut best: Option<(i64, u64, u64)> = None;
        for m in &config.members {
            let id = m.raft_id();
            if id == self.id() || !m.electable() {
                continue;
            }
            if above.is_some_and(|p| m.raft_priority() <= p) {
                continue;
            }
            let Some(pr) = prs.get(id) else { continue };
            if !pr.recent_active || pr.matched + TRANSFER_LAG < last {
                continue;
            }
            let peer = coord.peer_info(id).unwrap_or_default();
            if !peer.healthy
                || peer.in_initial_sync()
                || peer.frozen_until.is_some_and(|t| Instant::now() < t)
            {
                continue;
            }
            let key = (m.raft_priority(), pr.matched, id);
            if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                best = Some(key);
            }
        }
        best.map(|b| b.2)
    }

    /// MongoDB's priority takeover: a primary that sees a caught-up member of higher priority
    /// hands it the role (here by Raft leader transfer).
    fn maybe_priority_takeover(&mut self, coord: &Coordinator) {
        let interval = self
            .config
            .as_ref()
            .map_or(2000, |c| c.settings.heartbeat_interval_millis)
            .max(10) as u64;
        if self.last_takeover_check.elapsed() < Duration::from_millis(interval) {
            return;
        }
        self.last_takeover_check = Instant::now();
        if self.raw.raft.lead_transferee.is_some()
            || self
                .leader_since
                .is_none_or(|t| t.elapsed() < Duration::from_millis(interval))
        {
            return;
        }
        let mine = self.me().map_or(0, |m| m.raft_priority());
        if let Some(target) = self.transfer_target(coord, Some(mine)) {
            let caught_up = self
                .raw
                .raft
                .prs()
                .get(target)
                .is_some_and(|p| p.matched >= self.raw.raft.raft_log.last_index());
            if caught_up {
                self.raw.transfer_leader(target);
            }
        }
    }

    /// Hands Raft's messages to the peer links, noting (on the primary) the commit index each
    /// member was sent.
    fn send(&mut self, coord: &Coordinator, msgs: Vec<raft::eraftpb::Message>) {
        if msgs.is_empty() {
            return;
        }
        if self.raw.raft.state == StateRole::Leader {
            for m in &msgs {
                if matches!(
                    m.get_msg_type(),
                    MessageType::MsgAppend | MessageType::MsgHeartbeat
                ) {
                    let sent = self.sent_commit.entry(m.to).or_default();
                    *sent = (*sent).max(m.commit);
                }
            }
        }
        coord.send_messages(msgs);
    }

    /// On the primary: once `COMMIT_FORWARD_DELAY` passed since the commit index moved past
    /// what a member was sent, an append to each such member carries it (Raft sends entries
    /// the member lacks with it, or none). A member Raft sends nothing to (it is probed, or
    /// paused) learns it from Raft's next heartbeat or append.
    fn forward_commit(&mut self) {
        if self.raw.raft.state != StateRole::Leader {
            self.commit_forward_at = None;
            return;
        }
        let committed = self.raw.raft.raft_log.committed;
        let me = self.id();
        let sent = &self.sent_commit;
        let behind = |id: &u64| *id != me && sent.get(id).copied().unwrap_or(0) < committed;
        if !self.raw.raft.prs().iter().any(|(id, _)| behind(id)) {
            self.commit_forward_at = None;
            return;
        }
        let now = Instant::now();
        match self.commit_forward_at {
            None => self.commit_forward_at = Some(now + COMMIT_FORWARD_DELAY),
            Some(at) if now >= at => {
                let ids: Vec<u64> = self
                    .raw
                    .raft
                    .prs()
                    .iter()
                    .map(|(id, _)| *id)
                    .filter(behind)
                    .collect();
                for id in ids {
                    self.raw.raft.send_append(id);
                    self.sent_commit.insert(id, committed);
                }
                self.commit_forward_at = None;
            }
            Some(_) => {}
        }
    }

    fn on_ready(&mut self, coord: &Coordinator) -> raft::Result<()> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        if !ready.messages().is_empty() {
            self.send(coord, ready.take_messages());
        }
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            let data = SnapshotData::parse(&snap.data);
            // A snapshot of a compacted log stands for oplog entries this member lacks: their
            // data is copied by an initial sync (the set's first snapshot stands for none).
            let needs_sync = data.optime.is_some();
            self.store.apply_snapshot(&snap, needs_sync)?;
            let index = snap.get_metadata().index;
            self.delayed.retain(|e| e.index > index);
            self.held = self
                .held
                .map(|(from, to)| (from.max(index + 1), to))
                .filter(|(from, to)| from <= to);
            self.last_applied = self.last_applied.max(index);
            self.last_conf_index = self.last_conf_index.max(index);
            if let Some(c) = data.config.as_deref().and_then(parse_config) {
                self.set_config(coord, c);
            }
            if needs_sync && !self.syncing {
                self.syncing = true;
                // The copied data replaces everything here, divergent entries included.
                self.rollback_to = None;
                self.min_valid = None;
                crate::rollback::set_pending(coord.engine(), None)
                    .map_err(|e| store_error(format!("initial sync: {}", e.message)))?;
                crate::initial_sync::spawn(self.coord.clone());
            }
        }
        for rs in ready.take_read_states() {
            if let Ok(id) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) {
                coord.reads.done(u64::from_be_bytes(id), rs.index);
            }
        }
        let conflict = self.note_conflict(ready.entries());
        if conflict {
            // Undone before Raft's log loses the divergent entries and before anything
            // after the common point is applied.
            self.maybe_rollback(coord)?;
        }
        let committed = ready.take_committed_entries();
        // A hard state that needs no sync moved only the commit index: it is written with the
        // applied index of the entries it commits (one write), or alone below.
        let commit_only = ready.entries().is_empty() && !ready.must_sync();
        if let (true, Some(hs)) = (commit_only, ready.hs()) {
            self.commit_to_save = Some(hs.commit);
        }
        self.apply(coord, committed)?;
        if !ready.entries().is_empty() || (ready.hs().is_some() && !commit_only) {
            self.store.save_ready(&ready)?;
            if let Some(op) = ready.entries().iter().rev().find_map(entry_optime) {
                self.durable = op;
                coord.observe_timestamp(op.ts);
            } else if conflict {
                self.durable = optime_at_or_before(&self.store, self.store.last_index_cached());
            }
        }
        if !ready.persisted_messages().is_empty() {
            // The acknowledgement carries the entries just applied (see `report_applied`).
            self.report_applied(coord);
            self.send(coord, ready.take_persisted_messages());
        }
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.commit_to_save = self.commit_to_save.max(Some(commit));
        }
        self.send(coord, light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(coord, committed)?;
        self.advance_apply();
        if let Some(commit) = self.commit_to_save.take() {
            // Nothing was applied with it (entries held, delayed, or applied already).
            self.store.set_commit(commit)?;
        }
        // Entries applied after this pass's messages left: no message of this member's says
        // so until Raft's next round, so a status-only request tells the primary now.
        let leader = self.raw.raft.leader_id;
        if self.report_applied(coord) && self.raw.raft.state == StateRole::Follower && leader != 0 {
            coord.push_status(leader);
        }
        Ok(())
    }

    /// Hands this member's applied optime to the coordinator when it moved, ahead of the
    /// view published at the end of the pass, so the status its messages carry says it: the
    /// primary counts a member for `w: N` once it applied the write (MongoDB's members
    /// acknowledge with their last applied optime), so a read on a member that acknowledged
    /// a write sees it. Whether it moved.
    fn report_applied(&mut self, coord: &Coordinator) -> bool {
        let ts = nidus_engine::oplog::ts_to_u64(self.applied.ts);
        if ts == self.noted_applied {
            return false;
        }
        self.noted_applied = ts;
        coord.publish_applied(self.applied, self.durable.max_by_ts(self.applied));
        true
    }

    /// Tells Raft how far entries are applied (never backwards).
    fn advance_apply(&mut self) {
        let to = self.last_applied.max(self.raw.raft.raft_log.applied);
        self.raw.advance_apply_to(to);
    }

    /// Applies the committed entries that are due: all of them, or on a member with
    /// `secondaryDelaySecs` those whose `wall` time is at least that old, stopping at the
    /// first that is not (entries apply in log order).
    fn apply(&mut self, coord: &Coordinator, entries: Vec<Entry>) -> raft::Result<()> {
        const HELD_CHUNK: u64 = 1024;
        const HELD_CHUNK_BYTES: u64 = 64 << 20;
        if self.syncing || self.rolling_back || self.held.is_some() {
            // Committed entries are in the log (Raft hands out only persisted ones).
            if let (Some(first), Some(last)) = (entries.first(), entries.last()) {
                let from = self.held.map_or(first.index, |(f, _)| f);
                self.held = Some((from, last.index));
            }
            // Nothing is applied on top of divergent entries not undone yet.
            if self.syncing || self.rolling_back {
                return Ok(());
            }
            if let Some((from, to)) = self.held {
                let hi = to.min(from + HELD_CHUNK - 1);
                let chunk = self.store.entries(
                    from,
                    hi + 1,
                    HELD_CHUNK_BYTES,
                    GetEntriesContext::empty(false),
                )?;
                // At least one entry comes back (Raft's size limit keeps the first).
                let through = chunk.last().map_or(hi, |e| e.index);
                self.held = (through < to).then_some((through + 1, to));
                self.delayed.extend(chunk);
            }
        } else {
            self.delayed.extend(entries);
        }
        let delay_ms = self.me().map_or(0, |m| m.secondary_delay_secs) * 1000;
        let now = bson::DateTime::now().timestamp_millis();
        let mut due = 0;
        for e in &self.delayed {
            if delay_ms > 0 {
                if let Some(op) = entry_optime(e) {
                    if op.wall.timestamp_millis() + delay_ms > now {
                        break;
                    }
                }
            }
            due += 1;
        }
        if due == 0 {
            return Ok(());
        }
        let ready: Vec<Entry> = self.delayed.drain(..due).collect();
        self.apply_now(coord, ready)
    }

    /// Raft replaces this member's log from the first of `entries` when that index is
    /// already stored (the leader's log conflicts there): the oplog entries of the replaced
    /// part, and any after them, are divergent. Returns whether there is a conflict.
    fn note_conflict(&mut self, entries: &[Entry]) -> bool {
        let Some(first) = entries.first().map(|e| e.index) else {
            return false;
        };
        let last = self.store.last_index_cached();
        if first > last {
            return false;
        }
        // The replaced entries' first optime (the log's ts only grows); Raft never replaces
        // committed entries, so this is after the majority commit point.
        let replaced = (first..=last).find_map(|i| {
            self.store
                .entry(i)
                .ok()
                .flatten()
                .as_ref()
                .and_then(entry_optime)
        });
        let Some(op) = replaced else {
            return false;
        };
        let common =
            nidus_engine::oplog::u64_to_ts(nidus_engine::oplog::ts_to_u64(op.ts).saturating_sub(1));
        self.set_rollback_to(common);
        true
    }

    fn set_rollback_to(&mut self, common: bson::Timestamp) {
        let earlier = self.rollback_to.is_none_or(|r| {
            nidus_engine::oplog::ts_to_u64(common) < nidus_engine::oplog::ts_to_u64(r)
        });
        if earlier {
            self.rollback_to = Some(common);
        }
    }

    /// A member that is not primary writes nothing of its own: oplog entries past the
    /// newest one in its Raft log were written as primary and never proposed (a write that
    /// raced a stepdown, or a primary stopped before proposing), so they are divergent.
    fn note_local_only(&mut self, coord: &Coordinator) {
        if self.raw.raft.state == StateRole::Leader || self.syncing {
            return;
        }
        let Some(until) = self.check_local_only_until else {
            return;
        };
        if Instant::now() > until {
            self.check_local_only_until = None;
        }
        let Some(oplog) = coord.engine().oplog() else {
            return;
        };
        let known = nidus_engine::oplog::ts_to_u64(self.durable.ts)
            .max(nidus_engine::oplog::ts_to_u64(self.applied.ts));
        // No entry in the Raft log yet: what the oplog holds predates the set.
        if known == 0 {
            return;
        }
        if oplog.visible_u64() > known {
            self.set_rollback_to(nidus_engine::oplog::u64_to_ts(known));
        }
    }

    /// Runs a pending rollback against the primary (see `rollback`). When the primary cannot
    /// be reached (it went away mid-rollback), the member stays in ROLLBACK, holding the
    /// committed entries it receives, and tries again a second later against whichever
    /// member leads by then; a member that stops mid-rollback resumes it at its next start.
    fn maybe_rollback(&mut self, coord: &Coordinator) -> raft::Result<()> {
        let Some(common) = self.rollback_to else {
            return Ok(());
        };
        if self.syncing {
            // The initial sync replaces the data; nothing to undo.
            self.rollback_to = None;
            self.rolling_back = false;
            return Ok(());
        }
        if self.raw.raft.state == StateRole::Leader {
            // Elected with entries it never proposed: they are proposed with its first
            // entries instead (`on_became_leader`). A member in ROLLBACK does not stand.
            return Ok(());
        }
        if self.rollback_retry_at.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        // Nothing of this member's own past the common point (Raft replaced entries it had
        // received but not applied): nothing to undo.
        let holds_more = coord.engine().oplog().is_some_and(|o| {
            o.visible_u64() > nidus_engine::oplog::ts_to_u64(common)
                || o.last_reserved_u64() > nidus_engine::oplog::ts_to_u64(common)
        });
        if !holds_more {
            self.rollback_to = None;
            self.rolling_back = false;
            if crate::rollback::pending(coord.engine()).is_some() {
                crate::rollback::set_pending(coord.engine(), None)
                    .map_err(|e| store_error(format!("rollback: {}", e.message)))?;
            }
            return Ok(());
        }
        let leader = self.raw.raft.leader_id;
        let Some(host) = (leader != 0 && leader != self.id())
            .then(|| coord.host_of(leader))
            .flatten()
        else {
            return Ok(());
        };
        crate::rollback::set_pending(coord.engine(), Some(common))
            .map_err(|e| store_error(format!("rollback: {}", e.message)))?;
        if !self.rolling_back {
            self.rolling_back = true;
            self.publish(coord);
            // A test hook (MongoDB's tests use the `rollbackHangBeforeStart` fail point):
            // holds the member in ROLLBACK so its state can be observed.
            if let Some(ms) = std::env::var("NIDUS_TEST_ROLLBACK_PAUSE_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
            {
                std::thread::sleep(Duration::from_millis(ms.min(60_000)));
            }
        }
        let mut last_err = String::new();
        for attempt in 0..3 {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            match crate::rollback::run(coord.engine(), common, &host) {
                Ok(out) => {
                    eprintln!(
                        "replication: rolled back {} oplog entries ({} documents) after {:?} from {host}",
                        out.entries, out.documents, common
                    );
                    crate::rollback::set_pending(coord.engine(), None)
                        .map_err(|e| store_error(format!("rollback: {}", e.message)))?;
                    self.rollback_to = None;
                    self.rolling_back = false;
                    self.rollback_retry_at = None;
                    self.min_valid = out.min_valid;
                    return Ok(());
                }
                Err(e) => last_err = e.message.to_string(),
            }
        }
        eprintln!("replication: rollback from {host} failed, trying again: {last_err}");
        self.rollback_retry_at = Some(Instant::now() + Duration::from_secs(1));
        Ok(())
    }

    /// The initial sync copied the data: the held committed entries after what it applied
    /// are applied next (by the run loop), those before are skipped.
    fn initial_sync_done(&mut self, out: crate::initial_sync::Outcome) {
        let applied = nidus_engine::oplog::ts_to_u64(out.applied.ts);
        if let Err(e) = self.store.initial_sync_done(applied) {
            eprintln!("replication: cannot record the end of the initial sync: {e}");
            return;
        }
        eprintln!(
            "replication: {} committed entries were held during the initial sync",
            self.held.map_or(0, |(from, to)| to + 1 - from)
        );
        self.syncing = false;
        self.sync_applied = applied;
        self.rollback_to = None;
        self.applied = out.applied;
        self.durable = self.durable.max_by_ts(out.applied);
        self.min_valid = Some(out.min_valid);
        if let Some(coord) = self.coord.upgrade() {
            coord.observe_timestamp(out.applied.ts);
            if let Some(oplog) = coord.engine().oplog() {
                oplog.set_commit_point(out.applied.ts);
            }
        }
    }

    /// Compacts the Raft log once it is over its size bound (see `storage`): through an
    /// applied entry, keeping about half the bound of newer entries; on the primary not past
    /// what a healthy member still needs unless the log reached twice the bound (that member
    /// then gets the snapshot and an initial sync). At most `COMPACT_CHUNK` entries a pass.
    fn maybe_compact(&mut self, coord: &Coordinator) -> raft::Result<()> {
        const COMPACT_CHUNK: u64 = 20_000;
        if self.syncing {
            return Ok(());
        }
        let oplog_bytes = coord
            .engine()
            .oplog()
            .map_or(990 << 20, |o| o.max_bytes().max(0) as u64);
        let bound = crate::storage::max_log_bytes(oplog_bytes);
        let (first, last, bytes) = self.store.log_stats();
        if bytes <= bound || last < first {
            return Ok(());
        }
        let avg = (bytes / (last - first + 1)).max(1);
        let keep = (bound / 2 / avg).max(1);
        let mut to = last.saturating_sub(keep).min(self.last_applied);
        // The membership stored with the snapshot is the one in force: no configuration
        // entry may lie after the compacted index among the applied ones.
        if self.last_conf_index > to {
            return Ok(());
        }
        if self.raw.raft.state == StateRole::Leader && bytes <= bound.saturating_mul(2) {
            let me = self.id();
            let needed = self
                .raw
                .raft
                .prs()
                .iter()
                .filter(|(id, p)| **id != me && p.recent_active)
                .map(|(_, p)| p.matched)
                .min();
            if let Some(m) = needed {
                to = to.min(m);
            }
        }
        let to = to.min(first + COMPACT_CHUNK - 1);
        if to < first {
            return Ok(());
        }
        let optime = optime_at_or_before(&self.store, to);
        self.store.compact(to, optime)?;
        Ok(())
    }

    fn set_config(&mut self, coord: &Coordinator, config: ReplSetConfig) {
        if let Some(m) = config.member_by_raft_id(self.id()) {
            self.raw.raft.set_priority(m.raft_priority());
        }
        coord.ensure_links(&config, self.id());
        coord.config_applied(&config);
        self.config = Some(config);
    }

    /// Applies committed entries in order and records how far.
    fn apply_now(&mut self, coord: &Coordinator, entries: Vec<Entry>) -> raft::Result<()> {
        let Some(last) = entries.last().map(|e| e.index) else {
            return Ok(());
        };
        self.last_applied = self.last_applied.max(last);
        let mut new_config: Option<(ReplSetConfig, Vec<u8>)> = None;
        let mut conf_state = None;
        let mut inserts = crate::apply::InsertGroup::default();
        for e in &entries {
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if e.data.is_empty() {
                        continue;
                    }
                    let raw = bson::RawDocumentBuf::from_bytes(e.data.to_vec())
                        .map_err(|err| store_error(format!("entry {}: {err}", e.index)))?;
                    let op = OpTime::of_raw(&raw);
                    let copied = op.is_some_and(|op| {
                        nidus_engine::oplog::ts_to_u64(op.ts) <= self.sync_applied
                    });
                    if copied {
                        // In the data an initial sync copied (it applied through there).
                        continue;
                    }
                    let Err(raw) = inserts.push(raw) else {
                        continue;
                    };
                    self.apply_inserts(coord, &mut inserts)?;
                    let Err(raw) = inserts.push(raw) else {
                        continue;
                    };
                    self.apply_one(coord, &raw)?;
                    self.note_applied(coord, op);
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    self.apply_inserts(coord, &mut inserts)?;
                    self.last_conf_index = e.index;
                    let cs = if e.get_entry_type() == EntryType::EntryConfChange {
                        let cc = ConfChange::parse_from_bytes(&e.data)
                            .map_err(raft::Error::CodecError)?;
                        self.raw.apply_conf_change(&cc)?
                    } else {
                        let cc = ConfChangeV2::parse_from_bytes(&e.data)
                            .map_err(raft::Error::CodecError)?;
                        self.raw.apply_conf_change(&cc)?
                    };
                    let mut cs = cs;
                    if let Some(c) = parse_config(&e.context) {
                        // Versions only grow along the log, except after a forced
                        // configuration: an older configuration committed after it (an
                        // entry of the lost majority's term) does not replace it.
                        let current = new_config
                            .as_ref()
                            .map(|(n, _)| n)
                            .or(self.config.as_ref())
                            .filter(|cur| cur.version > c.version)
                            .cloned();
                        let target = current.as_ref().unwrap_or(&c);
                        if crate::membership::needs_reconcile(&cs, target) {
                            cs = crate::membership::install_locally(&mut self.raw, target)?;
                        }
                        if current.is_none() {
                            new_config = Some((c, e.context.to_vec()));
                        }
                    }
                    conf_state = Some(cs);
                }
            }
        }
        self.apply_inserts(coord, &mut inserts)?;
        self.store.set_applied(
            last,
            self.commit_to_save.take(),
            new_config.as_ref().map(|(_, b)| b.as_slice()),
            conf_state.as_ref(),
        )?;
        if let Some((c, _)) = new_config {
            self.set_config(coord, c);
        }
        // Everything applied here is committed: the majority commit point.
        if let Some(oplog) = coord.engine().oplog() {
            if self.applied.term >= 0 {
                oplog.set_commit_point(self.applied.ts);
            }
        }
        Ok(())
    }

    /// Applies one committed entry. MongoDB stops a member that cannot apply an entry; so
    /// does this one.
    fn apply_one(&self, coord: &Coordinator, raw: &bson::RawDocumentBuf) -> raft::Result<()> {
        crate::apply::apply_entry(coord.engine(), raw, None).map_err(|err| {
            let doc = Document::try_from(raw.as_ref())
                .map_or_else(|_| "(undecodable)".to_string(), |d| d.to_string());
            store_error(format!("cannot apply oplog entry {doc}: {}", err.message))
        })
    }

    /// Applies the inserts gathered in `group` (together when they can be, see
    /// [`crate::apply::InsertGroup`]) and empties it.
    fn apply_inserts(
        &mut self,
        coord: &Coordinator,
        group: &mut crate::apply::InsertGroup,
    ) -> raft::Result<()> {
        let entries = group.take();
        let Some(last) = entries.last() else {
            return Ok(());
        };
        if !crate::apply::apply_inserts_at_once(coord.engine(), &entries) {
            for raw in &entries {
                self.apply_one(coord, raw)?;
            }
        }
        // Entries apply in order and a failure stops the member: the last one's optime is
        // how far this member applied.
        self.note_applied(coord, OpTime::of_raw(last));
        Ok(())
    }

    fn note_applied(&mut self, coord: &Coordinator, op: Option<OpTime>) {
        if let Some(op) = op {
            self.applied = op;
            coord.observe_timestamp(op.ts);
        }
    }

    /// A new primary writes MongoDB's "new primary" no-op, which also commits everything
    /// before its term.
    fn on_became_leader(&mut self, coord: &Coordinator) {
        self.leader_since = Some(Instant::now());
        self.sent_commit.clear();
        self.leader_first_index = self.raw.raft.raft_log.last_index();
        let term = self.raw.raft.term.saturating_sub(1) as i64;
        let wall = bson::DateTime::now();
        let ts = coord.next_timestamp();
        let entry = doc! {
            "op": "n",
            "ns": "",
            "o": { "msg": "new primary" },
            "ts": ts,
            "t": term,
            "v": 2i64,
            "wall": wall,
        };
        self.election_date = Some(wall);
        self.election_optime = OpTime { ts, term, wall };
        if let Some(oplog) = coord.engine().oplog() {
            oplog.set_term(term);
        }
        // Entries it wrote as an earlier primary and never proposed go first (in `ts`
        // order, before the no-op, whose `ts` is later).
        if let (Some(after), Some(oplog)) = (self.rollback_to.take(), coord.engine().oplog()) {
            let after = if nidus_engine::oplog::ts_to_u64(self.durable.ts)
                > nidus_engine::oplog::ts_to_u64(after)
            {
                self.durable.ts
            } else {
                after
            };
            let _ = crate::rollback::set_pending(coord.engine(), None);
            for raw in oplog
                .read_after(coord.engine().kv(), after, usize::MAX)
                .unwrap_or_default()
            {
                let _ = self.raw.propose(Vec::new(), raw.as_bytes().to_vec());
            }
        }
        if let Ok(bytes) = bson::to_vec(&entry) {
            let _ = self.raw.propose(Vec::new(), bytes);
        }
        // Writable once the no-op (and so everything before it) is applied.
        self.leader_first_index = self.raw.raft.raft_log.last_index();
    }

    /// On a writable primary: proposes the local oplog entries written since the last
    /// proposal, in `ts` order (the visibility point guarantees no hole is skipped).
    fn propose_new_entries(&mut self, coord: &Coordinator) {
        let Some(after) = self.proposed_through else {
            return;
        };
        if self.raw.raft.state != StateRole::Leader || self.raw.raft.lead_transferee.is_some() {
            return;
        }
        let Some(oplog) = coord.engine().oplog() else {
            return;
        };
        let Ok(entries) = oplog.read_after(coord.engine().kv(), after, 256) else {
            return;
        };
        for raw in entries {
            let ts = match raw.get("ts") {
                Ok(Some(bson::RawBsonRef::Timestamp(ts))) => ts,
                _ => continue,
            };
            if self
                .raw
                .propose(Vec::new(), raw.as_bytes().to_vec())
                .is_err()
            {
                return;
            }
            let index = self.raw.raft.raft_log.last_index();
            self.index_ts
                .insert(index, ((ts.time as u64) << 32) | ts.increment as u64);
            self.proposed_through = Some(ts);
        }
    }

    fn publish(&mut self, coord: &Coordinator) {
        let leader = self.raw.raft.state == StateRole::Leader;
        if leader && self.leader_since.is_none() {
            self.on_became_leader(coord);
        } else if !leader && self.leader_since.is_some() {
            self.leader_since = None;
            self.check_local_only_until = Some(Instant::now() + Duration::from_secs(5));
            self.election_date = None;
        }
        let raft = &self.raw.raft;
        let state = match (&self.config, leader) {
            (None, _) => MemberState::Startup2,
            (Some(c), _) if c.member_by_raft_id(raft.id).is_none() => MemberState::Removed,
            (_, true) => MemberState::Primary,
            _ if self.syncing => MemberState::Startup2,
            _ if self.rolling_back => MemberState::Rollback,
            _ if self.min_valid.is_some_and(|m| {
                nidus_engine::oplog::ts_to_u64(self.applied.ts) < nidus_engine::oplog::ts_to_u64(m)
            }) =>
            {
                MemberState::Recovering
            }
            _ => MemberState::Secondary,
        };
        let writable = leader
            && raft.lead_transferee.is_none()
            && raft.raft_log.applied >= self.leader_first_index;
        let progress: std::collections::BTreeMap<u64, (u64, bool)> = if leader {
            raft.prs()
                .iter()
                .map(|(id, p)| (*id, (p.matched, p.recent_active)))
                .collect()
        } else {
            Default::default()
        };
        let mut member_ts = std::collections::BTreeMap::new();
        if leader {
            let min_matched = progress.values().map(|p| p.0).min().unwrap_or(0);
            for (id, (matched, _)) in &progress {
                let ts = if *id == raft.id {
                    // The primary's own writes are in its oplog when they are proposed.
                    self.proposed_through
                        .map_or(0, |t| ((t.time as u64) << 32) | t.increment as u64)
                } else if coord.peer_in_initial_sync(*id) {
                    // Its Raft log may hold the entries, but the data of those a snapshot
                    // stands for is still being copied: as in MongoDB, a member in initial
                    // sync acknowledges no write.
                    0
                } else {
                    self.index_ts
                        .range(..=*matched)
                        .next_back()
                        .map_or(0, |(_, ts)| *ts)
                };
                member_ts.insert(*id, ts);
            }
            // Entries every member holds are no longer needed (keep the newest of them).
            let keep_from = self
                .index_ts
                .range(..=min_matched)
                .next_back()
                .map(|(i, _)| *i);
            if let Some(k) = keep_from {
                self.index_ts = self.index_ts.split_off(&k);
            }
        } else {
            self.index_ts.clear();
        }
        if writable && !self.was_writable {
            self.proposed_through = coord
                .engine()
                .oplog()
                .and_then(|o| o.last_visible(coord.engine().kv()).ok())
                .map(|op| op.ts);
        } else if !writable {
            self.proposed_through = None;
        }
        self.was_writable = writable;
        if state == MemberState::Secondary || state == MemberState::Primary {
            self.min_valid = None;
        }
        coord.publish(View {
            state,
            config: self.config.clone(),
            id: raft.id,
            leader: raft.leader_id,
            term: raft.term.saturating_sub(1) as i64,
            commit_index: raft.raft_log.committed,
            applied_index: raft.raft_log.applied,
            last_index: raft.raft_log.last_index(),
            writable,
            election_date: self.election_date,
            election_optime: self.election_optime,
            applied: self.applied,
            durable: self.durable.max_by_ts(self.applied),
            logged: self.durable,
            committed: self.applied,
            progress,
            member_ts,
            frozen_until: self.frozen_until.filter(|t| Instant::now() < *t),
        });
    }
}

fn store_error(msg: String) -> raft::Error {
    raft::Error::Store(raft::StorageError::Other(msg.into()))
}

fn transport_stopping(coord: &Coordinator) -> bool {
    use crate::transport::LinkOwner;
    coord.stopping()
}

impl OpTime {
    fn max_by_ts(self, other: OpTime) -> OpTime {
        if (other.ts.time, other.ts.increment) > (self.ts.time, self.ts.increment) {
            other
        } else {
            self
        }
    }
}
