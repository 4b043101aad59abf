//! Server-wide state shared by every connection.

use crate::auth::AuthManager;
use crate::config::Config;
use crate::cursor::CursorManager;
use crate::failpoint::FailPoints;
use crate::params::Parameters;
use crate::session::Sessions;
use nidus_engine::Engine;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// `serverStatus().opcounters`.
#[derive(Default)]
pub struct OpCounters {
    pub insert: AtomicI64,
    pub query: AtomicI64,
    pub update: AtomicI64,
    pub delete: AtomicI64,
    pub getmore: AtomicI64,
    pub command: AtomicI64,
}

#[derive(Default)]
pub struct Connections {
    pub current: AtomicI64,
    pub total_created: AtomicI64,
    pub active: AtomicI64,
    sockets: parking_lot::Mutex<OpenSockets>,
}

/// The sockets of connections served on their own threads, by connection id, so that
/// shutdown can end the idle ones.
#[derive(Default)]
struct OpenSockets {
    by_id: std::collections::HashMap<i64, std::net::TcpStream>,
    closed: bool,
}

impl Connections {
    /// Registers a connection's socket; `false` once the server has closed its connections
    /// (the connection then ends at once).
    pub fn register(&self, id: i64, stream: &std::net::TcpStream) -> bool {
        let mut sockets = self.sockets.lock();
        if sockets.closed {
            return false;
        }
        if let Ok(s) = stream.try_clone() {
            sockets.by_id.insert(id, s);
        }
        true
    }

    pub fn unregister(&self, id: i64) {
        self.sockets.lock().by_id.remove(&id);
    }

    /// Shuts down every registered socket, as mongod ends its connections at shutdown: a
    /// thread waiting for a client's next message reads the end of the stream and lets go of
    /// the server state.
    pub fn close_all(&self) {
        let mut sockets = self.sockets.lock();
        sockets.closed = true;
        for (_, s) in sockets.by_id.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The cluster time a replica set member reports (`operationTime`, `$clusterTime`): a
/// timestamp of whole seconds and an increment, strictly increasing across calls.
#[derive(Default)]
pub struct ClusterClock {}

impl ClusterClock {
    /// The engine's logical clock, which also gives oplog entries their `ts`: a reply's
    /// `operationTime` is at or after every write it could have seen.
    pub fn tick(&self) -> bson::Timestamp {
        nidus_engine::oplog::clock().tick()
    }
}

pub struct ServerState {
    pub engine: Arc<Engine>,
    pub config: Config,
    pub params: Parameters,
    pub cursors: CursorManager,
    pub fail_points: FailPoints,
    pub opcounters: OpCounters,
    pub connections: Connections,
    pub started: Instant,
    pub process_id: bson::oid::ObjectId,
    pub auth: AuthManager,
    pub sessions: Sessions,
    pub cluster_time: ClusterClock,
    pub snapshots: crate::read_concern::SnapshotHistory,
    /// Operations in progress (`currentOp`, `killOp`).
    pub ops: crate::curop::OpRegistry,
    /// Profiling levels, `slowms`, `sampleRate` (`profile`).
    pub profiler: crate::profiler::Profiler,
    /// Set once shutdown begins, so waits (awaitable `hello`) end early.
    pub shutting_down: std::sync::atomic::AtomicBool,
    /// Per-collection usage (`top`, `$collStats` latencyStats, `$indexStats`).
    pub top: crate::top::Top,
    /// When the server started, as a date (`$indexStats` `accesses.since`).
    pub started_at: bson::DateTime,
    /// The replication coordinator (`--replSet`).
    pub repl: Option<Arc<nidus_repl::Coordinator>>,
    next_connection_id: AtomicU64,
}

impl ServerState {
    pub fn new(engine: Arc<Engine>, config: Config) -> Result<ServerState, String> {
        let params = Parameters::from_config(&config.set_parameters)?;
        // Read before the coordinator starts: its first connections to other members
        // authenticate with the key.
        let internal = match &config.key_file {
            Some(path) => {
                let key = crate::auth::keyfile::read_key_file(path)?;
                let internal = crate::auth::keyfile::InternalKey::new(&key).map_err(|e| e.0)?;
                nidus_repl::transport::set_internal_key(key);
                Some(internal)
            }
            None => None,
        };
        let repl = match &config.repl_set {
            Some(set) => Some(
                nidus_repl::Coordinator::start(
                    set,
                    &crate::commands::member_address(&config),
                    engine.clone(),
                )
                .map_err(|e| e.message.clone())?,
            ),
            None => None,
        };
        Ok(ServerState {
            engine,
            config: config.clone(),
            params,
            cursors: CursorManager::default(),
            fail_points: FailPoints::default(),
            opcounters: OpCounters::default(),
            connections: Connections::default(),
            started: Instant::now(),
            process_id: bson::oid::ObjectId::new(),
            // A key file turns authorization on, as mongod's does.
            auth: AuthManager::new(config.auth || internal.is_some(), internal),
            sessions: Sessions::default(),
            cluster_time: ClusterClock::default(),
            snapshots: Default::default(),
            ops: crate::curop::OpRegistry::default(),
            profiler: crate::profiler::Profiler::new(
                config.profile,
                config.slowms,
                config.slow_op_sample_rate,
            ),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            top: Default::default(),
            started_at: bson::DateTime::now(),
            repl,
            next_connection_id: AtomicU64::new(1),
        })
    }

    pub fn next_connection_id(&self) -> i64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed) as i64
    }

    pub fn test_commands_enabled(&self) -> bool {
        self.params.test_commands_enabled()
    }
}
