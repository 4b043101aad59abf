//! JSON log lines in MongoDB's shape: `{t, s, c, id, ctx, msg, attr}`, written to stdout or
//! to `--logpath`, and kept in memory for `getLog` (the last [`RING_LINES`] lines, and the
//! start-up warnings).

use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How many recent lines `getLog: "global"` returns (mongod keeps 1024).
pub const RING_LINES: usize = 1024;

struct Sink {
    /// `--logpath`: the file lines go to instead of stdout.
    path: Option<PathBuf>,
    file: Option<File>,
    recent: VecDeque<String>,
    startup_warnings: Vec<String>,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    path: None,
    file: None,
    recent: VecDeque::new(),
    startup_warnings: Vec::new(),
});
static TOTAL_LINES: AtomicU64 = AtomicU64::new(0);
/// Set once the server listens: warnings logged before are `startupWarnings`.
static STARTED: AtomicBool = AtomicBool::new(false);

fn open(path: &Path, append: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.create(true);
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(true);
    }
    o.open(path)
}

/// Sends the log to `path` (`--logpath`), appended to with `--logappend`; without it an
/// existing file is first renamed to `<path>.<timestamp>`, as mongod does.
pub fn to_file(path: &Path, append: bool) -> Result<(), String> {
    if !append && path.exists() {
        let _ = std::fs::rename(path, rotated_name(path));
    }
    let file =
        open(path, true).map_err(|e| format!("cannot open log file {}: {e}", path.display()))?;
    let mut sink = SINK.lock();
    sink.path = Some(path.to_path_buf());
    sink.file = Some(file);
    Ok(())
}

fn rotated_name(path: &Path) -> PathBuf {
    let stamp = now_iso().replace(':', "-");
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{stamp}"));
    PathBuf::from(name)
}

/// `logRotate`: renames the log file to `<path>.<timestamp>` and opens a new one. Without a
/// log file (stdout) there is nothing to rotate.
pub fn rotate() -> Result<(), String> {
    let mut sink = SINK.lock();
    let Some(path) = sink.path.clone() else {
        return Ok(());
    };
    let to = rotated_name(&path);
    std::fs::rename(&path, &to).map_err(|e| format!("Failed to rename {}: {e}", path.display()))?;
    sink.file = Some(open(&path, true).map_err(|e| e.to_string())?);
    Ok(())
}

/// Marks the end of start-up: later warnings are no longer `startupWarnings`.
pub fn started() {
    STARTED.store(true, Ordering::Relaxed);
}

/// `getLog: "global"`: the most recent lines, oldest first, and how many were ever written.
pub fn recent() -> (Vec<String>, u64) {
    let sink = SINK.lock();
    (
        sink.recent.iter().cloned().collect(),
        TOTAL_LINES.load(Ordering::Relaxed),
    )
}

/// `getLog: "startupWarnings"`.
pub fn startup_warnings() -> Vec<String> {
    SINK.lock().startup_warnings.clone()
}

pub fn now_iso() -> String {
    let now = bson::DateTime::now();
    now.try_to_rfc3339_string().unwrap_or_default()
}

/// Writes one line. `s` is the severity (`I`, `W`, `E`, `F`), `c` the component.
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
    let text = line.to_string();
    TOTAL_LINES.fetch_add(1, Ordering::Relaxed);
    let mut sink = SINK.lock();
    if sink.recent.len() == RING_LINES {
        sink.recent.pop_front();
    }
    sink.recent.push_back(text.clone());
    if s == "W" && !STARTED.load(Ordering::Relaxed) {
        sink.startup_warnings.push(text.clone());
    }
    match sink.file.as_mut() {
        Some(f) => {
            let _ = writeln!(f, "{text}");
        }
        None => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
        }
    }
}

pub fn info(c: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
    log("I", c, id, ctx, msg, attr);
}

pub fn warn(c: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
    log("W", c, id, ctx, msg, attr);
}
