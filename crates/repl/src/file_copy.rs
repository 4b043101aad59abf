//! File-copy based initial sync (MongoDB Enterprise's and Percona's
//! `initialSyncMethod: "fileCopyBased"`).
//!
//! The sync source opens a backup (`nidusBackupOpen`, MongoDB's `$backupCursor`): it notes its
//! oplog visibility point (every entry at or before it is committed, so in the copy) and term,
//! then makes a checkpoint of its store (`KvEngine::checkpoint`, RocksDB's checkpoint) under
//! `<dbpath>/nidus-backups/<id>`, and lists its files. The joining member fetches each file in
//! chunks (`nidusBackupRead`, at most [`MAX_CHUNK`] bytes a request, written to disk as they
//! come) into `<dbpath>/.initialsync`, closes the backup (`nidusBackupClose`, which deletes the
//! checkpoint), writes a marker with the source, the visibility point (the begin-applying
//! time) and the term, and restarts its own process (the same binary and arguments), since its
//! store is open.
//!
//! At start-up, before the store opens ([`install_pending`]): the copied store takes this
//! member's own replication state in place of the source's (everything under the `raft\0`
//! keys: Raft identity, hard state, log, snapshot, configuration, the pending initial sync),
//! plus the marker (`LogStore::file_copy_state`); then the copied files replace the member's
//! (`nidus_storage_rocks::install_checkpoint`). Each step is redone after a crash: a
//! download without its marker is discarded (the sync starts again), a transplant is
//! repeated until its marker file exists, the install resumes.
//!
//! Then the initial sync's last phase runs as in the logical sync (`initial_sync`): the
//! configuration document is this member's, and the source's oplog from the begin-applying
//! time through its majority commit point past minValid is applied (idempotently: entries the
//! checkpoint holds are skipped). The copied `local.oplog.rs` is kept: it matches the data.

use crate::sync_source::SyncSource;
use crate::Coordinator;
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::Engine;
use nidus_storage::{KvEngine, StorageResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most bytes one `nidusBackupRead` returns (well under the 16 MB BSON limit).
pub const MAX_CHUNK: usize = 4 << 20;
/// A backup nobody read for this long is closed (its checkpoint deleted).
const IDLE: Duration = Duration::from_secs(600);
/// Where the joining member stages the copied files (inside its dbpath).
const STAGED_DIR: &str = ".initialsync";
/// Written last into the staged directory: the download is complete.
const MARKER: &str = "nidus-initial-sync.bson";
/// Written into the staged directory once it carries this member's replication state.
const TRANSPLANTED: &str = "nidus-member-state-kept";
/// Where a source keeps the checkpoints of open backups.
const BACKUPS_DIR: &str = "nidus-backups";
/// Set in the environment of the process a file-copy sync restarts into.
pub const RESTART_ENV: &str = "NIDUS_RESTARTED_FOR_INITIAL_SYNC";

static FILE_COPY: AtomicBool = AtomicBool::new(false);

/// `--setParameter initialSyncMethod=...` (start-up only, as MongoDB's).
pub fn set_initial_sync_method(method: &str) -> std::result::Result<(), String> {
    match method {
        "logical" => FILE_COPY.store(false, Ordering::Relaxed),
        "fileCopyBased" => FILE_COPY.store(true, Ordering::Relaxed),
        other => {
            return Err(format!(
                "Bad value for parameter \"initialSyncMethod\": Invalid initial sync method: {other}; must be \"logical\" or \"fileCopyBased\""
            ))
        }
    }
    Ok(())
}

pub(crate) fn file_copy_method() -> bool {
    FILE_COPY.load(Ordering::Relaxed)
}

/// The data directory (the engine's spill directory is `<dbpath>/_tmp`).
pub(crate) fn dbpath(engine: &Engine) -> PathBuf {
    let spill = engine.spill_dir();
    spill
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

// ------------------------------------------------------------------ the sync source's side

struct Backup {
    dir: PathBuf,
    files: Vec<(String, u64)>,
    last_used: Instant,
}

/// The backups open on this member (as the sync source of a file-copy initial sync).
#[derive(Default)]
pub(crate) struct Backups {
    open: Mutex<HashMap<i64, Backup>>,
    next: AtomicI64,
    cleaned: AtomicBool,
}

impl Backups {
    /// Closes backups idle too long; the first call also removes checkpoints left by a
    /// previous run of the process.
    fn reap(&self, root: &Path) {
        if !self.cleaned.swap(true, Ordering::SeqCst) {
            let _ = std::fs::remove_dir_all(root);
        }
        self.open.lock().retain(|_, b| {
            let keep = b.last_used.elapsed() < IDLE;
            if !keep {
                let _ = std::fs::remove_dir_all(&b.dir);
            }
            keep
        });
    }
}

fn int_arg(body: &Document, field: &str) -> Result<i64> {
    match body.get(field) {
        Some(Bson::Int32(n)) => Ok(*n as i64),
        Some(Bson::Int64(n)) => Ok(*n),
        Some(Bson::Double(f)) if f.fract() == 0.0 => Ok(*f as i64),
        Some(other) => Err(Error::new(
            ErrorCode::TypeMismatch,
            format!(
                "BSON field '{field}' is the wrong type '{}', expected types '[long, int, double]'",
                type_name(other)
            ),
        )),
        None => Err(Error::new(
            ErrorCode::Location(40414),
            format!("BSON field '{field}' is missing but a required field"),
        )),
    }
}

/// MongoDB's name of a BSON type, for type-mismatch messages.
fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        _ => "unknown",
    }
}

impl Coordinator {
    /// The internal commands a file-copy initial sync sends its source: `nidusBackupOpen`,
    /// `nidusBackupRead`, `nidusBackupClose` (see the module documentation).
    pub fn backup_command(&self, name: &str, body: &Document) -> Result<Document> {
        let root = dbpath(self.engine()).join(BACKUPS_DIR);
        self.backups.reap(&root);
        match name {
            "nidusBackupOpen" => self.backup_open(&root),
            "nidusBackupRead" => self.backup_read(body),
            "nidusBackupClose" => {
                let id = int_arg(body, name)?;
                if let Some(b) = self.backups.open.lock().remove(&id) {
                    let _ = std::fs::remove_dir_all(&b.dir);
                }
                Ok(Document::new())
            }
            _ => Err(Error::internal(format!("not a backup command: {name}"))),
        }
    }

    fn backup_open(&self, root: &Path) -> Result<Document> {
        if !self.readable_state() {
            return Err(Error::new(
                ErrorCode::NotPrimaryOrSecondary,
                "a backup needs a primary or secondary sync source",
            ));
        }
        let oplog = self
            .engine()
            .oplog()
            .cloned()
            .ok_or_else(|| Error::internal("a backup needs an oplog"))?;
        // Noted before the checkpoint: every entry up to here is committed, so copied.
        let begin = oplog.visible();
        let term = self.view().term;
        let id = self.backups.next.fetch_add(1, Ordering::SeqCst) + 1;
        std::fs::create_dir_all(root)
            .map_err(|e| Error::internal(format!("cannot create {}: {e}", root.display())))?;
        let dir = root.join(id.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        self.engine().kv().checkpoint(&dir)?;
        let mut files = Vec::new();
        let listed = std::fs::read_dir(&dir)
            .map_err(|e| Error::internal(format!("cannot list the checkpoint: {e}")))?;
        for e in listed.flatten() {
            if let Ok(m) = e.metadata() {
                if m.is_file() {
                    files.push((e.file_name().to_string_lossy().into_owned(), m.len()));
                }
            }
        }
        files.sort();
        let listed: Vec<Bson> = files
            .iter()
            .map(|(n, len)| Bson::Document(doc! { "filename": n, "fileSize": *len as i64 }))
            .collect();
        self.backups.open.lock().insert(
            id,
            Backup {
                dir,
                files,
                last_used: Instant::now(),
            },
        );
        Ok(doc! {
            "backupId": id,
            "files": listed,
            "checkpointTimestamp": begin,
            "term": term,
        })
    }

    fn backup_read(&self, body: &Document) -> Result<Document> {
        let id = int_arg(body, "nidusBackupRead")?;
        let name = match body.get("filename") {
            Some(Bson::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::new(
                    ErrorCode::TypeMismatch,
                    format!(
                        "BSON field 'filename' is the wrong type '{}', expected type 'string'",
                        type_name(other)
                    ),
                ))
            }
            None => {
                return Err(Error::new(
                    ErrorCode::Location(40414),
                    "BSON field 'filename' is missing but a required field",
                ))
            }
        };
        let offset = int_arg(body, "offset")?;
        let length = int_arg(body, "length")?;
        if offset < 0 || length <= 0 {
            return Err(Error::bad_value(
                "offset must be at least 0 and length positive",
            ));
        }
        let path = {
            let mut open = self.backups.open.lock();
            let b = open.get_mut(&id).ok_or_else(|| {
                Error::new(
                    ErrorCode::CursorNotFound,
                    format!("backup cursor id {id} not found"),
                )
            })?;
            b.last_used = Instant::now();
            // Only a file the backup listed (never a path of the client's choosing).
            if !b.files.iter().any(|(n, _)| *n == name) {
                return Err(Error::bad_value(format!(
                    "{name} is not a file of backup {id}"
                )));
            }
            b.dir.join(&name)
        };
        let want = (length as usize).min(MAX_CHUNK);
        let io = |e: std::io::Error| Error::internal(format!("reading {name}: {e}"));
        let mut f = std::fs::File::open(&path).map_err(io)?;
        let size = f.metadata().map_err(io)?.len();
        f.seek(SeekFrom::Start(offset as u64)).map_err(io)?;
        let mut data = Vec::with_capacity(want.min(size.saturating_sub(offset as u64) as usize));
        f.take(want as u64).read_to_end(&mut data).map_err(io)?;
        let eof = offset as u64 + data.len() as u64 >= size;
        Ok(doc! {
            "data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: data },
            "eof": eof,
        })
    }
}

// ------------------------------------------------------------------ the joining member's side

/// Copies the source's checkpoint into `<dbpath>/.initialsync` and marks it complete.
pub(crate) fn download(coord: &Coordinator, host: &str) -> Result<()> {
    let staged = dbpath(coord.engine()).join(STAGED_DIR);
    let io = |e: std::io::Error| Error::internal(format!("file copy initial sync: {e}"));
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::create_dir_all(&staged).map_err(io)?;
    let mut src = SyncSource::new(host);
    let opened = src.run(&doc! { "nidusBackupOpen": 1, "$db": "admin" })?;
    let id = opened.get("backupId").cloned().unwrap_or(Bson::Int64(0));
    let result = fetch_files(coord, &mut src, &opened, &id, &staged);
    let _ = src.run(&doc! { "nidusBackupClose": id, "$db": "admin" });
    result?;
    let begin = opened
        .get_timestamp("checkpointTimestamp")
        .map_err(|_| Error::internal("the backup names no checkpoint timestamp"))?;
    let term = match opened.get("term") {
        Some(Bson::Int64(t)) => *t,
        Some(Bson::Int32(t)) => *t as i64,
        _ => -1,
    };
    let marker = doc! { "source": host, "begin": begin, "term": term };
    let bytes = bson::to_vec(&marker).map_err(|e| Error::internal(e.to_string()))?;
    let mut f = std::fs::File::create(staged.join(MARKER)).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::File::open(&staged)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

fn fetch_files(
    coord: &Coordinator,
    src: &mut SyncSource,
    opened: &Document,
    id: &Bson,
    staged: &Path,
) -> Result<()> {
    let io = |e: std::io::Error| Error::internal(format!("file copy initial sync: {e}"));
    let files: Vec<(String, i64)> = opened
        .get_array("files")
        .map_err(|_| Error::internal("the backup lists no files"))?
        .iter()
        .filter_map(Bson::as_document)
        .filter_map(|f| {
            let name = f.get_str("filename").ok()?;
            // A file name only: never a path out of the staging directory.
            let plain = !name.is_empty()
                && Path::new(name).file_name().and_then(|n| n.to_str()) == Some(name);
            plain.then(|| (name.to_string(), f.get_i64("fileSize").unwrap_or(0)))
        })
        .collect();
    let total: i64 = files.iter().map(|(_, n)| n).sum();
    coord
        .initial_sync
        .update(|s| s.file_copy = Some((total, 0)));
    let pause = std::env::var("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut paused = false;
    for (name, _) in &files {
        let mut out = std::fs::File::create(staged.join(name)).map_err(io)?;
        let mut offset = 0i64;
        loop {
            crate::initial_sync::stopped(coord)?;
            let cmd = doc! {
                "nidusBackupRead": id.clone(),
                "filename": name,
                "offset": offset,
                "length": MAX_CHUNK as i64,
                "$db": "admin",
            };
            // A lost connection is opened again for a second try.
            let reply = src.run(&cmd).or_else(|_| src.run(&cmd))?;
            let data = match reply.get("data") {
                Some(Bson::Binary(b)) => &b.bytes,
                _ => return Err(Error::internal("a backup chunk without data")),
            };
            out.write_all(data).map_err(io)?;
            offset += data.len() as i64;
            let n = data.len() as i64;
            coord.initial_sync.update(|s| {
                if let Some((_, copied)) = s.file_copy.as_mut() {
                    *copied += n;
                }
            });
            if reply.get_bool("eof").unwrap_or(true) || data.is_empty() {
                break;
            }
        }
        out.sync_all().map_err(io)?;
        // A test hook (as the logical sync's): holds the copy after its first file with
        // data.
        if let (Some(ms), false, true) = (pause, paused, offset > 0) {
            paused = true;
            std::thread::sleep(Duration::from_millis(ms.min(60_000)));
        }
    }
    Ok(())
}

/// Restarts this process (same binary, same arguments) so it opens the copied files; returns
/// only when that fails.
pub(crate) fn restart(engine: &Engine) -> Error {
    use std::os::unix::process::CommandExt;
    let _ = engine.sync();
    eprintln!("replication: restarting to install the files of the file copy initial sync");
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return Error::internal(format!("cannot restart: {e}")),
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(RESTART_ENV, "1")
        .exec();
    Error::internal(format!("cannot restart: {err}"))
}

/// The marker of a complete download: `(source, begin, term)`.
pub(crate) fn parse_marker(bytes: &[u8]) -> Option<(String, Timestamp, i64)> {
    let d = Document::from_reader(bytes).ok()?;
    Some((
        d.get_str("source").ok()?.to_string(),
        d.get_timestamp("begin").ok()?,
        d.get_i64("term").ok()?,
    ))
}

/// At start-up, before the store at `dbpath` opens: installs the files a file-copy initial
/// sync downloaded, keeping this member's replication state. `open` opens a store directory,
/// `install` replaces the store in `dbpath` by a complete one. Returns whether it installed.
pub fn install_pending(
    dbpath: &Path,
    open: &dyn Fn(&Path) -> StorageResult<Arc<dyn KvEngine>>,
    install: &dyn Fn(&Path, &Path) -> StorageResult<()>,
) -> std::result::Result<bool, String> {
    let staged = dbpath.join(STAGED_DIR);
    if !staged.is_dir() {
        return Ok(false);
    }
    let Ok(marker) = std::fs::read(staged.join(MARKER)) else {
        // An interrupted download: the initial sync (still pending) starts again.
        let _ = std::fs::remove_dir_all(&staged);
        return Ok(false);
    };
    let err = |e: &dyn std::fmt::Display| format!("installing the initial sync's files: {e}");
    if !staged.join(TRANSPLANTED).exists() {
        {
            let own = open(dbpath).map_err(|e| err(&e))?;
            let copied = open(&staged).map_err(|e| err(&e))?;
            crate::storage::transplant_member_state(own.as_ref(), copied.as_ref(), &marker)
                .map_err(|e| err(&e))?;
        }
        std::fs::File::create(staged.join(TRANSPLANTED))
            .and_then(|f| f.sync_all())
            .map_err(|e| err(&e))?;
    }
    install(dbpath, &staged).map_err(|e| err(&e))?;
    Ok(true)
}
