//! `nidus`: a MongoDB-compatible document database server on RocksDB.

mod auth;
mod commands;
mod config;
mod connection;
mod curop;
mod cursor;
mod failpoint;
mod log;
mod params;
mod profiler;
mod read_concern;
mod session;
mod state;
mod tls;
mod top;

use config::Config;
use connection::ConnectionSlot;
use nidus_engine::Engine;
use nidus_storage_rocks::RocksEngine;
use serde_json::json;
use state::ServerState;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// mimalloc for every Rust allocation (RocksDB's own C++ allocations keep the system's):
/// the request path allocates and frees many small values per command (BSON documents,
/// strings), which glibc's malloc made a third of a point read's instructions.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().skip(1).any(|a| a == "--version") {
        print_version();
        return;
    }
    let config = match Config::from_args(args) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    if config.fork && std::env::var_os(FORKED_ENV).is_none() {
        std::process::exit(fork_and_wait());
    }
    if let Some(path) = &config.log_path {
        // A process restarted by a file-copy initial sync keeps its log.
        let append =
            config.log_append || std::env::var_os(nidus_repl::file_copy::RESTART_ENV).is_some();
        if let Err(msg) = log::to_file(path, append) {
            eprintln!("{msg}");
            std::process::exit(1);
        }
    }
    if let Err(msg) = run(config) {
        log::log(
            "F",
            "CONTROL",
            20574,
            "main",
            "Error during startup",
            json!({ "error": msg }),
        );
        std::process::exit(1);
    }
}

/// `nidus --version`: mongod's two-part banner (the MongoDB version it behaves as, then the
/// build).
fn print_version() {
    println!(
        "nidus version v{} (compatible with db version v{})",
        env!("CARGO_PKG_VERSION"),
        commands::info::COMPATIBLE_VERSION
    );
    println!("Build Info: {{");
    println!("    \"nidus\": \"{}\",", env!("CARGO_PKG_VERSION"));
    println!("    \"storageEngine\": \"rocksdb\",");
    println!("    \"target_arch\": \"{}\",", std::env::consts::ARCH);
    println!("    \"target_os\": \"{}\"", std::env::consts::OS);
    println!("}}");
}

/// Set in the environment of the background process `--fork` starts.
const FORKED_ENV: &str = "NIDUS_FORKED_CHILD";

/// `--fork` as mongod: start the server in the background (its own process group, output
/// to its log file), wait until it listens, print its pid and exit 0; exit 1 if it fails to
/// start. The child reports readiness with one line on its stdout, a pipe to this process.
fn fork_and_wait() -> i32 {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    println!("about to fork child process, waiting until server is ready for connections.");
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ERROR: cannot create a pipe for --fork: {e}");
            return 1;
        }
    };
    let exe = std::env::current_exe().unwrap_or_else(|_| "nidus".into());
    let child = std::process::Command::new(exe)
        .args(std::env::args().skip(1))
        .env(FORKED_ENV, "1")
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ERROR: cannot start the background process: {e}");
            return 1;
        }
    };
    println!("forked process: {}", child.id());
    let mut line = String::new();
    let ready =
        std::io::BufReader::new(reader).read_line(&mut line).is_ok() && line.starts_with("ready");
    if ready {
        println!("child process started successfully, parent exiting");
        0
    } else {
        eprintln!("ERROR: child process failed, exited with 1 (see the log file)");
        1
    }
}

fn run(config: Config) -> Result<(), String> {
    std::fs::create_dir_all(&config.dbpath)
        .map_err(|e| format!("cannot create dbpath {}: {e}", config.dbpath.display()))?;
    if config.repl_set.is_some() {
        // The files a file-copy initial sync downloaded replace the store before it opens.
        let open = |p: &std::path::Path| {
            RocksEngine::open(p).map(|e| Arc::new(e) as Arc<dyn nidus_storage::KvEngine>)
        };
        if nidus_repl::file_copy::install_pending(
            &config.dbpath,
            &open,
            &nidus_storage_rocks::install_checkpoint,
        )? {
            log::info(
                "REPL",
                21327,
                "main",
                "Installed the files copied by the file copy based initial sync",
                serde_json::Value::Null,
            );
        }
    }
    let kv = RocksEngine::open_with_cache(&config.dbpath, config.cache_bytes())
        .map_err(|e| e.to_string())?;
    if !kv.preallocate_wal().map_err(|e| e.to_string())? {
        log::warn(
            "STORAGE",
            7360003,
            "main",
            "Not preparing the journal's files: too little free disk space",
            serde_json::json!({ "dbpath": config.dbpath.display().to_string() }),
        );
    }
    let engine = Engine::open(Arc::new(kv)).map_err(|e| e.to_string())?;
    // Spilled sort runs go where mongod keeps them; leftovers of a crash are removed.
    let spill = config.dbpath.join("_tmp");
    let _ = std::fs::remove_dir_all(&spill);
    engine.set_spill_dir(spill);
    engine.start_background_sync();
    if config.repl_set.is_some() {
        // A replica set member logs every write (`local.oplog.rs`); a standalone does not.
        engine
            .enable_oplog(config.oplog_size_mb)
            .map_err(|e| e.to_string())?;
    }
    nidus_engine::validation::set_warning_sink(Box::new(|ns, document, err_info| {
        log::warn(
            "STORAGE",
            20294,
            "conn",
            "Document would fail validation",
            serde_json::json!({
                "namespace": ns,
                "document": bson::Bson::Document(document.clone()).into_relaxed_extjson(),
                "errInfo": bson::Bson::Document(err_info.clone()).into_relaxed_extjson(),
            }),
        )
    }));
    let state = Arc::new(ServerState::new(engine.clone(), config.clone())?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A command holds a blocking thread while it runs, including a getMore parked for
        // events (change streams, awaitData cursors): as mongod's thread per connection,
        // every connection may need one, so the pool follows --maxConns (threads are made
        // only when needed). 512 parked change streams starved every other command.
        .max_blocking_threads(config.max_conns.clamp(512, 20_000))
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(serve(state.clone()))?;
    // As the runtime waits for its blocking pool when it drops: commands still running on
    // connections' own threads finish before the engine syncs and the process exits.
    connection::wait_for_thread_commands(Duration::from_secs(15));
    state.connections.close_all();
    engine.shutdown().map_err(|e| e.to_string())?;
    drop(runtime);
    drop(state);
    close_store(engine);
    log::info(
        "CONTROL",
        20565,
        "main",
        "Now exiting",
        serde_json::Value::Null,
    );
    Ok(())
}

/// Closes the store on this thread once it holds the last references to the engine and the
/// store: threads that still hold one (a connection ending with a cursor, a replication
/// thread) get two seconds to let go. Otherwise the references are kept for good, so no other
/// thread can close the store while the process exits (RocksDB aborts the process when its
/// environment is torn down under a closing database); everything committed was synced by
/// `Engine::shutdown`.
fn close_store(engine: Arc<Engine>) {
    let until = std::time::Instant::now() + Duration::from_secs(2);
    let kv = engine.kv_arc();
    if drop_when_sole(engine, until) && drop_when_sole(kv, until) {
        return;
    }
    log::warn(
        "STORAGE",
        7360002,
        "main",
        "Exiting with the storage engine open: other threads still hold it",
        serde_json::Value::Null,
    );
}

/// Drops `value` if this is (or becomes, before `until`) its only reference, else leaks it.
/// `Arc::get_mut` succeeds only without other strong or weak references, so no other thread
/// can take one afterwards.
fn drop_when_sole<T: ?Sized>(mut value: Arc<T>, until: std::time::Instant) -> bool {
    loop {
        if Arc::get_mut(&mut value).is_some() {
            drop(value);
            return true;
        }
        if std::time::Instant::now() >= until {
            std::mem::forget(value);
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

async fn serve(state: Arc<ServerState>) -> Result<(), String> {
    let acceptor = tls::acceptor(&state.config.tls)?;
    let mut listeners = Vec::new();
    for ip in &state.config.bind_ip {
        let addr = format!("{ip}:{}", state.config.port);
        let l = TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("Failed to bind {addr}: {e}"))?;
        log::info(
            "NETWORK",
            23015,
            "listener",
            "Listening on",
            json!({ "address": addr }),
        );
        listeners.push(l);
    }
    log::info(
        "NETWORK",
        23016,
        "listener",
        "Waiting for connections",
        json!({ "port": state.config.port, "ssl": if acceptor.is_some() { "on" } else { "off" } }),
    );
    log::started();
    if std::env::var_os(FORKED_ENV).is_some() {
        // The `--fork` parent waits for this line on our stdout (see fork_and_wait).
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    }
    for l in listeners {
        let st = state.clone();
        tokio::spawn(accept_loop(st, l, acceptor.clone()));
    }
    tokio::spawn(cursor_reaper(state.clone()));
    tokio::spawn(ttl_monitor(state.clone()));
    tokio::spawn(transaction_reaper(state.clone()));
    shutdown_signal().await;
    // Sequentially consistent: see connection::ThreadCommand.
    state
        .shutting_down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(repl) = &state.repl {
        repl.shutdown();
    }
    log::info(
        "CONTROL",
        23377,
        "SignalHandler",
        "Received signal",
        json!({ "signal": 15 }),
    );
    Ok(())
}

async fn accept_loop(
    state: Arc<ServerState>,
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // As mongod: accepted, then closed at once when maxConns are open.
                let slot = match ConnectionSlot::take(&state, state.config.max_conns) {
                    Ok(slot) => slot,
                    Err(current) => {
                        log::info(
                            "NETWORK",
                            22942,
                            "listener",
                            "Connection refused because there are too many open connections",
                            json!({ "remote": peer.to_string(), "connectionCount": current }),
                        );
                        drop(stream);
                        continue;
                    }
                };
                tokio::spawn(start_connection(
                    state.clone(),
                    stream,
                    peer,
                    acceptor.clone(),
                    slot,
                ));
            }
            Err(e) => {
                log::warn(
                    "NETWORK",
                    22942,
                    "listener",
                    "Error accepting new connection",
                    json!({ "error": e.to_string() }),
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Serves one accepted connection, first completing the TLS handshake when it uses TLS.
async fn start_connection(
    state: Arc<ServerState>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    slot: ConnectionSlot,
) {
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = acceptor else {
        return serve_plain(state, stream, peer, slot).await;
    };
    if !tls::wants_tls(state.config.tls.mode, &stream).await {
        return serve_plain(state, stream, peer, slot).await;
    }
    match tokio::time::timeout(Duration::from_secs(30), acceptor.accept(stream)).await {
        Ok(Ok(tls_stream)) => {
            let subject = tls_stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|cert| auth::x509::subject_name(cert));
            let peer_info = connection::TlsPeer { subject };
            connection::serve(state, tls_stream, peer, slot, Some(peer_info)).await
        }
        Ok(Err(e)) => log::info(
            "NETWORK",
            22988,
            "listener",
            "Error receiving request from client. Ending connection from remote",
            json!({ "error": format!("SSLHandshakeFailed: {e}"), "remote": peer.to_string() }),
        ),
        Err(_) => log::info(
            "NETWORK",
            22988,
            "listener",
            "Error receiving request from client. Ending connection from remote",
            json!({ "error": "SSLHandshakeFailed: handshake timed out", "remote": peer.to_string() }),
        ),
    }
}

/// Serves a plain TCP connection on a thread of its own with blocking socket calls
/// (`connection::serve_blocking`, as mongod's thread per connection): a cheap command then
/// costs one read and one write, with no event-loop wake-up or hand-off between threads.
/// `NIDUS_CONNECTION_THREADS=0` keeps such connections on the runtime's tasks (for A/B
/// measurements), as TLS connections always are.
async fn serve_plain(
    state: Arc<ServerState>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    slot: ConnectionSlot,
) {
    static TASKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let tasks =
        *TASKS.get_or_init(|| std::env::var("NIDUS_CONNECTION_THREADS").is_ok_and(|v| v == "0"));
    if tasks {
        return connection::serve(state, stream, peer, slot, None).await;
    }
    let socket = match stream
        .into_std()
        .and_then(|s| s.set_nonblocking(false).map(|()| s))
    {
        Ok(socket) => socket,
        Err(e) => {
            log::info(
                "NETWORK",
                22989,
                "listener",
                "Closing connection",
                json!({ "remote": peer.to_string(), "error": e.to_string() }),
            );
            return;
        }
    };
    let runtime = tokio::runtime::Handle::current();
    let thread = std::thread::Builder::new()
        .name("conn".into())
        .spawn(move || connection::serve_blocking(state, socket, peer, slot, runtime));
    if let Err(e) = thread {
        // As mongod when it cannot create a connection's thread: the connection is closed
        // (the socket and the slot went with the closure).
        log::warn(
            "EXECUTOR",
            22948,
            "listener",
            "Failed to create a thread for a connection",
            json!({ "remote": peer.to_string(), "error": e.to_string() }),
        );
    }
}

/// Every `ttlMonitorSleepSecs` (while `ttlMonitorEnabled`), deletes expired documents.
async fn ttl_monitor(state: Arc<ServerState>) {
    loop {
        let secs = state.params.i64("ttlMonitorSleepSecs").unwrap_or(60).max(1) as u64;
        tokio::time::sleep(Duration::from_secs(secs)).await;
        if !matches!(
            state.params.get("ttlMonitorEnabled"),
            Some(bson::Bson::Boolean(true))
        ) {
            continue;
        }
        // Every member expires its own change-stream images (their deletion is not
        // replicated), as `changeStreamOptions` says.
        if let Ok(Some(secs)) = commands::cluster_parameter::pre_image_expiry_secs(&state.engine) {
            let engine = state.engine.clone();
            let cutoff = bson::DateTime::from_millis(
                bson::DateTime::now()
                    .timestamp_millis()
                    .saturating_sub(secs.saturating_mul(1000)),
            );
            let expired = tokio::task::spawn_blocking(move || engine.expire_images_before(cutoff));
            if let Ok(Err(e)) = expired.await {
                log::info(
                    "QUERY",
                    6278511,
                    "ChangeStreamExpiredPreImagesRemover",
                    "Failed to remove expired pre-images",
                    json!({ "error": e.message }),
                );
            }
        }
        // Only a primary deletes expired documents (secondaries get the deletes replicated).
        if state.repl.as_ref().is_some_and(|r| !r.writable()) {
            continue;
        }
        let engine = state.engine.clone();
        let pass =
            tokio::task::spawn_blocking(move || engine.ttl_pass(bson::DateTime::now())).await;
        if let Ok(Err(e)) = pass {
            log::info(
                "INDEX",
                22542,
                "TTLMonitor",
                "Error processing ttl index",
                json!({ "error": e.message }),
            );
        }
    }
}

/// Aborts transactions older than `transactionLifetimeLimitSeconds` (their locks go with
/// them, so writers waiting on those documents proceed) and forgets sessions idle longer than
/// `localLogicalSessionTimeoutMinutes`.
async fn transaction_reaper(state: Arc<ServerState>) {
    // Retryable-write records of sessions that expired while the server was down.
    let engine = state.engine.clone();
    let idle = state
        .params
        .i64("localLogicalSessionTimeoutMinutes")
        .unwrap_or(30)
        .max(1) as u64;
    tokio::task::spawn_blocking(move || engine.sweep_statements(Duration::from_secs(idle * 60)));
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let lifetime = state
            .params
            .i64("transactionLifetimeLimitSeconds")
            .unwrap_or(60)
            .max(1) as u64;
        let idle_minutes = state
            .params
            .i64("localLogicalSessionTimeoutMinutes")
            .unwrap_or(30)
            .max(1) as u64;
        // Taken before the reaping: a session used again after it was reaped writes its
        // records later, and `forget_session` keeps them.
        let expired = std::time::SystemTime::now();
        let reaped = state.sessions.reap(
            Duration::from_secs(lifetime),
            Duration::from_secs(idle_minutes * 60),
        );
        let aborted = reaped.aborted;
        if !reaped.forget.is_empty() {
            let engine = state.engine.clone();
            tokio::task::spawn_blocking(move || {
                for lsid in reaped.forget {
                    if let Err(e) = engine.forget_session(&lsid, expired) {
                        log::warn(
                            "STORAGE",
                            7360001,
                            "TransactionReaper",
                            "Could not delete retryable write records",
                            json!({ "error": e.to_string() }),
                        );
                    }
                }
            });
        }
        if aborted > 0 {
            log::info(
                "TXN",
                5047400,
                "TransactionReaper",
                "Aborting transactions that exceeded transactionLifetimeLimitSeconds",
                json!({ "numAborted": aborted, "transactionLifetimeLimitSeconds": lifetime }),
            );
        }
    }
}

/// MongoDB's ClientCursorMonitor: every `clientCursorMonitorFrequencySecs` (4) closes the
/// cursors idle for `cursorTimeoutMillis` and those whose session is gone.
async fn cursor_reaper(state: Arc<ServerState>) {
    loop {
        let every = state
            .params
            .i64("clientCursorMonitorFrequencySecs")
            .unwrap_or(4)
            .max(1) as u64;
        tokio::time::sleep(Duration::from_secs(every)).await;
        let timeout = state
            .params
            .i64("cursorTimeoutMillis")
            .unwrap_or(600_000)
            .max(0) as u64;
        let sessions_at = std::time::Instant::now();
        let live_sessions: std::collections::HashSet<Vec<u8>> = if state.cursors.any_in_session() {
            state
                .sessions
                .list()
                .iter()
                .filter_map(|d| match d.get_document("_id").ok()?.get("id")? {
                    bson::Bson::Binary(b) => Some(b.bytes.clone()),
                    _ => None,
                })
                .collect()
        } else {
            Default::default()
        };
        let reaped = state.cursors.reap(&cursor::ReapRules {
            timeout: Duration::from_millis(timeout),
            session_cursors_time_out: matches!(
                state.params.get("enableTimeoutOfInactiveSessionCursors"),
                Some(bson::Bson::Boolean(true))
            ),
            live_sessions: &live_sessions,
            sessions_at,
        });
        if reaped.timed_out > 0 {
            log::info(
                "QUERY",
                20529,
                "clientcursormon",
                "Cursors timed out",
                json!({ "numTimedOut": reaped.timed_out }),
            );
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
