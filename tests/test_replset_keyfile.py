"""Internal authentication (`--keyFile`): members holding the same key form a set, clients
must authenticate (a key file turns authorization on), the localhost exception initiates the
set and creates the first user, `__system@local` authenticates with the key, and a member
started with another key never joins.

Every wait is bounded; only this test's own processes are signalled (through the harness)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure, WriteConcernError

from nidus_harness import ReplicaSet, find_binary, free_port, wait_until

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}
KEY = "c2VjcmV0IGtleSBmb3IgdGVzdHM="
OTHER_KEY = "YW5vdGhlciBrZXkgZW50aXJlbHk="


def key_file(dir: Path, name: str, content: str, mode: int = 0o600) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    path.write_text(content)
    path.chmod(mode)
    return path


def keyed_set(keys: list[Path]) -> ReplicaSet:
    r = ReplicaSet(len(keys))
    for m, k in zip(r.members, keys):
        m.extra_args += ["--keyFile", str(k)]
    return r


def stop(r: ReplicaSet) -> None:
    r.stop()
    for m in r.members:
        assert m.panics() == [], m.log_tail()


def test_members_with_the_key_form_a_set_and_clients_must_authenticate(tmp_path):
    # Whitespace in a key file is ignored, as mongod ignores it.
    key = key_file(tmp_path, "key", KEY[:10] + "\n  " + KEY[10:] + "\n")
    r = keyed_set([key] * 3).start()
    try:
        # The localhost exception: initiate, then create the first user, before any user exists.
        r.initiate(priorities=[2, 1, 1], settings=SETTINGS)
        primary = r.members[0]
        r.wait_for_state(primary, "PRIMARY", timeout=60)
        with primary.client() as c:
            c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
            for read in (lambda: c.test.k.find_one(), lambda: c.local.oplog.rs.find_one()):
                with pytest.raises(OperationFailure) as e:
                    read()
                assert e.value.code == 13, e.value.details
            with pytest.raises(OperationFailure) as e:
                c.admin.command("replSetGetStatus")
            assert e.value.code == 13

        # A w:3 write is acknowledged only when both secondaries have it: the members talk.
        with MongoClient(r.uri(), username="admin", password="pw", serverSelectionTimeoutMS=20000) as c:
            coll = c.test.get_collection("k", write_concern=WriteConcern(w=3, wtimeout=30000))
            coll.insert_one({"_id": 1, "v": "replicated"})
            # The status shows each member as its last heartbeat found it (every 500 ms here):
            # one missed under load shows as "(not reachable/healthy)" until the next succeeds.
            want = ["PRIMARY", "SECONDARY", "SECONDARY"]
            states = lambda: sorted(m["stateStr"] for m in c.admin.command("replSetGetStatus")["members"])  # noqa: E731
            assert wait_until(lambda: states() == want, 15, "every member seen healthy")
        for m in r.members:
            with m.client(username="admin", password="pw") as c:
                assert c.test.k.find_one({"_id": 1}) == {"_id": 1, "v": "replicated"}

        # __system@local authenticates with the key, with either SCRAM mechanism, and may
        # read the oplog; the wrong key is refused.
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-1"):
            with primary.client(username="__system", password=KEY, authSource="local",
                                authMechanism=mech) as c:
                entry = c.local.oplog.rs.find_one({"ns": "test.k", "op": "i"})
                assert entry["o"] == {"_id": 1, "v": "replicated"}
        with primary.client(username="__system", password=OTHER_KEY, authSource="local",
                            authMechanism="SCRAM-SHA-256") as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("ping")
            assert e.value.code == 18
        # A file-copy initial sync's backup commands are internal: a root user is refused,
        # __system reads the checkpoint's files in chunks.
        with primary.client(username="admin", password="pw") as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("nidusBackupOpen", 1)
            assert e.value.code == 13
        with primary.client(username="__system", password=KEY, authSource="local") as c:
            opened = c.admin.command("nidusBackupOpen", 1)
            names = [f["filename"] for f in opened["files"]]
            assert "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)
            bid = opened["backupId"]
            chunk = c.admin.command("nidusBackupRead", bid, filename="CURRENT", offset=0, length=4)
            assert chunk["data"] == b"MANI" and chunk["eof"] is False
            rest = c.admin.command("nidusBackupRead", bid, filename="CURRENT", offset=4, length=1 << 30)
            assert rest["eof"] is True and (chunk["data"] + rest["data"]).startswith(b"MANIFEST-")
            for bad, code in (({"filename": "../mongod.lock"}, 2), ({"filename": 5}, 14),
                              ({"filename": "CURRENT", "offset": -1}, 2)):
                args = {"filename": "CURRENT", "offset": 0, "length": 10, **bad}
                with pytest.raises(OperationFailure) as e:
                    c.admin.command("nidusBackupRead", bid, **args)
                assert e.value.code == code, (bad, e.value.details)
            c.admin.command("nidusBackupClose", bid)
            with pytest.raises(OperationFailure) as e:
                c.admin.command("nidusBackupRead", bid, filename="CURRENT", offset=0, length=10)
            assert e.value.code == 43
                # Only on `local`: there is no __system user in `admin`.
        with primary.client(username="__system", password=KEY, authSource="admin") as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("ping")
            assert e.value.code == 18
    finally:
        stop(r)


def test_member_with_another_key_never_joins(tmp_path):
    good = key_file(tmp_path, "key", KEY)
    bad = key_file(tmp_path, "other", OTHER_KEY)
    r = keyed_set([good, good, bad]).start()
    try:
        r.initiate(priorities=[2, 1, 0], settings=SETTINGS)
        # Member 0 (highest priority) ends up primary, possibly after a takeover.
        primary = r.members[0]
        r.wait_for_state(primary, "PRIMARY", timeout=60)
        r.wait_for_state(r.members[1], "SECONDARY", timeout=60)
        with primary.client() as c:
            c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
        with primary.client(username="admin", password="pw") as c:
            coll = c.test.get_collection("k", write_concern=WriteConcern(w=3, wtimeout=3000))
            with pytest.raises(WriteConcernError) as e:
                coll.insert_one({"_id": 1})
            assert e.value.code == 64
            # The write itself is kept, as MongoDB keeps it.
            assert c.test.k.find_one({"_id": 1}) == {"_id": 1}

            def outsider():
                members = c.admin.command("replSetGetStatus")["members"]
                return next(m for m in members if m["_id"] == 2)

            # Its heartbeats fail authentication: the set sees it as down.
            assert wait_until(lambda: outsider()["health"] == 0, 20, "the outsider reported down")
            assert outsider()["stateStr"] != "SECONDARY"
        # It never received the set's configuration nor its data.
        hello = r.hello(r.members[2])
        assert hello is not None and r.host(r.members[0]) not in hello.get("hosts", [])
        with r.members[2].client(username="__system", password=OTHER_KEY, authSource="local") as c:
            assert c.test.k.find_one({"_id": 1}) is None
    finally:
        stop(r)


@pytest.mark.parametrize(
    "content, mode, message",
    [
        (KEY, 0o644, "are too open"),
        ("abc", 0o600, "has length 3, must be between 6 and 1024 chars"),
        ("abc-def", 0o600, "invalid char in key file"),
    ],
)
def test_bad_key_files_stop_the_server_at_startup(tmp_path, content, mode, message):
    key = key_file(tmp_path, "key", content, mode)
    argv = [str(find_binary()), "--port", str(free_port()), "--bind_ip", "127.0.0.1",
            "--dbpath", str(tmp_path / "db"), "--replSet", "rs0", "--keyFile", str(key)]
    (tmp_path / "db").mkdir()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
