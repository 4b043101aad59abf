//! JSON log lines in MongoDB's shape: `{t, s, c, id, ctx, msg, attr}`.

use serde_json::{json, Value};
use std::io::Write;

pub fn now_iso() -> String {
    let now = bson::DateTime::now();
    now.try_to_rfc3339_string().unwrap_or_default()
}

/// Writes one line to stdout. `s` is the severity (`I`, `W`, `E`, `F`), `c` the component.
pub fn log(s: &str, c: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
    let mut line = json!({
        "t": { "$date": now_iso() },
        "s": s,
        "c": c,
        "id": id,
        "ctx": ctx,
        "msg": msg,
    });
    if !attr.is_null() {
        line["attr"] = attr;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

pub fn info(c: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
    log("I", c, id, ctx, msg, attr);
}

pub fn warn(c: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
    log("W", c, id, ctx, msg, attr);
}
