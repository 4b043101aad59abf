//! One client connection: read a message, run it, write the reply.
//!
//! A plain TCP connection has a thread of its own ([`serve_blocking`]), as mongod's: it reads
//! with blocking calls, runs each command itself and writes the reply, with no hand-off to
//! another thread and back. Only the `getMore` of an idle change stream, whose wait a client's
//! hang-up or next message also ends, takes the asynchronous path there.
//!
//! A TLS connection is a tokio task ([`serve`]). Cheap commands (see [`runs_inline`]) run on
//! the task itself; everything that can wait (awaitable `hello`, cursors, write-concern
//! waits, journal syncs, scans, transactions, fail points) runs on tokio's blocking pool
//! while the task watches the client for a hang-up.

use crate::commands::{self, Reply, Request};
use crate::log;
use crate::state::ServerState;
use bson::{doc, Document};
use nidus_common::Error;
use nidus_wire::{Compressor, Decoded, MsgHeader, Request as WireRequest, HEADER_LEN};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A client's byte stream: plain TCP or TLS over it.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> ClientStream for S {}

/// Per-connection state commands may read or change.
#[derive(Debug, Clone)]
pub struct ConnState {
    pub id: i64,
    pub peer: SocketAddr,
    /// `peer` as `ip:port` (formatted once: every operation's `currentOp` entry names it).
    pub peer_text: Arc<str>,
    pub client_metadata: Option<Arc<Document>>,
    pub app_name: Option<String>,
    /// Compressors agreed in `hello`, in the client's order of preference.
    pub compressors: Vec<Compressor>,
    /// The authenticated user and any SASL conversation in progress.
    pub auth: crate::auth::AuthState,
    /// The TLS session, when the connection uses TLS.
    pub tls: Option<TlsPeer>,
    /// The connection already waited out this `getMore`'s await time for its idle change
    /// stream (see [`idle_change_stream`]): the command answers without waiting again.
    pub awaited_data: bool,
}

/// What the TLS handshake established about the client.
#[derive(Debug, Clone, Default)]
pub struct TlsPeer {
    /// The subject of the client's certificate (verified against `--tlsCAFile`), in the
    /// RFC 2253 form MONGODB-X509 user names use.
    pub subject: Option<String>,
}

/// Holds one of the `--maxConns` connection slots: taken when a connection is accepted,
/// given back when it ends (whatever path it ends on, TLS handshake failures included).
pub struct ConnectionSlot(Arc<ServerState>);

impl ConnectionSlot {
    /// Takes a slot, or `Err(current)` when `max` connections are already open.
    pub fn take(state: &Arc<ServerState>, max: usize) -> Result<ConnectionSlot, i64> {
        let before = state.connections.current.fetch_add(1, Ordering::AcqRel);
        if usize::try_from(before).unwrap_or(0) >= max {
            state.connections.current.fetch_sub(1, Ordering::AcqRel);
            return Err(before);
        }
        Ok(ConnectionSlot(state.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.current.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Most bytes reserved for a message before more of it has arrived (see [`fill`]).
const INITIAL_BODY_CAPACITY: usize = 64 * 1024;

/// Serves a connection until the client leaves or breaks the protocol. `slot` is the
/// connection's `--maxConns` slot, released when this returns.
pub async fn serve<S: ClientStream>(
    state: Arc<ServerState>,
    mut stream: S,
    peer: SocketAddr,
    slot: ConnectionSlot,
    tls: Option<TlsPeer>,
) {
    let mut conn = accepted(&state, peer, tls);
    let id = conn.id;
    // Bytes read from the client and not handled yet: the rest of the message being read, or
    // the next message(s) when the client sent them early (pipelined, or read while watching
    // for a disconnect during a command).
    let mut carry = Vec::new();
    loop {
        match handle_one(&state, &mut stream, &mut carry, conn).await {
            Ok(Some(c)) => conn = c,
            Ok(None) => break,
            Err(e) => {
                closing(id, peer, &e);
                break;
            }
        }
    }
    drop(slot);
    ended(id, peer);
}

/// Serves a plain TCP connection on the calling thread, a thread of its own, as mongod
/// serves each connection on its thread: blocking reads and writes, and commands run right
/// here, so a cheap request costs one read and one write and no hand-off between threads or
/// trip through the event loop. An awaitable `hello` waits here too and looks for a hang-up
/// every 50 ms ([`hung_up`]). The `getMore` of an idle change stream, whose wait a hang-up or
/// a next message also ends, goes through the asynchronous path ([`dispatch`]) on `runtime`,
/// as on a TLS connection: the socket is registered with the event loop for that command and
/// returned to blocking mode after it.
pub fn serve_blocking(
    state: Arc<ServerState>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    slot: ConnectionSlot,
    runtime: tokio::runtime::Handle,
) {
    let mut conn = accepted(&state, peer, None);
    let id = conn.id;
    if !state.connections.register(id, &stream) {
        drop(slot);
        ended(id, peer);
        return;
    }
    let mut stream = Some(stream);
    let mut carry = Vec::new();
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        match handle_one_blocking(
            &state,
            &mut stream,
            &mut carry,
            &mut scratch,
            conn,
            &runtime,
        ) {
            Ok(Some(c)) => conn = c,
            Ok(None) => break,
            Err(e) => {
                closing(id, peer, &e);
                break;
            }
        }
    }
    state.connections.unregister(id);
    drop(stream);
    drop(slot);
    ended(id, peer);
}

/// Commands in progress on connections' own threads (see [`serve_blocking`]).
static THREAD_COMMANDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One command counted in [`THREAD_COMMANDS`] while it runs.
struct ThreadCommand;

impl ThreadCommand {
    /// Counts a command about to run, or `None` once the server is shutting down (the
    /// connection then closes instead). Counted before the flag is read, and the shutdown
    /// sets the flag before it reads the count (both sequentially consistent): a command
    /// either sees the flag or is waited for.
    fn start(state: &ServerState) -> Option<ThreadCommand> {
        THREAD_COMMANDS.fetch_add(1, Ordering::SeqCst);
        if state.shutting_down.load(Ordering::SeqCst) {
            THREAD_COMMANDS.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(ThreadCommand)
    }
}

impl Drop for ThreadCommand {
    fn drop(&mut self) {
        THREAD_COMMANDS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// At shutdown, once `shutting_down` is set: waits up to `limit` for the commands running on
/// connections' own threads to finish (those on the asynchronous path too, which must leave
/// the runtime before it drops), so that none is inside the storage engine when it syncs and
/// the process exits (the runtime's blocking pool is waited for when it drops).
pub fn wait_for_thread_commands(limit: std::time::Duration) {
    // An idle change stream's wait (on a connection's own thread, inside the runtime) ends.
    shutdown_notify().notify_waiters();
    let until = std::time::Instant::now() + limit;
    while THREAD_COMMANDS.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Woken when the server starts shutting down (see [`wait_for_thread_commands`]).
fn shutdown_notify() -> &'static tokio::sync::Notify {
    static NOTIFY: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    NOTIFY.get_or_init(tokio::sync::Notify::new)
}

/// A new connection's state, counted and logged.
fn accepted(state: &ServerState, peer: SocketAddr, tls: Option<TlsPeer>) -> ConnState {
    let id = state.next_connection_id();
    state
        .connections
        .total_created
        .fetch_add(1, Ordering::Relaxed);
    log::info(
        "NETWORK",
        22943,
        "listener",
        "Connection accepted",
        serde_json::json!({ "remote": peer.to_string(), "connectionId": id }),
    );
    ConnState {
        id,
        peer,
        peer_text: peer.to_string().into(),
        client_metadata: None,
        app_name: None,
        compressors: Vec::new(),
        auth: Default::default(),
        tls,
        awaited_data: false,
    }
}

fn closing(id: i64, peer: SocketAddr, e: &std::io::Error) {
    log::info(
        "NETWORK",
        22989,
        &format!("conn{id}"),
        "Closing connection",
        serde_json::json!({ "remote": peer.to_string(), "error": e.to_string() }),
    );
}

fn ended(id: i64, peer: SocketAddr) {
    log::info(
        "NETWORK",
        22944,
        &format!("conn{id}"),
        "Connection ended",
        serde_json::json!({ "remote": peer.to_string(), "connectionId": id }),
    );
}

/// What the next message of a connection is. Returned once per message and taken apart at
/// once: boxing the request would cost an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// The client closed the connection (cleanly, or in the middle of a header).
    Closed,
    /// A message that does not decode but leaves the stream in step: answer with this frame.
    Refused(Vec<u8>),
    /// A request, and the id of its message.
    Request(Decoded, i32),
}

/// The header at the front of `carry` (which holds at least `HEADER_LEN` bytes) and the
/// length of its whole message.
fn parse_header(carry: &[u8]) -> std::io::Result<(MsgHeader, usize)> {
    let mut bytes = [0u8; HEADER_LEN];
    bytes.copy_from_slice(&carry[..HEADER_LEN]);
    let header = MsgHeader::parse(&bytes);
    match nidus_wire::check_length(&header) {
        Ok(body_len) => Ok((header, HEADER_LEN + body_len)),
        Err(e) => Err(fatal(e)),
    }
}

/// Decodes the message at the front of `carry` (which holds its `message_len` bytes) and
/// removes it.
fn take_message(
    carry: &mut Vec<u8>,
    header: &MsgHeader,
    message_len: usize,
) -> std::io::Result<Next> {
    let decoded = nidus_wire::decode(header, &carry[HEADER_LEN..message_len]);
    consume(carry, message_len);
    match decoded {
        Ok(d) => Ok(Next::Request(d, header.request_id)),
        Err(e) if e.is_fatal() => Err(fatal(e)),
        Err(e) => {
            let reply = Error::from(e).to_reply();
            Ok(Next::Refused(nidus_wire::encode_msg(
                next_request_id(),
                header.request_id,
                0,
                &reply,
                None,
            )))
        }
    }
}

/// Reads the next message. The whole message comes with as few reads as the client's
/// writes allow: a read takes whatever the socket holds (usually the header and body
/// together), and bytes past this message stay in `carry` for the next one.
async fn read_next<S: ClientStream>(stream: &mut S, carry: &mut Vec<u8>) -> std::io::Result<Next> {
    if !fill(stream, carry, HEADER_LEN).await? {
        return Ok(Next::Closed);
    }
    let (header, message_len) = parse_header(carry)?;
    if !fill(stream, carry, message_len).await? {
        // The client closed the connection in the middle of a message.
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    take_message(carry, &header, message_len)
}

/// [`read_next`] with blocking reads.
fn read_next_blocking(
    stream: &mut std::net::TcpStream,
    carry: &mut Vec<u8>,
    scratch: &mut [u8],
) -> std::io::Result<Next> {
    if !fill_blocking(stream, carry, scratch, HEADER_LEN)? {
        return Ok(Next::Closed);
    }
    let (header, message_len) = parse_header(carry)?;
    if !fill_blocking(stream, carry, scratch, message_len)? {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    take_message(carry, &header, message_len)
}

/// Handles one message. `Ok(None)` = the client closed the connection cleanly or must be
/// disconnected; `Err` = an I/O or framing error after which the connection is closed.
async fn handle_one<S: ClientStream>(
    state: &Arc<ServerState>,
    stream: &mut S,
    carry: &mut Vec<u8>,
    conn: ConnState,
) -> std::io::Result<Option<ConnState>> {
    match read_next(stream, carry).await? {
        Next::Closed => Ok(None),
        Next::Refused(frame) => {
            stream.write_all(&frame).await?;
            Ok(Some(conn))
        }
        Next::Request(decoded, request_id) => {
            dispatch(state, stream, carry, conn, decoded, request_id, false).await
        }
    }
}

/// [`handle_one`] on a connection's own thread (see [`serve_blocking`]). `stream` is taken
/// while a command runs on the asynchronous path and put back after it.
fn handle_one_blocking(
    state: &Arc<ServerState>,
    stream: &mut Option<std::net::TcpStream>,
    carry: &mut Vec<u8>,
    scratch: &mut [u8],
    mut conn: ConnState,
    runtime: &tokio::runtime::Handle,
) -> std::io::Result<Option<ConnState>> {
    use std::io::Write;
    let Some(socket) = stream.as_mut() else {
        return Ok(None);
    };
    let (decoded, request_id) = match read_next_blocking(socket, carry, scratch)? {
        Next::Closed => return Ok(None),
        Next::Refused(frame) => {
            socket.write_all(&frame)?;
            return Ok(Some(conn));
        }
        Next::Request(decoded, request_id) => (decoded, request_id),
    };
    let Some(_running) = ThreadCommand::start(state) else {
        return Ok(None);
    };
    // Every command runs right here, on the connection's own thread, writing its replies as
    // it makes them (an exhaust cursor's batches and a streaming `hello` too; an awaitable
    // `hello` checks for a hang-up every 50 ms, see `hung_up`), except the `getMore` of an
    // idle change stream: its wait also ends when the client hangs up or sends more, which
    // the event loop watches for.
    let waits_for_client = match &decoded.request {
        WireRequest::Msg(msg) => idle_change_stream(state, msg).is_some(),
        WireRequest::Query(_) => false,
    };
    if !waits_for_client {
        // No wait hook: a wait blocks this connection's thread and nothing else.
        let mut out = Out::Socket {
            socket,
            error: None,
        };
        let close = execute(
            state,
            &mut conn,
            decoded.request,
            request_id,
            decoded.compressor,
            &mut out,
        );
        if let Out::Socket { error: Some(e), .. } = out {
            return Err(e);
        }
        return Ok((!close).then_some(conn));
    }
    let Some(socket) = stream.take() else {
        return Ok(None);
    };
    socket.set_nonblocking(true)?;
    let (result, socket) = runtime.block_on(async {
        match tokio::net::TcpStream::from_std(socket) {
            Ok(mut socket) => {
                let result =
                    dispatch(state, &mut socket, carry, conn, decoded, request_id, true).await;
                (result, socket.into_std().ok())
            }
            Err(e) => (Err(e), None),
        }
    });
    let result = result?;
    match socket {
        Some(socket) => {
            socket.set_nonblocking(false)?;
            *stream = Some(socket);
            Ok(result)
        }
        None if result.is_none() => Ok(None),
        None => Err(std::io::Error::other(
            "the connection could not return to blocking mode",
        )),
    }
}

/// Runs one decoded request and writes its replies: a cheap command (see [`runs_inline`])
/// on the calling task, anything that can wait on tokio's blocking pool while the task
/// watches the client for a hang-up. `own_thread`: the caller is the connection's own
/// thread (see [`serve_blocking`]), which a wait may block.
async fn dispatch<S: ClientStream>(
    state: &Arc<ServerState>,
    stream: &mut S,
    carry: &mut Vec<u8>,
    conn: ConnState,
    decoded: Decoded,
    request_id: i32,
    own_thread: bool,
) -> std::io::Result<Option<ConnState>> {
    let Decoded {
        request,
        compressor,
    } = decoded;
    let mut conn = conn;
    if let WireRequest::Msg(msg) = &request {
        if let Some((channel, seen, wait)) = idle_change_stream(state, msg) {
            // Nothing to read for this stream until its channel moves: wait here, on the
            // connection's task, rather than parked in a thread; a client that hangs up or
            // sends more ends the wait.
            let mut probe = [0u8; 4096];
            tokio::select! {
                _ = channel.changed(seen) => {}
                _ = tokio::time::sleep_until(idle_wait_end(wait)) => conn.awaited_data = true,
                read = stream.read(&mut probe), if carry.len() < MAX_CARRY => match read {
                    Ok(n) if n > 0 => carry.extend_from_slice(&probe[..n]),
                    _ => return Ok(None),
                },
                // The server is shutting down: the connection closes.
                _ = shutdown_notify().notified() => return Ok(None),
            }
        }
        // After a full wait the answer is an empty batch: cheap enough to run inline.
        if conn.awaited_data || runs_inline(state, msg) {
            let _hook = (!own_thread)
                .then(|| nidus_engine::blocking::install(|f| tokio::task::block_in_place(f)));
            let mut out = Out::Buffer(Vec::new());
            let close = execute(state, &mut conn, request, request_id, compressor, &mut out);
            conn.awaited_data = false;
            if let Out::Buffer(frames) = out {
                for frame in frames {
                    stream.write_all(&frame).await?;
                }
            }
            return Ok((!close).then_some(conn));
        }
    }
    // Replies travel through a channel so an exhaust cursor can stream several of them.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let state2 = state.clone();
    let task = tokio::task::spawn_blocking(move || {
        let mut conn = conn;
        let close = execute(
            &state2,
            &mut conn,
            request,
            request_id,
            compressor,
            &mut Out::Channel(tx),
        );
        (conn, close)
    });
    // While the command runs, also read from the client: a client that hangs up ends a
    // long wait (an awaitable hello notices the closed channel) instead of holding its
    // thread and its connection slot; bytes of a pipelined next message are kept in `carry`.
    let mut probe = [0u8; 4096];
    let mut client_gone = false;
    loop {
        let watch = !client_gone && carry.len() < MAX_CARRY;
        let event = tokio::select! {
            frame = rx.recv() => Event::Frame(frame),
            read = stream.read(&mut probe), if watch => Event::Read(read),
        };
        match event {
            Event::Frame(Some(frame)) if !client_gone => stream.write_all(&frame).await?,
            Event::Frame(Some(_)) => {}
            Event::Frame(None) => break,
            Event::Read(Ok(n)) if n > 0 => carry.extend_from_slice(&probe[..n]),
            Event::Read(_) => {
                client_gone = true;
                rx.close();
            }
        }
    }
    let (conn, close) = task
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok((!close && !client_gone).then_some(conn))
}

/// Most bytes read ahead of the next message while a command runs; past it the client is
/// not watched until the command ends.
const MAX_CARRY: usize = 64 * 1024;

/// Idle change-stream waits end on a shared tick of this length.
const IDLE_WAIT_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// When an idle change stream's wait of `wait` ends: rounded up to the next multiple of
/// [`IDLE_WAIT_TICK`] since a process-wide epoch, so that the waits of many streams (each
/// waking once per await period) expire together, one timer wake-up of the runtime for all
/// the streams of a tick instead of one each. A `getMore` answers at most one tick after its
/// `maxAwaitTimeMS`.
fn idle_wait_end(wait: std::time::Duration) -> tokio::time::Instant {
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    let end = tokio::time::Instant::now() + wait;
    let tick = IDLE_WAIT_TICK.as_nanos();
    let since = end.saturating_duration_since(epoch).as_nanos();
    let rounded = since.div_ceil(tick).saturating_mul(tick);
    epoch + std::time::Duration::from_nanos(u64::try_from(rounded).unwrap_or(u64::MAX))
}

/// Bytes a read asks the socket for when the buffer has less room: a small message and the
/// header of the next one fit; a larger message grows the buffer as its bytes arrive.
const READ_CHUNK: usize = 4 * 1024;

/// Reads until `carry` holds at least `want` bytes. False when the client closed the
/// connection first. The buffer grows with the bytes actually received, so a header
/// announcing a 48 MB message costs nothing until the client sends that much.
async fn fill<S: ClientStream>(
    stream: &mut S,
    carry: &mut Vec<u8>,
    want: usize,
) -> std::io::Result<bool> {
    while carry.len() < want {
        let missing = want - carry.len();
        carry.reserve(missing.clamp(READ_CHUNK, INITIAL_BODY_CAPACITY));
        if stream.read_buf(carry).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// [`fill`] with blocking reads. A read of what a small message needs goes into `scratch`
/// (a buffer of `READ_CHUNK` bytes kept by the connection, initialized once) and is copied
/// into `carry`; a larger message is read straight into `carry`, grown as it arrives.
fn fill_blocking(
    stream: &mut std::net::TcpStream,
    carry: &mut Vec<u8>,
    scratch: &mut [u8],
    want: usize,
) -> std::io::Result<bool> {
    use std::io::Read;
    while carry.len() < want {
        let missing = want - carry.len();
        let read = if missing <= scratch.len() {
            let read = stream.read(scratch);
            if let Ok(n) = read {
                carry.extend_from_slice(&scratch[..n]);
            }
            read
        } else {
            carry.reserve(missing.min(INITIAL_BODY_CAPACITY));
            let filled = carry.len();
            carry.resize(carry.capacity(), 0);
            let read = stream.read(&mut carry[filled..]);
            carry.truncate(filled + *read.as_ref().unwrap_or(&0));
            read
        };
        match read {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Drops the first `n` bytes of `carry` (a message just decoded), keeping what follows it,
/// and gives back the memory a large message took once nothing of it is left.
fn consume(carry: &mut Vec<u8>, n: usize) {
    carry.drain(..n);
    if carry.capacity() > INITIAL_BODY_CAPACITY && carry.len() <= READ_CHUNK {
        carry.shrink_to(READ_CHUNK);
    }
}

enum Event {
    Frame(Option<Vec<u8>>),
    Read(std::io::Result<usize>),
}

/// A framing error after which the connection is closed.
fn fatal(e: nidus_wire::WireError) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        Error::from(e).message.clone(),
    )
}

fn next_request_id() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Where a command's reply frames go.
enum Out<'a> {
    /// To the connection task, which writes them while the command runs on another thread.
    Channel(tokio::sync::mpsc::Sender<Vec<u8>>),
    /// Kept until an inline command returns (it sends one reply at most).
    Buffer(Vec<Vec<u8>>),
    /// Written at once to the socket of the connection's own thread (see
    /// [`serve_blocking`]), which runs the command; `error` keeps a failed write's error.
    Socket {
        socket: &'a mut std::net::TcpStream,
        error: Option<std::io::Error>,
    },
}

impl Out<'_> {
    /// False when the client is gone.
    fn send(&mut self, frame: Vec<u8>) -> bool {
        match self {
            Out::Channel(tx) => tx.blocking_send(frame).is_ok(),
            Out::Buffer(frames) => {
                frames.push(frame);
                true
            }
            Out::Socket { socket, error } => {
                use std::io::Write;
                match socket.write_all(&frame) {
                    Ok(()) => true,
                    Err(e) => {
                        *error = Some(e);
                        false
                    }
                }
            }
        }
    }

    /// True once the client is known to be gone. A command that waits long checks it (an
    /// awaitable `hello`, every 50 ms).
    fn is_closed(&self) -> bool {
        match self {
            Out::Channel(tx) => tx.is_closed(),
            Out::Buffer(_) => false,
            Out::Socket { socket, .. } => hung_up(socket),
        }
    }
}

/// Whether the client of a connection's own thread hung up: a peek that does not wait finds
/// the end of the stream or an error (bytes of a next message, or nothing yet, mean it is
/// still there; they stay in the socket for the next read).
fn hung_up(socket: &std::net::TcpStream) -> bool {
    if socket.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let gone = match socket.peek(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ),
    };
    // A socket left non-blocking would fail the thread's next read: treat it as gone.
    socket.set_nonblocking(false).is_err() || gone
}

/// Most documents an inline `insert` may carry (MongoDB's internalInsertMaxBatchSize: one
/// storage batch).
const INLINE_MAX_DOCUMENTS: usize = 64;

/// Whether a command is cheap and cannot wait, so it runs on the connection's task: `ping`,
/// a non-awaitable `hello`, `find` by `_id` equality on a collection (no hint or collation),
/// and `insert`/`update`/`delete` by `_id` (no hint or collation) outside a multi-statement
/// transaction with a write concern that waits for nothing (no `j`, no majority or `w` > 1). Such a command touches a bounded number of keys; the
/// only waits left are a session used by two commands at once (see `session.rs`, which
/// leaves the worker in that case) and RocksDB write stalls (mongod's connection thread
/// blocks on those as well).
fn runs_inline(state: &ServerState, msg: &nidus_wire::OpMsg) -> bool {
    use bson::Bson;
    static DISABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // NIDUS_INLINE_COMMANDS=0 sends every command to the blocking pool (for A/B measurements).
    let disabled =
        *DISABLED.get_or_init(|| std::env::var("NIDUS_INLINE_COMMANDS").is_ok_and(|v| v == "0"));
    if disabled || msg.exhaust_allowed() || state.fail_points.command_fail_point_set() {
        return false;
    }
    let body = &msg.body;
    let Some(name) = body.keys().next() else {
        return false;
    };
    let transaction = body.contains_key("autocommit") || body.contains_key("startTransaction");
    let read_concern_waits = match body.get("readConcern") {
        // A global default read concern (`setDefaultRWConcern`) other than `local` may wait.
        None if name == "find" => {
            commands::read_concern_for_command(state, name, body).map_or(true, |rc| {
                rc.is_some_and(|rc| {
                    !matches!(
                        rc.level,
                        nidus_repl::read_concern::Level::Local
                            | nidus_repl::read_concern::Level::Available
                    )
                })
            })
        }
        None => false,
        Some(Bson::Document(rc)) => rc.iter().any(|(k, v)| match k.as_str() {
            "level" => !matches!(v, Bson::String(l) if l == "local" || l == "available"),
            _ => true,
        }),
        Some(_) => true,
    };
    if transaction || read_concern_waits || body.contains_key("maxTimeMS") {
        return false;
    }
    let by_id = |filter: Option<&Bson>| -> bool {
        let Some(Bson::Document(f)) = filter else {
            return false;
        };
        f.len() == 1
            && matches!(f.get("_id"), Some(v) if !matches!(v,
                Bson::Document(_) | Bson::Array(_) | Bson::RegularExpression(_)
                | Bson::JavaScriptCode(_) | Bson::JavaScriptCodeWithScope(_)))
    };
    let write_waits = || match commands::WriteConcern::for_command(state, name, body) {
        Ok(wc) => wc.journal || wc.majority || wc.mode.is_some() || wc.nodes.is_some_and(|n| n > 1),
        Err(_) => true,
    };
    match name.as_str() {
        "ping" => true,
        "hello" | "isMaster" | "ismaster" => !body.contains_key("maxAwaitTimeMS"),
        "find" => {
            // A hint, min or max can make a scan of another index out of an `_id` filter, a
            // collation other than the `_id` index's a collection scan; a view runs its
            // pipeline.
            let is_view = match (body.get("find"), body.get("$db")) {
                (Some(Bson::String(c)), Some(Bson::String(db))) => state
                    .engine
                    .view(&nidus_engine::namespace::Namespace::new(db, c))
                    .is_some(),
                _ => true,
            };
            by_id(body.get("filter"))
                && !["tailable", "awaitData", "hint", "min", "max", "collation"]
                    .iter()
                    .any(|k| body.contains_key(k))
                && !is_view
        }
        "insert" => {
            let n = match body.get("documents") {
                Some(Bson::Array(a)) => a.len(),
                _ => msg
                    .sequences
                    .iter()
                    .filter(|(f, _)| f == "documents")
                    .map(|(_, d)| d.len())
                    .sum(),
            };
            n <= INLINE_MAX_DOCUMENTS && !write_waits()
        }
        "update" | "delete" => {
            let field = if name == "update" {
                "updates"
            } else {
                "deletes"
            };
            let mut n = 0usize;
            let mut all_by_id = true;
            if let Some(Bson::Array(ops)) = body.get(field) {
                for op in ops {
                    n += 1;
                    all_by_id &= match op {
                        Bson::Document(op) => {
                            by_id(op.get("q"))
                                && !matches!(op.get("multi"), Some(Bson::Boolean(true)))
                                && !op.contains_key("hint")
                                && !op.contains_key("collation")
                        }
                        _ => false,
                    };
                }
            }
            for (_, ops) in msg.sequences.iter().filter(|(f, _)| f == field) {
                for op in ops {
                    n += 1;
                    all_by_id &= raw_by_id(op)
                        && !matches!(op.get_bool("multi"), Ok(true))
                        && !matches!(op.get("hint"), Ok(Some(_)))
                        && !matches!(op.get("collation"), Ok(Some(_)));
                }
            }
            n > 0 && n <= INLINE_MAX_DOCUMENTS && all_by_id && !write_waits()
        }
        _ => false,
    }
}

/// Whether a write statement from a document sequence selects by `_id` equality alone (as
/// `by_id` in [`runs_inline`]).
fn raw_by_id(op: &bson::RawDocumentBuf) -> bool {
    use bson::spec::ElementType;
    let Ok(q) = op.get_document("q") else {
        return false;
    };
    let mut fields = q.iter();
    let first = match fields.next() {
        Some(Ok(("_id", value))) => value,
        _ => return false,
    };
    fields.next().is_none()
        && !matches!(
            first.element_type(),
            ElementType::EmbeddedDocument
                | ElementType::Array
                | ElementType::RegularExpression
                | ElementType::JavaScriptCode
                | ElementType::JavaScriptCodeWithScope
        )
}

/// For a `getMore` on a change stream that is caught up (its previous `getMore` read every
/// readable entry) and whose scope had no entry since: the stream's channel, the generation
/// to wait past, and the `getMore`'s await time.
fn idle_change_stream(
    state: &ServerState,
    msg: &nidus_wire::OpMsg,
) -> Option<(
    std::sync::Arc<nidus_engine::oplog_notify::Channel>,
    u64,
    std::time::Duration,
)> {
    let body = &msg.body;
    let id = match body.iter().next()? {
        (name, bson::Bson::Int64(id)) if name == "getMore" => *id,
        _ => return None,
    };
    let cursor = state.cursors.get(id).ok()?;
    let cursor = cursor.try_lock()?;
    let stream = cursor.change_stream.as_ref()?.clone();
    drop(cursor);
    let s = stream.try_lock()?;
    let seen = s.idle_at.filter(|seen| s.channel.generation() == *seen)?;
    // As the command reads it; a value it refuses is left for it to refuse.
    let wait = match crate::commands::parse_max_time("getMore", body).ok()? {
        Some(deadline) => deadline.saturating_duration_since(std::time::Instant::now()),
        None => crate::commands::change_stream::AWAIT_DEFAULT,
    };
    Some((s.channel.clone(), seen, wait))
}

/// Runs one request, sending its replies to `out`. Returns true when the connection must close.
fn execute(
    state: &ServerState,
    conn: &mut ConnState,
    request: WireRequest,
    request_id: i32,
    compressor: Option<Compressor>,
    out: &mut Out<'_>,
) -> bool {
    state.connections.active.fetch_add(1, Ordering::Relaxed);
    let close = match request {
        WireRequest::Msg(msg) => run_msg(state, conn, msg, request_id, compressor, out),
        WireRequest::Query(q) => {
            let reply = legacy_query(state, conn, q);
            reply.close_connection
                || !out.send(nidus_wire::encode_reply(
                    next_request_id(),
                    request_id,
                    &reply.full_body(),
                ))
        }
    };
    state.connections.active.fetch_sub(1, Ordering::Relaxed);
    close
}

/// An OP_MSG: no reply under `moreToCome`; a `getMore` with `exhaustAllowed` keeps sending
/// batches flagged `moreToCome` until the cursor is exhausted; an awaitable `hello` (the
/// drivers' streaming monitor) answers after `maxAwaitTimeMS` without a topology change, and
/// with `exhaustAllowed` keeps answering so until the client goes away.
fn run_msg(
    state: &ServerState,
    conn: &mut ConnState,
    msg: nidus_wire::OpMsg,
    request_id: i32,
    compressor: Option<Compressor>,
    out: &mut Out<'_>,
) -> bool {
    let silent = msg.more_to_come();
    let exhaust =
        msg.exhaust_allowed() && msg.body.keys().next().map(String::as_str) == Some("getMore");
    let mut await_hello = awaitable_hello(state, &msg.body);
    let hello_stream = msg.exhaust_allowed() && await_hello.is_some();
    // Only a command that may run again (an exhaust getMore, a streaming hello) keeps a
    // copy of its body.
    let again = (exhaust || hello_stream).then(|| (msg.body.clone(), msg.cluster_time.clone()));
    let mut request = Request {
        body: msg.body,
        sequences: msg.sequences,
        cluster_time: msg.cluster_time,
    };
    let mut response_to = request_id;
    loop {
        if let Some((wait, seen)) = await_hello {
            if !await_topology_change(state, out, wait, seen) {
                return true;
            }
        }
        let reply = commands::run(state, conn, request);
        // A streamed `hello` waits next for a change from the version this reply tells the
        // client (one made after it was read is not missed).
        if let Some((wait, seen)) = await_hello {
            let told = reply
                .body
                .get_document("topologyVersion")
                .and_then(|t| t.get_i64("counter"));
            await_hello = Some((wait, told.unwrap_or(seen)));
        }
        if reply.close_connection {
            return true;
        }
        if silent {
            return false;
        }
        let more = (exhaust && cursor_still_open(&reply.body))
            || (hello_stream && reply.body.get_f64("ok").unwrap_or(0.0) == 1.0);
        let id = next_request_id();
        let flags = if more { nidus_wire::MORE_TO_COME } else { 0 };
        let frame = nidus_wire::encode_msg_with_batch(
            id,
            response_to,
            flags,
            &reply.body,
            &reply.batch,
            &reply.trailer(),
            compressor,
        );
        if !out.send(frame) {
            return true;
        }
        if !more {
            return false;
        }
        if hello_stream {
            test_stream_pause();
        }
        response_to = id;
        let Some((body, cluster_time)) = &again else {
            return false;
        };
        request = Request {
            body: body.clone(),
            sequences: Vec::new(),
            cluster_time: cluster_time.clone(),
        };
    }
}

/// Tests widen the moment between a streamed `hello` reply and its next wait
/// (`NIDUS_TEST_HELLO_STREAM_PAUSE_MS`, read once), where a topology change must not be missed.
fn test_stream_pause() {
    static PAUSE: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        std::env::var("NIDUS_TEST_HELLO_STREAM_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
    });
    if let Some(p) = pause {
        std::thread::sleep(*p);
    }
}

/// How long an awaitable `hello` waits, and for a change from which topology version: its
/// `maxAwaitTimeMS` and its `topologyVersion` counter when that is this server's current one
/// (a different process or an older counter answers at once).
fn awaitable_hello(state: &ServerState, body: &Document) -> Option<(std::time::Duration, i64)> {
    let name = body.keys().next()?;
    if !matches!(
        name.as_str(),
        "hello" | "isMaster" | "ismaster" | "saslStart" | "saslContinue" | "authenticate"
    ) {
        return None;
    }
    let ms = match body.get("maxAwaitTimeMS")? {
        bson::Bson::Int32(n) => i64::from(*n),
        bson::Bson::Int64(n) => *n,
        bson::Bson::Double(n) => *n as i64,
        _ => return None,
    };
    let tv = body.get_document("topologyVersion").ok()?;
    let counter = state.repl.as_ref().map_or(0, |r| r.topology_version());
    let same = tv.get_object_id("processId").ok() == Some(state.process_id)
        && tv.get_i64("counter").ok() == Some(counter);
    (same && ms > 0).then(|| (std::time::Duration::from_millis(ms as u64), counter))
}

/// Waits out an awaitable `hello`: until `wait` passes or the replica set's topology version
/// differs from `seen`, the one the client was told (not the one read now: a change between
/// the two would keep the client from hearing of a new primary for `maxAwaitTimeMS`). False
/// when the client went away or the server is shutting down.
fn await_topology_change(
    state: &ServerState,
    out: &Out<'_>,
    wait: std::time::Duration,
    seen: i64,
) -> bool {
    let until = std::time::Instant::now() + wait;
    while std::time::Instant::now() < until {
        if out.is_closed() || state.shutting_down.load(Ordering::Relaxed) {
            return false;
        }
        let slice = std::time::Duration::from_millis(50).min(wait);
        match &state.repl {
            Some(repl) => {
                if repl.wait_topology_change(seen, slice) {
                    return true;
                }
            }
            None => std::thread::sleep(slice),
        }
    }
    true
}

fn cursor_still_open(reply: &Document) -> bool {
    reply.get_f64("ok").unwrap_or(0.0) == 1.0
        && reply
            .get_document("cursor")
            .and_then(|c| c.get_i64("id"))
            .unwrap_or(0)
            != 0
}

/// OP_QUERY is accepted only for the handshake and authentication commands on `<db>.$cmd`,
/// as in MongoDB 6.0+ (old drivers authenticate before switching to OP_MSG).
fn legacy_query(state: &ServerState, conn: &mut ConnState, q: nidus_wire::OpQuery) -> Reply {
    let Some(db) = q.full_collection_name.strip_suffix(".$cmd") else {
        return legacy_error(
            "OP_QUERY is no longer supported. The client driver may require an upgrade.",
        );
    };
    let mut body = match q.query.get_document("$query") {
        Ok(inner) => inner.clone(),
        Err(_) => q.query.clone(),
    };
    let name = body.keys().next().cloned().unwrap_or_default();
    if !matches!(
        name.as_str(),
        "hello" | "isMaster" | "ismaster" | "saslStart" | "saslContinue" | "authenticate"
    ) {
        return legacy_error(&format!(
            "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"
        ));
    }
    body.insert("$db", db);
    commands::run(
        state,
        conn,
        Request {
            body,
            sequences: Vec::new(),
            cluster_time: None,
        },
    )
}

fn legacy_error(msg: &str) -> Reply {
    Reply {
        body: doc! { "$err": msg, "errmsg": msg, "code": 352, "codeName": "UnsupportedOpQueryCommand", "ok": 0.0 },
        batch: Vec::new(),
        cluster_time: None,
        close_connection: false,
    }
}
