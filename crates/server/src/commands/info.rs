//! Informational and administrative commands.

use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// The MongoDB release whose behaviour Nidus follows and reports to drivers.
pub const COMPATIBLE_VERSION: &str = "8.0.4";
pub const COMPATIBLE_VERSION_ARRAY: [i32; 4] = [8, 0, 4, 0];

pub fn ping(_ctx: &mut Ctx) -> Result<Document> {
    Ok(Document::new())
}

/// `fsync`: everything acknowledged so far is on disk when it replies (the WAL is synced;
/// RocksDB's files need no separate flush to survive a crash). `lock: true` is refused.
pub fn fsync(ctx: &mut Ctx) -> Result<Document> {
    if ctx.opt_bool("lock")?.unwrap_or(false) {
        return Err(Error::new(
            ErrorCode::CommandNotSupported,
            "fsync with lock: true is not supported by this server",
        ));
    }
    ctx.state.engine.sync()?;
    Ok(doc! { "numFiles": 1 })
}

pub fn build_info(_ctx: &mut Ctx) -> Result<Document> {
    Ok(doc! {
        "version": COMPATIBLE_VERSION,
        "gitVersion": "nidus",
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "versionArray": COMPATIBLE_VERSION_ARRAY.to_vec(),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": nidus_wire::MAX_BSON_OBJECT_SIZE as i32,
        "storageEngines": ["rocksdb"],
        "buildEnvironment": { "target_os": std::env::consts::OS, "target_arch": std::env::consts::ARCH },
        "nidus": { "name": "nidus", "version": env!("CARGO_PKG_VERSION") },
    })
}

pub fn get_parameter(ctx: &mut Ctx) -> Result<Document> {
    let all = ctx.state.params.all();
    if matches!(ctx.body.get("getParameter"), Some(Bson::String(s)) if s == "*") {
        return Ok(all);
    }
    let mut out = Document::new();
    for (k, _) in ctx.body.iter().skip(1) {
        if k.starts_with('$') || matches!(k.as_str(), "lsid" | "comment") {
            continue;
        }
        if let Some(v) = all.get(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    if out.is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "no option found to get",
        ));
    }
    Ok(out)
}

pub fn set_parameter(ctx: &mut Ctx) -> Result<Document> {
    let mut out = Document::new();
    for (k, v) in ctx.body.iter().skip(1) {
        if k.starts_with('$') || matches!(k.as_str(), "lsid" | "comment") {
            continue;
        }
        match ctx.state.params.set(k, v.clone()) {
            Some(was) => {
                out.insert("was", was);
            }
            None => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    format!(
                    "attempted to set unrecognized parameter [{k}], use help:true to see options "
                ),
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "no option found to set, use help:true to see options ",
        ));
    }
    ctx.state.params.apply_to_engine();
    Ok(out)
}

pub fn get_cmd_line_opts(ctx: &mut Ctx) -> Result<Document> {
    let cfg = &ctx.state.config;
    let mut set_parameter = Document::new();
    for (k, v) in &cfg.set_parameters {
        set_parameter.insert(k.clone(), v.clone());
    }
    let mut parsed = doc! {
        "net": { "bindIp": cfg.bind_ip.join(","), "port": cfg.port as i32 },
        "storage": { "dbPath": cfg.dbpath.display().to_string() },
    };
    if !set_parameter.is_empty() {
        parsed.insert("setParameter", set_parameter);
    }
    if cfg.auth {
        parsed.insert("security", doc! { "authorization": "enabled" });
    }
    if cfg.tls.mode != crate::config::TlsMode::Disabled {
        let mut tls = doc! { "mode": cfg.tls.mode.name() };
        if let Some(f) = &cfg.tls.certificate_key_file {
            tls.insert("certificateKeyFile", f.display().to_string());
        }
        if let Some(f) = &cfg.tls.ca_file {
            tls.insert("CAFile", f.display().to_string());
        }
        if let Ok(net) = parsed.get_document_mut("net") {
            net.insert("tls", tls);
        }
    }
    Ok(doc! { "argv": cfg.argv.clone(), "parsed": parsed })
}

fn mem_total_mb() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0)
}

pub fn host_info(_ctx: &mut Ctx) -> Result<Document> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1);
    Ok(doc! {
        "system": {
            "currentTime": bson::DateTime::now(),
            "hostname": nidus_common::hostname(),
            "cpuAddrSize": 64,
            "memSizeMB": mem_total_mb(),
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
        },
        "os": { "type": "Linux", "name": std::env::consts::OS },
        "extra": {},
    })
}

pub fn whatsmyuri(ctx: &mut Ctx) -> Result<Document> {
    Ok(doc! { "you": ctx.conn.peer.to_string() })
}

pub fn list_commands(_ctx: &mut Ctx) -> Result<Document> {
    let mut commands = Document::new();
    for name in super::command_names() {
        let requires_auth = !matches!(super::need_of(name), Some(crate::auth::Need::Nothing));
        commands.insert(
            name,
            doc! { "help": "", "adminOnly": false, "requiresAuth": requires_auth },
        );
    }
    Ok(doc! { "commands": commands })
}

/// Sessions are accepted and tracked by the client; the server keeps no per-session state yet.
pub fn get_log(ctx: &mut Ctx) -> Result<Document> {
    match ctx.body.get("getLog") {
        Some(Bson::String(s)) if s == "*" => Ok(doc! { "names": ["global", "startupWarnings"] }),
        Some(Bson::String(_)) => Ok(doc! { "totalLinesWritten": 0, "log": [] }),
        _ => Err(Error::type_mismatch(
            "Argument to getLog must be of type String",
        )),
    }
}

pub fn free_monitoring(_ctx: &mut Ctx) -> Result<Document> {
    Ok(doc! { "state": "disabled" })
}

pub fn features(_ctx: &mut Ctx) -> Result<Document> {
    Ok(doc! { "oidMachine": 0 })
}

pub fn configure_fail_point(ctx: &mut Ctx) -> Result<Document> {
    if ctx.db != "admin" {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            "configureFailPoint may only be run against the admin database.",
        ));
    }
    let count = ctx.state.fail_points.configure(&ctx.body)?;
    Ok(doc! { "count": count })
}
