//! Group commit: concurrent writers that need a synced WAL share one `fsync`.

use nidus_storage::KvEngine;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct GroupCommit {
    /// Tickets are taken after a commit; a sync covers every ticket issued before it began.
    issued: AtomicU64,
    synced: Mutex<u64>,
    syncs: AtomicU64,
}

impl GroupCommit {
    /// Returns once everything this thread committed before the call is durable.
    pub fn sync(&self, kv: &dyn KvEngine) -> nidus_storage::StorageResult<()> {
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut synced = self.synced.lock();
        if *synced >= ticket {
            return Ok(());
        }
        let covered = self.issued.load(Ordering::SeqCst);
        kv.sync_wal()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        *synced = covered;
        Ok(())
    }

    /// Number of WAL syncs performed (for `serverStatus`).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}
