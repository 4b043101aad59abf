"""Raft log compaction and logical initial sync: members compact their Raft log past a size
bound (`raftLogMaxSizeBytes`, set small here), so a member added later cannot replay the log
and copies the data from the primary instead (collections with their UUIDs and options,
documents, indexes, views, then the oplog from the begin time), while writes go on. A member
stopped in the middle of the clone starts it again from scratch.

Every wait is bounded; only this test's own processes are signalled (through the harness)."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from pymongo import ASCENDING, WriteConcern
from pymongo.collation import Collation
from pymongo.errors import OperationFailure, PyMongoError, WriteConcernError

from nidus_harness import ReplicaSet, wait_until

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}
LOG_BOUND = 64 * 1024


def admin(m, cmd: dict):
    with m.client(serverSelectionTimeoutMS=5000) as c:
        return c.admin.command(cmd)


def status(m) -> dict:
    return admin(m, {"replSetGetStatus": 1})


def set_log_bound(rs: ReplicaSet):
    for m in rs.members:
        admin(m, {"setParameter": 1, "raftLogMaxSizeBytes": LOG_BOUND})


def two_of_three(rs: ReplicaSet):
    """A set of the first two processes (member 0 preferred); the third is not a member."""
    conf = rs.config(settings=SETTINGS)
    conf["members"] = conf["members"][:2]
    conf["members"][0]["priority"] = 2
    with rs.members[0].client() as c:
        c.admin.command("replSetInitiate", conf)
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 30, "member 0 primary")
    rs.wait_for_state(rs.members[1], "SECONDARY", 30)
    return rs.members[0]


def load(primary):
    """Data of several kinds, enough to take the Raft log well past its bound."""
    with primary.client() as c:
        wc = WriteConcern(w="majority")
        test = c.test
        test.create_collection("validated", validator={"n": {"$type": "int"}})
        test.create_collection("capped", capped=True, size=64 * 1024, max=50)
        test.create_collection("collated", collation=Collation("en", strength=2))
        coll = test.get_collection("c", write_concern=wc)
        coll.create_index([("k", ASCENDING)])
        coll.create_index([("u", ASCENDING)], unique=True, sparse=True)
        coll.create_index([("s", ASCENDING), ("k", -1)], name="s_k", partialFilterExpression={"k": {"$gt": 2}})
        for start in range(0, 1500, 250):
            coll.insert_many([{"_id": i, "k": i % 7, "s": "x" * (i % 13) + "y" * 80} for i in range(start, start + 250)])
        coll.update_many({"k": 3}, {"$set": {"t": True}})
        coll.delete_many({"k": 5})
        coll.update_one({"_id": 1}, {"$set": {"u": "one"}})
        test.validated.insert_many([{"_id": i, "n": i} for i in range(20)])
        test.capped.insert_many([{"_id": i, "p": "z" * 200} for i in range(120)])
        test.collated.insert_many([{"_id": i, "name": n} for i, n in enumerate(["a", "B", "c"])])
        test.command("create", "by_k", viewOn="c", pipeline=[{"$match": {"k": 1}}])
        other = c.other.get_collection("docs", write_concern=wc)
        other.insert_many([{"_id": f"d{i}", "v": [i, {"w": i}]} for i in range(300)])
        other.create_index("v.w")


def load_timeseries(primary):
    """A time-series collection (its buckets collection and view) with an index of its own."""
    with primary.client() as c:
        c.test.create_collection("weather", timeseries={"timeField": "ts", "metaField": "m"})
        weather = c.test.get_collection("weather", write_concern=WriteConcern(w="majority"))
        weather.create_index([("m", ASCENDING), ("v", ASCENDING)])
        t0 = datetime.datetime(2026, 1, 1)
        weather.insert_many([{"ts": t0 + datetime.timedelta(minutes=i), "m": i % 3, "v": i} for i in range(200)])


def check_timeseries(m):
    with m.client(readPreference="secondaryPreferred") as c:
        assert c.test.weather.count_documents({}) == 200
        assert c.test.weather.count_documents({"m": 1}) == len([i for i in range(200) if i % 3 == 1])
        assert sorted(d["v"] for d in c.test.weather.find({"m": 2, "v": {"$lt": 10}})) == [2, 5, 8]
        info = c.test.command("listCollections", filter={"name": "weather"})["cursor"]["firstBatch"]
        assert [i["type"] for i in info] == ["timeseries"]


def raft_log(m) -> dict:
    return status(m)["raftLog"]


def add_third(rs: ReplicaSet, primary):
    conf = admin(primary, {"replSetGetConfig": 1})["config"]
    conf["version"] += 1
    conf["members"].append({"_id": 2, "host": rs.host(rs.members[2])})
    assert admin(primary, {"replSetReconfig": conf})["ok"] == 1


def databases(m) -> list[str]:
    with m.client() as c:
        return sorted(n for n in c.list_database_names() if n != "local")


def catalog(m, db: str) -> dict:
    """Per collection or view: type, options, UUID and index specs."""
    with m.client(readPreference="secondaryPreferred") as c:
        out = {}
        for info in c[db].list_collections():
            if (db, info["name"]) == ("config", "system.preimages"):
                continue  # each member's own, as on MongoDB (not replicated)
            entry = {"type": info["type"], "options": info.get("options"),
                     "uuid": info.get("info", {}).get("uuid")}
            if info["type"] == "collection":
                entry["indexes"] = sorted((dict(ix) for ix in c[db][info["name"]].list_indexes()),
                                          key=lambda ix: ix["name"])
            out[info["name"]] = entry
        return out


def db_hash(m, db: str) -> dict:
    with m.client(readPreference="secondaryPreferred") as c:
        h = c[db].command("dbHash")
    return {"md5": h["md5"], "collections": h["collections"]}


def assert_same_data(primary, member):
    dbs = databases(primary)
    assert dbs == databases(member)
    assert {"test", "other"} <= set(dbs)
    for db in dbs:
        wait_until(lambda db=db: db_hash(member, db) == db_hash(primary, db), 30, f"dbHash of {db} equal")
        want = catalog(primary, db)
        assert catalog(member, db) == want, db
        assert all(e["uuid"] is not None for e in want.values() if e["type"] == "collection")


class Writer:
    """Inserts into test.live until stopped (at most `limit` documents, 60 s)."""

    def __init__(self, rs: ReplicaSet, limit: int = 5000):
        self.rs, self.limit, self.done = rs, limit, threading.Event()
        self.acked = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        deadline = time.monotonic() + 60
        with self.rs.members[0].client() as c:
            coll = c.test.live
            while not self.done.is_set() and self.acked < self.limit and time.monotonic() < deadline:
                try:
                    coll.insert_one({"_id": self.acked, "pad": "p" * 100})
                    self.acked += 1
                except PyMongoError:
                    time.sleep(0.05)
                time.sleep(0.002)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(30)


def test_compacted_log_bounds_size_and_new_member_syncs_while_writes_go_on(rs):
    set_log_bound(rs)
    primary = two_of_three(rs)
    load(primary)
    load_timeseries(primary)
    # Both members compacted their log and keep it near the bound.
    for m in rs.members[:2]:
        wait_until(lambda m=m: raft_log(m)["firstIndex"] > 1000, 30, "log compacted")
        log = raft_log(m)
        assert log["sizeBytes"] <= 2 * LOG_BOUND, log
        assert log["entries"] == log["lastIndex"] - log["firstIndex"] + 1
    third = rs.members[2]
    with Writer(rs) as writer:
        wait_until(lambda: writer.acked > 50, 20, "writes running")
        add_third(rs, primary)
        rs.wait_for_state(third, "SECONDARY", 90)
        assert writer.acked < writer.limit
    assert writer.acked > 50
    # The new member copied the data: its log starts after the primary's compacted entries.
    assert "replication: initial sync done" in third.log_text()
    assert raft_log(third)["firstIndex"] > 1000
    st = status(third)
    assert st["myState"] == 2 and "initialSyncStatus" not in st
    assert_same_data(primary, third)
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.live.count_documents({}) == writer.acked
        assert c.test.c.find_one({"_id": 1})["u"] == "one"
        assert c.test.by_k.count_documents({}) == len([i for i in range(1500) if i % 7 == 1])
        assert c.test.capped.count_documents({}) == 50
    check_timeseries(third)
    # It keeps applying, and the log stays bounded on every member under more writes.
    with primary.client() as c:
        coll = c.test.get_collection("more", write_concern=WriteConcern(w=3, wtimeout=30000))
        for start in range(0, 1200, 200):
            coll.insert_many([{"_id": i, "pad": "q" * 150} for i in range(start, start + 200)])
    assert_same_data(primary, third)
    for m in rs.members:
        log = raft_log(m)
        assert log["sizeBytes"] <= 2 * LOG_BOUND, (rs.host(m), log)


def test_member_killed_mid_clone_starts_the_sync_again(rs, monkeypatch):
    set_log_bound(rs)
    primary = two_of_three(rs)
    load(primary)
    wait_until(lambda: raft_log(primary)["firstIndex"] > 1000, 30, "log compacted")
    third = rs.members[2]
    third.stop()
    # The clone waits after its first collection, long enough to be caught in the middle.
    monkeypatch.setenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS", "30000")
    third.restart()
    monkeypatch.delenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
    admin(third, {"setParameter": 1, "raftLogMaxSizeBytes": LOG_BOUND})
    add_third(rs, primary)

    def mid_clone():
        st = status(third)
        sync = st.get("initialSyncStatus")
        if st["myState"] != 5 or not sync:
            return None
        cloned = sum(v["clonedCollections"] for k, v in sync["databases"].items() if isinstance(v, dict))
        return sync if cloned >= 1 else None

    sync = wait_until(mid_clone, 30, "initial sync in the middle of the clone", tolerate=(PyMongoError,))
    assert sync["failedInitialSyncAttempts"] == 0
    assert sync["databases"]["databasesToClone"] >= 2
    assert "initialSyncOplogStart" in sync
    assert status(third)["syncSourceHost"] == rs.host(primary)
    third.kill()
    with primary.client() as c:
        c.test.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "after-kill"})
    third.restart()
    rs.wait_for_state(third, "SECONDARY", 90)
    log = third.log_text()
    assert log.count("replication: initial sync from") >= 2, third.log_tail()
    assert "replication: initial sync done" in log
    assert_same_data(primary, third)
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.c.find_one({"_id": "after-kill"}) == {"_id": "after-kill"}


def test_member_whose_log_ends_before_the_compacted_log_resyncs(rs):
    """A secondary stopped while the others compacted past its last entry cannot catch up
    from the log: it receives the snapshot and replaces its data by an initial sync."""
    set_log_bound(rs)
    primary = two_of_three(rs)
    add_third(rs, primary)
    rs.wait_for_state(rs.members[2], "SECONDARY", 30)
    # The third votes (its newlyAdded mark cleared), so the set keeps a majority without the
    # second.
    wait_until(lambda: status(primary)["votingMembersCount"] == 3, 20, "the third votes")
    behind = rs.members[1]
    with primary.client() as c:
        c.test.get_collection("pre", write_concern=WriteConcern(w=3, wtimeout=20000)).insert_many(
            [{"_id": i, "v": i} for i in range(100)])
    before = raft_log(behind)["lastIndex"]
    behind.stop()
    load(primary)
    with primary.client() as c:
        c.test.pre.delete_many({"_id": {"$lt": 50}})
    wait_until(lambda: raft_log(primary)["firstIndex"] > before + 1, 30, "primary compacted past the stopped member")
    behind.restart()
    admin(behind, {"setParameter": 1, "raftLogMaxSizeBytes": LOG_BOUND})
    # It is SECONDARY with its old data until the primary reaches it with the snapshot.
    wait_until(lambda: "replication: initial sync done" in behind.log_text(), 90, "initial sync done")
    rs.wait_for_state(behind, "SECONDARY", 30)
    assert raft_log(behind)["firstIndex"] > before
    assert_same_data(primary, behind)
    with behind.client(readPreference="secondaryPreferred") as c:
        assert sorted(d["_id"] for d in c.test.pre.find()) == list(range(50, 100))


def test_file_copy_initial_sync_installs_the_sources_files_while_writes_go_on(rs, monkeypatch):
    """`initialSyncMethod=fileCopyBased`: the new member copies a checkpoint of the primary's
    store over the wire, restarts onto it with its own replication state, applies the oplog
    written meanwhile and is SECONDARY with the same data; a restart keeps it."""
    set_log_bound(rs)
    primary = two_of_three(rs)
    load(primary)
    load_timeseries(primary)
    wait_until(lambda: raft_log(primary)["firstIndex"] > 1000, 30, "log compacted")
    third = rs.members[2]
    third.stop()
    third.extra_args += ["--setParameter", "initialSyncMethod=fileCopyBased"]
    # The copy waits after its first file, so its status can be seen.
    monkeypatch.setenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS", "3000")
    third.restart()
    monkeypatch.delenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
    admin(third, {"setParameter": 1, "raftLogMaxSizeBytes": LOG_BOUND})
    with Writer(rs) as writer:
        wait_until(lambda: writer.acked > 50, 20, "writes running")
        add_third(rs, primary)

        def copying():
            sync = status(third).get("initialSyncStatus")
            return sync if sync and sync.get("approxTotalBytesCopied", 0) > 0 else None

        sync = wait_until(copying, 30, "file copy in progress", tolerate=(PyMongoError,))
        assert sync["method"] == "fileCopyBased"
        assert 0 < sync["approxTotalBytesCopied"] <= sync["approxTotalDataSize"]
        rs.wait_for_state(third, "SECONDARY", 120)
        acked_during = writer.acked
    assert acked_during > 50
    log = third.log_text()
    assert "replication: file copy initial sync from" in log, third.log_tail()
    assert "Installed the files copied by the file copy based initial sync" in log
    assert "replication: file copy initial sync: applying the oplog" in log
    assert "replication: initial sync done" in log
    assert "replication: initial sync from" not in log  # never the logical one
    st = status(third)
    assert st["myState"] == 2 and "initialSyncStatus" not in st
    # Its own identity and configuration, not the source's.
    me = [m for m in st["members"] if m.get("self")]
    assert [m["name"] for m in me] == [rs.host(third)]
    with third.client() as c:
        conf = c.local["system.replset"].find_one()
    assert [m["host"] for m in conf["members"]] == [rs.host(m) for m in rs.members]
    assert_same_data(primary, third)
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.live.count_documents({}) == writer.acked
        assert c.test.capped.count_documents({}) == 50
    check_timeseries(third)
    # The source removed its checkpoint once the copy was done.
    assert not any((primary.dbpath / "nidus-backups").glob("*"))
    assert not (third.dbpath / ".initialsync").exists()

    # A restart keeps the data, and the member goes on applying. The primary's log is back
    # to its default bound first: with the tiny one, the writes below could have it compact
    # past the restarting member (not heard from lately) and send it a snapshot, a new
    # initial sync, before it caught up.
    for m in rs.members[:2]:
        admin(m, {"setParameter": 1, "raftLogMaxSizeBytes": 0})
    third.stop()
    third.restart()
    rs.wait_for_state(third, "SECONDARY", 60)
    with primary.client() as c:
        coll = c.test.get_collection("after", write_concern=WriteConcern(w=3, wtimeout=30000))
        coll.insert_many([{"_id": i} for i in range(100)])
    assert_same_data(primary, third)
    assert "initialSyncStatus" not in status(third)


def test_file_copy_killed_mid_copy_starts_again(rs, monkeypatch):
    """A member killed while it copies files discards the partial copy at its next start
    and copies again."""
    set_log_bound(rs)
    primary = two_of_three(rs)
    load(primary)
    wait_until(lambda: raft_log(primary)["firstIndex"] > 1000, 30, "log compacted")
    third = rs.members[2]
    third.stop()
    third.extra_args += ["--setParameter", "initialSyncMethod=fileCopyBased"]
    monkeypatch.setenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS", "30000")
    third.restart()
    monkeypatch.delenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
    admin(third, {"setParameter": 1, "raftLogMaxSizeBytes": LOG_BOUND})
    add_third(rs, primary)

    def copying():
        sync = status(third).get("initialSyncStatus")
        return sync if sync and sync.get("approxTotalBytesCopied", 0) > 0 else None

    wait_until(copying, 30, "file copy in progress", tolerate=(PyMongoError,))
    assert (third.dbpath / ".initialsync").is_dir()
    # A member in initial sync acknowledges no write, though its Raft log takes the entries:
    # `w: 3` waits out its wtimeout (the write is kept), `w: 2` is acknowledged.
    with primary.client() as c:
        with pytest.raises(WriteConcernError) as e:
            c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=1500)).insert_one(
                {"_id": "during-copy"})
        assert e.value.code == 64
        assert c.test.c.find_one({"_id": "during-copy"}) == {"_id": "during-copy"}
        c.test.get_collection("c", write_concern=WriteConcern(w=2, wtimeout=20000)).insert_one(
            {"_id": "during-copy-w2"})
    assert status(third)["myState"] == 5  # still copying: STARTUP2
    third.kill()
    with primary.client() as c:
        c.test.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "after-kill"})
    third.restart()
    rs.wait_for_state(third, "SECONDARY", 90)
    log = third.log_text()
    assert log.count("replication: file copy initial sync from") >= 2, third.log_tail()
    assert "replication: initial sync done" in log
    assert_same_data(primary, third)
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.c.find_one({"_id": "after-kill"}) == {"_id": "after-kill"}


def member_flags(m) -> list:
    conf = admin(m, {"replSetGetConfig": 1, "$_internalIncludeNewlyAdded": True})["config"]
    return [x.get("newlyAdded", False) for x in conf["members"]]


def vote_counts(m) -> tuple:
    st = status(m)
    return (st["votingMembersCount"], st["majorityVoteCount"], st["writeMajorityCount"],
            st["writableVotingMembersCount"])


def test_newly_added_member_votes_once_its_initial_sync_is_done(rs, monkeypatch):
    """MongoDB's `newlyAdded`: a voting member added by replSetReconfig neither votes nor
    counts towards `w: "majority"` until it is past initial sync; then the primary's own
    reconfiguration (version + 1) makes it a voter."""
    set_log_bound(rs)
    primary = two_of_three(rs)
    second, third = rs.members[1], rs.members[2]
    load(primary)
    wait_until(lambda: raft_log(primary)["firstIndex"] > 1000, 30, "log compacted")
    # The third's initial sync holds after its first collection.
    third.stop()
    monkeypatch.setenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS", "10000")
    third.restart()
    monkeypatch.delenv("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
    add_third(rs, primary)
    version = admin(primary, {"replSetGetConfig": 1})["config"]["version"]
    # Shown only when asked for (and in local.system.replset); not a voter yet.
    assert "newlyAdded" not in admin(primary, {"replSetGetConfig": 1})["config"]["members"][2]
    assert member_flags(primary) == [False, False, True]
    assert vote_counts(primary) == (2, 2, 2, 2)
    with primary.client() as c:
        stored = c.local["system.replset"].find_one()
    assert [m.get("newlyAdded", False) for m in stored["members"]] == [False, False, True]
    stored["version"] += 1
    with pytest.raises(OperationFailure) as e:
        admin(primary, {"replSetReconfig": stored})
    assert e.value.code == 93 and "Cannot provide newlyAdded field" in str(e.value), e.value.details
    wait_until(lambda: status(third)["myState"] == 5, 30, "third in initial sync",
               tolerate=(OperationFailure,))
    # The majority is the first two: with the second gone, a `w: "majority"` write is not
    # acknowledged though the syncing member's Raft log takes the entry.
    second.kill()
    with primary.client() as c:
        reply = c.test.command({"insert": "c", "documents": [{"_id": "no-majority"}],
                                "writeConcern": {"w": "majority", "wtimeout": 700}})
    assert reply["n"] == 1
    assert reply.get("writeConcernError", {}).get("code") in (64, 11602), reply
    assert status(third)["myState"] == 5
    second.restart()
    wait_until(lambda: (rs.hello(primary) or {}).get("isWritablePrimary"), 30, "member 0 primary")
    # Past initial sync: the primary clears the mark (a new version) and the member votes.
    rs.wait_for_state(third, "SECONDARY", 90)
    wait_until(lambda: member_flags(primary) == [False, False, False], 20, "newlyAdded cleared")
    assert admin(primary, {"replSetGetConfig": 1})["config"]["version"] == version + 1
    assert vote_counts(primary) == (3, 2, 2, 3)
    for m in rs.members:
        wait_until(lambda m=m: (rs.hello(m) or {}).get("setVersion") == version + 1, 20,
                   f"{rs.host(m)} on the new version")
    # Now the third counts: with the second gone, the first and the third are a majority.
    second.kill()
    with primary.client() as c:
        c.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": "majority-with-third"})
        want = c.test.c.count_documents({})
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.c.find_one({"_id": "majority-with-third"}) is not None
        assert c.test.c.find_one({"_id": "no-majority"}) is not None
        assert c.test.c.count_documents({}) == want


def test_initial_sync_method_is_checked_at_startup(tmp_path):
    import subprocess

    from nidus_harness import find_binary, free_port

    argv = [str(find_binary()), "--port", str(free_port()), "--bind_ip", "127.0.0.1",
            "--dbpath", str(tmp_path), "--replSet", "rs0", "--setParameter", "initialSyncMethod=copy"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "Bad value for parameter" in out and "Invalid initial sync method: copy" in out, out
