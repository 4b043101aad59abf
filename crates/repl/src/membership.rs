//! `replSetReconfig`: MongoDB's checks of a new configuration against the one in force, and
//! the Raft configuration changes that carry it.
//!
//! A configuration is installed by a Raft configuration-change entry whose context is the new
//! configuration document, so every member installs it at the same log position. Voting
//! members (`votes: 1`) are Raft voters, `votes: 0` members Raft learners; a change of
//! priority, `hidden`, tags or settings alone is carried by a change that re-adds the primary
//! (no membership change). A forced reconfiguration (`force: true`, for a set that lost its
//! majority) cannot be committed through Raft: the member installs it locally, and once it
//! leads under it, it proposes it to the set like any other configuration.

use crate::config::ReplSetConfig;
use crate::storage::LogStore;
use crate::{Coordinator, Input, MemberState};
use bson::Document;
use nidus_common::{Error, ErrorCode, Result};
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState,
};
use raft::RawNode;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the driver needs to install a configuration.
pub(crate) struct ReconfigRequest {
    pub config: ReplSetConfig,
    pub force: bool,
    pub reply: mpsc::Sender<Result<()>>,
}

fn version_and_term(c: &ReplSetConfig) -> String {
    format!("{{version: {}, term: {}}}", c.version, c.term)
}

fn incompatible(msg: String) -> Error {
    Error::new(ErrorCode::NewReplicaSetConfigurationIncompatible, msg)
}

/// MongoDB's `validateOldAndNewConfigsCompatible` and, without `force`, the single voting
/// member change rule (so every quorum of the new configuration overlaps the old one's, which
/// is also what a simple Raft configuration change needs).
pub fn check_compatible(old: &ReplSetConfig, new: &ReplSetConfig, force: bool) -> Result<()> {
    let newer = if new.term < 0 || old.term < 0 {
        new.version > old.version
    } else {
        (new.version, new.term) > (old.version, old.term)
    };
    if !newer {
        return Err(incompatible(format!(
            "New replica set configuration version and term must be greater than old, but {} is not greater than {} for replica set {}",
            version_and_term(new),
            version_and_term(old),
            new.set_name
        )));
    }
    if old.set_name != new.set_name {
        return Err(incompatible(format!(
            "New and old configurations differ in replica set name; old was {}, and new is {}",
            old.set_name, new.set_name
        )));
    }
    if old.settings.replica_set_id != new.settings.replica_set_id {
        return Err(incompatible(format!(
            "New and old configurations differ in replica set ID; old was {}, and new is {}",
            old.settings.replica_set_id, new.settings.replica_set_id
        )));
    }
    for m in &new.members {
        for o in &old.members {
            if o.host == m.host && o.id != m.id {
                return Err(incompatible(format!(
                    "New and old configurations both have members with host of {} but in the new configuration the _id field is {} and in the old configuration it is {} for replica set {}",
                    o.host, m.id, o.id, new.set_name
                )));
            }
            if o.host == m.host && o.build_indexes != m.build_indexes {
                return Err(incompatible(format!(
                    "New and old configurations differ in the setting of the buildIndexes field for member {}; to make this change, remove then re-add the member",
                    o.host
                )));
            }
        }
    }
    if !force {
        let voters = |c: &ReplSetConfig| -> BTreeSet<i64> {
            c.members
                .iter()
                .filter(|m| m.is_voter())
                .map(|m| m.id)
                .collect()
        };
        let (a, b) = (voters(old), voters(new));
        if a.symmetric_difference(&b).count() > 1 {
            return Err(Error::new(
                ErrorCode::InvalidReplicaSetConfig,
                "Non force replica set reconfig can only add or remove at most 1 voting member.",
            ));
        }
    }
    Ok(())
}

/// The Raft changes that turn `current` into the membership of `config`.
fn changes(current: &ConfState, config: &ReplSetConfig) -> Vec<ConfChangeSingle> {
    let target = crate::driver::conf_state(config);
    let mut out = Vec::new();
    let single = |t: ConfChangeType, id: u64| {
        let mut c = ConfChangeSingle::default();
        c.set_change_type(t);
        c.node_id = id;
        c
    };
    for id in &target.voters {
        if !current.voters.contains(id) {
            out.push(single(ConfChangeType::AddNode, *id));
        }
    }
    for id in &target.learners {
        if !current.learners.contains(id) {
            out.push(single(ConfChangeType::AddLearnerNode, *id));
        }
    }
    for id in current.voters.iter().chain(&current.learners) {
        if !target.voters.contains(id) && !target.learners.contains(id) {
            out.push(single(ConfChangeType::RemoveNode, *id));
        }
    }
    out
}

fn same_members(a: &ConfState, b: &ConfState) -> bool {
    let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
    set(&a.voters) == set(&b.voters) && set(&a.learners) == set(&b.learners)
}

/// Proposes `config` on the leader: a configuration change entry whose context is the
/// configuration document. Fails when a configuration change is still in progress.
pub(crate) fn propose(raw: &mut RawNode<LogStore>, config: &ReplSetConfig) -> Result<()> {
    if raw.raft.has_pending_conf() {
        return Err(Error::new(
            ErrorCode::ConfigurationInProgress,
            "Cannot run replSetReconfig because the node is currently updating its configuration",
        ));
    }
    let context =
        bson::to_vec(&config.to_document()).map_err(|e| Error::internal(e.to_string()))?;
    let current = raw.raft.prs().conf().to_conf_state();
    let list = changes(&current, config);
    let before = raw.raft.raft_log.last_index();
    let proposed = if list.is_empty() {
        // No membership change: re-adding the leader changes nothing but carries the
        // configuration through the log.
        let mut cc = ConfChange::default();
        cc.set_change_type(ConfChangeType::AddNode);
        cc.node_id = raw.raft.id;
        raw.propose_conf_change(context, cc)
    } else {
        let mut cc = ConfChangeV2::default();
        cc.set_transition(ConfChangeTransition::Auto);
        cc.set_changes(list.into());
        raw.propose_conf_change(context, cc)
    };
    proposed.map_err(|e| Error::internal(format!("cannot propose the configuration: {e}")))?;
    if raw.raft.raft_log.last_index() == before {
        return Err(Error::new(
            ErrorCode::NotWritablePrimary,
            "New config is rejected :: caused by :: replSetReconfig should only be run on a writable PRIMARY",
        ));
    }
    Ok(())
}

/// Makes Raft's membership that of `config` on this member alone, without the log: for a
/// forced reconfiguration, and for a configuration entry whose membership differs from what
/// its Raft change produced (a forced configuration spread by its new primary).
pub(crate) fn install_locally(
    raw: &mut RawNode<LogStore>,
    config: &ReplSetConfig,
) -> raft::Result<ConfState> {
    let mut current = raw.raft.prs().conf().to_conf_state();
    if !current.voters_outgoing.is_empty() {
        current = raw.apply_conf_change(&ConfChangeV2::default())?;
    }
    let target = crate::driver::conf_state(config);
    if same_members(&current, &target) {
        return Ok(current);
    }
    let list = changes(&current, config);
    let joint = list.len() > 1;
    let mut cc = ConfChangeV2::default();
    cc.set_transition(if joint {
        ConfChangeTransition::Explicit
    } else {
        ConfChangeTransition::Auto
    });
    cc.set_changes(list.into());
    let mut cs = raw.apply_conf_change(&cc)?;
    if joint {
        cs = raw.apply_conf_change(&ConfChangeV2::default())?;
    }
    Ok(cs)
}

/// True when an applied configuration entry left Raft's membership different from what the
/// configuration lists (outside a joint configuration, which its leave entry completes).
pub(crate) fn needs_reconcile(cs: &ConfState, config: &ReplSetConfig) -> bool {
    cs.voters_outgoing.is_empty() && !same_members(cs, &crate::driver::conf_state(config))
}

/// A force reconfiguration's version: MongoDB adds a random 10000..110000 so that it wins over
/// any configuration the lost majority may have installed meanwhile.
fn forced_version(version: i64) -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as i64)
        .unwrap_or(0);
    version + 10_000 + nanos % 100_000
}

impl Coordinator {
    /// A secondary in maintenance mode reports RECOVERING (and serves no reads).
    pub(crate) fn maintenance_state(&self, state: MemberState) -> MemberState {
        if state == MemberState::Secondary && self.maintenance.load(Ordering::SeqCst) > 0 {
            MemberState::Recovering
        } else {
            state
        }
    }

    /// `replSetMaintenance`: enters (`true`) or leaves (`false`) maintenance mode; calls
    /// nest as MongoDB's counter does.
    pub fn set_maintenance(&self, activate: bool) -> Result<()> {
        if self.implicit() {
            return Err(Error::new(
                ErrorCode::NotSecondary,
                "primaries can't modify maintenance mode",
            ));
        }
        let state = {
            let mut v = self.view.write();
            if v.state == MemberState::Primary {
                return Err(Error::new(
                    ErrorCode::NotSecondary,
                    "primaries can't modify maintenance mode",
                ));
            }
            if activate {
                self.maintenance.fetch_add(1, Ordering::SeqCst);
            } else if self
                .maintenance
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n > 0).then_some(n - 1)
                })
                .is_err()
            {
                return Err(Error::new(
                    ErrorCode::OperationFailed,
                    "already out of maintenance mode",
                ));
            }
            let before = v.state;
            let base = if before == MemberState::Recovering {
                MemberState::Secondary
            } else {
                before
            };
            v.state = self.maintenance_state(base);
            (before, v.state)
        };
        if state.0 != state.1 {
            self.bump_topology();
        }
        Ok(())
    }

    /// A member that sends Raft traffic but is not in this member's newer configuration
    /// was removed from the set (it learns so from the reply, as MongoDB's heartbeats tell).
    pub(crate) fn removed_sender(&self, from: u64, status: &Document) -> bool {
        let v = self.view.read();
        let Some(c) = &v.config else { return false };
        let theirs = status.get_i64("configVersion").unwrap_or(-1);
        from != 0 && c.member_by_raft_id(from).is_none() && theirs >= 0 && c.version > theirs
    }

    pub(crate) fn note_removed(&self) {
        {
            let mut v = self.view.write();
            let Some(version) = v.config.as_ref().map(|c| c.version) else {
                return;
            };
            self.removed_at.store(version, Ordering::SeqCst);
            if v.state == MemberState::Removed || v.state == MemberState::Primary {
                return;
            }
            v.state = MemberState::Removed;
        }
        self.bump_topology();
    }

    /// REMOVED while the configuration this member holds is the one it was removed under.
    pub(crate) fn removed_state(&self, view: &crate::View) -> MemberState {
        let at = self.removed_at.load(Ordering::SeqCst);
        match &view.config {
            Some(c) if at >= 0 && c.version == at && view.state != MemberState::Primary => {
                MemberState::Removed
            }
            _ => view.state,
        }
    }

    /// True while maintenance mode holds this member out of elections.
    pub(crate) fn in_maintenance(&self) -> bool {
        self.maintenance.load(Ordering::SeqCst) > 0
    }

    /// `replSetReconfig`: validates `doc` against the configuration in force and installs it
    /// through Raft (on the primary), or on this member alone with `force`. Returns once this
    /// member applied it: for a normal reconfiguration that is after a majority of the set
    /// holds it (the Raft entry is committed).
    pub fn reconfig(&self, doc: &Document, force: bool, timeout: Duration) -> Result<()> {
        if self.implicit() {
            return Err(Error::new(
                ErrorCode::NotYetInitialized,
                "Node not yet initialized; use the replSetInitiate command",
            ));
        }
        let view = self.view();
        let Some(mut old) = view.config.clone() else {
            return Err(Error::new(
                ErrorCode::NotYetInitialized,
                "Cannot run replSetReconfig because the node is currently updating its configuration",
            ));
        };
        if !force && view.state != MemberState::Primary {
            return Err(Error::new(
                ErrorCode::NotWritablePrimary,
                format!(
                    "New config is rejected :: caused by :: replSetReconfig should only be run on a writable PRIMARY. Current state {};",
                    view.state.name()
                ),
            ));
        }
        // MongoDB's primary rewrites its configuration's term when it is elected, so the
        // configuration in force carries the current term (a forced one has none).
        if old.term >= 0 {
            old.term = view.term;
        }
        let mut new = ReplSetConfig::parse(doc)?;
        let has_id = doc
            .get_document("settings")
            .is_ok_and(|s| s.contains_key("replicaSetId"));
        if !has_id {
            new.settings.replica_set_id = old.settings.replica_set_id;
        }
        if force {
            new.version = forced_version(new.version);
            new.term = -1;
        } else {
            // `newlyAdded` is the server's to set and clear (a configuration read from
            // `local.system.replset` carries it).
            if new.members.iter().any(|m| m.newly_added) {
                return Err(Error::new(
                    ErrorCode::InvalidReplicaSetConfig,
                    format!(
                        "Cannot provide {} field to member config during reconfig.",
                        crate::config::NEWLY_ADDED
                    ),
                ));
            }
            new.term = view.term;
            new.mark_newly_added(&old);
        }
        check_compatible(&old, &new, force)?;
        let me = self.self_member(&new).ok_or_else(|| {
            Error::new(
                ErrorCode::NodeNotFound,
                format!(
                    "No host described in new configuration with {} for replica set {} maps to this node",
                    version_and_term(&new),
                    new.set_name
                ),
            )
        })?;
        if me != view.id {
            return Err(incompatible(format!(
                "This member is _id {} in the configuration in force; the new configuration gives its host _id {}",
                view.id.saturating_sub(1),
                me - 1
            )));
        }
        if !force {
            if let Some(m) = new.member_by_raft_id(me).filter(|m| !m.electable()) {
                return Err(Error::new(
                    ErrorCode::NodeNotElectable,
                    format!(
                        "This node, {}, with _id {} is not electable under the new configuration with {} for replica set {}",
                        m.host,
                        m.id,
                        version_and_term(&new),
                        new.set_name
                    ),
                ));
            }
        }
        let version = new.version;
        let (tx, rx) = mpsc::channel();
        self.send_input(Input::Reconfig(ReconfigRequest {
            config: new,
            force,
            reply: tx,
        }));
        match rx.recv_timeout(timeout) {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::new(
                    ErrorCode::ExceededTimeLimit,
                    "replSetReconfig timed out before the new configuration was proposed",
                ))
            }
        }
        let until = Instant::now() + timeout;
        loop {
            let seen = self.topology_version();
            let v = self.view();
            if v.config.as_ref().is_some_and(|c| c.version >= version) {
                return Ok(());
            }
            if !force && v.state != MemberState::Primary {
                return Err(Error::new(
                    ErrorCode::InterruptedDueToReplStateChange,
                    "replSetReconfig was interrupted: this node stepped down before the new configuration was committed",
                ));
            }
            let now = Instant::now();
            if now >= until {
                return Err(Error::new(
                    ErrorCode::CurrentConfigNotCommittedYet,
                    format!(
                        "The new configuration (version {version}) was not committed by a majority of the replica set in time"
                    ),
                ));
            }
            self.wait_topology_change(seen, (until - now).min(Duration::from_millis(100)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson};

    fn summary(config: &ReplSetConfig) -> Document {
        doc! {
            "version": config.version,
            "members": config.members.iter().map(|m| Bson::String(m.host.clone())).collect::<Vec<_>>(),
        }
    }

    fn config(version: i64, members: &[(i64, &str, i32)]) -> ReplSetConfig {
        let ms: Vec<Bson> = members
            .iter()
            .map(|(id, host, votes)| {
                Bson::Document(doc! { "_id": *id, "host": *host, "votes": *votes, "priority": if *votes > 0 { 1 } else { 0 } })
            })
            .collect();
        let mut c = ReplSetConfig::parse(&doc! { "_id": "rs0", "version": version, "members": ms })
            .unwrap();
        c.settings.replica_set_id = bson::oid::ObjectId::from_bytes([1; 12]);
        c
    }

    #[test]
    fn compatibility_rules() {
        let old = config(2, &[(0, "a:1", 1), (1, "b:1", 1)]);
        let cases: Vec<(ReplSetConfig, bool, Option<i32>)> = vec![
            (
                config(3, &[(0, "a:1", 1), (1, "b:1", 1), (2, "c:1", 1)]),
                false,
                None,
            ),
            (
                config(2, &[(0, "a:1", 1), (1, "b:1", 1), (2, "c:1", 1)]),
                false,
                Some(103),
            ),
            (config(3, &[(0, "a:1", 1), (2, "b:1", 1)]), false, Some(103)),
            (
                config(
                    3,
                    &[(0, "a:1", 1), (1, "b:1", 1), (2, "c:1", 1), (3, "d:1", 1)],
                ),
                false,
                Some(93),
            ),
            (
                config(
                    3,
                    &[(0, "a:1", 1), (1, "b:1", 1), (2, "c:1", 1), (3, "d:1", 1)],
                ),
                true,
                None,
            ),
            (
                config(3, &[(0, "a:1", 1), (1, "b:1", 0), (2, "c:1", 0)]),
                false,
                None,
            ),
            (config(3, &[(0, "a:1", 1)]), false, None),
        ];
        for (new, force, want) in cases {
            let got = check_compatible(&old, &new, force)
                .err()
                .map(|e| e.code.code());
            assert_eq!(got, want, "{:?}", summary(&new));
        }
        let mut renamed = config(3, &[(0, "a:1", 1), (1, "b:1", 1)]);
        renamed.set_name = "rs1".into();
        assert_eq!(
            check_compatible(&old, &renamed, false)
                .unwrap_err()
                .code
                .code(),
            103
        );
        let mut other_id = config(3, &[(0, "a:1", 1), (1, "b:1", 1)]);
        other_id.settings.replica_set_id = bson::oid::ObjectId::from_bytes([2; 12]);
        assert_eq!(
            check_compatible(&old, &other_id, false)
                .unwrap_err()
                .code
                .code(),
            103
        );
    }

    #[test]
    fn new_voters_are_newly_added_learners_until_cleared() {
        let old = config(2, &[(0, "a:1", 1), (1, "b:1", 1)]);
        // Two new voters and a new non-voter at once: the voters are newly added, so no
        // vote changes and the single voting change rule holds.
        let mut new = config(
            3,
            &[
                (0, "a:1", 1),
                (1, "b:1", 1),
                (2, "c:1", 1),
                (3, "d:1", 1),
                (4, "e:1", 0),
            ],
        );
        assert_eq!(
            check_compatible(&old, &new, false).unwrap_err().code.code(),
            93
        );
        new.mark_newly_added(&old);
        let marked: Vec<bool> = new.members.iter().map(|m| m.newly_added).collect();
        assert_eq!(marked, [false, false, true, true, false]);
        check_compatible(&old, &new, false).unwrap();
        assert_eq!((new.voters(), new.majority()), (2, 2));
        let cs = crate::driver::conf_state(&new);
        assert_eq!((cs.voters, cs.learners), (vec![1, 2], vec![3, 4, 5]));
        let c = &new.members[2];
        assert!(!c.electable() && c.raft_priority() == 0 && !c.is_voter());
        // The mark is stored and read back.
        let back = ReplSetConfig::from_stored(&new.to_document()).unwrap();
        let stored: Vec<bool> = back.members.iter().map(|m| m.newly_added).collect();
        assert_eq!(stored, marked);
        // A later reconfiguration from a document without the mark (replSetGetConfig leaves
        // it out) keeps it on members still newly added, except one made a non-voter.
        let mut later = config(
            4,
            &[(0, "a:1", 1), (1, "b:1", 1), (2, "c:1", 1), (3, "d:1", 0)],
        );
        later.mark_newly_added(&new);
        let marked: Vec<bool> = later.members.iter().map(|m| m.newly_added).collect();
        assert_eq!(marked, [false, false, true, false]);
        // Cleared (the primary's automatic reconfiguration): a Raft voter, promoted from
        // learner by one AddNode.
        let mut cleared = new.clone();
        cleared.version += 1;
        cleared.members[2].newly_added = false;
        check_compatible(&new, &cleared, false).unwrap();
        let got: Vec<(ConfChangeType, u64)> = changes(&crate::driver::conf_state(&new), &cleared)
            .iter()
            .map(|c| (c.get_change_type(), c.node_id))
            .collect();
        assert_eq!(got, vec![(ConfChangeType::AddNode, 3)]);
        assert_eq!((cleared.voters(), cleared.majority()), (3, 2));
    }

    #[test]
    fn changes_map_votes_to_voters_and_learners() {
        let cur = ConfState {
            voters: vec![1, 2],
            learners: vec![3],
            ..Default::default()
        };
        let new = config(3, &[(0, "a:1", 1), (2, "c:1", 1), (3, "d:1", 0)]);
        let list = changes(&cur, &new);
        let got: Vec<(ConfChangeType, u64)> = list
            .iter()
            .map(|c| (c.get_change_type(), c.node_id))
            .collect();
        assert_eq!(
            got,
            vec![
                (ConfChangeType::AddNode, 3),
                (ConfChangeType::AddLearnerNode, 4),
                (ConfChangeType::RemoveNode, 2),
            ]
        );
        assert!(needs_reconcile(&cur, &new));
        assert!(!needs_reconcile(&crate::driver::conf_state(&new), &new));
    }
}
