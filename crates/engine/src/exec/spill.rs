//! Sorted runs on disk for a blocking `SORT` over its memory limit when the query allows disk
//! use (MongoDB's external sorter): each run is a temporary file of records in sort order,
//! read back one record at a time while the runs are merged. A run's file is removed when the
//! run is dropped.
//!
//! A record is the record id (u64, `NO_RID` for none), the lengths of the sort key and of the
//! document (u32 each), the key's bytes (empty when the writer keeps none), then the
//! document's: a SORT keeps each result's key so that merging does not compute it again.

use bson::RawDocumentBuf;
use nidus_common::{Error, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Record ids are written as-is; this one stands for "no record id".
const NO_RID: u64 = u64::MAX;
/// A record's fixed part: record id, key length, document length.
const HEAD_LEN: usize = 16;
/// Bytes read or written per system call.
const IO_BUFFER: usize = 64 * 1024;

pub struct SpillRun {
    path: PathBuf,
    reader: BufReader<File>,
    /// Bytes the run holds on disk (`spilledDataStorageSize`).
    pub bytes: u64,
}

fn io(e: std::io::Error) -> Error {
    Error::internal(format!("sort spill file: {e}"))
}

/// A file name unique within the process.
fn run_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("extsort-{}-{n}", std::process::id()))
}

/// A run being written a few records at a time (`$setWindowFields` appends a partition's
/// documents to one file as it spills them); `finish` turns it into a readable run.
pub struct SpillWriter {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    /// Bytes written so far.
    pub bytes: u64,
}

impl SpillWriter {
    pub fn create(dir: &Path) -> Result<SpillWriter> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = run_path(dir);
        let out = BufWriter::with_capacity(IO_BUFFER, File::create(&path).map_err(io)?);
        Ok(SpillWriter {
            path,
            out: Some(out),
            bytes: 0,
        })
    }

    pub fn append(&mut self, rid: Option<u64>, doc: &RawDocumentBuf) -> Result<()> {
        self.append_keyed(rid, &[], doc)
    }

    /// Appends a record with its sort key (read back by `SpillRun::next_keyed`).
    pub fn append_keyed(
        &mut self,
        rid: Option<u64>,
        key: &[u8],
        doc: &RawDocumentBuf,
    ) -> Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Err(Error::internal("spill file already finished"));
        };
        let data = doc.as_bytes();
        let len =
            |n: usize| u32::try_from(n).map_err(|_| Error::internal("sort spill record too large"));
        let mut head = [0u8; HEAD_LEN];
        head[..8].copy_from_slice(&rid.unwrap_or(NO_RID).to_le_bytes());
        head[8..12].copy_from_slice(&len(key.len())?.to_le_bytes());
        head[12..].copy_from_slice(&len(data.len())?.to_le_bytes());
        out.write_all(&head).map_err(io)?;
        out.write_all(key).map_err(io)?;
        out.write_all(data).map_err(io)?;
        self.bytes += (HEAD_LEN + key.len() + data.len()) as u64;
        Ok(())
    }

    pub fn finish(mut self) -> Result<SpillRun> {
        if let Some(mut out) = self.out.take() {
            out.flush().map_err(io)?;
        }
        let path = std::mem::take(&mut self.path);
        let reader = BufReader::with_capacity(IO_BUFFER, File::open(&path).map_err(io)?);
        Ok(SpillRun {
            path,
            reader,
            bytes: self.bytes,
        })
    }
}

impl Drop for SpillWriter {
    fn drop(&mut self) {
        // Unfinished (an error on the way): the file goes; finished: the run owns it.
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl SpillRun {
    /// Writes `(record id, sort key, document)` records, already in sort order, as one run
    /// in `dir`.
    pub fn write<'a>(
        dir: &Path,
        items: impl Iterator<Item = (Option<u64>, &'a [u8], &'a RawDocumentBuf)>,
    ) -> Result<SpillRun> {
        let mut w = SpillWriter::create(dir)?;
        for (rid, key, doc) in items {
            w.append_keyed(rid, key, doc)?;
        }
        w.finish()
    }

    /// The next record of the run, or None at its end.
    pub fn next(&mut self) -> Result<Option<(Option<u64>, RawDocumentBuf)>> {
        self.next_keyed(&mut Vec::new())
    }

    /// The next record of the run with its sort key (into `key`, replacing what it held).
    pub fn next_keyed(
        &mut self,
        key: &mut Vec<u8>,
    ) -> Result<Option<(Option<u64>, RawDocumentBuf)>> {
        let mut head = [0u8; HEAD_LEN];
        match self.reader.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io(e)),
        }
        let rid = u64::from_le_bytes(head[..8].try_into().unwrap_or([0; 8]));
        let key_len = u32::from_le_bytes(head[8..12].try_into().unwrap_or([0; 4])) as usize;
        let len = u32::from_le_bytes(head[12..].try_into().unwrap_or([0; 4])) as usize;
        key.clear();
        key.resize(key_len, 0);
        self.reader.read_exact(key).map_err(io)?;
        let mut data = vec![0u8; len];
        self.reader.read_exact(&mut data).map_err(io)?;
        let doc = RawDocumentBuf::from_bytes(data).map_err(|e| Error::internal(e.to_string()))?;
        Ok(Some(((rid != NO_RID).then_some(rid), doc)))
    }
}

impl Drop for SpillRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The sorted runs one pipeline stage spilled, with the counts its explain reports.
#[derive(Default)]
pub struct SpilledRuns {
    pub runs: Vec<SpillRun>,
    spills: u64,
    bytes: u64,
    records: u64,
}

impl SpilledRuns {
    /// Writes `docs`, already in sort order, as one more run in `dir`.
    pub fn write(
        &mut self,
        dir: &Path,
        docs: impl IntoIterator<Item = Result<bson::Document>>,
    ) -> Result<()> {
        let mut w = SpillWriter::create(dir)?;
        let mut n = 0u64;
        for d in docs {
            let raw = nidus_common::encode::document_to_raw(&d?)
                .map_err(|e| Error::internal(e.to_string()))?;
            w.append(None, &raw)?;
            n += 1;
        }
        let run = w.finish()?;
        self.spills += 1;
        self.records += n;
        self.bytes += run.bytes;
        self.runs.push(run);
        Ok(())
    }

    /// Appends another spiller's runs after this one's, with its counts.
    pub fn extend(&mut self, later: SpilledRuns) {
        self.runs.extend(later.runs);
        self.spills += later.spills;
        self.bytes += later.bytes;
        self.records += later.records;
    }

    /// `usedDisk`, `spills`, `spilledDataStorageSize` and `spilledRecords` as explain prints
    /// them (counted as written, so taking the runs to merge them changes nothing).
    pub fn stats(&self) -> bson::Document {
        bson::doc! {
            "usedDisk": self.spills > 0,
            "spills": self.spills as i64,
            "spilledDataStorageSize": self.bytes as i64,
            "spilledRecords": self.records as i64,
        }
    }
}
