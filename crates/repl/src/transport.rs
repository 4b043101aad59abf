//! Inter-member transport: members talk over their normal MongoDB port. One link per peer
//! keeps a plain client connection and sends `replSetRaftMessages` commands carrying
//! serialized Raft messages (an array of binData) and this member's status; a command with no
//! messages is the heartbeat. The reply carries the peer's status.
//!
//! Requests are pipelined: the link's writer thread sends each batch as soon as Raft hands it
//! over, without waiting for the replies of the requests before it (at most `MAX_INFLIGHT` on
//! the wire), and a reader thread per connection reads the replies in order. So an append never
//! waits behind a heartbeat's or an earlier append's round trip, and an acknowledgement leaves
//! a follower the moment it is ready: a `w: "majority"` write costs one round trip.
//!
//! A peer whose connections are refused (nothing listens at its address: the process is gone)
//! for `GONE_AFTER` is reported to the owner (`LinkOwner::on_peer_gone`); a silent peer (a
//! stopped process, a partition) is not.
//!
//! With a key file every connection first authenticates as `__system@local` (SCRAM-SHA-256,
//! the key as password), MongoDB's internal authentication; a member without the key is
//! refused by the others.

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use parking_lot::{Condvar, Mutex};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Most batches waiting for one peer; more are dropped (Raft resends what is lost).
const QUEUE: usize = 256;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const IO_TIMEOUT: Duration = Duration::from_millis(5000);
const MAX_BACKOFF: Duration = Duration::from_millis(1000);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Most requests sent to one peer and not answered yet.
const MAX_INFLIGHT: usize = 64;
/// How long a peer's connections must be refused before it is reported gone (a few attempts
/// on the backoff schedule: a restart in progress or a transient refusal is not a death).
const GONE_AFTER: Duration = Duration::from_millis(100);
/// The reader's poll while no reply is due (a stalled peer is found by the oldest request's
/// age, `IO_TIMEOUT`).
const READ_POLL: Duration = Duration::from_millis(1000);

pub fn encode_messages(msgs: &[Message]) -> Vec<Bson> {
    msgs.iter()
        .filter_map(|m| m.write_to_bytes().ok())
        .map(|bytes| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes,
            })
        })
        .collect()
}

pub fn decode_messages(arr: &[Bson]) -> Result<Vec<Message>, String> {
    arr.iter()
        .map(|b| match b {
            Bson::Binary(bin) => Message::parse_from_bytes(&bin.bytes).map_err(|e| e.to_string()),
            _ => Err("replSetRaftMessages.messages must hold binData".to_string()),
        })
        .collect()
}

/// What a link needs from the coordinator (held weakly so threads end with it).
pub trait LinkOwner: Send + Sync + 'static {
    fn peer_host(&self, id: u64) -> Option<String>;
    /// The command to send: messages plus this member's status.
    fn outgoing(&self, to: u64, messages: Vec<Bson>) -> Document;
    fn heartbeat_interval(&self) -> Duration;
    /// A reply arrived after `ping`.
    fn on_reply(&self, id: u64, reply: &Document, ping: Duration, had_snapshot: bool);
    /// The peer could not be reached.
    fn on_unreachable(&self, id: u64, had_messages: bool, had_snapshot: bool);
    /// The peer's connections were refused for `GONE_AFTER` or longer (reported at every
    /// refused attempt from then on, until a connection succeeds).
    fn on_peer_gone(&self, id: u64);
    fn stopping(&self) -> bool;
}

pub struct Link {
    /// The writer's queue; the readers hold it weakly (to wake the writer when a connection
    /// dies), so dropping the link ends the writer.
    tx: Arc<SyncSender<Vec<Message>>>,
}

impl Link {
    pub fn start<O: LinkOwner>(owner: Weak<O>, id: u64) -> Link {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let tx = Arc::new(tx);
        let writer = Writer {
            owner,
            id,
            rx,
            wake: Arc::downgrade(&tx),
            conn: None,
            backoff: FIRST_BACKOFF,
            retry_at: None,
            refused_since: None,
            answered_sent: None,
        };
        let _ = std::thread::Builder::new()
            .name(format!("repl-peer-{id}"))
            .spawn(move || writer.run());
        Link { tx }
    }

    pub fn send(&self, msgs: Vec<Message>) {
        match self.tx.try_send(msgs) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// A request on the wire, waiting for its reply.
struct Pending {
    started: Instant,
    had_messages: bool,
    had_snapshot: bool,
}

#[derive(Default)]
struct InFlight {
    /// The connection failed (or was closed): its reader reported every pending request
    /// unreachable and takes no more.
    dead: bool,
    /// A reply arrived on this connection (the peer speaks to us: no backoff after it).
    replied: bool,
    /// Raft messages went out without a reply (see `needs_reply`) since the last request
    /// that waits for one: the connection failing reports them unreachable.
    unanswered: bool,
    pending: VecDeque<Pending>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<InFlight>,
    changed: Condvar,
}

struct Conn {
    host: String,
    stream: TcpStream,
    shared: Arc<Shared>,
}

impl Conn {
    /// Ends the connection; its reader reports what was pending.
    fn close(&self) {
        self.shared.state.lock().dead = true;
        let _ = self.stream.shutdown(Shutdown::Both);
        self.shared.changed.notify_all();
    }
}

struct Writer<O: LinkOwner> {
    owner: Weak<O>,
    id: u64,
    rx: Receiver<Vec<Message>>,
    wake: Weak<SyncSender<Vec<Message>>>,
    conn: Option<Conn>,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// Since when every connection attempt was refused.
    refused_since: Option<Instant>,
    /// When the last request that waits for its reply was sent.
    answered_sent: Option<Instant>,
}

impl<O: LinkOwner> Writer<O> {
    fn run(mut self) {
        loop {
            let interval = match self.owner.upgrade() {
                Some(o) if !o.stopping() => o.heartbeat_interval(),
                _ => break,
            };
            self.drop_dead_conn();
            // While backing off, the next attempt is made when the backoff ends, so a peer
            // that is down is probed on the backoff schedule, not only at heartbeats.
            let wait = self.retry_at.map_or(interval, |t| {
                t.saturating_duration_since(Instant::now()).min(interval)
            });
            let mut msgs = match self.rx.recv_timeout(wait) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => Vec::new(),
                Err(RecvTimeoutError::Disconnected) => break,
            };
            while msgs.len() < 1024 {
                match self.rx.try_recv() {
                    Ok(more) => msgs.extend(more),
                    Err(_) => break,
                }
            }
            let Some(o) = self.owner.upgrade() else { break };
            if o.stopping() {
                break;
            }
            self.drop_dead_conn();
            let had_snapshot = msgs
                .iter()
                .any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
            let had_messages = !msgs.is_empty();
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                // Still backing off after a failure: the batch is dropped; Raft resends.
                o.on_unreachable(self.id, had_messages, had_snapshot);
                continue;
            }
            let Some(host) = o.peer_host(self.id) else {
                continue;
            };
            if self.conn.as_ref().is_some_and(|c| c.host != host) {
                if let Some(c) = self.conn.take() {
                    c.close();
                }
            }
            if self.conn.is_none() {
                match connect(&host) {
                    Ok(stream) => match self.open(&host, stream) {
                        Ok(()) => {
                            self.refused_since = None;
                        }
                        Err(_) => {
                            self.failed(&*o, false);
                            o.on_unreachable(self.id, had_messages, had_snapshot);
                            continue;
                        }
                    },
                    Err(e) => {
                        self.failed(&*o, e.kind() == ErrorKind::ConnectionRefused);
                        o.on_unreachable(self.id, had_messages, had_snapshot);
                        continue;
                    }
                }
            }
            let Some(conn) = self.conn.as_ref() else {
                continue;
            };
            // At most MAX_INFLIGHT requests on the wire: wait for replies (the reader ends a
            // connection whose oldest request is unanswered for IO_TIMEOUT).
            {
                let mut st = conn.shared.state.lock();
                while !st.dead && st.pending.len() >= MAX_INFLIGHT {
                    conn.shared.changed.wait_for(&mut st, READ_POLL);
                }
            }
            // At least one request per heartbeat interval is answered, also under a steady
            // stream of appends: its reply is the peer's heartbeat (`lastHeartbeat`, `pingMs`).
            let reply =
                needs_reply(&msgs) || self.answered_sent.is_none_or(|t| t.elapsed() >= interval);
            if reply {
                self.answered_sent = Some(Instant::now());
            }
            let cmd = o.outgoing(self.id, encode_messages(&msgs));
            let flags = if reply { 0 } else { nidus_wire::MORE_TO_COME };
            let bytes = nidus_wire::encode_msg(next_request_id(), 0, flags, &cmd, None);
            // The request is pending before it is written: its reply can arrive (and the
            // reader look for it) before `write_all` returns here.
            let accepted = {
                let mut st = conn.shared.state.lock();
                if st.dead {
                    false
                } else if reply {
                    // Its reply also tells that the unanswered batches before it arrived.
                    let unanswered = std::mem::take(&mut st.unanswered);
                    st.pending.push_back(Pending {
                        started: Instant::now(),
                        had_messages: had_messages || unanswered,
                        had_snapshot,
                    });
                    true
                } else {
                    st.unanswered = true;
                    true
                }
            };
            if !accepted {
                // The reader already gave up on this connection (and reported what it held).
                o.on_unreachable(self.id, had_messages, had_snapshot);
                continue;
            }
            let mut stream = &conn.stream;
            if stream.write_all(&bytes).is_err() {
                // Closing ends the reader, which reports this request with the others pending.
                if let Some(c) = self.conn.take() {
                    c.close();
                }
                self.failed(&*o, false);
                continue;
            }
            #[cfg(test)]
            tests::after_write();
        }
        if let Some(c) = self.conn.take() {
            c.close();
        }
    }

    /// Starts the reader of a new connection.
    fn open(&mut self, host: &str, stream: TcpStream) -> std::io::Result<()> {
        stream.set_read_timeout(Some(READ_POLL))?;
        let reading = stream.try_clone()?;
        let shared = Arc::new(Shared::default());
        let reader = Reader {
            owner: self.owner.clone(),
            id: self.id,
            stream: reading,
            shared: shared.clone(),
            wake: self.wake.clone(),
        };
        std::thread::Builder::new()
            .name(format!("repl-peer-{}-rx", self.id))
            .spawn(move || reader.run())?;
        self.conn = Some(Conn {
            host: host.to_string(),
            stream,
            shared,
        });
        Ok(())
    }

    /// Forgets a connection its reader found broken: the next attempt is made at once when
    /// the peer had answered on it, else after the backoff.
    fn drop_dead_conn(&mut self) {
        let Some(c) = self.conn.as_ref() else { return };
        let (dead, replied) = {
            let st = c.shared.state.lock();
            (st.dead, st.replied)
        };
        if !dead {
            if replied {
                self.backoff = FIRST_BACKOFF;
                self.retry_at = None;
            }
            return;
        }
        self.conn = None;
        if replied {
            self.backoff = FIRST_BACKOFF;
            self.retry_at = None;
        } else {
            self.retry_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// A connection attempt or a send failed: back off; a refused connection counts towards
    /// reporting the peer gone.
    fn failed(&mut self, o: &O, refused: bool) {
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        if !refused {
            self.refused_since = None;
            return;
        }
        let since = *self.refused_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= GONE_AFTER {
            o.on_peer_gone(self.id);
        }
    }
}

/// Reads the replies of one connection, in the order of its requests.
struct Reader<O: LinkOwner> {
    owner: Weak<O>,
    id: u64,
    stream: TcpStream,
    shared: Arc<Shared>,
    wake: Weak<SyncSender<Vec<Message>>>,
}

impl<O: LinkOwner> Reader<O> {
    fn run(mut self) {
        // Reads until the connection fails or is closed; a peer that exits closes it, which
        // is noticed here at once even while nothing is pending. Replies are read into one
        // buffer, as many as each read brings, under the one read timeout the connection
        // keeps (`READ_POLL`); a reply that stalls part-way is found as a request waiting
        // longer than `IO_TIMEOUT`.
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            if self.shared.state.lock().dead {
                break;
            }
            match reply_len(&buf) {
                Err(_) => break,
                Ok(Some(n)) => {
                    let reply = decode_reply(&buf[..n]);
                    buf.drain(..n);
                    let Ok(reply) = reply else { break };
                    if !self.replied(&reply) {
                        break;
                    }
                    continue;
                }
                Ok(None) => {}
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let stalled = self
                        .shared
                        .state
                        .lock()
                        .pending
                        .front()
                        .is_some_and(|p| p.started.elapsed() >= IO_TIMEOUT);
                    if stalled {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let (drained, unanswered): (Vec<Pending>, bool) = {
            let mut st = self.shared.state.lock();
            st.dead = true;
            (
                st.pending.drain(..).collect(),
                std::mem::take(&mut st.unanswered),
            )
        };
        self.shared.changed.notify_all();
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(o) = self.owner.upgrade() {
            for p in drained {
                o.on_unreachable(self.id, p.had_messages, p.had_snapshot);
            }
            if unanswered {
                o.on_unreachable(self.id, true, false);
            }
        }
        // The writer reconnects (or backs off) now rather than at its next heartbeat.
        if let Some(tx) = self.wake.upgrade() {
            let _ = tx.try_send(Vec::new());
        }
    }

    /// A reply to the oldest pending request: false when the connection is to end (the owner
    /// is gone, or nothing was pending: the stream is out of step).
    fn replied(&self, reply: &Document) -> bool {
        let Some(o) = self.owner.upgrade() else {
            return false;
        };
        let done = {
            let mut st = self.shared.state.lock();
            st.replied = true;
            st.pending.pop_front()
        };
        self.shared.changed.notify_all();
        let Some(p) = done else { return false };
        o.on_reply(self.id, reply, p.started.elapsed(), p.had_snapshot);
        true
    }
}

/// Whether a batch is sent as a request the peer answers. A leader's appends and heartbeats
/// go with `moreToCome` and no reply: the follower answers each with a Raft message of its
/// own, which carries its status, so a reply would only repeat it (and cost both members a
/// send, a read and a thread wake-up per batch). Heartbeats of the link (no messages) keep
/// their reply, which measures the round trip and tells a removed member so; snapshots keep
/// theirs (their outcome is reported to Raft); a follower's messages keep theirs, whose
/// status is the leader's visibility point as of after the request was sent (a causal read
/// on the follower relies on that order).
fn needs_reply(msgs: &[Message]) -> bool {
    msgs.is_empty()
        || msgs.iter().any(|m| {
            !matches!(
                m.get_msg_type(),
                MessageType::MsgAppend | MessageType::MsgHeartbeat
            )
        })
}

/// The length of the whole message at the start of `buf`, once all of it is there; an error
/// for a length no reply can have.
fn reply_len(buf: &[u8]) -> std::io::Result<Option<usize>> {
    let Some(len) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let n = i32::from_le_bytes(*len);
    if n < nidus_wire::HEADER_LEN as i32 || n as usize > nidus_wire::MAX_MESSAGE_SIZE_BYTES {
        return Err(std::io::Error::other("bad reply length"));
    }
    Ok((buf.len() >= n as usize).then_some(n as usize))
}

/// The set's key (`--keyFile`), set once at startup before any member connection is made.
static INTERNAL_KEY: OnceLock<String> = OnceLock::new();

pub fn set_internal_key(key: String) {
    let _ = INTERNAL_KEY.set(key);
}

/// Authenticates a new connection as the internal user (a SCRAM-SHA-256 conversation).
fn authenticate(s: TcpStream, key: &str) -> std::io::Result<TcpStream> {
    use nidus_wire::scram::{ClientConversation, Mechanism};
    let failed = |e: nidus_wire::scram::ScramError| std::io::Error::other(e.0);
    let payload = |d: &Document| match d.get("payload") {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        _ => Err(std::io::Error::other("SASL reply without a payload")),
    };
    let binary = |bytes: Vec<u8>| Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    };
    let (mut conv, first) =
        ClientConversation::start(Mechanism::Sha256, "__system", key).map_err(failed)?;
    let start = doc! {
        "saslStart": 1,
        "mechanism": "SCRAM-SHA-256",
        "payload": binary(first.into_bytes()),
        "options": { "skipEmptyExchange": true },
        "$db": "local",
    };
    let (s, reply) = round_trip(s, &start)?;
    let proof = conv.proof(&payload(&reply)?).map_err(failed)?;
    let id = reply
        .get("conversationId")
        .cloned()
        .unwrap_or(Bson::Int32(1));
    let next = doc! {
        "saslContinue": 1,
        "conversationId": id.clone(),
        "payload": binary(proof.into_bytes()),
        "$db": "local",
    };
    let (mut s, mut reply) = round_trip(s, &next)?;
    conv.verify(&payload(&reply)?).map_err(failed)?;
    // Bounded: a server that skips the empty exchange is done after the proof.
    for _ in 0..2 {
        if reply.get_bool("done").unwrap_or(false) {
            return Ok(s);
        }
        let empty = doc! {
            "saslContinue": 1,
            "conversationId": id.clone(),
            "payload": binary(Vec::new()),
            "$db": "local",
        };
        (s, reply) = round_trip(s, &empty)?;
    }
    Err(std::io::Error::other("SASL conversation did not finish"))
}

/// A connection to another member, authenticated when the set has a key.
pub(crate) fn connect(host: &str) -> std::io::Result<TcpStream> {
    let s = connect_plain(host)?;
    match INTERNAL_KEY.get() {
        Some(key) => authenticate(s, key),
        None => Ok(s),
    }
}

fn connect_plain(host: &str) -> std::io::Result<TcpStream> {
    let addr = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("cannot resolve {host}")))?;
    let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
}

fn next_request_id() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Sends one OP_MSG command and reads its reply; a reply with `ok: 0` is an error.
pub(crate) fn round_trip(s: TcpStream, cmd: &Document) -> std::io::Result<(TcpStream, Document)> {
    let (s, body) = exchange(s, cmd)?;
    Ok((s, ok_or_error(body)?))
}

/// Sends one OP_MSG command and reads its reply, whatever its `ok`.
pub(crate) fn exchange(mut s: TcpStream, cmd: &Document) -> std::io::Result<(TcpStream, Document)> {
    let bytes = nidus_wire::encode_msg(next_request_id(), 0, 0, cmd, None);
    s.write_all(&bytes)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let n = i32::from_le_bytes(len);
    if n < nidus_wire::HEADER_LEN as i32 || n as usize > nidus_wire::MAX_MESSAGE_SIZE_BYTES {
        return Err(std::io::Error::other("bad reply length"));
    }
    let mut message = len.to_vec();
    message.resize(n as usize, 0);
    s.read_exact(&mut message[4..])?;
    Ok((s, decode_body(&message)?))
}

/// The body of an OP_MSG reply; a reply that is not `ok` is an error.
fn decode_reply(message: &[u8]) -> std::io::Result<Document> {
    ok_or_error(decode_body(message)?)
}

fn ok_or_error(body: Document) -> std::io::Result<Document> {
    if body.get_f64("ok").unwrap_or(0.0) != 1.0 {
        return Err(std::io::Error::other(
            body.get_str("errmsg").unwrap_or("error").to_string(),
        ));
    }
    Ok(body)
}

/// The body of an OP_MSG reply, whatever its `ok`.
fn decode_body(message: &[u8]) -> std::io::Result<Document> {
    let decoded =
        nidus_wire::decode_message(message).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    match decoded.request {
        nidus_wire::Request::Msg(m) => Ok(m.body),
        _ => Err(std::io::Error::other("unexpected reply")),
    }
}

/// The heartbeat/transport command a member sends.
pub fn command(
    set_name: &str,
    from: u64,
    from_host: &str,
    status: Document,
    messages: Vec<Bson>,
) -> Document {
    doc! {
        "replSetRaftMessages": 1,
        "setName": set_name,
        "from": from as i64,
        "fromHost": from_host,
        "status": status,
        "messages": messages,
        "$db": "admin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    /// A pause after each request is written (microseconds): the writer's thread losing the
    /// processor right after its write, while the peer answers.
    static PAUSE_AFTER_WRITE_US: AtomicU64 = AtomicU64::new(0);

    pub(super) fn after_write() {
        let us = PAUSE_AFTER_WRITE_US.load(Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    #[derive(Default)]
    struct Owner {
        host: String,
        replies: AtomicUsize,
        unreachable: AtomicUsize,
        /// Of `unreachable`, the reports that messages were lost.
        lost_messages: AtomicUsize,
        done: AtomicBool,
    }

    impl LinkOwner for Owner {
        fn peer_host(&self, _id: u64) -> Option<String> {
            Some(self.host.clone())
        }
        fn outgoing(&self, _to: u64, messages: Vec<Bson>) -> Document {
            doc! { "replSetRaftMessages": 1, "messages": messages, "$db": "admin" }
        }
        fn heartbeat_interval(&self) -> Duration {
            Duration::from_secs(60)
        }
        fn on_reply(&self, _id: u64, _reply: &Document, _ping: Duration, _snapshot: bool) {
            self.replies.fetch_add(1, Ordering::SeqCst);
        }
        fn on_unreachable(&self, _id: u64, messages: bool, _snapshot: bool) {
            self.unreachable.fetch_add(1, Ordering::SeqCst);
            if messages {
                self.lost_messages.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn on_peer_gone(&self, _id: u64) {}
        fn stopping(&self) -> bool {
            self.done.load(Ordering::SeqCst)
        }
    }

    /// What a test peer saw.
    #[derive(Default)]
    struct Seen {
        accepted: AtomicUsize,
        /// Requests flagged `moreToCome` (not answered).
        silent: AtomicUsize,
        answered: AtomicUsize,
    }

    /// A peer answering every request that wants a reply at once with `{ok: 1}`, as a
    /// server does (none under `moreToCome`); it closes a connection after `close_after`
    /// requests on it.
    fn answering_peer_closing_after(close_after: usize) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                counts.accepted.fetch_add(1, Ordering::SeqCst);
                let counts = counts.clone();
                std::thread::spawn(move || {
                    let reply = nidus_wire::encode_msg(1, 0, 0, &doc! { "ok": 1.0 }, None);
                    for _ in 0..close_after {
                        let mut len = [0u8; 4];
                        if conn.read_exact(&mut len).is_err() {
                            return;
                        }
                        let mut rest = vec![0u8; i32::from_le_bytes(len) as usize - 4];
                        if conn.read_exact(&mut rest).is_err() {
                            return;
                        }
                        // The header's other 12 bytes, then OP_MSG's flag bits.
                        let flags = u32::from_le_bytes(rest[12..16].try_into().unwrap());
                        if flags & nidus_wire::MORE_TO_COME != 0 {
                            counts.silent.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        counts.answered.fetch_add(1, Ordering::SeqCst);
                        if conn.write_all(&reply).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (host, seen)
    }

    fn answering_peer() -> (String, Arc<Seen>) {
        answering_peer_closing_after(usize::MAX)
    }

    fn message(t: MessageType) -> Message {
        let mut m = Message::default();
        m.set_msg_type(t);
        m
    }

    fn wait_for(what: &str, pred: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !pred() {
            assert!(Instant::now() < until, "not within 10s: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A leader's appends and heartbeats go without a reply (the first request of the
    /// heartbeat interval excepted: it is the link's heartbeat); a follower's messages and
    /// the link's own heartbeats are answered.
    #[test]
    fn a_leaders_appends_go_without_a_reply() {
        let (host, seen) = answering_peer();
        let owner = Arc::new(Owner {
            host,
            ..Default::default()
        });
        let link = Link::start(Arc::downgrade(&owner), 2);
        const APPENDS: usize = 20;
        for sent in 1..=APPENDS {
            link.send(vec![message(MessageType::MsgAppend)]);
            let got = || seen.silent.load(Ordering::SeqCst) + seen.answered.load(Ordering::SeqCst);
            wait_for("the append reaches the peer", || got() >= sent);
        }
        assert_eq!(seen.answered.load(Ordering::SeqCst), 1);
        assert_eq!(seen.silent.load(Ordering::SeqCst), APPENDS - 1);
        // One at a time (batches queued together go as one request).
        link.send(vec![message(MessageType::MsgAppendResponse)]);
        wait_for("the follower's message answered", || {
            owner.replies.load(Ordering::SeqCst) == 2
        });
        link.send(Vec::new());
        wait_for("the heartbeat answered", || {
            owner.replies.load(Ordering::SeqCst) == 3
        });
        assert_eq!(seen.silent.load(Ordering::SeqCst), APPENDS - 1);
        owner.done.store(true, Ordering::SeqCst);
        assert_eq!(owner.unreachable.load(Ordering::SeqCst), 0);
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    }

    /// A connection that ends after appends sent without a reply reports them unreachable
    /// (Raft probes the member again instead of waiting for their acknowledgements).
    #[test]
    fn unanswered_appends_on_a_lost_connection_are_reported() {
        // Answers the first request, takes two appends, then closes.
        let (host, seen) = answering_peer_closing_after(3);
        let owner = Arc::new(Owner {
            host,
            ..Default::default()
        });
        let link = Link::start(Arc::downgrade(&owner), 2);
        link.send(Vec::new());
        wait_for("the first reply", || {
            owner.replies.load(Ordering::SeqCst) == 1
        });
        for sent in 1..=2 {
            link.send(vec![message(MessageType::MsgAppend)]);
            wait_for("the append reaches the peer", || {
                seen.silent.load(Ordering::SeqCst) == sent
            });
        }
        wait_for("the lost appends reported", || {
            owner.lost_messages.load(Ordering::SeqCst) >= 1
        });
        assert_eq!(seen.silent.load(Ordering::SeqCst), 2);
        owner.done.store(true, Ordering::SeqCst);
    }

    /// A reply that arrives before the writer is done with its request (the writer paused
    /// right after writing) is the reply to that request: the link keeps its one connection
    /// and every batch is answered, none reported unreachable.
    #[test]
    fn a_reply_before_the_writer_resumes_keeps_the_connection() {
        let (host, seen) = answering_peer();
        let owner = Arc::new(Owner {
            host,
            ..Default::default()
        });
        PAUSE_AFTER_WRITE_US.store(2000, Ordering::Relaxed);
        let link = Link::start(Arc::downgrade(&owner), 2);
        const BATCHES: usize = 50;
        // One batch at a time, each after the previous one's outcome (batches queued together
        // would go as one request).
        for sent in 1..=BATCHES {
            // A follower's message: answered.
            link.send(vec![message(MessageType::MsgHeartbeatResponse)]);
            let until = Instant::now() + Duration::from_secs(10);
            while owner.replies.load(Ordering::SeqCst) + owner.unreachable.load(Ordering::SeqCst)
                < sent
                && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        PAUSE_AFTER_WRITE_US.store(0, Ordering::Relaxed);
        owner.done.store(true, Ordering::SeqCst);
        assert_eq!(owner.unreachable.load(Ordering::SeqCst), 0);
        assert_eq!(owner.replies.load(Ordering::SeqCst), BATCHES);
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    }
}
