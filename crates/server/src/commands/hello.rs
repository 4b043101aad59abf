//! `hello` / `isMaster`: the handshake drivers use to discover the server.

use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_wire::Compressor;

/// Wire version of MongoDB 8.0.
pub const MAX_WIRE_VERSION: i32 = 25;

pub fn hello(ctx: &mut Ctx) -> Result<Document> {
    handshake(ctx, "isWritablePrimary")
}

pub fn is_master(ctx: &mut Ctx) -> Result<Document> {
    handshake(ctx, "ismaster")
}

fn handshake(ctx: &mut Ctx, primary_field: &str) -> Result<Document> {
    record_client_metadata(ctx)?;
    let mut reply = Document::new();
    if ctx.opt_bool("helloOk")?.unwrap_or(false) {
        reply.insert("helloOk", true);
    }
    reply.insert(primary_field, true);
    let counter = ctx.state.repl.as_ref().map_or(0, |r| r.topology_version());
    reply.insert(
        "topologyVersion",
        doc! { "processId": ctx.state.process_id, "counter": counter },
    );
    reply.insert("maxBsonObjectSize", nidus_wire::MAX_BSON_OBJECT_SIZE as i32);
    reply.insert(
        "maxMessageSizeBytes",
        nidus_wire::MAX_MESSAGE_SIZE_BYTES as i32,
    );
    reply.insert("maxWriteBatchSize", nidus_wire::MAX_WRITE_BATCH_SIZE as i32);
    reply.insert("localTime", bson::DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", 30);
    reply.insert("connectionId", nidus_common::number(ctx.conn.id));
    reply.insert("minWireVersion", 0);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    if let Some(set) = &ctx.state.config.repl_set {
        match &ctx.state.repl {
            Some(repl) if !repl.implicit() => repl.hello_fields(primary_field, &mut reply),
            _ => add_replica_set_fields(ctx, set, &mut reply),
        }
    }
    if let Some(list) = negotiate_compression(ctx)? {
        reply.insert("compression", list);
    }
    if let Some(mechs) = super::auth::supported_mechs(ctx)? {
        reply.insert("saslSupportedMechs", mechs);
    }
    if let Some(spec) = super::auth::speculative(ctx) {
        reply.insert("speculativeAuthenticate", spec);
    }
    Ok(reply)
}

/// The implicit one-member replica set (started with `--replSet`, never initiated nor joined)
/// whose only member is this primary.
fn add_replica_set_fields(ctx: &Ctx, set: &str, reply: &mut Document) {
    let me = member_address(&ctx.state.config);
    let now = bson::DateTime::now();
    let op_time = doc! { "ts": ctx.state.cluster_time.tick(), "t": 1i64 };
    reply.insert("hosts", vec![me.clone()]);
    reply.insert("setName", set);
    reply.insert("setVersion", 1);
    reply.insert("secondary", false);
    reply.insert("primary", me.clone());
    reply.insert("me", me);
    reply.insert(
        "electionId",
        bson::oid::ObjectId::from_bytes([0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1]),
    );
    reply.insert(
        "lastWrite",
        doc! {
            "opTime": op_time.clone(),
            "lastWriteDate": now,
            "majorityOpTime": op_time,
            "majorityWriteDate": now,
        },
    );
}

/// `host:port` as clients reach this server: the first bind address, or the host name when
/// bound to every interface.
pub fn member_address(config: &crate::config::Config) -> String {
    let host = match config.bind_ip.first().map(String::as_str) {
        None | Some("0.0.0.0") | Some("::") => nidus_common::hostname(),
        Some(ip) => ip.to_string(),
    };
    format!("{host}:{}", config.port)
}

/// The first handshake may carry `client` metadata; later ones may not change it.
fn record_client_metadata(ctx: &mut Ctx) -> Result<()> {
    let Some(client) = ctx.body.get("client") else {
        return Ok(());
    };
    let Bson::Document(client) = client else {
        return Err(Error::type_mismatch(
            "BSON field 'hello.client' is the wrong type, expected type 'object'",
        ));
    };
    if ctx.conn.client_metadata.is_some() {
        return Err(Error::new(
            ErrorCode::ClientMetadataCannotBeMutated,
            "The client metadata document may only be sent in the first hello",
        ));
    }
    if let Ok(app) = client.get_document("application") {
        match app.get("name") {
            Some(Bson::String(name)) if name.len() > 128 => {
                return Err(Error::new(
                    ErrorCode::ClientMetadataAppNameTooLarge,
                    "The 'application.name' field must be less than or equal to 128 bytes in the client metadata document",
                ))
            }
            Some(Bson::String(name)) => ctx.conn.app_name = Some(name.clone()),
            _ => {}
        }
    }
    ctx.conn.client_metadata = Some(std::sync::Arc::new(client.clone()));
    Ok(())
}

/// Agrees on the compressors both sides support, in the client's order.
fn negotiate_compression(ctx: &mut Ctx) -> Result<Option<Vec<String>>> {
    let Some(Bson::Array(requested)) = ctx.body.get("compression") else {
        return Ok(None);
    };
    let agreed: Vec<Compressor> = requested
        .iter()
        .filter_map(|c| c.as_str())
        .filter_map(Compressor::from_name)
        .filter(|c| *c != Compressor::Noop)
        .collect();
    ctx.conn.compressors = agreed.clone();
    Ok(Some(agreed.iter().map(|c| c.name().to_string()).collect()))
}
