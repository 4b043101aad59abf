use super::*;
use nidus_storage::keys;

fn open() -> (tempfile::TempDir, RocksEngine) {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = RocksEngine::open(dir.path()).expect("open");
    (dir, engine)
}

/// The keys in `[lower, upper)` as `read` sees them, in order.
fn keys_in(read: &dyn KvRead, space: Space, lower: &[u8], upper: &[u8]) -> Vec<Vec<u8>> {
    let mut c = read.cursor(space, lower, upper);
    c.seek_to_first();
    let mut out = Vec::new();
    while c.valid() {
        out.push(c.key().to_vec());
        c.next();
    }
    out
}

#[test]
fn commit_makes_writes_visible_and_snapshots_stay_stable() {
    let (_d, e) = open();
    let before = e.snapshot();
    let mut t = e.begin();
    t.put(Space::Records, b"k1", b"v1").unwrap();
    assert_eq!(
        t.get(Space::Records, b"k1").unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert_eq!(e.snapshot().get(Space::Records, b"k1").unwrap(), None);
    t.commit().unwrap();
    assert_eq!(
        e.snapshot().get(Space::Records, b"k1").unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert_eq!(before.get(Space::Records, b"k1").unwrap(), None);
}

#[test]
fn write_to_key_locked_by_open_transaction_conflicts_at_once() {
    let (_d, e) = open();
    let mut a = e.begin();
    a.put(Space::Records, b"k", b"a").unwrap();
    let mut b = e.begin();
    assert_eq!(
        b.put(Space::Records, b"k", b"b"),
        Err(StorageError::WriteConflict)
    );
    a.commit().unwrap();
}

#[test]
fn write_to_key_committed_after_snapshot_conflicts() {
    let (_d, e) = open();
    let mut b = e.begin();
    let mut a = e.begin();
    a.put(Space::Records, b"k", b"a").unwrap();
    a.commit().unwrap();
    assert_eq!(
        b.put(Space::Records, b"k", b"b"),
        Err(StorageError::WriteConflict)
    );
}

#[test]
fn cursor_respects_bounds_and_sees_own_writes() {
    let (_d, e) = open();
    let mut t = e.begin();
    for k in [b"a1", b"b1", b"b2", b"c1"] {
        t.put(Space::Indexes, k, b"").unwrap();
    }
    assert_eq!(
        keys_in(t.as_ref(), Space::Indexes, b"b", b"c"),
        vec![b"b1".to_vec(), b"b2".to_vec()]
    );
    t.commit().unwrap();
    e.sync_wal().unwrap();
}

#[test]
fn data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = RocksEngine::open(dir.path()).unwrap();
        let mut t = e.begin();
        t.put(Space::Catalog, b"c", b"x").unwrap();
        t.commit().unwrap();
        e.sync_wal().unwrap();
    }
    let e = RocksEngine::open(dir.path()).unwrap();
    assert_eq!(
        e.snapshot().get(Space::Catalog, b"c").unwrap().as_deref(),
        Some(&b"x"[..])
    );
}

#[test]
fn statistics_count_keys_read_and_bytes_written() {
    let (_d, e) = open();
    let count = |name: &str| {
        e.statistics()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c)
            .expect("ticker reported")
    };
    let written = count("rocksdb.bytes.written");
    let mut t = e.begin();
    t.put(Space::Records, b"k", &[7u8; 1000]).unwrap();
    t.commit().unwrap();
    assert!(count("rocksdb.bytes.written") >= written + 1000);
    let read = count("rocksdb.number.keys.read");
    for _ in 0..3 {
        assert!(e.snapshot().get(Space::Records, b"k").unwrap().is_some());
    }
    assert_eq!(count("rocksdb.number.keys.read"), read + 3);
}

#[test]
fn checkpoint_holds_the_data_of_its_instant_and_installs_over_another_store() {
    let src_dir = tempfile::tempdir().unwrap();
    let dst_dir = tempfile::tempdir().unwrap();
    let cp = src_dir.path().join("cp");
    {
        let src = RocksEngine::open(src_dir.path()).unwrap();
        let mut t = src.begin();
        t.put(Space::Records, b"r1", b"one").unwrap();
        t.put(Space::Indexes, b"i1", b"").unwrap();
        t.commit().unwrap();
        src.checkpoint(&cp).unwrap();
        // Later writes are not in the checkpoint.
        let mut t = src.begin();
        t.put(Space::Records, b"r2", b"two").unwrap();
        t.commit().unwrap();
        // An existing checkpoint directory is refused.
        assert!(src.checkpoint(&cp).is_err());
    }
    {
        let dst = RocksEngine::open(dst_dir.path()).unwrap();
        let mut t = dst.begin();
        t.put(Space::Records, b"old", b"x").unwrap();
        t.commit().unwrap();
        dst.sync_wal().unwrap();
    }
    std::fs::write(dst_dir.path().join("server.log"), b"kept").unwrap();
    install_checkpoint(dst_dir.path(), &cp).unwrap();
    assert!(!cp.exists());
    // A second call after a finished install has nothing to do but fails cleanly.
    assert!(install_checkpoint(dst_dir.path(), &cp).is_err());
    let dst = RocksEngine::open(dst_dir.path()).unwrap();
    let snap = dst.snapshot();
    assert_eq!(
        snap.get(Space::Records, b"r1").unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert!(snap.get(Space::Indexes, b"i1").unwrap().is_some());
    assert!(snap.get(Space::Records, b"r2").unwrap().is_none());
    assert!(snap.get(Space::Records, b"old").unwrap().is_none());
    assert_eq!(
        std::fs::read(dst_dir.path().join("server.log")).unwrap(),
        b"kept"
    );
}

#[test]
fn store_files_are_recognised_by_name() {
    for name in [
        "CURRENT",
        "LOCK",
        "000012.sst",
        "000013.log",
        "MANIFEST-000005",
        "OPTIONS-000007",
        "LOG.old.1700000000",
    ] {
        assert!(is_store_file(name), "{name}");
    }
    for name in [
        "mongod.log",
        "x.sst",
        ".log",
        "rollback",
        "nidus-initial-sync.bson",
    ] {
        assert!(!is_store_file(name), "{name}");
    }
}

/// Records of every size around the blob threshold, overwritten and deleted, read back by
/// point gets and by cursors in both directions, against a model map: while in memtables,
/// after a flush to table and blob files, and after a reopen.
#[test]
fn large_values_in_blob_files_read_back_as_written() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().expect("tempdir");
    let sizes = [
        0usize,
        1 << 10,
        (LARGE_VALUE_BYTES as usize) - 1,
        LARGE_VALUE_BYTES as usize,
        200 << 10,
        1 << 20,
    ];
    // Pseudo-random bytes (xorshift), so compression cannot shrink a value below the threshold.
    let value = |i: usize, round: u8| -> Vec<u8> {
        let len = sizes[i % sizes.len()];
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((i as u64) << 8) ^ round as u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let check = |e: &RocksEngine, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
        let snap = e.snapshot();
        for i in 0..40u64 {
            let k = keys::with_id(9, i);
            assert_eq!(
                snap.get(Space::Records, &k).expect("get"),
                model.get(&k[..]).cloned(),
                "key {i}"
            );
        }
        let mut c = snap.cursor(Space::Records, &keys::u64_be(9), &keys::prefix_end(9));
        let mut forward = Vec::new();
        c.seek_to_first();
        while c.valid() {
            forward.push((c.key().to_vec(), c.value().to_vec()));
            c.next();
        }
        c.status().expect("cursor");
        let mut backward = Vec::new();
        c.seek_to_last();
        while c.valid() {
            backward.push((c.key().to_vec(), c.value().to_vec()));
            c.prev();
        }
        backward.reverse();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(forward, want);
        assert_eq!(backward, want);
    };
    {
        let e = RocksEngine::open(dir.path()).expect("open");
        for round in 0..3u8 {
            let mut t = e.begin();
            for i in 0..40usize {
                let k = keys::with_id(9, i as u64).to_vec();
                if (i + round as usize).is_multiple_of(7) {
                    t.delete(Space::Records, &k).expect("delete");
                    model.remove(&k);
                } else {
                    let v = value(i, round);
                    t.put(Space::Records, &k, &v).expect("put");
                    model.insert(k, v);
                }
            }
            t.commit().expect("commit");
            check(&e, &model);
            // Flushed: the values now live in table and blob files.
            for space in Space::ALL {
                e.inner.db.flush_cf(e.inner.cf(space)).expect("flush");
            }
            check(&e, &model);
        }
        let blob_bytes = e
            .statistics()
            .into_iter()
            .find(|(n, _)| *n == "rocksdb.blobdb.blob.file.bytes.written")
            .map(|(_, c)| c)
            .expect("ticker reported");
        assert!(blob_bytes >= 1 << 20, "no value went to a blob file");
    }
    let e = RocksEngine::open(dir.path()).expect("reopen");
    check(&e, &model);
}

/// `put_new` writes go with the transaction as `put`'s do: read back by it (point reads and
/// cursors), invisible to others until commit, undone by a savepoint rollback and by a
/// rollback, in any column family; they take no lock.
#[test]
fn put_new_is_part_of_its_transaction_without_a_lock() {
    let (_d, e) = open();
    let mut t = e.begin();
    t.put(Space::Records, b"r1", b"tracked").unwrap();
    t.put_new(Space::Records, b"r2", b"new").unwrap();
    t.put_new(Space::Indexes, b"i1", b"").unwrap();
    assert_eq!(
        t.get(Space::Records, b"r2").unwrap().as_deref(),
        Some(&b"new"[..])
    );
    assert_eq!(
        keys_in(t.as_ref(), Space::Records, b"r", b"s"),
        vec![b"r1".to_vec(), b"r2".to_vec()]
    );
    // Another transaction can take the key's lock: put_new took none.
    let other = e.begin();
    other.get_for_update(Space::Records, b"r2").unwrap();
    other.rollback().unwrap();
    t.set_savepoint();
    t.put_new(Space::Records, b"r3", b"undone").unwrap();
    t.rollback_to_savepoint().unwrap();
    assert_eq!(e.snapshot().get(Space::Records, b"r2").unwrap(), None);
    t.commit().unwrap();
    let s = e.snapshot();
    assert_eq!(
        s.get(Space::Records, b"r2").unwrap().as_deref(),
        Some(&b"new"[..])
    );
    assert_eq!(
        s.get(Space::Indexes, b"i1").unwrap().as_deref(),
        Some(&b""[..])
    );
    assert_eq!(s.get(Space::Records, b"r3").unwrap(), None);
    let mut gone = e.begin();
    gone.put_new(Space::Records, b"r4", b"rolled back").unwrap();
    gone.rollback().unwrap();
    assert_eq!(e.snapshot().get(Space::Records, b"r4").unwrap(), None);
}

/// The WAL files in `dir`, by name, with their sizes.
fn wal_files(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| {
            let len = e.metadata().expect("metadata").len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn synced_writes_after_preallocate_wal_go_into_full_size_files_and_survive_a_reopen() {
    let (dir, e) = open();
    let key = |i: u32| format!("k{i:05}").into_bytes();
    let write = |e: &RocksEngine, range: std::ops::Range<u32>| {
        for i in range {
            let mut t = e.begin();
            t.put(Space::Records, &key(i), &[b'v'; 100]).unwrap();
            t.commit().unwrap();
            e.sync_wal().unwrap();
        }
    };
    // Written before: in the WAL file the first round fills and retires.
    write(&e, 0..10);
    let fresh = wal_files(dir.path());
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert!(fresh[0].1 < 1 << 20, "{fresh:?}");
    assert!(
        e.preallocate_wal().unwrap(),
        "the test's file system has room"
    );
    let prepared = wal_files(dir.path());
    assert_eq!(prepared.len(), RECYCLED_WAL_FILES, "{prepared:?}");
    assert!(
        prepared
            .iter()
            .all(|(_, len)| *len >= PREALLOCATED_WAL_FILE_BYTES as u64),
        "{prepared:?}"
    );
    // Synced writes land inside the current file: no file grows, none is added.
    write(&e, 10..500);
    assert_eq!(wal_files(dir.path()), prepared);
    drop(e);
    // Recovery reads the reused file's new records, not the filler or the records it held
    // before it was reused.
    let e = RocksEngine::open(dir.path()).expect("reopen");
    let snap = e.snapshot();
    let all = keys_in(&*snap, Space::Records, b"", b"\xff");
    assert_eq!(all, (0..500).map(key).collect::<Vec<_>>());
    for i in [0, 9, 10, 499] {
        assert_eq!(
            snap.get(Space::Records, &key(i)).unwrap().as_deref(),
            Some(&[b'v'; 100][..])
        );
    }
}

#[test]
fn free_space_is_that_of_the_file_system() {
    let dir = tempfile::tempdir().expect("tempdir");
    let free = available_bytes(dir.path()).expect("statvfs");
    assert!(free > 0);
    assert_eq!(available_bytes(&dir.path().join("missing")), None);
}

/// The keys in `[lower, upper)` as a cursor walking backwards from the end sees them, in
/// ascending order (so they compare with [`keys_in`]'s).
fn keys_in_reverse(read: &dyn KvRead, space: Space, lower: &[u8], upper: &[u8]) -> Vec<Vec<u8>> {
    let mut c = read.cursor(space, lower, upper);
    c.seek_to_last();
    let mut out = Vec::new();
    while c.valid() {
        out.push(c.key().to_vec());
        c.prev();
    }
    out.reverse();
    out
}

/// Every key of both spaces, seen four ways (cursor forwards and backwards, point reads of
/// every key the model ever held, in a snapshot and in a transaction), equals the model.
fn assert_reads_match(
    e: &RocksEngine,
    model: &std::collections::BTreeSet<(u8, Vec<u8>)>,
    all: &[(Space, Vec<u8>)],
    label: &str,
) {
    let spaces = [Space::Records, Space::Indexes];
    let snap = e.snapshot();
    let txn = e.begin();
    for (si, &space) in spaces.iter().enumerate() {
        let want: Vec<Vec<u8>> = model
            .iter()
            .filter(|(s, _)| *s as usize == si)
            .map(|(_, k)| k.clone())
            .collect();
        for read in [snap.as_ref() as &dyn KvRead, txn.as_ref() as &dyn KvRead] {
            let (lo, hi) = (keys::u64_be(0), keys::u64_be(u64::MAX));
            assert_eq!(
                keys_in(read, space, &lo, &hi),
                want,
                "{label}: {space:?} forwards"
            );
            assert_eq!(
                keys_in_reverse(read, space, &lo, &hi),
                want,
                "{label}: {space:?} backwards"
            );
            for (s, k) in all.iter().filter(|(s, _)| *s == space) {
                let present = model.contains(&(si as u8, k.clone()));
                assert_eq!(
                    read.get(*s, k).unwrap().is_some(),
                    present,
                    "{label}: get {space:?} {k:?}"
                );
            }
        }
    }
}

#[test]
fn delete_range_removes_exactly_its_range_from_memtables_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = RocksEngine::open(dir.path()).unwrap();
    let spaces = [Space::Records, Space::Indexes];
    let mut model = std::collections::BTreeSet::new();
    let mut all = Vec::new();
    // Ids 1..=5 in both spaces, 60 keys each: the first 30 flushed into a table file, the
    // rest left in the memtable, so a range covers keys of both.
    for half in 0..2u64 {
        let mut t = e.begin();
        for (si, &space) in spaces.iter().enumerate() {
            for id in 1..=5u64 {
                for n in half * 30..half * 30 + 30 {
                    let k = keys::with_id(id, n).to_vec();
                    t.put(space, &k, b"v").unwrap();
                    model.insert((si as u8, k.clone()));
                    all.push((space, k));
                }
            }
        }
        t.commit().unwrap();
        if half == 0 {
            for &space in &spaces {
                e.inner.db.flush_cf(e.inner.cf(space)).unwrap();
            }
        }
    }
    let before = e.snapshot();
    let before_model = model.clone();
    assert_reads_match(&e, &model, &all, "written");
    // (space, id) ranges removed: an id in one space only, the first and the last id, an id
    // removed twice (the second removes nothing) and one that never had keys.
    // A range without keys writes nothing (no tombstone for reads to pass).
    let wal_bytes = |e: &RocksEngine| e.inner.opts.get_ticker_count(Ticker::WalFileBytes);
    for (si, id) in [(0u8, 2u64), (1, 3), (0, 1), (1, 5), (0, 2), (0, 9)] {
        let had_keys = model
            .iter()
            .any(|(s, k)| *s == si && keys::read_u64(k) == Some(id));
        let written = wal_bytes(&e);
        e.delete_range(
            spaces[si as usize],
            &keys::u64_be(id),
            &keys::prefix_end(id),
        )
        .unwrap();
        assert_eq!(wal_bytes(&e) > written, had_keys, "{si}/{id} written");
        model.retain(|(s, k)| !(*s == si && keys::read_u64(k) == Some(id)));
        assert_reads_match(&e, &model, &all, &format!("after removing {si}/{id}"));
    }
    // A snapshot from before still reads every key.
    let want: Vec<Vec<u8>> = before_model
        .iter()
        .filter(|(s, _)| *s == 0)
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(
        keys_in(
            before.as_ref(),
            Space::Records,
            &keys::u64_be(0),
            &keys::u64_be(u64::MAX)
        ),
        want
    );
    drop(before);
    // A key written into a removed range afterwards is there: the removal covers only what
    // was written before it.
    let mut t = e.begin();
    let late = keys::with_id(2, 7).to_vec();
    t.put(Space::Records, &late, b"late").unwrap();
    t.commit().unwrap();
    model.insert((0, late));
    assert_reads_match(&e, &model, &all, "written again");
    // Flushed and reopened, the same.
    for &space in &spaces {
        e.inner.db.flush_cf(e.inner.cf(space)).unwrap();
    }
    drop(e);
    let e = RocksEngine::open(dir.path()).unwrap();
    assert_reads_match(&e, &model, &all, "reopened");
}

/// Memtable inserts start from the last position of their key's 8-byte id (the hint prefix
/// of the records' and indexes' spaces): keys appended, prepended, scattered and rewritten
/// under interleaved ids, and keys too short to have an id, all read back in order, both
/// directions, with their newest values.
#[test]
fn hinted_memtable_inserts_keep_every_key_in_order() {
    let (_d, e) = open();
    let mut model: std::collections::BTreeMap<(u8, Vec<u8>), Vec<u8>> = Default::default();
    let key = |id: u64, n: u64| [keys::u64_be(id).as_slice(), &keys::u64_be(n)].concat();
    let mut scatter = 12_345u64;
    let mut t = e.begin();
    for step in 0..1_200u64 {
        let n = step / 4;
        let (id, suffix) = match step % 4 {
            0 => (1, n),
            1 => (2, 10_000 - n),
            2 => {
                scatter = scatter
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                (3, scatter >> 50)
            }
            _ => (4, n % 7),
        };
        let value = step.to_be_bytes().to_vec();
        for space in [Space::Records, Space::Indexes] {
            let k = key(id, suffix);
            if id == 1 {
                t.put_new(space, &k, &value).unwrap();
            } else {
                t.put(space, &k, &value).unwrap();
            }
            model.insert((space as u8, k), value.clone());
        }
        if step % 97 == 0 {
            let short = vec![0, (step % 5) as u8];
            t.put(Space::Records, &short, &value).unwrap();
            model.insert((Space::Records as u8, short), value.clone());
        }
        if step % 50 == 49 {
            t.commit().unwrap();
            t = e.begin();
        }
    }
    t.commit().unwrap();
    let snap = e.snapshot();
    for space in [Space::Records, Space::Indexes] {
        let expected: Vec<Vec<u8>> = model
            .keys()
            .filter(|(s, _)| *s == space as u8)
            .map(|(_, k)| k.clone())
            .collect();
        let upper = [0xFFu8; 17];
        assert_eq!(keys_in(snap.as_ref(), space, b"", &upper), expected);
        assert_eq!(keys_in_reverse(snap.as_ref(), space, b"", &upper), expected);
        for k in &expected {
            assert_eq!(
                snap.get(space, k).unwrap().as_deref(),
                model.get(&(space as u8, k.clone())).map(Vec::as_slice)
            );
        }
    }
}

/// After `new_keys_unread`, `put_new` writes past the transaction's read index: its commit
/// writes every such key, a rollback or a savepoint's rollback drops them as any write, and
/// tracked writes beside them keep their locks and their place in the read index.
#[test]
fn unread_new_keys_commit_and_roll_back_like_any_write() {
    let (_d, e) = open();
    let mut t = e.begin();
    t.new_keys_unread();
    t.put_new(Space::Records, b"r1", b"one").unwrap();
    t.put(Space::Indexes, b"u1", b"tracked").unwrap();
    t.set_savepoint();
    t.put_new(Space::Records, b"r2", b"two").unwrap();
    t.put(Space::Indexes, b"u2", b"tracked").unwrap();
    // The tracked keys stay in the read index; the unread ones are past it (that is the
    // point: the built library's `put_unindexed` is the one in use).
    assert_eq!(
        t.get(Space::Indexes, b"u2").unwrap().as_deref(),
        Some(&b"tracked"[..])
    );
    #[cfg(nidus_rocks_shim)]
    assert_eq!(t.get(Space::Records, b"r1").unwrap(), None);
    // Another transaction cannot take a tracked key's lock; an unread key has none.
    let mut other = e.begin();
    assert_eq!(
        other.put(Space::Indexes, b"u1", b"x"),
        Err(StorageError::WriteConflict)
    );
    other.get_for_update(Space::Records, b"r1").unwrap();
    other.rollback().unwrap();
    t.rollback_to_savepoint().unwrap();
    t.commit().unwrap();
    let s = e.snapshot();
    assert_eq!(
        s.get(Space::Records, b"r1").unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(s.get(Space::Records, b"r2").unwrap(), None);
    assert_eq!(
        s.get(Space::Indexes, b"u1").unwrap().as_deref(),
        Some(&b"tracked"[..])
    );
    assert_eq!(s.get(Space::Indexes, b"u2").unwrap(), None);
    // A rolled-back transaction leaves nothing.
    let mut t = e.begin();
    t.new_keys_unread();
    t.put_new(Space::Records, b"r3", b"three").unwrap();
    t.rollback().unwrap();
    assert_eq!(e.snapshot().get(Space::Records, b"r3").unwrap(), None);
    // Many keys in one transaction, read back after the commit in order.
    let mut t = e.begin();
    t.new_keys_unread();
    let expected: Vec<Vec<u8>> = (0..500u64)
        .map(|i| [b"m".as_slice(), &keys::u64_be(i)].concat())
        .collect();
    for k in expected.iter().rev() {
        t.put_new(Space::Records, k, k).unwrap();
    }
    t.commit().unwrap();
    let s = e.snapshot();
    assert_eq!(keys_in(s.as_ref(), Space::Records, b"m", b"n"), expected);
    for k in &expected {
        assert_eq!(
            s.get(Space::Records, k).unwrap().as_deref(),
            Some(k.as_slice())
        );
    }
}

/// Index and record misses of point reads that each read a random index entry and then a
/// random record (an `_id` read), with the records eight times the block cache and the index
/// half of it, once the cache is warm (deterministic: one thread, a fixed sequence, each
/// space flushed once to a single table file).
#[cfg(nidus_rocks_shim)]
fn index_and_record_misses(caches: BlockCaches) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = RocksEngine::open_with_caches(dir.path(), caches).expect("open");
    let data_misses = || e.inner.opts.get_ticker_count(Ticker::BlockCacheDataMiss);
    // Values vary byte by byte so that the cache's (uncompressed) blocks are what the sizes
    // say: 4 MiB of index entries, 60 MB of records (each in one memtable, flushed once).
    let value = |i: u64, len: usize| -> Vec<u8> {
        (0..len as u64)
            .map(|j| (i.wrapping_mul(31).wrapping_add(j * 7) % 251) as u8)
            .collect()
    };
    let (index_keys, record_keys) = (32_768u64, 60_000u64);
    for (space, n, len) in [
        (Space::Indexes, index_keys, 100),
        (Space::Records, record_keys, 1000),
    ] {
        for chunk in (0..n).collect::<Vec<_>>().chunks(4096) {
            let mut t = e.begin();
            for &i in chunk {
                t.put(space, &keys::with_id(1, i), &value(i, len))
                    .expect("put");
            }
            t.commit().expect("commit");
        }
        e.inner.db.flush_cf(e.inner.cf(space)).expect("flush");
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let snap = e.snapshot();
    let mut point_reads = |reads: u32| -> (u64, u64) {
        let (mut index_misses, mut record_misses) = (0, 0);
        for _ in 0..reads {
            for (space, n, misses) in [
                (Space::Indexes, index_keys, &mut index_misses),
                (Space::Records, record_keys, &mut record_misses),
            ] {
                let before = data_misses();
                let key = keys::with_id(1, random(n));
                assert!(snap.get(space, &key).expect("get").is_some());
                *misses += data_misses() - before;
            }
        }
        (index_misses, record_misses)
    };
    // Warm: every index block has been read many times.
    point_reads(40_000);
    point_reads(20_000)
}

/// The indexes' blocks are cached ahead of the records': under `_id`-like point reads with
/// data several times the cache, the index stays cached (nearly every index read a hit)
/// where one LRU order for both keeps losing index blocks to the stream of record blocks;
/// the records miss as often either way (they do not fit). One shard, so that no shard holds
/// more of the index than its share (RocksDB spreads blocks over shards by a hash of keys
/// that differ from one open to the next).
#[cfg(nidus_rocks_shim)]
#[test]
fn index_blocks_stay_cached_under_random_point_reads() {
    const CACHE: usize = 8 << 20;
    let caches = |prioritize| BlockCaches::build(CACHE, 0, prioritize).expect("caches");
    let (index, records) = index_and_record_misses(caches(true));
    let (plain_index, plain_records) = index_and_record_misses(caches(false));
    // Measured: 0 and 765.
    assert!(index < 50, "{index} of 20,000 index reads missed");
    assert!(
        plain_index > 400,
        "{plain_index} of 20,000 index reads missed with one LRU order"
    );
    for misses in [records, plain_records] {
        assert!(misses > 15_000, "{misses} of 20,000 record reads missed");
    }
}

/// Every store carries the format mark (see `FORMAT_MARK`), which a binary that does not know
/// it cannot open past; a store of an earlier version gets it when opened.
#[test]
fn stores_carry_the_format_mark() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        // A store as an earlier version made it: the spaces' column families only.
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let names: Vec<&str> = Space::ALL.iter().map(|s| s.name()).collect();
        rocksdb::DB::open_cf(&opts, dir.path(), names).expect("open an earlier store");
    }
    let has_mark = || {
        rocksdb::DB::list_cf(&Options::default(), dir.path())
            .expect("list")
            .iter()
            .any(|name| name == FORMAT_MARK)
    };
    assert!(!has_mark());
    drop(RocksEngine::open(dir.path()).expect("open"));
    assert!(has_mark());
    // Opening without it, as an earlier binary would, fails.
    let names: Vec<&str> = Space::ALL.iter().map(|s| s.name()).collect();
    assert!(rocksdb::DB::open_cf(&Options::default(), dir.path(), names).is_err());
}
