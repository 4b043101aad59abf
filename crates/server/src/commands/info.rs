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

/// Parameters only `--setParameter` may set (mongod's `set_at: startup`).
const STARTUP_ONLY: &[&str] = &[
    "enableTestCommands",
    "authenticationMechanisms",
    "maxBSONDepth",
    "featureCompatibilityVersion",
    "initialSyncMethod",
];

/// `getParameter`: `"*"` or `{allParameters: true}` for every parameter, otherwise the named
/// ones; with `{showDetails: true}` each value comes as `{value, settableAtRuntime,
/// settableAtStartup}`.
pub fn get_parameter(ctx: &mut Ctx) -> Result<Document> {
    let all = ctx.state.params.all();
    let (every, details) = match ctx.body.get("getParameter") {
        Some(Bson::String(s)) if s == "*" => (true, false),
        Some(Bson::Document(o)) => {
            for (k, v) in o {
                if !matches!(k.as_str(), "allParameters" | "showDetails" | "setAt") {
                    return Err(Error::new(
                        ErrorCode::Location(40415),
                        format!("BSON field 'getParameter.{k}' is an unknown field."),
                    ));
                }
                if !matches!(v, Bson::Boolean(_)) && k != "setAt" {
                    return Err(super::wrong_type("getParameter", k, v, "bool"));
                }
            }
            (
                o.get_bool("allParameters").unwrap_or(false),
                o.get_bool("showDetails").unwrap_or(false),
            )
        }
        _ => (false, false),
    };
    let show = |k: &str, v: &Bson| -> Bson {
        if details {
            let runtime = !STARTUP_ONLY.contains(&k);
            Bson::Document(doc! {
                "value": v.clone(),
                "settableAtRuntime": runtime,
                "settableAtStartup": k != "featureCompatibilityVersion",
            })
        } else {
            v.clone()
        }
    };
    if every {
        return Ok(all.iter().map(|(k, v)| (k.clone(), show(k, v))).collect());
    }
    let mut out = Document::new();
    for (k, _) in ctx.body.iter().skip(1) {
        if super::is_generic_arg(k) {
            continue;
        }
        if let Some(v) = all.get(k) {
            out.insert(k.clone(), show(k, v));
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
        match ctx
            .state
            .params
            .set(k, v.clone())
            .map_err(Error::bad_value)?
        {
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

/// `getCmdLineOpts`: `argv` as given and `parsed`, every option in effect that was set (or
/// that mongod always lists), nested by its config-file path.
pub fn get_cmd_line_opts(ctx: &mut Ctx) -> Result<Document> {
    let cfg = &ctx.state.config;
    let mut parsed = Document::new();
    for (path, v) in &cfg.given {
        nidus_doc::path::set_path(&mut parsed, path, v.clone());
    }
    Ok(doc! { "argv": cfg.argv.clone(), "parsed": parsed })
}

/// Bytes in MiB, as `hostInfo` reports memory (0 when unknown).
fn mib(bytes: Option<u64>) -> i64 {
    bytes.map_or(0, |b| i64::try_from(b >> 20).unwrap_or(i64::MAX))
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
            "memSizeMB": mib(crate::config::memory_total_bytes()),
            "memLimitMB": mib(crate::config::memory_limit_bytes()),
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

pub fn list_commands(ctx: &mut Ctx) -> Result<Document> {
    let mut commands = Document::new();
    for name in super::command_names(ctx.state) {
        let requires_auth = !matches!(super::need_of(name), Some(crate::auth::Need::Nothing));
        let (versions, deprecated) = super::api_of(name)
            .map(super::api::Api::versions)
            .unwrap_or_default();
        commands.insert(
            name,
            doc! {
                "help": "",
                "adminOnly": false,
                "requiresAuth": requires_auth,
                "apiVersions": versions,
                "deprecatedApiVersions": deprecated,
            },
        );
    }
    Ok(doc! { "commands": commands })
}

/// `getLog`: `"*"` lists the logs, `"global"` returns the recent lines kept in memory,
/// `"startupWarnings"` the warnings logged before the server listened.
pub fn get_log(ctx: &mut Ctx) -> Result<Document> {
    match ctx.body.get("getLog") {
        Some(Bson::String(s)) if s == "*" => Ok(doc! { "names": ["global", "startupWarnings"] }),
        Some(Bson::String(s)) if s == "global" => {
            let (lines, total) = crate::log::recent();
            Ok(doc! { "totalLinesWritten": nidus_common::number(total), "log": lines })
        }
        Some(Bson::String(s)) if s == "startupWarnings" => {
            let lines = crate::log::startup_warnings();
            Ok(doc! { "totalLinesWritten": lines.len() as i32, "log": lines })
        }
        Some(Bson::String(s)) => Err(Error::new(
            ErrorCode::OperationFailed,
            format!("No log named '{s}'"),
        )),
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
    ctx.require_admin("configureFailPoint")?;
    let count = ctx.state.fail_points.configure(&ctx.body)?;
    Ok(doc! { "count": count })
}
