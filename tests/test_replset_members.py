"""Replica set membership: `replSetReconfig` (add, remove, priority/votes/hidden changes,
MongoDB's refusals, `force` on a member that lost its majority), a member added to a set
holding data catching up, and what `hello`/`replSetGetStatus`/`local.system.replset` report.

Every wait is bounded; only this test's own processes are signalled (through the harness)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from pymongo import WriteConcern
from pymongo.errors import NotPrimaryError, OperationFailure

import wire
from nidus_harness import ReplicaSet, wait_until

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}



def admin(m, cmd: dict):
    with m.client(serverSelectionTimeoutMS=5000) as c:
        return c.admin.command(cmd)


def get_config(m) -> dict:
    return admin(m, {"replSetGetConfig": 1})["config"]


def reconfig(m, conf: dict, **kw):
    return admin(m, {"replSetReconfig": conf, **kw})


def refused(m, conf: dict, **kw) -> dict:
    """The error reply (pymongo raises NotPrimaryError for 10107, OperationFailure else)."""
    with pytest.raises((OperationFailure, NotPrimaryError)) as e:
        reconfig(m, conf, **kw)
    return e.value.details


def db_hash(m, db: str = "test") -> dict:
    with m.client(serverSelectionTimeoutMS=5000) as c:
        h = c[db].command("dbHash")
    return {"md5": h["md5"], "collections": h["collections"]}


def two_of_three(rs: ReplicaSet):
    """A set of the first two processes (priorities 2 and 1); the third is started but not
    a member."""
    conf = rs.config(settings=SETTINGS)
    conf["members"] = conf["members"][:2]
    conf["members"][0]["priority"] = 2
    with rs.members[0].client() as c:
        c.admin.command("replSetInitiate", conf)
    p = wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 30,
                   "member 0 primary")
    assert p
    return rs.members[0]


def test_reconfig_refusals_follow_mongodb(rs):
    primary = two_of_three(rs)
    secondary = rs.members[1]
    rs.wait_for_state(secondary, "SECONDARY", 30)
    conf = get_config(primary)
    assert conf["version"] == 1
    cases = [
        # (change to the configuration, code, message fragment)
        (lambda c: c, 103, "New replica set configuration version and term must be greater than old, but {version: 1, term: "),
        (lambda c: {**c, "version": 2, "_id": "other"}, 103, "differ in replica set name; old was rs0, and new is other"),
        (lambda c: {**c, "version": 2, "members": [c["members"][0], {**c["members"][1], "_id": 5}]},
         103, "but in the new configuration the _id field is 5 and in the old configuration it is 1"),
        # `newlyAdded` is the server's to set (a configuration copied from
        # local.system.replset carries it). The single voting change rule is checked in
        # membership's unit tests: here every new voter is newly added, so no vote changes.
        (lambda c: {**c, "version": 2, "members": [c["members"][0], {"_id": 3, "host": "127.0.0.1:1", "newlyAdded": True}]},
         93, "Cannot provide newlyAdded field to member config during reconfig."),
        (lambda c: {**c, "version": 2, "members": c["members"][1:]}, 74, "maps to this node"),
        (lambda c: {**c, "version": 2, "members": [{**c["members"][0], "priority": 0}, c["members"][1]]},
         104, "is not electable under the new configuration with {version: 2, term: "),
        (lambda c: {**c, "version": 2, "members": [{**c["members"][0], "hidden": True}, c["members"][1]]},
         93, "priority must be 0 when hidden=true"),
        (lambda c: {**c, "version": 2, "members": [c["members"][0], {**c["members"][1], "secondaryDelaySecs": 5}]},
         93, "priority must be 0 when secondaryDelaySecs is used"),
        (lambda c: {**c, "version": 2, "members": [c["members"][0], {**c["members"][1], "buildIndexes": False, "priority": 0}]},
         103, "differ in the setting of the buildIndexes field"),
    ]
    for change, code, fragment in cases:
        e = refused(primary, change(dict(conf)))
        assert e["code"] == code, (fragment, e)
        assert fragment in e["errmsg"], e
    # Only the primary reconfigures.
    e = refused(secondary, {**conf, "version": 2})
    assert e["code"] == 10107
    assert e["errmsg"] == ("New config is rejected :: caused by :: replSetReconfig should "
                                   "only be run on a writable PRIMARY. Current state SECONDARY;")
    # Nothing changed.
    assert get_config(primary)["version"] == 1
    assert get_config(secondary)["version"] == 1


def test_add_member_to_set_with_data_then_change_and_remove_it(rs):
    primary = two_of_three(rs)
    third = rs.members[2]
    with primary.client() as c:
        coll = c.test.get_collection("c", write_concern=WriteConcern(w="majority"))
        coll.create_index("k")
        coll.insert_many([{"_id": i, "k": i % 7, "s": "x" * (i % 13)} for i in range(500)])
        coll.update_many({"k": 3}, {"$set": {"u": True}})
        coll.delete_many({"k": 5})
        c.test.other.insert_one({"_id": "a"})
    before = get_config(primary)
    # rs.add(): the next _id, version + 1.
    conf = dict(before)
    conf["version"] += 1
    conf["members"] = before["members"] + [{"_id": 2, "host": rs.host(third)}]
    assert reconfig(primary, conf)["ok"] == 1
    after = get_config(primary)
    assert after["version"] >= 2
    assert after["settings"]["replicaSetId"] == before["settings"]["replicaSetId"]
    assert [m["host"] for m in after["members"]] == [rs.host(m) for m in rs.members]
    rs.wait_for_state(third, "SECONDARY", 60)
    # Version 3: the primary's own reconfiguration once the new member (newly added) is past
    # its initial sync.
    hosts = sorted(rs.host(m) for m in rs.members)
    for m in rs.members:
        wait_until(lambda m=m: (h := rs.hello(m)) and h.get("setVersion") == 3
                   and sorted(h["hosts"]) == hosts, 20, f"{rs.host(m)} reports version 3")
    # The new member holds the same data (initial sync) and keeps applying.
    with primary.client() as c:
        c.test.c.insert_one({"_id": "late"})
        c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20000)).insert_one({"_id": "w3"})
    want = db_hash(primary)
    wait_until(lambda: db_hash(third) == want, 20, "dbHash equal on the new member")
    assert db_hash(rs.members[1]) == want
    with third.client(readPreference="secondaryPreferred") as c:
        assert c.test.c.count_documents({}) == 500 - 71 + 2
        assert [i["name"] for i in c.test.c.list_indexes()] == ["_id_", "k_1"]
    st = admin(primary, {"replSetGetStatus": 1})
    assert st["votingMembersCount"] == 3 and st["majorityVoteCount"] == 2
    assert {m["name"]: m["configVersion"] for m in st["members"]}[rs.host(third)] == 3
    # local.system.replset holds the configuration in force on every member.
    for m in rs.members:
        wait_until(lambda m=m: m.client().local["system.replset"].find_one()["version"] == 3, 10,
                   f"{rs.host(m)} local.system.replset version 3")

    # Hidden, priority 0, then non-voting (a Raft learner).
    conf = get_config(primary)
    conf["version"] += 1
    conf["members"][2].update({"priority": 0, "hidden": True})
    reconfig(primary, conf)
    h = rs.hello(primary)
    assert h["setVersion"] == 4 and rs.host(third) not in h["hosts"] + h.get("passives", [])
    wait_until(lambda: (rs.hello(third) or {}).get("hidden") is True, 10, "third reports hidden")
    conf = get_config(primary)
    conf["version"] += 1
    conf["members"][2].update({"hidden": False, "votes": 0})
    reconfig(primary, conf)
    h = rs.hello(primary)
    assert h["passives"] == [rs.host(third)] and rs.host(third) not in h["hosts"]
    st = admin(primary, {"replSetGetStatus": 1})
    assert st["votingMembersCount"] == 2 and st["majorityVoteCount"] == 2
    with primary.client() as c:
        c.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one({"_id": "learner"})
    wait_until(lambda: db_hash(third) == db_hash(primary), 20, "the learner applies")

    # rs.remove(): the member leaves the configuration.
    conf = get_config(primary)
    conf["version"] += 1
    conf["members"] = conf["members"][:2]
    reconfig(primary, conf)
    h = rs.hello(primary)
    assert h["setVersion"] == 6 and sorted(h["hosts"]) == sorted(rs.host(m) for m in rs.members[:2])
    assert "passives" not in h
    assert len(admin(primary, {"replSetGetStatus": 1})["members"]) == 2
    with primary.client() as c:
        c.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one({"_id": "after-remove"})
        assert c.local["system.replset"].find_one()["version"] == 6
    # The removed member learns it from the set's replies: REMOVED, no status.
    wait_until(lambda: (h := rs.hello(third)) is not None and h["secondary"] is False, 20,
               "the removed member leaves SECONDARY")
    with pytest.raises(OperationFailure) as e:
        admin(third, {"replSetGetStatus": 1})
    assert e.value.code == 93
    assert e.value.details["errmsg"] == "Our replica set config is invalid or we are not a member of it"


def test_force_reconfig_on_member_that_lost_its_majority(rs):
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    primary = rs.wait_for_primary(30)
    assert primary is rs.members[0]
    with primary.client() as c:
        c.test.c.with_options(write_concern=WriteConcern(w=3, wtimeout=20000)).insert_one({"_id": 1})
    survivor = rs.members[2]
    rs.members[0].kill()
    rs.members[1].kill()
    rs.wait_for_state(survivor, "SECONDARY", 30)
    conf = get_config(survivor)
    old_version = conf["version"]
    conf["members"] = [m for m in conf["members"] if m["host"] == rs.host(survivor)]
    conf["members"][0]["priority"] = 1
    conf["version"] = old_version + 1
    e = refused(survivor, conf)
    assert e["code"] == 10107
    assert reconfig(survivor, conf, force=True)["ok"] == 1
    new = get_config(survivor)
    assert new["version"] > old_version + 10000
    assert [m["host"] for m in new["members"]] == [rs.host(survivor)]
    wait_until(lambda: (rs.hello(survivor) or {}).get("isWritablePrimary"), 30, "survivor primary")
    with survivor.client() as c:
        c.test.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=10000)).insert_one({"_id": 2})
        assert sorted(d["_id"] for d in c.test.c.find()) == [1, 2]
        assert c.local["system.replset"].find_one()["version"] == new["version"]
    h = rs.hello(survivor)
    assert h["hosts"] == [rs.host(survivor)] and h["setVersion"] == new["version"]
    # The forced configuration survives a restart.
    survivor.stop()
    survivor.restart()
    wait_until(lambda: (rs.hello(survivor) or {}).get("isWritablePrimary"), 30, "survivor primary again")
    assert get_config(survivor)["version"] == new["version"]


def find_mongosh() -> str:
    for cand in (os.environ.get("MONGOSH"), str(Path(__file__).parent / ".node" / "bin" / "mongosh"),
                 shutil.which("mongosh")):
        if cand and os.path.exists(cand):
            return cand
    pytest.skip("mongosh is not installed (source scripts/lib.sh; ensure_mongosh)")


def shell(m, script: str) -> str:
    r = subprocess.run([find_mongosh(), "--quiet", "--norc",
                        f"mongodb://127.0.0.1:{m.port}/?directConnection=true", "--eval", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_mongosh_rs_helpers(rs):
    primary = two_of_three(rs)
    third = rs.host(rs.members[2])
    with primary.client() as c:
        c.test.c.with_options(write_concern=WriteConcern(w="majority")).insert_many(
            [{"x": i} for i in range(10)])
    out = shell(primary, f'rs.add("{third}").ok + " " + rs.conf().version + " " + '
                         'JSON.stringify(rs.conf().members.map(m => [m._id, m.host]))')
    hosts = [[i, rs.host(m)] for i, m in enumerate(rs.members)]
    assert out.strip() == f"1 2 {json.dumps(hosts, separators=(',', ':'))}"
    rs.wait_for_state(rs.members[2], "SECONDARY", 60)
    wait_until(lambda: len([x for x in admin(primary, {"replSetGetStatus": 1})["members"]
                            if x["stateStr"] == "SECONDARY" and x["health"] == 1]) == 2, 20,
               "two healthy secondaries")
    # The member added votes once the primary's reconfiguration (version 3) clears its
    # newlyAdded mark.
    wait_until(lambda: (rs.hello(primary) or {}).get("setVersion") == 3, 20, "version 3")
    # What mongosh prints against MongoDB: the oplog window and each secondary's lag.
    out = shell(primary, "rs.printReplicationInfo()")
    for label in ("actual oplog size", "configured oplog size", "log length start to end",
                  "oplog first event time", "oplog last event time", "now"):
        assert f"\n{label}\n" in "\n" + out, out
    assert "'990 MB'" in out
    out = shell(primary, "rs.printSecondaryReplicationInfo()")
    sources = [l.split("source: ")[1] for l in out.splitlines() if l.startswith("source: ")]
    assert sorted(sources) == sorted(rs.host(m) for m in rs.members[1:]), out
    assert out.count("syncedTo:") == 2 and out.count("behind the primary") == 2, out
    # rs.reconfig bumps the version itself; rs.remove drops the member.
    out = shell(primary, "const c = rs.conf(); c.members[1].priority = 0.5; "
                         "rs.reconfig(c).ok + ' ' + rs.conf().version + ' ' + rs.conf().members[1].priority")
    assert out.strip() == "1 4 0.5"
    out = shell(primary, f'rs.remove("{third}").ok + " " + rs.conf().members.length + " " + db.hello().setVersion')
    assert out.strip() == "1 2 5"


def test_maintenance_mode_is_recovering(rs):
    primary = two_of_three(rs)
    secondary = rs.members[1]
    rs.wait_for_state(secondary, "SECONDARY", 30)
    with primary.client() as c:
        c.test.c.with_options(write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
    e = pytest.raises(OperationFailure, admin, primary, {"replSetMaintenance": True}).value
    assert (e.code, e.details["errmsg"]) == (95, "primaries can't modify maintenance mode")
    e = pytest.raises(OperationFailure, admin, secondary, {"replSetMaintenance": False}).value
    assert (e.code, e.details["errmsg"]) == (96, "already out of maintenance mode")
    # Calls nest: two in, one out is still RECOVERING.
    admin(secondary, {"replSetMaintenance": True})
    admin(secondary, {"replSetMaintenance": True})
    admin(secondary, {"replSetMaintenance": False})
    h = rs.hello(secondary)
    assert h["secondary"] is False and h["isWritablePrimary"] is False
    assert admin(secondary, {"replSetGetStatus": 1})["myState"] == 3
    wait_until(lambda: {m["name"]: m["stateStr"] for m in admin(primary, {"replSetGetStatus": 1})["members"]}
               [rs.host(secondary)] == "RECOVERING", 10, "the primary sees RECOVERING")
    sock = wire.connect(secondary.port)
    try:
        r = wire.command(sock, {"find": "c", "$db": "test",
                                "$readPreference": {"mode": "secondaryPreferred"}})
        assert (r["ok"], r["code"], r["codeName"]) == (0.0, 13436, "NotPrimaryOrSecondary")
    finally:
        sock.close()
    admin(secondary, {"replSetMaintenance": False})
    rs.wait_for_state(secondary, "SECONDARY", 10)
    with secondary.client(readPreference="secondaryPreferred") as c:
        assert c.test.c.find_one() == {"_id": 1}


def test_delayed_secondary_applies_entries_once_they_are_old_enough(rs):
    delay = 3
    rs.initiate(priorities=[3, 2, 0], settings=SETTINGS,
                member_options=[{}, {}, {"hidden": True, "secondaryDelaySecs": delay}])
    primary = rs.wait_for_primary(30)
    delayed = rs.members[2]
    rs.wait_for_state(delayed, "SECONDARY", 30)
    h = rs.hello(delayed)
    assert h["hidden"] is True and h["secondaryDelaySecs"] == delay
    assert rs.host(delayed) not in rs.hello(primary)["hosts"]

    def on_delayed(doc_id):
        with delayed.client(readPreference="secondaryPreferred") as c:
            return c.test.c.find_one({"_id": doc_id})

    with primary.client() as c:
        coll = c.test.c.with_options(write_concern=WriteConcern(w="majority", wtimeout=20000))
        coll.insert_one({"_id": "warm"})
        wait_until(lambda: on_delayed("warm"), 30, "first entry on the delayed member")
        coll.insert_one({"_id": 1})
        written = time.monotonic()
        assert c.test.c.find_one({"_id": 1}) == {"_id": 1}
    time.sleep(1.0)
    assert on_delayed(1) is None
    wait_until(lambda: on_delayed(1), delay + 10, "the entry applied after the delay")
    assert time.monotonic() - written >= delay - 0.5
