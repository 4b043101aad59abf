//! Inter-member transport: members talk over their normal MongoDB port. One link per peer
//! keeps a plain client connection and sends `replSetRaftMessages` commands carrying
//! serialized Raft messages (an array of binData) and this member's status; a command with no
//! messages is the heartbeat. The reply carries the peer's status.
//!
//! Requests are pipelined: each batch goes out as soon as Raft hands it over, without waiting
//! for the replies of the requests before it (at most `MAX_INFLIGHT` on the wire), and a
//! reader thread per connection reads the replies in order. So an append never waits behind a
//! heartbeat's or an earlier append's round trip, and an acknowledgement leaves a follower the
//! moment it is ready: a `w: "majority"` write costs one round trip. The Raft driver writes a
//! batch itself when the connection is idle (nothing queued before it, the socket takes it
//! now); the link's writer thread sends the others, heartbeats, and what the socket could not
//! take at once, and (re)connects. A leader's appends and heartbeats are not answered (see
//! `needs_reply`).
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
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

/// The largest piece of one serialized Raft message a request carries. A request is a BSON
/// document, which a member refuses past 16 MiB (`MAX_INTERNAL_OBJECT_SIZE`), and one Raft
/// entry can be larger (a large transaction's oplog entry): such a message goes as several
/// requests of `fragment`s, in order on the link's connection, which the receiver joins
/// ([`Fragments`]) before it hands the message to Raft.
pub const FRAGMENT_BYTES: usize = 8 << 20;

pub fn encode_messages(msgs: &[Message]) -> Vec<Bson> {
    msgs.iter()
        .filter_map(|m| m.write_to_bytes().ok())
        .map(binary)
        .collect()
}

fn binary(bytes: Vec<u8>) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    })
}

/// A batch as the requests that carry it: the serialized messages grouped while they fit in
/// `FRAGMENT_BYTES`, a larger message alone as its `fragment`s (`(fields, messages)` per
/// request; `fields` are added to the command). One request (no fields) in the usual case.
fn requests(msgs: &[Message]) -> Vec<(Document, Vec<Bson>)> {
    let encoded: Vec<Vec<u8>> = msgs
        .iter()
        .filter_map(|m| m.write_to_bytes().ok())
        .collect();
    if encoded.iter().map(Vec::len).sum::<usize>() <= FRAGMENT_BYTES {
        return vec![(Document::new(), encoded.into_iter().map(binary).collect())];
    }
    let mut out = Vec::new();
    let mut group: Vec<Bson> = Vec::new();
    let mut group_bytes = 0;
    for bytes in encoded {
        if bytes.len() > FRAGMENT_BYTES {
            if !group.is_empty() {
                out.push((Document::new(), std::mem::take(&mut group)));
                group_bytes = 0;
            }
            let id = next_request_id() as i64;
            let parts = bytes.len().div_ceil(FRAGMENT_BYTES);
            for (i, part) in bytes.chunks(FRAGMENT_BYTES).enumerate() {
                out.push((
                    doc! {
                        "fragmentId": id,
                        "fragmentIndex": i as i32,
                        "fragmentLast": i + 1 == parts,
                        "fragment": binary(part.to_vec()),
                    },
                    Vec::new(),
                ));
            }
            continue;
        }
        if group_bytes + bytes.len() > FRAGMENT_BYTES && !group.is_empty() {
            out.push((Document::new(), std::mem::take(&mut group)));
            group_bytes = 0;
        }
        group_bytes += bytes.len();
        group.push(binary(bytes));
    }
    if !group.is_empty() {
        out.push((Document::new(), group));
    }
    out
}

/// Most bytes of one message a receiver joins from fragments (a message past it is dropped:
/// Raft sends it again, and it fails again, as it would without fragments).
const MAX_JOINED_BYTES: usize = 512 << 20;

/// A message being joined: its fragment id, the next fragment's index, the bytes so far.
type Joining = (i64, i32, Vec<u8>);

/// The receiving side of `fragment` requests, per sending member: the message being joined.
#[derive(Default)]
pub struct Fragments {
    joining: parking_lot::Mutex<std::collections::HashMap<u64, Joining>>,
}

impl Fragments {
    /// Takes a request's fragment, if it has one; the whole message once its last fragment
    /// arrived. A fragment out of order (a connection lost midway) drops what was joined.
    pub fn take(&self, from: u64, body: &Document) -> Result<Option<Message>, String> {
        let Some(Bson::Binary(part)) = body.get("fragment") else {
            return Ok(None);
        };
        let id = body.get_i64("fragmentId").map_err(|e| e.to_string())?;
        let index = body.get_i32("fragmentIndex").map_err(|e| e.to_string())?;
        let last = body.get_bool("fragmentLast").map_err(|e| e.to_string())?;
        let mut joining = self.joining.lock();
        if index == 0 {
            joining.insert(from, (id, 0, Vec::new()));
        }
        let Some((jid, next, bytes)) = joining.get_mut(&from) else {
            return Ok(None);
        };
        if *jid != id || *next != index || bytes.len() + part.bytes.len() > MAX_JOINED_BYTES {
            joining.remove(&from);
            return Ok(None);
        }
        bytes.extend_from_slice(&part.bytes);
        *next += 1;
        if !last {
            return Ok(None);
        }
        let Some((_, _, bytes)) = joining.remove(&from) else {
            return Ok(None);
        };
        Message::parse_from_bytes(&bytes)
            .map(Some)
            .map_err(|e| e.to_string())
    }
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
    shared: Arc<LinkShared>,
    /// The peer's Raft id.
    id: u64,
}

/// What a link's writer shares with the callers of [`Link::send`].
#[derive(Default)]
struct LinkShared {
    /// The connection; whoever writes a request on it holds this lock (the writer for each
    /// of its requests, a caller writing its own batch).
    conn: Mutex<Option<Conn>>,
    /// Batches (with messages) handed to the writer and not written yet: a caller writes its
    /// batch itself only when there are none, so batches go in the order they were sent.
    queued: AtomicUsize,
}

impl Link {
    pub fn start<O: LinkOwner>(owner: Weak<O>, id: u64) -> Link {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let tx = Arc::new(tx);
        let shared = Arc::new(LinkShared::default());
        let writer = Writer {
            owner,
            id,
            rx,
            wake: Arc::downgrade(&tx),
            shared: shared.clone(),
            backoff: FIRST_BACKOFF,
            retry_at: None,
            refused_since: None,
        };
        let _ = std::thread::Builder::new()
            .name(format!("repl-peer-{id}"))
            .spawn(move || writer.run());
        Link { tx, shared, id }
    }

    /// Sends a batch to the peer. On an idle connection the caller's thread writes it (no
    /// hand-off to the writer thread, which is one thread wake-up per batch on the write
    /// path); otherwise, or when the socket cannot take it now, the writer does.
    pub fn send<O: LinkOwner>(&self, owner: &O, msgs: Vec<Message>) {
        let Some(msgs) = self.write_here(owner, msgs) else {
            return;
        };
        let counted = !msgs.is_empty();
        if counted {
            self.shared.queued.fetch_add(1, Ordering::SeqCst);
        }
        if self.tx.try_send(msgs).is_err() && counted {
            // Dropped (the queue is full, or the writer ended): Raft resends what is lost.
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Writes the batch on this thread when nothing is queued before it and the connection
    /// is up and idle; hands it back otherwise (also a snapshot: large, and its outcome is
    /// the writer's to report).
    fn write_here<O: LinkOwner>(&self, owner: &O, msgs: Vec<Message>) -> Option<Vec<Message>> {
        if msgs.is_empty() || self.shared.queued.load(Ordering::SeqCst) != 0 || has_snapshot(&msgs)
        {
            return Some(msgs);
        }
        let Some(mut guard) = self.shared.conn.try_lock() else {
            return Some(msgs);
        };
        // Checked again under the lock: the writer takes a batch off the queue before it
        // locks, and counts it written only once written.
        if self.shared.queued.load(Ordering::SeqCst) != 0 {
            return Some(msgs);
        }
        let Some(conn) = guard.as_mut().filter(|c| c.idle()) else {
            return Some(msgs);
        };
        match conn.send(owner, self.id, &msgs, owner.heartbeat_interval(), false) {
            Sent::Whole => {}
            Sent::Part => {
                // The writer writes the rest before anything else.
                let _ = self.tx.try_send(Vec::new());
            }
            Sent::Dead => owner.on_unreachable(self.id, true, false),
            Sent::Failed => {
                // Closing ends the reader, which reports the batch with the others pending
                // (and wakes the writer, which reconnects).
                if let Some(c) = guard.take() {
                    c.close();
                }
            }
        }
        None
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
    /// When the last request that waits for its reply was sent.
    answered_sent: Option<Instant>,
    /// The rest of a request a caller's thread wrote only in part (the socket's buffer was
    /// full): the writer writes it before anything else.
    unfinished: Vec<u8>,
}

/// How much of a request [`Conn::send`] wrote.
enum Sent {
    Whole,
    /// The rest is in `unfinished`.
    Part,
    /// The connection had failed: nothing was sent or counted pending.
    Dead,
    /// Writing failed: the request is pending, the connection is to be closed (its reader
    /// then reports the request unreachable).
    Failed,
}

impl Conn {
    /// Ends the connection; its reader reports what was pending.
    fn close(&self) {
        self.shared.state.lock().dead = true;
        let _ = self.stream.shutdown(Shutdown::Both);
        self.shared.changed.notify_all();
    }

    /// Whether a caller's thread may write a request now: alive, nothing left unfinished,
    /// room for a request waiting for its reply.
    fn idle(&self) -> bool {
        let st = self.shared.state.lock();
        !st.dead && self.unfinished.is_empty() && st.pending.len() < MAX_INFLIGHT
    }

    /// Writes what a caller left unfinished (blocking, bounded by the write timeout).
    fn finish(&mut self) -> bool {
        let rest = std::mem::take(&mut self.unfinished);
        rest.is_empty() || (&self.stream).write_all(&rest).is_ok()
    }

    /// Writes `msgs` (with this member's status) as one request: answered when
    /// `needs_reply` says so, and at least once per heartbeat `interval` (its reply is the
    /// peer's heartbeat: `lastHeartbeat`, `pingMs`). `may_block` false (a caller's thread)
    /// never waits for the socket: what it cannot take now is left in `unfinished`.
    fn send<O: LinkOwner>(
        &mut self,
        o: &O,
        id: u64,
        msgs: &[Message],
        interval: Duration,
        may_block: bool,
    ) -> Sent {
        let had_snapshot = has_snapshot(msgs);
        let reply = needs_reply(msgs) || self.answered_sent.is_none_or(|t| t.elapsed() >= interval);
        // One request in the usual case; several for a batch past `FRAGMENT_BYTES`, all but
        // the last without a reply (the last one's reply answers for them).
        let requests = requests(msgs);
        let count = requests.len();
        let mut bytes = Vec::new();
        for (i, (fields, messages)) in requests.into_iter().enumerate() {
            let mut cmd = o.outgoing(id, messages);
            cmd.extend(fields);
            let flags = if reply && i + 1 == count {
                0
            } else {
                nidus_wire::MORE_TO_COME
            };
            bytes.extend(nidus_wire::encode_msg(
                next_request_id(),
                0,
                flags,
                &cmd,
                None,
            ));
        }
        // The request is pending before it is written: its reply can arrive (and the reader
        // look for it) before the write returns here.
        {
            let mut st = self.shared.state.lock();
            if st.dead {
                // The reader already gave up on this connection (and reported what it held).
                return Sent::Dead;
            }
            if reply {
                // Its reply also tells that the unanswered batches before it arrived.
                let unanswered = std::mem::take(&mut st.unanswered);
                st.pending.push_back(Pending {
                    started: Instant::now(),
                    had_messages: !msgs.is_empty() || unanswered,
                    had_snapshot,
                });
            } else {
                st.unanswered = true;
            }
        }
        if reply {
            self.answered_sent = Some(Instant::now());
        }
        if may_block {
            return match (&self.stream).write_all(&bytes) {
                Ok(()) => Sent::Whole,
                Err(_) => Sent::Failed,
            };
        }
        let mut written = 0;
        while written < bytes.len() {
            match send_now(&self.stream, &bytes[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(_) => return Sent::Failed,
            }
        }
        if written == bytes.len() {
            return Sent::Whole;
        }
        self.unfinished.extend_from_slice(&bytes[written..]);
        Sent::Part
    }
}

/// Writes what the socket takes now without waiting (0 when it takes nothing).
fn send_now(stream: &TcpStream, bytes: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: the pointer and length describe `bytes`, borrowed for the call; the
        // descriptor is the stream's, open while it is borrowed.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::WouldBlock => return Ok(0),
            ErrorKind::Interrupted => {}
            _ => return Err(e),
        }
    }
}

struct Writer<O: LinkOwner> {
    owner: Weak<O>,
    id: u64,
    rx: Receiver<Vec<Message>>,
    wake: Weak<SyncSender<Vec<Message>>>,
    shared: Arc<LinkShared>,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// Since when every connection attempt was refused.
    refused_since: Option<Instant>,
}

impl<O: LinkOwner> Writer<O> {
    fn run(mut self) {
        loop {
            let interval = match self.owner.upgrade() {
                Some(o) if !o.stopping() => o.heartbeat_interval(),
                _ => break,
            };
            self.drop_dead_conn(&mut self.shared.clone().conn.lock());
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
            let mut taken = usize::from(!msgs.is_empty());
            while msgs.len() < 1024 {
                match self.rx.try_recv() {
                    Ok(more) => {
                        taken += usize::from(!more.is_empty());
                        msgs.extend(more);
                    }
                    Err(_) => break,
                }
            }
            let Some(o) = self.owner.upgrade() else { break };
            if o.stopping() {
                break;
            }
            let shared = self.shared.clone();
            let mut conn = shared.conn.lock();
            self.send_batch(&*o, &mut conn, msgs, interval);
            // Counted written while the lock is held: a caller that sees none queued and
            // takes the lock writes after this batch.
            shared.queued.fetch_sub(taken, Ordering::SeqCst);
        }
        if let Some(c) = self.shared.conn.lock().take() {
            c.close();
        }
    }

    /// Sends one batch (none: a heartbeat), connecting first when needed.
    fn send_batch(
        &mut self,
        o: &O,
        conn: &mut Option<Conn>,
        msgs: Vec<Message>,
        interval: Duration,
    ) {
        self.drop_dead_conn(conn);
        // A caller's unfinished request goes first.
        let finished = match conn.as_mut() {
            Some(c) if !c.unfinished.is_empty() => {
                if !c.finish() {
                    self.lost(o, conn);
                    return;
                }
                true
            }
            _ => false,
        };
        if msgs.is_empty() && finished {
            // Woken to finish a caller's request: no heartbeat is due for that.
            return;
        }
        let had_snapshot = has_snapshot(&msgs);
        let had_messages = !msgs.is_empty();
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            // Still backing off after a failure: the batch is dropped; Raft resends.
            o.on_unreachable(self.id, had_messages, had_snapshot);
            return;
        }
        let Some(host) = o.peer_host(self.id) else {
            return;
        };
        if conn.as_ref().is_some_and(|c| c.host != host) {
            if let Some(c) = conn.take() {
                c.close();
            }
        }
        if conn.is_none() {
            match connect(&host) {
                Ok(stream) => match self.open(&host, stream) {
                    Ok(c) => {
                        *conn = Some(c);
                        self.refused_since = None;
                    }
                    Err(_) => {
                        self.failed(o, false);
                        o.on_unreachable(self.id, had_messages, had_snapshot);
                        return;
                    }
                },
                Err(e) => {
                    self.failed(o, e.kind() == ErrorKind::ConnectionRefused);
                    o.on_unreachable(self.id, had_messages, had_snapshot);
                    return;
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            return;
        };
        // At most MAX_INFLIGHT requests on the wire: wait for replies (the reader ends a
        // connection whose oldest request is unanswered for IO_TIMEOUT).
        {
            let mut st = c.shared.state.lock();
            while !st.dead && st.pending.len() >= MAX_INFLIGHT {
                c.shared.changed.wait_for(&mut st, READ_POLL);
            }
        }
        match c.send(o, self.id, &msgs, interval, true) {
            Sent::Whole | Sent::Part => {
                #[cfg(test)]
                tests::after_write();
            }
            Sent::Dead => o.on_unreachable(self.id, had_messages, had_snapshot),
            Sent::Failed => self.lost(o, conn),
        }
    }

    /// The connection failed while writing: closing ends its reader, which reports the
    /// pending requests unreachable.
    fn lost(&mut self, o: &O, conn: &mut Option<Conn>) {
        if let Some(c) = conn.take() {
            c.close();
        }
        self.failed(o, false);
    }

    /// Starts the reader of a new connection.
    fn open(&mut self, host: &str, stream: TcpStream) -> std::io::Result<Conn> {
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
        Ok(Conn {
            host: host.to_string(),
            stream,
            shared,
            answered_sent: None,
            unfinished: Vec::new(),
        })
    }

    /// Forgets a connection its reader found broken: the next attempt is made at once when
    /// the peer had answered on it, else after the backoff.
    fn drop_dead_conn(&mut self, conn: &mut Option<Conn>) {
        let Some(c) = conn.as_ref() else { return };
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
        *conn = None;
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

fn has_snapshot(msgs: &[Message]) -> bool {
    msgs.iter()
        .any(|m| m.get_msg_type() == MessageType::MsgSnapshot)
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
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// A pause after each request is written (microseconds): the writer's thread losing the
    /// processor right after its write, while the peer answers.
    static PAUSE_AFTER_WRITE_US: AtomicU64 = AtomicU64::new(0);

    pub(super) fn after_write() {
        let us = PAUSE_AFTER_WRITE_US.load(Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    fn append_of(to: u64, index: u64, data_len: usize) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = to;
        let e = raft::eraftpb::Entry {
            index,
            data: vec![7u8; data_len].into(),
            ..Default::default()
        };
        m.entries = vec![e].into();
        m
    }

    /// A batch past `FRAGMENT_BYTES` goes as several requests, each under the document limit,
    /// and the receiver gets back every message, in order; a fragment out of order drops the
    /// message being joined instead of corrupting it.
    #[test]
    fn large_messages_go_in_fragments_and_join_in_order() {
        let msgs = vec![
            append_of(2, 1, 10),
            append_of(2, 2, 3 * FRAGMENT_BYTES + 5),
            append_of(2, 3, 20),
            append_of(2, 4, FRAGMENT_BYTES - 100),
            append_of(2, 5, 200),
        ];
        let reqs = requests(&msgs);
        assert!(reqs.len() >= 6, "{}", reqs.len());
        let fragments = Fragments::default();
        let mut got = Vec::new();
        for (fields, messages) in &reqs {
            let mut body = doc! { "replSetRaftMessages": 1, "messages": messages.clone() };
            body.extend(fields.clone());
            assert!(bson::to_vec(&body).unwrap().len() < nidus_wire::MAX_INTERNAL_OBJECT_SIZE);
            got.extend(decode_messages(messages).unwrap());
            got.extend(fragments.take(1, &body).unwrap());
        }
        let indexes: Vec<u64> = got.iter().map(|m| m.entries[0].index).collect();
        assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
        assert_eq!(got[1].entries[0].data.len(), 3 * FRAGMENT_BYTES + 5);
        assert_eq!(requests(&msgs[..1]).len(), 1);

        // The second fragment of a message lost: the third does not join the first.
        let frags: Vec<Document> = requests(&msgs[1..2]).into_iter().map(|(f, _)| f).collect();
        assert_eq!(frags.len(), 4);
        assert!(fragments.take(1, &frags[0]).unwrap().is_none());
        assert!(fragments.take(1, &frags[2]).unwrap().is_none());
        assert!(fragments.take(1, &frags[3]).unwrap().is_none());
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

    /// A link to `host` whose first request (a heartbeat) was answered.
    fn connected_link(host: String) -> (Arc<Owner>, Link) {
        let owner = Arc::new(Owner {
            host,
            ..Default::default()
        });
        let link = Link::start(Arc::downgrade(&owner), 2);
        link.send(&*owner, Vec::new());
        wait_for("the first reply", || {
            owner.replies.load(Ordering::SeqCst) == 1
        });
        (owner, link)
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
            link.send(&*owner, vec![message(MessageType::MsgAppend)]);
            let got = || seen.silent.load(Ordering::SeqCst) + seen.answered.load(Ordering::SeqCst);
            wait_for("the append reaches the peer", || got() >= sent);
        }
        assert_eq!(seen.answered.load(Ordering::SeqCst), 1);
        assert_eq!(seen.silent.load(Ordering::SeqCst), APPENDS - 1);
        // One at a time (batches queued together go as one request).
        link.send(&*owner, vec![message(MessageType::MsgAppendResponse)]);
        wait_for("the follower's message answered", || {
            owner.replies.load(Ordering::SeqCst) == 2
        });
        link.send(&*owner, Vec::new());
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
        let (owner, link) = connected_link(host);
        for sent in 1..=2 {
            link.send(&*owner, vec![message(MessageType::MsgAppend)]);
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

    /// Batches written by the caller's thread and by the writer (when the socket's buffer is
    /// full, a caller leaves the rest of its request to the writer) reach the peer whole and
    /// in the order they were sent, also while the peer does not read for a while.
    #[test]
    fn batches_arrive_whole_and_in_order_past_a_full_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let reading = Arc::new(AtomicBool::new(false));
        let received = Arc::new(Mutex::new(Vec::<u64>::new()));
        {
            let (reading, received) = (reading.clone(), received.clone());
            std::thread::spawn(move || {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let reply = nidus_wire::encode_msg(1, 0, 0, &doc! { "ok": 1.0 }, None);
                let mut first = true;
                loop {
                    // The first request (answered) comes through; then nothing is read
                    // until the test says so.
                    while !first && !reading.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    first = false;
                    let mut len = [0u8; 4];
                    if conn.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut message = len.to_vec();
                    message.resize(i32::from_le_bytes(len) as usize, 0);
                    if conn.read_exact(&mut message[4..]).is_err() {
                        return;
                    }
                    let decoded = nidus_wire::decode_message(&message).expect("a whole request");
                    let nidus_wire::Request::Msg(m) = decoded.request else {
                        panic!("not an OP_MSG");
                    };
                    let msgs = decode_messages(m.body.get_array("messages").expect("messages"))
                        .expect("Raft messages");
                    received.lock().extend(msgs.iter().map(|m| m.index));
                    if !m.more_to_come() && conn.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
        let (owner, link) = connected_link(host);
        // 200 appends of 64 KiB each: far more than the sockets' buffers hold.
        const APPENDS: u64 = 200;
        for index in 1..=APPENDS {
            let mut m = message(MessageType::MsgAppend);
            m.index = index;
            m.context = vec![index as u8; 64 << 10].into();
            link.send(&*owner, vec![m]);
        }
        std::thread::sleep(Duration::from_millis(200));
        reading.store(true, Ordering::SeqCst);
        wait_for("every append received", || {
            received.lock().len() >= APPENDS as usize
        });
        let got = received.lock().clone();
        assert_eq!(got, (1..=APPENDS).collect::<Vec<_>>());
        assert_eq!(owner.unreachable.load(Ordering::SeqCst), 0);
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
            link.send(&*owner, vec![message(MessageType::MsgHeartbeatResponse)]);
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
