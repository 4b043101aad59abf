//! Inter-member transport: members talk over their normal MongoDB port. One sender thread per
//! peer keeps a plain client connection and sends `replSetRaftMessages` commands carrying
//! serialized Raft messages (an array of binData) and this member's status; a command with no
//! messages is the heartbeat. The reply carries the peer's status.
//!
//! With a key file every connection first authenticates as `__system@local` (SCRAM-SHA-256,
//! the key as password), MongoDB's internal authentication; a member without the key is
//! refused by the others.

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{OnceLock, Weak};
use std::time::{Duration, Instant};

/// Most batches waiting for one peer; more are dropped (Raft resends what is lost).
const QUEUE: usize = 256;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const IO_TIMEOUT: Duration = Duration::from_millis(5000);
const MAX_BACKOFF: Duration = Duration::from_millis(1000);

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

/// What a sender thread needs from the coordinator (held weakly so threads end with it).
pub trait LinkOwner: Send + Sync + 'static {
    fn peer_host(&self, id: u64) -> Option<String>;
    /// The command to send: messages plus this member's status.
    fn outgoing(&self, to: u64, messages: Vec<Bson>) -> Document;
    fn heartbeat_interval(&self) -> Duration;
    /// A reply arrived after `ping`.
    fn on_reply(&self, id: u64, reply: &Document, ping: Duration, had_snapshot: bool);
    /// The peer could not be reached.
    fn on_unreachable(&self, id: u64, had_messages: bool, had_snapshot: bool);
    fn stopping(&self) -> bool;
}

pub struct Link {
    tx: SyncSender<Vec<Message>>,
}

impl Link {
    pub fn start<O: LinkOwner>(owner: Weak<O>, id: u64) -> Link {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let _ = std::thread::Builder::new()
            .name(format!("repl-peer-{id}"))
            .spawn(move || run(owner, id, rx));
        Link { tx }
    }

    pub fn send(&self, msgs: Vec<Message>) {
        match self.tx.try_send(msgs) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn run<O: LinkOwner>(owner: Weak<O>, id: u64, rx: Receiver<Vec<Message>>) {
    let mut conn: Option<(String, TcpStream)> = None;
    let mut backoff = Duration::from_millis(50);
    let mut retry_at: Option<Instant> = None;
    loop {
        let interval = match owner.upgrade() {
            Some(o) if !o.stopping() => o.heartbeat_interval(),
            _ => return,
        };
        let mut msgs = match rx.recv_timeout(interval) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => Vec::new(),
            Err(RecvTimeoutError::Disconnected) => return,
        };
        while msgs.len() < 1024 {
            match rx.try_recv() {
                Ok(more) => msgs.extend(more),
                Err(_) => break,
            }
        }
        let Some(o) = owner.upgrade() else { return };
        if o.stopping() {
            return;
        }
        let had_snapshot = msgs
            .iter()
            .any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        let had_messages = !msgs.is_empty();
        if retry_at.is_some_and(|t| Instant::now() < t) {
            // Still backing off after a failure: the batch is dropped; Raft resends.
            o.on_unreachable(id, had_messages, had_snapshot);
            continue;
        }
        let Some(host) = o.peer_host(id) else {
            continue;
        };
        if conn.as_ref().is_some_and(|(h, _)| *h != host) {
            conn = None;
        }
        let cmd = o.outgoing(id, crate::transport::encode_messages(&msgs));
        let started = Instant::now();
        let result = match conn.take() {
            Some((h, s)) => round_trip(s, &cmd).map(|(s, r)| ((h, s), r)),
            None => connect(&host)
                .and_then(|s| round_trip(s, &cmd))
                .map(|(s, r)| ((host.clone(), s), r)),
        };
        match result {
            Ok((c, reply)) => {
                conn = Some(c);
                backoff = Duration::from_millis(50);
                retry_at = None;
                o.on_reply(id, &reply, started.elapsed(), had_snapshot);
            }
            Err(_) => {
                o.on_unreachable(id, had_messages, had_snapshot);
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
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
    if body.get_f64("ok").unwrap_or(0.0) != 1.0 {
        return Err(std::io::Error::other(
            body.get_str("errmsg").unwrap_or("error").to_string(),
        ));
    }
    Ok((s, body))
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
    let decoded = nidus_wire::decode_message(&message)
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    match decoded.request {
        nidus_wire::Request::Msg(m) => Ok((s, m.body)),
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
