//! `replSetResizeOplog`: the oplog's size bound (`engine/src/oplog.rs`).

use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::oplog::{MAX_OPLOG_SIZE_MB, MIN_OPLOG_SIZE_MB};

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(n) => Some(*n as f64),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) => Some(*f),
        Bson::Decimal128(d) => d.to_string().parse().ok(),
        _ => None,
    }
}

pub fn repl_set_resize_oplog(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("replSetResizeOplog")?;
    if ctx.state.engine.oplog().is_none() {
        return Err(Error::new(
            ErrorCode::NoReplicationEnabled,
            "can't resize oplog as the oplog does not exist",
        ));
    }
    for (k, _) in ctx.body.iter().skip(1) {
        if !super::is_generic_arg(k) && k != "size" && k != "minRetentionHours" {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field 'ReplSetResizeOplogRequest.{k}' is an unknown field."),
            ));
        }
    }
    if let Some(v) = ctx.body.get("minRetentionHours") {
        match number(v) {
            Some(h) if h >= 0.0 => {}
            Some(_) => {
                return Err(Error::bad_value(
                    "minRetentionHours must be greater than or equal to 0",
                ))
            }
            None => {
                return Err(Error::new(
                    ErrorCode::TypeMismatch,
                    "BSON field 'ReplSetResizeOplogRequest.minRetentionHours' is the wrong type, expected type 'double'",
                ))
            }
        }
    }
    match ctx.body.get("size") {
        None if ctx.body.contains_key("minRetentionHours") => {}
        None => {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "replSetResizeOplog expects 'size' and/or 'minRetentionHours' to be specified",
            ))
        }
        Some(v) => {
            let mb = number(v).ok_or_else(|| {
                Error::new(
                    ErrorCode::TypeMismatch,
                    "BSON field 'ReplSetResizeOplogRequest.size' is the wrong type, expected type 'double'",
                )
            })?;
            if mb < MIN_OPLOG_SIZE_MB {
                return Err(Error::bad_value("oplog size should be 990MB at least"));
            }
            if mb > MAX_OPLOG_SIZE_MB {
                return Err(Error::bad_value(
                    "oplog size in MB cannot exceed maximum of 1PB",
                ));
            }
            ctx.state
                .engine
                .resize_oplog((mb * 1024.0 * 1024.0) as i64)?;
        }
    }
    Ok(doc! {})
}
