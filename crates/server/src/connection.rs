//! One client connection: read a message, run it off the reactor, write the reply.

use crate::commands::{self, Reply, Request};
use crate::log;
use crate::state::ServerState;
use bson::{doc, Document};
use nidus_common::Error;
use nidus_wire::{Compressor, Decoded, MsgHeader, Request as WireRequest, HEADER_LEN};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Per-connection state commands may read or change.
#[derive(Debug, Clone)]
pub struct ConnState {
    pub id: i64,
    pub peer: SocketAddr,
    pub client_metadata: Option<Document>,
    pub app_name: Option<String>,
    /// Compressors agreed in `hello`, in the client's order of preference.
    pub compressors: Vec<Compressor>,
}

pub async fn serve(state: Arc<ServerState>, mut stream: TcpStream, peer: SocketAddr) {
    let id = state.next_connection_id();
    state.connections.current.fetch_add(1, Ordering::Relaxed);
    state
        .connections
        .total_created
        .fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    let mut conn = ConnState {
        id,
        peer,
        client_metadata: None,
        app_name: None,
        compressors: Vec::new(),
    };
    log::info(
        "NETWORK",
        22943,
        "listener",
        "Connection accepted",
        serde_json::json!({ "remote": peer.to_string(), "connectionId": id }),
    );
    loop {
        match handle_one(&state, &mut stream, conn).await {
            Ok(Some(c)) => conn = c,
            Ok(None) => break,
            Err(e) => {
                log::info(
                    "NETWORK",
                    22989,
                    &format!("conn{id}"),
                    "Closing connection",
                    serde_json::json!({ "remote": peer.to_string(), "error": e.to_string() }),
                );
                break;
            }
        }
    }
    state.connections.current.fetch_sub(1, Ordering::Relaxed);
    log::info(
        "NETWORK",
        22944,
        &format!("conn{id}"),
        "Connection ended",
        serde_json::json!({ "remote": peer.to_string(), "connectionId": id }),
    );
}

/// Handles one message. `Ok(None)` = the client closed the connection cleanly or must be
/// disconnected; `Err` = an I/O or framing error after which the connection is closed.
async fn handle_one(
    state: &Arc<ServerState>,
    stream: &mut TcpStream,
    conn: ConnState,
) -> std::io::Result<Option<ConnState>> {
    let mut header_bytes = [0u8; HEADER_LEN];
    match stream.read_exact(&mut header_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let header = MsgHeader::parse(&header_bytes);
    let body_len = match nidus_wire::check_length(&header) {
        Ok(n) => n,
        Err(e) => return Err(fatal(e)),
    };
    let mut body = vec![0u8; body_len];
    stream.read_exact(&mut body).await?;
    let decoded = match nidus_wire::decode(&header, &body) {
        Ok(d) => d,
        Err(e) if e.is_fatal() => return Err(fatal(e)),
        Err(e) => {
            let reply = Error::from(e).to_reply();
            let bytes =
                nidus_wire::encode_msg(next_request_id(), header.request_id, 0, &reply, None);
            stream.write_all(&bytes).await?;
            return Ok(Some(conn));
        }
    };
    let Decoded {
        request,
        compressor,
    } = decoded;
    let state2 = state.clone();
    let task = tokio::task::spawn_blocking(move || {
        let mut conn = conn;
        let out = execute(&state2, &mut conn, request, header.request_id, compressor);
        (conn, out)
    });
    let (conn, out) = task
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    match out {
        Outcome::Reply(bytes) => {
            stream.write_all(&bytes).await?;
            Ok(Some(conn))
        }
        Outcome::NoReply => Ok(Some(conn)),
        Outcome::Close => Ok(None),
    }
}

/// A framing error after which the connection is closed.
fn fatal(e: nidus_wire::WireError) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        Error::from(e).message.clone(),
    )
}

enum Outcome {
    Reply(Vec<u8>),
    NoReply,
    Close,
}

fn next_request_id() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn execute(
    state: &ServerState,
    conn: &mut ConnState,
    request: WireRequest,
    request_id: i32,
    compressor: Option<Compressor>,
) -> Outcome {
    state.connections.active.fetch_add(1, Ordering::Relaxed);
    let out = match request {
        WireRequest::Msg(msg) => {
            let more_to_come = msg.more_to_come();
            let reply = commands::run(
                state,
                conn,
                Request {
                    body: msg.body,
                    sequences: msg.sequences,
                },
            );
            if reply.close_connection {
                Outcome::Close
            } else if more_to_come {
                Outcome::NoReply
            } else {
                Outcome::Reply(nidus_wire::encode_msg(
                    next_request_id(),
                    request_id,
                    0,
                    &reply.body,
                    compressor,
                ))
            }
        }
        WireRequest::Query(q) => {
            let reply = legacy_query(state, conn, q);
            if reply.close_connection {
                Outcome::Close
            } else {
                Outcome::Reply(nidus_wire::encode_reply(
                    next_request_id(),
                    request_id,
                    &reply.body,
                ))
            }
        }
    };
    state.connections.active.fetch_sub(1, Ordering::Relaxed);
    out
}

/// OP_QUERY is accepted only for the handshake commands on `<db>.$cmd`, as in MongoDB 6.0+.
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
    if !matches!(name.as_str(), "hello" | "isMaster" | "ismaster") {
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
        },
    )
}

fn legacy_error(msg: &str) -> Reply {
    Reply {
        body: doc! { "$err": msg, "errmsg": msg, "code": 352, "codeName": "UnsupportedOpQueryCommand", "ok": 0.0 },
        close_connection: false,
    }
}
