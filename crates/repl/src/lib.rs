//! Replica sets: the replication coordinator between the server (commands, `hello`) and the
//! engine.
//!
//! Consensus is TiKV's `raft` crate: its terms are MongoDB's terms (Raft's bootstrap term 1
//! is reported as term 0, the state before the first election), its leader is the primary, its
//! commit index is the majority commit point. Member `priority` is Raft's election priority
//! (a voter refuses a lower-priority candidate whose log is no longer than its own), priority 0
//! members never campaign, `votes: 0` members are Raft learners, and priority takeover and
//! `replSetStepDown` are Raft leader transfers.
//!
//! A member started with `--replSet` and no stored configuration is the primary of an
//! implicit one-member set (what a single-server deployment and the test suite use) until it
//! is initiated (`replSetInitiate`) or a member of an initiated set reaches it; from then on it
//! runs Raft and its state comes from there.

pub mod apply;
pub mod config;
pub mod diff;
mod driver;
pub mod file_copy;
mod initial_sync;
pub mod membership;
pub mod read_concern;
mod remote_primary;
mod rollback;
pub mod state;
pub mod storage;
mod sync_source;
pub mod transport;

use bson::{doc, Bson, Document};
use config::ReplSetConfig;
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::Engine;
use parking_lot::{Condvar, Mutex, RwLock};
use raft::eraftpb::Message;
pub use state::{MemberState, OpTime};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};
use storage::LogStore;

/// What the Raft driver publishes for commands and `hello` to read.
#[derive(Debug, Clone)]
pub struct View {
    pub state: MemberState,
    pub config: Option<ReplSetConfig>,
    /// This member's Raft id (0 before it joined a set).
    pub id: u64,
    /// The primary's Raft id, 0 when none is known.
    pub leader: u64,
    /// MongoDB's term.
    pub term: i64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub last_index: u64,
    /// A primary accepts writes once it applied everything committed before its election.
    pub writable: bool,
    pub election_date: Option<bson::DateTime>,
    pub election_optime: OpTime,
    pub applied: OpTime,
    pub durable: OpTime,
    /// The newest entry this member's own Raft log holds durably (its append was synced;
    /// `durable` also counts applied entries, which a majority of other members may have
    /// made durable first).
    pub logged: OpTime,
    pub committed: OpTime,
    /// On the primary: each member's replicated index and whether it was heard from lately.
    pub progress: BTreeMap<u64, (u64, bool)>,
    /// On the primary: the newest oplog `ts` (as u64) each member holds durably.
    pub member_ts: BTreeMap<u64, u64>,
    pub frozen_until: Option<Instant>,
}

impl View {
    fn empty() -> View {
        View {
            state: MemberState::Startup,
            config: None,
            id: 0,
            leader: 0,
            term: 0,
            commit_index: 0,
            applied_index: 0,
            last_index: 0,
            writable: false,
            election_date: None,
            election_optime: OpTime::default(),
            applied: OpTime::default(),
            durable: OpTime::default(),
            logged: OpTime::default(),
            committed: OpTime::default(),
            progress: BTreeMap::new(),
            member_ts: BTreeMap::new(),
            frozen_until: None,
        }
    }
}

/// How a write concern wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplicationWait {
    /// The members asked for hold the entry (for `majority`, the set's Raft commit does).
    Satisfied,
    /// The implicit one-member set: there is no one to replicate to, and no commit to wait for.
    Alone,
    TimedOut,
    /// This member stopped being primary while waiting.
    NotPrimary,
    /// A custom write concern mode the configuration does not define (it may have changed
    /// since the command was checked): MongoDB's UnknownReplWriteConcern.
    UnknownMode(nidus_common::Error),
    /// A custom write concern mode that even every member holding the entry would not
    /// satisfy: MongoDB's UnsatisfiableWriteConcern.
    Unsatisfiable(String),
}

/// Which members must hold a write (beyond the Raft commit `majority` asks for).
#[derive(Debug, Clone, Copy)]
pub enum Acknowledgers<'a> {
    /// At least this many members (`w: <number>`).
    Count(i64),
    /// A custom write concern mode by name (`w: "<mode>"`, `settings.getLastErrorModes`).
    Mode(&'a str),
}

/// What this member last learned about a peer from heartbeats.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub healthy: bool,
    pub state: MemberState,
    pub applied: OpTime,
    pub durable: OpTime,
    pub term: i64,
    pub config_version: i64,
    pub sync_source: String,
    pub election_date: Option<bson::DateTime>,
    pub last_heartbeat: Option<bson::DateTime>,
    pub last_heartbeat_recv: Option<bson::DateTime>,
    pub ping_ms: i64,
    pub frozen_until: Option<Instant>,
    pub last_message: String,
    pub up_since: Option<Instant>,
    /// The peer's oplog visibility point (`ts` as u64) and when this member learned it.
    pub visible: u64,
    pub visible_seen: Option<Instant>,
}

impl PeerInfo {
    /// The peer runs an initial sync: STARTUP2 with a configuration (a member without one is
    /// not in a set yet). It holds no data yet, whatever its Raft log holds.
    pub fn in_initial_sync(&self) -> bool {
        self.state == MemberState::Startup2 && self.config_version >= 0
    }
}

impl Default for PeerInfo {
    fn default() -> PeerInfo {
        PeerInfo {
            healthy: false,
            state: MemberState::Unknown,
            applied: OpTime::default(),
            durable: OpTime::default(),
            term: -1,
            config_version: -1,
            sync_source: String::new(),
            election_date: None,
            last_heartbeat: None,
            last_heartbeat_recv: None,
            ping_ms: 0,
            frozen_until: None,
            last_message: String::new(),
            up_since: None,
            visible: 0,
            visible_seen: None,
        }
    }
}

pub(crate) enum Input {
    Messages(Vec<Message>),
    Campaign,
    StepDown {
        freeze: Duration,
        /// With no caught-up member to hand over to, step down anyway (`force: true`).
        force: bool,
    },
    Freeze(Duration),
    Unreachable(u64),
    /// Connections to this member are refused: its process is gone (`transport`).
    PeerGone(u64),
    SnapshotDone(u64, bool),
    /// The oplog advanced: the primary proposes its new entries.
    Wake,
    Reconfig(membership::ReconfigRequest),
    /// A linearizable read asks Raft to confirm leadership (`read_concern::ReadIndexes`).
    ReadIndex(u64),
    /// The initial sync copied the data of the snapshot it was started for.
    InitialSyncDone(initial_sync::Outcome),
}

/// The replication coordinator of one member.
pub struct Coordinator {
    set_name: String,
    me: String,
    started: Instant,
    engine: Arc<Engine>,
    store: LogStore,
    view: RwLock<View>,
    topology: Mutex<i64>,
    topology_changed: Condvar,
    /// Bumped with every published view (write concern waiters re-check).
    progress: Mutex<u64>,
    progress_changed: Condvar,
    inbox: Mutex<Option<mpsc::Sender<Input>>>,
    links: Mutex<HashMap<u64, transport::Link>>,
    /// Raft messages arriving in pieces (see `transport::FRAGMENT_BYTES`).
    fragments: transport::Fragments,
    peers: RwLock<HashMap<u64, PeerInfo>>,
    /// Hosts of members this one heard from before it knew the configuration.
    known_hosts: RwLock<HashMap<u64, String>>,
    stopping: AtomicBool,
    /// `replSetMaintenance` calls in force: a secondary with any is RECOVERING.
    maintenance: std::sync::atomic::AtomicI64,
    /// The configuration version under which a newer member reported this one removed (-1:
    /// never); this member is REMOVED until it applies another configuration.
    removed_at: std::sync::atomic::AtomicI64,
    /// The newest oplog timestamp this member issued or saw (`ts` only moves forward).
    clock: Mutex<bson::Timestamp>,
    reads: read_concern::ReadIndexes,
    /// The initial sync in progress (`replSetGetStatus.initialSyncStatus`).
    initial_sync: initial_sync::Progress,
    /// Backups open on this member for other members' file-copy initial syncs.
    backups: file_copy::Backups,
    weak: Weak<Coordinator>,
}

fn store_error(e: raft::Error) -> Error {
    Error::internal(format!("replication storage: {e}"))
}

impl Coordinator {
    /// The coordinator of a member of `set_name` reached at `me` (`host:port`). Resumes Raft
    /// when this member already belongs to an initiated set.
    pub fn start(set_name: &str, me: &str, engine: Arc<Engine>) -> Result<Arc<Coordinator>> {
        let store = LogStore::open(engine.kv_arc()).map_err(store_error)?;
        let coord = Arc::new_cyclic(|weak| Coordinator {
            set_name: set_name.to_string(),
            me: me.to_string(),
            started: Instant::now(),
            engine,
            store,
            view: RwLock::new(View::empty()),
            topology: Mutex::new(0),
            topology_changed: Condvar::new(),
            progress: Mutex::new(0),
            progress_changed: Condvar::new(),
            inbox: Mutex::new(None),
            links: Mutex::new(HashMap::new()),
            fragments: transport::Fragments::default(),
            peers: RwLock::new(HashMap::new()),
            known_hosts: RwLock::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            maintenance: std::sync::atomic::AtomicI64::new(0),
            removed_at: std::sync::atomic::AtomicI64::new(-1),
            clock: Mutex::new(bson::Timestamp {
                time: 0,
                increment: 0,
            }),
            reads: Default::default(),
            initial_sync: Default::default(),
            backups: Default::default(),
            weak: weak.clone(),
        });
        if coord.store.initialized() {
            let id = coord
                .store
                .node_id()
                .map_err(store_error)?
                .ok_or_else(|| Error::internal("replication state without a member id"))?;
            coord.start_driver(id)?;
        }
        Ok(coord)
    }

    /// A timestamp after every one issued or seen: the oplog's clock when there is one.
    pub fn next_timestamp(&self) -> bson::Timestamp {
        if self.engine.oplog().is_some() {
            return nidus_engine::oplog::clock().tick();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let mut last = self.clock.lock();
        *last = if now > last.time {
            bson::Timestamp {
                time: now,
                increment: 1,
            }
        } else {
            bson::Timestamp {
                time: last.time,
                increment: last.increment.saturating_add(1),
            }
        };
        *last
    }

    pub(crate) fn observe_timestamp(&self, ts: bson::Timestamp) {
        // A new primary's first entry must follow every entry in its log, applied or not.
        if self.engine.oplog().is_some() {
            nidus_engine::oplog::clock().advance_to(ts);
        }
        let mut last = self.clock.lock();
        if (ts.time, ts.increment) > (last.time, last.increment) {
            *last = ts;
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Members that hold data (every member: arbiters are not supported).
    pub fn data_bearing_members(&self) -> usize {
        if self.implicit() {
            return 1;
        }
        self.view
            .read()
            .config
            .as_ref()
            .map_or(1, |c| c.members.len())
    }

    /// Voting members that build indexes: the members an index build's `commitQuorum:
    /// "votingMembers"` waits for (1 for the implicit one-member set).
    pub fn voting_index_builders(&self) -> usize {
        if self.implicit() {
            return 1;
        }
        self.view.read().config.as_ref().map_or(1, |c| {
            c.members
                .iter()
                .filter(|m| m.is_voter() && m.build_indexes)
                .count()
        })
    }

    /// Waits, at most `max_wait`, until this member's Raft log holds the entry at `ts`
    /// durably: its append was synced, and with it the WAL's earlier writes, among them the
    /// write that made the entry. True: the write is journaled (a `j: true` write concern
    /// needs no WAL sync of its own). False on a member that does not replicate its writes
    /// through Raft (the implicit set, not the primary) or when the wait runs out.
    pub fn wait_durable(&self, ts: bson::Timestamp, max_wait: Duration) -> bool {
        if self.implicit() {
            return false;
        }
        let target = ((ts.time as u64) << 32) | ts.increment as u64;
        let until = Instant::now() + max_wait;
        loop {
            let seen = *self.progress.lock();
            {
                let v = self.view.read();
                if v.state != MemberState::Primary || self.stopping.load(Ordering::SeqCst) {
                    return false;
                }
                let logged = ((v.logged.ts.time as u64) << 32) | v.logged.ts.increment as u64;
                if logged >= target {
                    return true;
                }
            }
            let mut g = self.progress.lock();
            if *g != seen {
                continue;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            self.progress_changed.wait_for(&mut g, until - now);
        }
    }

    /// Waits until the entry at `ts` is majority-committed (`majority`) or held by `nodes`
    /// members, until `deadline`.
    pub fn wait_for_replication(
        &self,
        ts: bson::Timestamp,
        majority: bool,
        acknowledgers: Acknowledgers<'_>,
        deadline: Option<Instant>,
    ) -> ReplicationWait {
        if self.implicit() {
            return ReplicationWait::Alone;
        }
        let target = ((ts.time as u64) << 32) | ts.increment as u64;
        loop {
            let seen = *self.progress.lock();
            // Another member counts once it applied the write, as MongoDB's `w: N` waits for
            // members' last applied optimes (a read there after the acknowledgement sees
            // it); holding it in its Raft log is not enough.
            let applied: BTreeMap<u64, u64> = self
                .peers
                .read()
                .iter()
                .map(|(id, p)| (*id, nidus_engine::oplog::ts_to_u64(p.applied.ts)))
                .collect();
            {
                let v = self.view.read();
                let holds = |id: u64| {
                    v.member_ts.get(&id).is_some_and(|t| {
                        *t >= target
                            && (id == v.id || applied.get(&id).is_some_and(|a| *a >= target))
                    })
                };
                if v.state != MemberState::Primary {
                    return ReplicationWait::NotPrimary;
                }
                let committed =
                    ((v.committed.ts.time as u64) << 32) | v.committed.ts.increment as u64;
                let majority_ok = !majority || committed >= target;
                let held = match acknowledgers {
                    Acknowledgers::Count(nodes) => {
                        v.member_ts.keys().filter(|id| holds(**id)).count() as i64 >= nodes
                    }
                    Acknowledgers::Mode(name) => {
                        let Some(config) = v.config.as_ref() else {
                            return ReplicationWait::NotPrimary;
                        };
                        let mode = match config.write_mode(name) {
                            Ok(m) => m,
                            Err(e) => return ReplicationWait::UnknownMode(e),
                        };
                        if !config.satisfies(mode, |_| true) {
                            return ReplicationWait::Unsatisfiable(format!(
                                "Not enough nodes match write concern mode \"{name}\""
                            ));
                        }
                        config.satisfies(mode, holds)
                    }
                };
                if majority_ok && held {
                    return ReplicationWait::Satisfied;
                }
            }
            if self.stopping.load(Ordering::SeqCst) {
                return ReplicationWait::NotPrimary;
            }
            let mut g = self.progress.lock();
            if *g != seen {
                continue;
            }
            let slice = Duration::from_millis(100);
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return ReplicationWait::TimedOut;
                    }
                    (d - now).min(slice)
                }
                None => slice,
            };
            self.progress_changed.wait_for(&mut g, wait);
        }
    }

    pub fn set_name(&self) -> &str {
        &self.set_name
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// True while no set was initiated or joined: the implicit one-member set.
    pub fn implicit(&self) -> bool {
        self.inbox.lock().is_none()
    }

    pub fn view(&self) -> View {
        self.view.read().clone()
    }

    pub fn peer_info(&self, id: u64) -> Option<PeerInfo> {
        self.peers.read().get(&id).cloned()
    }

    /// Whether the peer last reported an initial sync under way (see
    /// [`PeerInfo::in_initial_sync`]).
    pub fn peer_in_initial_sync(&self, id: u64) -> bool {
        self.peers
            .read()
            .get(&id)
            .is_some_and(PeerInfo::in_initial_sync)
    }

    pub fn uptime_secs(&self) -> i64 {
        self.started.elapsed().as_secs() as i64
    }

    /// Writes are accepted (the primary, or the implicit one-member set).
    pub fn writable(&self) -> bool {
        self.implicit() || self.view.read().writable
    }

    /// While this member accepts writes, what tells its reign apart from every other
    /// primary's: the term (one primary per term, and a member elected again gets a new one),
    /// or `i64::MIN` for the implicit set, which applies nobody else's writes. `None` while it
    /// accepts none.
    pub fn writer_term(&self) -> Option<i64> {
        if self.implicit() {
            return Some(i64::MIN);
        }
        let v = self.view.read();
        v.writable.then_some(v.term)
    }

    /// Reads are served (primary or secondary, or the implicit set).
    pub fn readable_state(&self) -> bool {
        self.implicit() || self.view.read().state.readable()
    }

    /// `topologyVersion.counter`: changes whenever what `hello` reports changes.
    pub fn topology_version(&self) -> i64 {
        *self.topology.lock()
    }

    /// Waits until the topology version differs from `seen` (true) or `timeout` passes.
    pub fn wait_topology_change(&self, seen: i64, timeout: Duration) -> bool {
        let mut v = self.topology.lock();
        if *v != seen {
            return true;
        }
        self.topology_changed.wait_for(&mut v, timeout);
        *v != seen
    }

    fn bump_topology(&self) {
        *self.topology.lock() += 1;
        self.topology_changed.notify_all();
    }

    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(oplog) = self.engine.oplog() {
            oplog.set_local_write_hook(None);
        }
        self.inbox.lock().take();
        self.links.lock().clear();
        self.topology_changed.notify_all();
    }

    /// `replSetInitiate`: starts a set from this member with `config` (or this member alone).
    pub fn initiate(&self, config: Option<&Document>) -> Result<()> {
        if !self.implicit() || self.store.initialized() {
            return Err(Error::new(
                ErrorCode::AlreadyInitialized,
                "already initialized",
            ));
        }
        let config = match config {
            Some(d) => ReplSetConfig::parse(d)?,
            None => ReplSetConfig::single(&self.set_name, &self.me),
        };
        if config.set_name != self.set_name {
            return Err(Error::new(
                ErrorCode::InvalidReplicaSetConfig,
                format!(
                    "Attempting to initiate a replica set with name {}, but command line reports {}; rejecting",
                    config.set_name, self.set_name
                ),
            ));
        }
        let me = self.self_member(&config).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidReplicaSetConfig,
                format!(
                    "No host described in new configuration with {{version: {}, term: {}}} for replica set {} maps to this node",
                    config.version, config.term, config.set_name
                ),
            )
        })?;
        let data =
            bson::to_vec(&config.to_document()).map_err(|e| Error::internal(e.to_string()))?;
        self.store
            .bootstrap(me, driver::conf_state(&config), data)
            .map_err(store_error)?;
        self.save_config_document(&config)?;
        self.start_driver(me)?;
        self.send_input(Input::Campaign);
        Ok(())
    }

    /// This member's Raft id in `config`: the member whose host is this member's address.
    fn self_member(&self, config: &ReplSetConfig) -> Option<u64> {
        let (my_host, my_port) = split_host(&self.me);
        config
            .members
            .iter()
            .find(|m| {
                let (h, p) = split_host(&m.host);
                p == my_port && (h == my_host || is_loopback(h) && is_loopback(my_host))
            })
            .map(|m| m.raft_id())
    }

    /// Keeps `local.system.replset` equal to the configuration in force.
    fn save_config_document(&self, config: &ReplSetConfig) -> Result<()> {
        use nidus_engine::namespace::Namespace;
        use nidus_engine::write::WriteOpts;
        let ns = Namespace::new("local", "system.replset");
        let coll = self.engine.ensure_collection(&ns)?;
        let opts = WriteOpts::default();
        self.engine
            .delete(&coll, &Document::new(), true, None, &opts)?;
        let raw = nidus_common::encode::document_to_raw(&config.to_document())
            .map_err(|e| Error::internal(e.to_string()))?;
        self.engine.insert_one(&coll, &raw, &opts)
    }

    fn start_driver(&self, id: u64) -> Result<()> {
        let mut inbox = self.inbox.lock();
        if inbox.is_some() {
            return Ok(());
        }
        let coord = self
            .weak
            .upgrade()
            .ok_or_else(|| Error::internal("stopping"))?;
        let tx = driver::spawn(coord, self.store.clone(), id).map_err(store_error)?;
        *inbox = Some(tx);
        drop(inbox);
        if let Some(oplog) = self.engine.oplog() {
            // A local write wakes the driver from the writer's thread, so the primary
            // proposes its entries at once (a secondary's driver finds nothing to propose).
            let weak = self.weak.clone();
            oplog.set_local_write_hook(Some(Arc::new(move || {
                if let Some(c) = weak.upgrade() {
                    c.send_input(Input::Wake);
                }
            })));
        }
        self.bump_topology();
        Ok(())
    }

    fn send_input(&self, input: Input) {
        if let Some(tx) = self.inbox.lock().as_ref() {
            let _ = tx.send(input);
        }
    }

    /// `replSetRaftMessages` from another member: its Raft messages and status. Replies with
    /// this member's status.
    pub fn receive(&self, body: &Document) -> Result<Document> {
        let set = body.get_str("setName").unwrap_or_default();
        if set != self.set_name {
            return Err(Error::new(
                ErrorCode::InvalidReplicaSetConfig,
                format!(
                    "replica set name {set} does not match this member's set {}",
                    self.set_name
                ),
            ));
        }
        let from = body.get_i64("from").unwrap_or(0) as u64;
        if let Ok(host) = body.get_str("fromHost") {
            if from != 0 {
                self.known_hosts.write().insert(from, host.to_string());
            }
        }
        let mut msgs = match body.get_array("messages") {
            Ok(a) => transport::decode_messages(a).map_err(Error::bad_value)?,
            Err(_) => Vec::new(),
        };
        if let Some(joined) = self.fragments.take(from, body).map_err(Error::bad_value)? {
            msgs.push(joined);
        }
        if from != 0 {
            if let Ok(status) = body.get_document("status") {
                self.note_peer_status(from, status, None);
            }
        }
        if !msgs.is_empty() {
            if self.implicit() {
                // The first message of an initiated set that lists this member: join it with
                // the id the set gave this member.
                let to = msgs[0].to;
                if to == 0 || self.stopping.load(Ordering::SeqCst) {
                    return Ok(doc! { "status": self.status_document() });
                }
                self.store.set_node_id(to).map_err(store_error)?;
                self.start_driver(to)?;
            }
            self.send_input(Input::Messages(msgs));
        }
        let mut reply = doc! { "status": self.status_document() };
        if let Ok(status) = body.get_document("status") {
            if self.removed_sender(from, status) {
                reply.insert("removed", true);
            }
        }
        Ok(reply)
    }

    /// The status a member sends with every message and heartbeat.
    fn status_document(&self) -> Document {
        // A copy: `sync_source` reads the view again, and a second read lock while the driver
        // waits to publish would deadlock.
        let v = self.view();
        let mut d = doc! {
            "state": v.state.code(),
            "term": v.term,
            "appliedOpTime": v.applied.to_document(),
            "appliedWall": v.applied.wall,
            "durableOpTime": v.durable.to_document(),
            "durableWall": v.durable.wall,
            "configVersion": v.config.as_ref().map_or(-1, |c| c.version),
            "syncSourceHost": self.sync_source(&v),
            "frozenMs": v.frozen_until.map_or(0, |t| t.saturating_duration_since(Instant::now()).as_millis() as i64),
        };
        // A causal read on a secondary may rely on the primary's visibility point to cover
        // every acknowledged write: true only of a writable primary (a newly elected one has
        // not applied its predecessors' last writes yet, so its point can be behind them).
        if v.state == MemberState::Primary && v.writable {
            if let Some(oplog) = self.engine.oplog() {
                d.insert("visibleTs", oplog.visible_u64() as i64);
            }
        }
        if let Some(e) = v.election_date {
            d.insert("electionDate", e);
        }
        d
    }

    fn note_peer_status(&self, id: u64, status: &Document, ping: Option<Duration>) {
        let now = bson::DateTime::now();
        let mut peers = self.peers.write();
        let p = peers.entry(id).or_default();
        let newly_up = !p.healthy;
        p.healthy = true;
        if newly_up || p.up_since.is_none() {
            p.up_since = Some(Instant::now());
        }
        p.state = MemberState::from_code(status.get_i32("state").unwrap_or(6));
        p.term = status.get_i64("term").unwrap_or(-1);
        let applied_before = p.applied.ts;
        p.applied = OpTime::from_document(
            status
                .get_document("appliedOpTime")
                .unwrap_or(&Document::new()),
            status.get_datetime("appliedWall").ok().copied(),
        );
        p.durable = OpTime::from_document(
            status
                .get_document("durableOpTime")
                .unwrap_or(&Document::new()),
            status.get_datetime("durableWall").ok().copied(),
        );
        p.config_version = status.get_i64("configVersion").unwrap_or(-1);
        p.sync_source = status.get_str("syncSourceHost").unwrap_or("").to_string();
        p.election_date = status.get_datetime("electionDate").ok().copied();
        let frozen = status.get_i64("frozenMs").unwrap_or(0);
        p.frozen_until =
            (frozen > 0).then(|| Instant::now() + Duration::from_millis(frozen as u64));
        p.last_message.clear();
        // Only a reply tells when its status was built: after the request was sent.
        if let (Ok(v), Some(ping)) = (status.get_i64("visibleTs"), ping) {
            p.visible = v as u64;
            p.visible_seen = Instant::now().checked_sub(ping);
        }
        match ping {
            Some(ping) => {
                p.last_heartbeat = Some(now);
                p.ping_ms = ping.as_millis() as i64;
            }
            None => p.last_heartbeat_recv = Some(now),
        }
        let applied_moved = p.applied.ts != applied_before;
        drop(peers);
        if applied_moved {
            // A write waiting for `w: N` counts the members that applied it.
            *self.progress.lock() += 1;
            self.progress_changed.notify_all();
        }
    }

    /// The host a Raft id is reached at: from the configuration, else from its messages.
    pub fn host_of(&self, id: u64) -> Option<String> {
        let from_config = self
            .view
            .read()
            .config
            .as_ref()
            .and_then(|c| c.member_by_raft_id(id).map(|m| m.host.clone()));
        from_config.or_else(|| self.known_hosts.read().get(&id).cloned())
    }

    /// Where a pipeline running on this secondary sends its `$out`/`$merge` writes: the
    /// primary, reached as the internal user; none known → FailedToSatisfyReadPreference, as
    /// MongoDB's targeting of the primary.
    pub fn primary_writes(
        &self,
        write_concern: Option<Document>,
    ) -> Result<Arc<dyn nidus_engine::pipeline::PrimaryWrites>> {
        let v = self.view();
        match (v.leader != 0 && v.leader != v.id)
            .then(|| self.host_of(v.leader))
            .flatten()
        {
            Some(host) => Ok(Arc::new(remote_primary::RemotePrimary::new(
                host,
                write_concern,
            ))),
            None => Err(Error::new(
                ErrorCode::FailedToSatisfyReadPreference,
                format!(
                    "Could not find host matching read preference {{ mode: \"primary\" }} for set {}",
                    self.set_name()
                ),
            )),
        }
    }

    fn sync_source(&self, v: &View) -> String {
        let syncing = matches!(v.state, MemberState::Secondary | MemberState::Startup2);
        if syncing && v.leader != 0 && v.leader != v.id {
            self.host_of(v.leader).unwrap_or_default()
        } else {
            String::new()
        }
    }

    /// This member's applied and durable optimes as of now, ahead of the driver's next view
    /// (see `Driver::report_applied`).
    pub(crate) fn publish_applied(&self, applied: OpTime, durable: OpTime) {
        let mut v = self.view.write();
        v.applied = applied;
        v.committed = applied;
        v.durable = durable;
    }

    /// Sends this member's status to `to` now (a request without Raft messages, as a
    /// heartbeat).
    pub(crate) fn push_status(&self, to: u64) {
        if let Some(link) = self.links.lock().get(&to) {
            link.send(self, Vec::new());
        }
    }

    pub(crate) fn send_messages(&self, msgs: Vec<Message>) {
        let mut by_peer: BTreeMap<u64, Vec<Message>> = BTreeMap::new();
        for m in msgs {
            by_peer.entry(m.to).or_default().push(m);
        }
        let mut links = self.links.lock();
        for (to, batch) in by_peer {
            links
                .entry(to)
                .or_insert_with(|| transport::Link::start(self.weak.clone(), to))
                .send(self, batch);
        }
    }

    /// Starts heartbeats to every member of the configuration.
    pub(crate) fn ensure_links(&self, config: &ReplSetConfig, me: u64) {
        let mut links = self.links.lock();
        for m in &config.members {
            let id = m.raft_id();
            if id != me {
                links
                    .entry(id)
                    .or_insert_with(|| transport::Link::start(self.weak.clone(), id));
            }
        }
        links.retain(|id, _| config.member_by_raft_id(*id).is_some());
    }

    pub(crate) fn publish(&self, mut view: View) {
        view.state = self.maintenance_state(self.removed_state(&view));
        let changed = {
            let old = self.view.read();
            old.state != view.state
                || old.leader != view.leader
                || old.writable != view.writable
                || old.term != view.term
                || old.config.as_ref().map(|c| c.version) != view.config.as_ref().map(|c| c.version)
        };
        *self.view.write() = view;
        if changed {
            self.bump_topology();
        }
        *self.progress.lock() += 1;
        self.progress_changed.notify_all();
    }

    pub(crate) fn config_applied(&self, config: &ReplSetConfig) {
        if let Err(e) = self.save_config_document(config) {
            eprintln!(
                "replication: cannot save local.system.replset: {}",
                e.message
            );
        }
    }

    /// `replSetStepDown`: hands the primary role to the most suitable caught-up member and
    /// keeps this one from standing for election for `freeze`.
    pub fn step_down(&self, freeze: Duration, wait: Duration, force: bool) -> Result<()> {
        if self.implicit() {
            return Err(Error::new(
                ErrorCode::NotWritablePrimary,
                "not primary so can't step down",
            ));
        }
        if self.view.read().state != MemberState::Primary {
            return Err(Error::new(
                ErrorCode::NotWritablePrimary,
                "not primary so can't step down",
            ));
        }
        let seen = self.topology_version();
        self.send_input(Input::StepDown { freeze, force });
        // A forced stepdown happens at once (a handover or becoming a follower); the wait
        // only covers the driver getting to it.
        let until = Instant::now()
            + if force {
                wait.max(Duration::from_secs(5))
            } else {
                wait
            };
        let mut seen = seen;
        while Instant::now() < until {
            if self.view.read().state != MemberState::Primary {
                return Ok(());
            }
            self.wait_topology_change(seen, Duration::from_millis(100));
            seen = self.topology_version();
        }
        if self.view.read().state != MemberState::Primary {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::ExceededTimeLimit,
            format!(
                "No electable secondaries caught up as of {}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down.",
                bson::DateTime::now().try_to_rfc3339_string().unwrap_or_default()
            ),
        ))
    }

    /// `replSetFreeze`: this member does not stand for election for `secs` (0 unfreezes).
    pub fn freeze(&self, secs: i64) -> Result<Document> {
        if self.implicit() {
            return Err(Error::new(
                ErrorCode::NotSecondary,
                "cannot freeze node when primary or running for election. state: Primary",
            ));
        }
        let state = self.view.read().state;
        if state == MemberState::Primary {
            return Err(Error::new(
                ErrorCode::NotSecondary,
                "cannot freeze node when primary or running for election. state: Primary",
            ));
        }
        self.send_input(Input::Freeze(Duration::from_secs(secs.max(0) as u64)));
        Ok(if secs == 0 {
            doc! { "info": "unfreezing" }
        } else {
            Document::new()
        })
    }

    /// The electionId a primary reports: MongoDB's term-based ObjectId.
    pub fn election_id(term: i64) -> bson::oid::ObjectId {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        b[4..].copy_from_slice(&(term.max(0) as u64).to_be_bytes());
        bson::oid::ObjectId::from_bytes(b)
    }

    /// The replica set fields of `hello` (`primary_field` is `isWritablePrimary` or
    /// `ismaster`), for a member that runs Raft.
    pub fn hello_fields(&self, primary_field: &str, reply: &mut Document) {
        let v = self.view();
        let Some(config) = &v.config else {
            reply.insert(primary_field, false);
            reply.insert("secondary", false);
            reply.insert("info", "Does not have a valid replica set config");
            reply.insert("isreplicaset", true);
            return;
        };
        let mut hosts = Vec::new();
        let mut passives = Vec::new();
        for m in &config.members {
            if m.hidden {
                continue;
            }
            if m.priority > 0.0 {
                hosts.push(Bson::String(m.host.clone()));
            } else {
                passives.push(Bson::String(m.host.clone()));
            }
        }
        let me = config.member_by_raft_id(v.id);
        reply.insert(primary_field, v.writable);
        reply.insert("secondary", v.state == MemberState::Secondary);
        reply.insert("hosts", hosts);
        if !passives.is_empty() {
            reply.insert("passives", passives);
        }
        reply.insert("setName", &self.set_name);
        reply.insert("setVersion", config.version as i32);
        if let Some(p) = (v.leader != 0)
            .then(|| config.member_by_raft_id(v.leader))
            .flatten()
        {
            reply.insert("primary", p.host.clone());
        }
        reply.insert("me", me.map_or(self.me.clone(), |m| m.host.clone()));
        if let Some(m) = me {
            if m.hidden {
                reply.insert("hidden", true);
            }
            if m.priority == 0.0 && !m.hidden {
                reply.insert("passive", true);
            }
            if m.secondary_delay_secs > 0 {
                reply.insert("secondaryDelaySecs", m.secondary_delay_secs);
            }
            // Drivers select members by these (read preference tag sets); MongoDB sends the
            // field only for a member that has tags.
            if !m.tags.is_empty() {
                reply.insert("tags", m.tags.clone());
            }
        }
        if v.state == MemberState::Primary {
            reply.insert("electionId", Coordinator::election_id(v.term));
        }
        reply.insert(
            "lastWrite",
            doc! {
                "opTime": v.applied.to_document(),
                "lastWriteDate": v.applied.wall,
                "majorityOpTime": v.committed.to_document(),
                "majorityWriteDate": v.committed.wall,
            },
        );
    }

    /// `replSetGetConfig`.
    pub fn config_document(&self, include_newly_added: bool) -> Result<Document> {
        let v = self.view.read();
        let Some(c) = &v.config else {
            return Err(Error::new(
                ErrorCode::NotYetInitialized,
                "no replset config has been received",
            ));
        };
        let mut d = c.to_document();
        // The configuration in force carries the current term, as MongoDB's primary
        // rewrites it on election (a forced configuration has none, -1).
        if c.term >= 0 {
            d.insert("term", v.term as i32);
        }
        if !include_newly_added {
            if let Ok(members) = d.get_array_mut("members") {
                for m in members {
                    if let Bson::Document(m) = m {
                        m.remove(config::NEWLY_ADDED);
                    }
                }
            }
        }
        Ok(d)
    }

    /// `replSetGetStatus`.
    pub fn status(&self) -> Result<Document> {
        let v = self.view();
        let Some(config) = &v.config else {
            return Err(Error::new(
                ErrorCode::NotYetInitialized,
                "no replset config has been received",
            ));
        };
        if v.state == MemberState::Removed {
            return Err(Error::new(
                ErrorCode::InvalidReplicaSetConfig,
                "Our replica set config is invalid or we are not a member of it",
            ));
        }
        let now = bson::DateTime::now();
        let heartbeat = config.settings.heartbeat_interval_millis;
        let mut members = Vec::new();
        for m in &config.members {
            let id = m.raft_id();
            let mut d = doc! { "_id": m.id as i32, "name": &m.host };
            if id == v.id {
                d.insert("health", 1.0);
                d.insert("state", v.state.code());
                d.insert("stateStr", v.state.name());
                d.insert("uptime", self.uptime_secs());
                d.insert("optime", v.applied.to_document());
                d.insert("optimeDate", v.applied.date());
                d.insert("lastAppliedWallTime", v.applied.wall);
                d.insert("lastDurableWallTime", v.durable.wall);
                d.insert("syncSourceHost", self.sync_source(&v));
                d.insert(
                    "syncSourceId",
                    match v.state {
                        MemberState::Secondary if v.leader != 0 => config
                            .member_by_raft_id(v.leader)
                            .map_or(-1, |l| l.id as i32),
                        _ => -1,
                    },
                );
                d.insert("infoMessage", "");
                if v.state == MemberState::Primary {
                    if let Some(e) = v.election_date {
                        d.insert("electionTime", v.election_optime.ts);
                        d.insert("electionDate", e);
                    }
                }
                d.insert("configVersion", config.version as i32);
                d.insert("configTerm", v.term as i32);
                d.insert("self", true);
                d.insert("lastHeartbeatMessage", "");
            } else {
                let p = self.peer_info(id).unwrap_or_default();
                let state = if p.healthy {
                    p.state
                } else {
                    MemberState::Down
                };
                d.insert("health", if p.healthy { 1.0 } else { 0.0 });
                d.insert("state", state.code());
                d.insert("stateStr", state.name());
                d.insert(
                    "uptime",
                    p.up_since
                        .filter(|_| p.healthy)
                        .map_or(0, |t| t.elapsed().as_secs() as i64),
                );
                d.insert("optime", p.applied.to_document());
                d.insert("optimeDurable", p.durable.to_document());
                d.insert("optimeDate", p.applied.date());
                d.insert("optimeDurableDate", p.durable.date());
                d.insert("lastAppliedWallTime", p.applied.wall);
                d.insert("lastDurableWallTime", p.durable.wall);
                d.insert(
                    "lastHeartbeat",
                    p.last_heartbeat.unwrap_or(bson::DateTime::from_millis(0)),
                );
                d.insert(
                    "lastHeartbeatRecv",
                    p.last_heartbeat_recv
                        .unwrap_or(bson::DateTime::from_millis(0)),
                );
                d.insert("pingMs", p.ping_ms);
                d.insert("lastHeartbeatMessage", p.last_message.clone());
                d.insert("syncSourceHost", p.sync_source.clone());
                d.insert(
                    "syncSourceId",
                    config
                        .member_by_host(&p.sync_source)
                        .map_or(-1, |s| s.id as i32),
                );
                d.insert("infoMessage", "");
                if p.healthy && p.state == MemberState::Primary {
                    if let Some(e) = p.election_date {
                        d.insert("electionDate", e);
                    }
                }
                d.insert("configVersion", p.config_version as i32);
                d.insert("configTerm", p.term as i32);
            }
            members.push(Bson::Document(d));
        }
        let voting = config.voters() as i32;
        let majority = config.majority() as i32;
        let (first, last, bytes) = self.store.log_stats();
        let mut extra = doc! {
            // Nidus's own: the Raft log this member keeps (compacted past its size bound).
            "raftLog": {
                "firstIndex": first as i64,
                "lastIndex": last as i64,
                "entries": (last + 1).saturating_sub(first) as i64,
                "sizeBytes": bytes as i64,
            },
        };
        if let Some(s) = self.initial_sync.document() {
            extra.insert("initialSyncStatus", s);
        }
        let mut reply = doc! {
            "set": &self.set_name,
            "date": now,
            "myState": v.state.code(),
            "term": v.term,
            "syncSourceHost": self.sync_source(&v),
            "syncSourceId": match v.state {
                MemberState::Secondary if v.leader != 0 => config.member_by_raft_id(v.leader).map_or(-1, |l| l.id as i32),
                _ => -1,
            },
            "heartbeatIntervalMillis": heartbeat,
            "majorityVoteCount": majority,
            "writeMajorityCount": majority,
            "votingMembersCount": voting,
            "writableVotingMembersCount": voting,
            "optimes": {
                "lastCommittedOpTime": v.committed.to_document(),
                "lastCommittedWallTime": v.committed.wall,
                "readConcernMajorityOpTime": v.committed.to_document(),
                "appliedOpTime": v.applied.to_document(),
                "durableOpTime": v.durable.to_document(),
                "lastAppliedWallTime": v.applied.wall,
                "lastDurableWallTime": v.durable.wall,
            },
            "members": members,
        };
        reply.extend(extra);
        Ok(reply)
    }
}

impl transport::LinkOwner for Coordinator {
    fn peer_host(&self, id: u64) -> Option<String> {
        self.host_of(id)
    }

    fn outgoing(&self, _to: u64, messages: Vec<Bson>) -> Document {
        let id = self.view.read().id;
        transport::command(
            &self.set_name,
            id,
            &self.me,
            self.status_document(),
            messages,
        )
    }

    fn heartbeat_interval(&self) -> Duration {
        let ms = self
            .view
            .read()
            .config
            .as_ref()
            .map_or(2000, |c| c.settings.heartbeat_interval_millis);
        Duration::from_millis(ms.clamp(10, 60_000) as u64)
    }

    fn on_reply(&self, id: u64, reply: &Document, ping: Duration, had_snapshot: bool) {
        if let Ok(status) = reply.get_document("status") {
            self.note_peer_status(id, status, Some(ping));
        }
        if reply.get_bool("removed").unwrap_or(false) {
            self.note_removed();
        }
        if had_snapshot {
            self.send_input(Input::SnapshotDone(id, true));
        }
    }

    fn on_unreachable(&self, id: u64, had_messages: bool, had_snapshot: bool) {
        {
            let mut peers = self.peers.write();
            let p = peers.entry(id).or_default();
            if p.healthy {
                p.last_message = "Couldn't get a connection within the time limit".to_string();
            }
            p.healthy = false;
            p.up_since = None;
            p.last_heartbeat = Some(bson::DateTime::now());
        }
        if had_snapshot {
            self.send_input(Input::SnapshotDone(id, false));
        }
        if had_messages {
            self.send_input(Input::Unreachable(id));
        }
    }

    fn on_peer_gone(&self, id: u64) {
        self.send_input(Input::PeerGone(id));
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

fn split_host(h: &str) -> (&str, &str) {
    match h.rsplit_once(':') {
        Some((host, port)) => (host, port),
        None => (h, "27017"),
    }
}

/// All of 127.0.0.0/8 is loopback (a test harness's proxy listens on 127.0.0.2 for a member
/// on 127.0.0.1 with the same port).
fn is_loopback(h: &str) -> bool {
    matches!(h, "localhost" | "::1" | "[::1]")
        || h.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}
