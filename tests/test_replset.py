"""Multi-member replica sets: three nidus processes on loopback ports, initiated as in seed
000's lab (priorities 3/2/1), elections on Raft, what drivers see, and failover.

Every wait is bounded; only this test's own processes are signalled (by pid, through the
harness)."""

from __future__ import annotations

import time

import pytest
from pymongo import MongoClient
from pymongo.errors import NotPrimaryError, OperationFailure, PyMongoError

import wire
from nidus_harness import ReplicaSet, member_state, wait_until

ELECTION_TIMEOUT_MS = 2000
SETTINGS = {"electionTimeoutMillis": ELECTION_TIMEOUT_MS, "heartbeatIntervalMillis": 500}



def initiated(rs: ReplicaSet, via: int = 0):
    """Initiates with priorities [3, 2, 1]; returns the priority-3 member once it is primary
    (on a loaded machine another member can win the first election, and priority takeover
    then hands the role over)."""
    rs.initiate(via=via, priorities=[3, 2, 1], settings=SETTINGS)
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 30,
               "the priority-3 member as primary")
    return rs.members[0]


def initiated_with_a_long_lease(rs: ReplicaSet):
    """Initiates with priorities [3, 2, 1] and a 60 s election timeout, so a primary that
    lost both secondaries stays primary through a test's write concern timeouts; returns it
    once both secondaries are SECONDARY."""
    rs.initiate(priorities=[3, 2, 1], settings={"electionTimeoutMillis": 60000, "heartbeatIntervalMillis": 500})
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 60,
               "the priority-3 member as primary")
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY", 60)
    return rs.members[0]


def status(m) -> dict:
    with m.client(serverSelectionTimeoutMS=2000) as c:
        return c.admin.command("replSetGetStatus")


def test_highest_priority_member_becomes_primary_even_when_another_initiates(rs):
    # Initiated through the priority-1 member: priority takeover hands the role to the
    # priority-3 member once it has caught up.
    rs.initiate(via=2, priorities=[3, 2, 1], settings=SETTINGS)
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 30,
               "priority-3 member primary")
    # The former primary learns of the takeover from the new term: every member then names
    # the priority-3 member, and no other claims the role.
    me = rs.host(rs.members[0])
    wait_until(lambda: all((h := rs.hello(m)) and h.get("primary") == me
                           and h.get("isWritablePrimary") == (m is rs.members[0])
                           for m in rs.members), 10, "every member names the priority-3 primary")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        c.test.c.insert_one({"_id": 1})
        assert c.primary == ("127.0.0.1", rs.members[0].port)
        assert c.test.c.find_one({"_id": 1}) == {"_id": 1}


def test_hello_fields_on_every_member(rs):
    primary = initiated(rs)
    assert primary is rs.members[0]
    hosts = [rs.host(m) for m in rs.members]
    # Every member names the same primary once heartbeats went round.
    for m in rs.members:
        wait_until(lambda m=m: (rs.hello(m) or {}).get("primary") == hosts[0], 10,
                   f"{rs.host(m)} knows the primary")
    seen_tv = set()
    for m in rs.members:
        h = rs.hello(m)
        assert h["setName"] == "rs0"
        assert sorted(h["hosts"]) == sorted(hosts)
        assert h["setVersion"] == 1
        assert h["me"] == rs.host(m)
        assert h["primary"] == hosts[0]
        is_primary = m is primary
        assert h["isWritablePrimary"] is is_primary
        assert h["secondary"] is (not is_primary)
        assert ("electionId" in h) is is_primary
        assert set(h["lastWrite"]) >= {"opTime", "lastWriteDate", "majorityOpTime", "majorityWriteDate"}
        tv = h["topologyVersion"]
        assert tv["counter"] > 0
        seen_tv.add(tv["processId"])
    assert len(seen_tv) == 3
    # A passive (priority 0) member is listed under passives, not hosts.
    with rs.members[0].client() as c:
        conf = c.admin.command("replSetGetConfig")["config"]
    assert conf["_id"] == "rs0" and conf["version"] == 1
    assert [m["priority"] for m in conf["members"]] == [3, 2, 1]
    assert conf["settings"]["electionTimeoutMillis"] == ELECTION_TIMEOUT_MS
    assert conf["settings"]["heartbeatIntervalMillis"] == 500
    # The configuration is persisted in local.system.replset on every member.
    for m in rs.members:
        with m.client() as c:
            stored = wait_until(lambda c=c: c.local["system.replset"].find_one(), 10,
                                "local.system.replset")
            assert stored["_id"] == "rs0"
            assert [x["host"] for x in stored["members"]] == hosts


def test_awaitable_hello_wakes_on_state_change(rs):
    primary = initiated(rs)
    secondary = rs.members[1]
    rs.wait_for_state(secondary, "SECONDARY")
    with secondary.client() as c:
        tv = c.admin.command("hello")["topologyVersion"]
    sock = wire.connect(secondary.port)
    try:
        with primary.client() as c:
            c.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
        started = time.monotonic()
        reply = wire.command(sock, {"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 10000,
                                    "$db": "admin"})
        waited = time.monotonic() - started
    finally:
        sock.close()
    assert reply["ok"] == 1.0
    assert waited < 8, waited
    assert reply["topologyVersion"]["counter"] != tv["counter"] or reply["isWritablePrimary"]


def test_streamed_hello_misses_no_change_made_between_two_replies(rs, monkeypatch):
    """A streamed hello (the drivers' monitor: exhaustAllowed) waits after each reply for a
    change from the topology version that reply told the client. A change made between the
    reply and the next wait (the server is made to pause there) is answered at once, not after
    maxAwaitTimeMS: an election's steps come that close, and a driver missing one does not
    find the new primary for 10 s."""
    initiated(rs)
    secondary = rs.members[1]
    secondary.stop()
    monkeypatch.setenv("NIDUS_TEST_HELLO_STREAM_PAUSE_MS", "1500")
    secondary.restart()
    monkeypatch.delenv("NIDUS_TEST_HELLO_STREAM_PAUSE_MS")
    rs.wait_for_state(secondary, "SECONDARY", 30)
    with secondary.client() as c:
        def settled():
            before = c.admin.command("hello")["topologyVersion"]
            time.sleep(1)
            return before if c.admin.command("hello")["topologyVersion"] == before else None

        tv = wait_until(settled, 30, "the restarted member's topology settled")
        with wire.connect(secondary.port, timeout=30) as sock:
            sock.sendall(wire.op_msg({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 10000, "$db": "admin"},
                                     flags=wire.EXHAUST_ALLOWED))
            time.sleep(0.5)  # the hello is waiting, so it streams
            c.admin.command("replSetMaintenance", True)
            first = wire.parse_reply(*wire.read_message(sock)[::2])
            assert first["topologyVersion"]["counter"] > tv["counter"], first
            # Within the pause after the first reply.
            c.admin.command("replSetMaintenance", False)
            changed_at = time.monotonic()
            second = wire.parse_reply(*wire.read_message(sock)[::2])
            waited = time.monotonic() - changed_at
    assert second["topologyVersion"]["counter"] > first["topologyVersion"]["counter"], (first, second)
    assert second["secondary"] is True and first["secondary"] is False, (first, second)
    assert waited < 8, f"the change was answered after maxAwaitTimeMS ({waited:.1f} s)"


def test_replset_get_status_shape(rs):
    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")

    def healthy():
        s = status(primary)
        return s if all(x["health"] == 1.0 for x in s["members"]) else None

    s = wait_until(healthy, 10, "all members healthy")
    assert s["set"] == "rs0"
    assert s["myState"] == 1
    assert s["term"] >= 1
    assert s["majorityVoteCount"] == 2 and s["votingMembersCount"] == 3
    assert set(s["optimes"]) >= {"lastCommittedOpTime", "appliedOpTime", "durableOpTime"}
    states = {x["name"]: x["stateStr"] for x in s["members"]}
    assert states == {rs.host(rs.members[0]): "PRIMARY", rs.host(rs.members[1]): "SECONDARY",
                      rs.host(rs.members[2]): "SECONDARY"}
    me = [x for x in s["members"] if x.get("self")]
    assert len(me) == 1 and me[0]["name"] == rs.host(primary)
    assert "electionDate" in me[0] and me[0]["configVersion"] == 1
    for x in s["members"]:
        assert set(x) >= {"_id", "name", "health", "state", "stateStr", "optime", "optimeDate",
                          "syncSourceHost", "configVersion", "configTerm"}
        if not x.get("self"):
            assert set(x) >= {"lastHeartbeat", "pingMs", "optimeDurable", "lastHeartbeatRecv"}
            assert x["pingMs"] >= 0
    # A secondary syncs from the primary and reports the same members.
    s2 = wait_until(lambda: (lambda d: d if d["syncSourceHost"] else None)(status(rs.members[1])),
                    10, "secondary sync source")
    assert s2["myState"] == 2
    assert s2["syncSourceHost"] == rs.host(primary)
    assert {x["name"]: x["stateStr"] for x in s2["members"]}[rs.host(primary)] == "PRIMARY"


def test_secondary_refuses_writes_and_unflagged_reads(rs):
    initiated(rs)
    secondary = rs.members[1]
    rs.wait_for_state(secondary, "SECONDARY")
    with secondary.client() as c:
        with pytest.raises(NotPrimaryError) as e:
            c.test.c.insert_one({"x": 1})
        assert e.value.details["code"] == 10107
        assert e.value.details["codeName"] == "NotWritablePrimary"
        # A direct connection reads with primaryPreferred: allowed on a secondary.
        assert c.test.c.find_one() is None
    sock = wire.connect(secondary.port)
    try:
        r = wire.command(sock, {"find": "c", "$db": "test"})
        assert (r["ok"], r["code"], r["codeName"]) == (0.0, 13435, "NotPrimaryNoSecondaryOk")
        r = wire.command(sock, {"find": "c", "$db": "test",
                                "$readPreference": {"mode": "secondaryPreferred"}})
        assert r["ok"] == 1.0
        r = wire.command(sock, {"insert": "c", "documents": [{"a": 1}], "$db": "test",
                                "lsid": {"id": __import__("bson").Binary(b"0" * 16, 4)},
                                "txnNumber": 1})
        assert r["code"] == 10107
        assert "RetryableWriteError" in r.get("errorLabels", [])
    finally:
        sock.close()


def test_initiate_errors(rs):
    with rs.members[0].client() as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.command("replSetGetStatus")
        assert e.value.code == 94
        bad = rs.config()
        bad["_id"] = "other"
        with pytest.raises(OperationFailure) as e:
            c.admin.command("replSetInitiate", bad)
        assert e.value.code == 93
        not_me = rs.config()
        not_me["members"] = not_me["members"][1:]
        with pytest.raises(OperationFailure) as e:
            c.admin.command("replSetInitiate", not_me)
        assert e.value.code == 93
    primary = initiated(rs)
    with primary.client() as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.command("replSetInitiate", rs.config())
        assert e.value.code == 23
        with pytest.raises(OperationFailure) as e:
            c.admin.command("replSetFreeze", 10)
        assert e.value.code == 95
    with rs.members[1].client() as c:
        rs.wait_for_state(rs.members[1], "SECONDARY")
        with pytest.raises(NotPrimaryError) as e:
            c.admin.command("replSetStepDown", 10)
        assert e.value.details["code"] == 10107


def test_step_down_hands_over_and_freeze_holds_it(rs):
    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with primary.client() as c:
        c.admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=4)
    new = rs.wait_for_primary(10, exclude=primary)
    # The next-highest priority member takes over; the stepped-down member is frozen for the
    # stepdown period, then takes its role back by priority.
    assert new is rs.members[1]
    rs.wait_for_state(primary, "SECONDARY", 5)
    rs.wait_for_state(primary, "PRIMARY", 20)


def test_step_down_with_no_electable_secondary_needs_force(rs):
    # Priority-0 secondaries can never take over: only a forced stepdown steps down.
    rs.initiate(priorities=[1, 0, 0], settings=SETTINGS)
    primary = rs.members[0]
    rs.wait_for_state(primary, "PRIMARY", 30)
    cases = [
        ({"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 10}, 2,
         "stepdown period must be longer than secondaryCatchUpPeriodSecs"),
        ({"replSetStepDown": -1}, 2, "stepdown period must be a positive integer, but got -1"),
        ({"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": -1}, 2,
         "secondaryCatchUpPeriodSecs period must be a positive or absent"),
        ({"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 1}, 262,
         "No electable secondaries caught up"),
    ]
    with primary.client() as c:
        for cmd, code, message in cases:
            with pytest.raises(OperationFailure) as e:
                c.admin.command(cmd)
            assert e.value.code == code, (cmd, e.value.details)
            assert message in str(e.value), (cmd, e.value.details)
        assert c.admin.command("hello")["isWritablePrimary"]
        # Forced, with MongoDB's default catch-up period for force (none): down at once,
        # frozen for the period, then elected again (the only electable member).
        c.admin.command("replSetStepDown", 3, force=True)
    rs.wait_for_state(primary, "SECONDARY", 2)
    rs.wait_for_state(primary, "PRIMARY", 20)


def test_kill_primary_fails_over_and_old_primary_rejoins(rs):
    primary = initiated(rs)
    assert primary is rs.members[0]
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000, retryWrites="true")) as c:
        c.test.c.insert_one({"_id": "before"})
        killed_at = time.monotonic()
        primary.kill()
        first_write = None
        i = 0
        while time.monotonic() - killed_at < 30:
            try:
                c.test.c.insert_one({"_id": f"after-{i}"})
                first_write = time.monotonic()
                break
            except PyMongoError:
                i += 1
                time.sleep(0.05)
        assert first_write is not None, "no write accepted within 30 s of killing the primary"
        failover = first_write - killed_at
        print(f"\nfailover (SIGKILL primary -> first successful write): {failover:.2f} s "
              f"(electionTimeoutMillis={ELECTION_TIMEOUT_MS})")
        assert failover < ELECTION_TIMEOUT_MS / 1000 + 8
        # The priority-2 member leads while the priority-3 one is down (the priority-1
        # member may win the first election; priority takeover then hands the role over).
        rs.wait_for_state(rs.members[1], "PRIMARY", 20)
        # The killed member restarts, rejoins as a secondary and, having the highest
        # priority, takes the primary role back once caught up.
        primary.restart()
        seen = wait_until(lambda: (lambda h: h if h and (h.get("secondary") or h.get("isWritablePrimary")) else None)(rs.hello(primary)),
                          20, "restarted member rejoins")
        assert seen["setName"] == "rs0"
        rs.wait_for_state(primary, "PRIMARY", 30)
        deadline = time.monotonic() + 20
        while True:
            try:
                c.test.c.insert_one({"_id": "back"})
                break
            except PyMongoError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert c.primary == ("127.0.0.1", primary.port)


def member_docs(m, coll="c", db="test"):
    with m.client() as c:
        return sorted(c[db][coll].find({}), key=lambda d: str(d["_id"]))


def wait_same_data(rs, members, coll="c", timeout=15.0):
    want = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [member_docs(m, coll) for m in members]
        if all(g == got[0] for g in got):
            return got[0]
        time.sleep(0.1)
    raise AssertionError(f"members differ: {got!r}")


def test_a_collection_default_collation_replicates_and_its_writes_apply(rs):
    """Secondaries create the collection with its default collation (and `_id` index under
    it) and apply updates and deletes of string `_id`s through that index."""
    from pymongo import WriteConcern

    initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    fr = {"locale": "fr", "strength": 1}
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        c.test.create_collection("coll_fr", collation=fr)
        maj = c.test.get_collection("coll_fr", write_concern=WriteConcern(w=3, wtimeout=15000))
        maj.insert_many([{"_id": w, "v": i} for i, w in enumerate(["abc", "déf", "Ghi", "jkl"])])
        # Operations on the collection compare under its collation.
        assert maj.update_one({"_id": "ABC"}, {"$set": {"v": 10}}).modified_count == 1
        maj.update_many({"_id": {"$in": ["DEF", "ghi"]}}, {"$inc": {"v": 100}})
        assert maj.delete_one({"_id": "JKL"}).deleted_count == 1
    docs = wait_same_data(rs, rs.members, coll="coll_fr")
    assert sorted((d["_id"], d["v"]) for d in docs) == [("Ghi", 102), ("abc", 10), ("déf", 101)]
    for m in rs.members:
        with m.client(directConnection=True) as mc:
            ix = {i["name"]: i for i in mc.test.coll_fr.list_indexes()}
            assert ix["_id_"]["collation"]["locale"] == "fr", m.port


def test_writes_replicate_to_every_member(rs):
    from pymongo import WriteConcern
    from pymongo.errors import WriteConcernError

    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        maj = c.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10000))
        maj.insert_many([{"_id": i, "v": i, "tags": ["a", "b"], "sub": {"x": i}} for i in range(20)])
        maj.update_one({"_id": 3}, {"$set": {"v": 33, "sub.y": 1}, "$push": {"tags": "c"}})
        maj.update_many({"_id": {"$gte": 15}}, {"$inc": {"v": 100}, "$unset": {"sub": ""}})
        maj.replace_one({"_id": 4}, {"replaced": True})
        maj.delete_one({"_id": 5})
        maj.delete_many({"_id": {"$in": [6, 7]}})
        maj.create_index([("v", 1)], name="v_1")
        w3 = c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=10000))
        w3.insert_one({"_id": "w3"})
        expected = sorted(c.test.c.find({}), key=lambda d: str(d["_id"]))
        # Majority-acknowledged writes are on a majority at once; all members converge.
        assert len(expected) == 18
        assert wait_same_data(rs, rs.members) == expected
        for m in rs.members:
            with m.client() as mc:
                assert "v_1" in [ix["name"] for ix in mc.test.c.list_indexes()]
                # The secondary recorded the primary's entries in its own oplog.
                last = mc.local["oplog.rs"].find_one({"ns": "test.c", "op": "i", "o._id": "w3"})
                assert last is not None and last["op"] == "i"
        with pytest.raises(WriteConcernError) as e:
            c.test.get_collection("c", write_concern=WriteConcern(w=5)).insert_one({"_id": "w5"})
        assert e.value.code == 100
        assert c.test.c.find_one({"_id": "w5"}) == {"_id": "w5"}
        # With one secondary gone, w:3 times out (the write is kept), w:"majority" succeeds.
        rs.members[2].kill()
        with pytest.raises(WriteConcernError) as e:
            c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=500)).insert_one({"_id": "t"})
        assert e.value.code == 64
        assert e.value.details["errmsg"] == "waiting for replication timed out"
        assert c.test.c.find_one({"_id": "t"}) == {"_id": "t"}
        maj.insert_one({"_id": "after-kill"})


def test_a_write_acknowledged_by_every_member_is_read_there_at_once(rs):
    """`w: N` counts a member once it applied the write (MongoDB's members acknowledge with
    their last applied optime), not once its log holds it: right after a `w: 3` insert (or
    update, or delete) is acknowledged, a read on either secondary sees it. pymongo's
    test_read_preferences.py relies on it (its setUp writes with `w` = the members, then
    reads on a secondary directly)."""
    from pymongo import WriteConcern

    primary = initiated(rs)
    secondaries = rs.members[1:]
    for m in secondaries:
        rs.wait_for_state(m, "SECONDARY")
    readers = [m.client(directConnection=True, readPreference="secondaryPreferred") for m in secondaries]
    try:
        with primary.client() as c:
            w3 = c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20000))
            missed = []
            for i in range(40):
                w3.insert_one({"_id": i, "v": 0})
                w3.update_one({"_id": i}, {"$set": {"v": 1}})
                for m, r in zip(secondaries, readers):
                    if r.test.c.find_one({"_id": i}) != {"_id": i, "v": 1}:
                        missed.append((rs.host(m), i))
                if i % 2:
                    w3.delete_one({"_id": i})
                    for m, r in zip(secondaries, readers):
                        if r.test.c.find_one({"_id": i}) is not None:
                            missed.append((rs.host(m), -i))
            assert missed == [], missed
    finally:
        for r in readers:
            r.close()


# Catalog changes taken on the primary, in order: after each, every member holds what the
# primary holds (names, UUIDs, options, index specs, documents, views).
CATALOG_STEPS = [
    {"create": "c", "validator": {"v": {"$type": "int"}}},
    {"insert": "c", "documents": [{"_id": i, "v": i, "s": f"s{i}", "t": None} for i in range(5)]},
    {"createIndexes": "c", "indexes": [
        {"key": {"v": 1}, "name": "v_1"},
        {"key": {"s": 1}, "name": "s_1", "unique": True},
        {"key": {"u": 1}, "name": "u_1", "sparse": True},
        {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 3600},
        {"key": {"v": -1, "s": 1}, "name": "vs", "partialFilterExpression": {"v": {"$gt": 1}}},
    ]},
    {"collMod": "c", "index": {"name": "v_1", "hidden": True}},
    {"collMod": "c", "index": {"keyPattern": {"s": 1}, "hidden": True}},
    {"collMod": "c", "index": {"keyPattern": {"s": 1}, "hidden": False}},
    {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": 60}},
    {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": 120, "hidden": True}},
    {"collMod": "c", "validationLevel": "moderate", "validationAction": "warn"},
    {"collMod": "c", "changeStreamPreAndPostImages": {"enabled": True}},
    {"dropIndexes": "c", "index": "u_1"},
    {"create": "view", "viewOn": "c", "pipeline": [{"$match": {"v": {"$gt": 1}}}]},
    {"collMod": "view", "viewOn": "c", "pipeline": [{"$match": {"v": {"$lt": 3}}}]},
    {"create": "folded", "viewOn": "c", "pipeline": [], "collation": {"locale": "en", "strength": 2}},
    {"renameCollection": "test.c", "to": "test.d", "$db": "admin"},
    {"renameCollection": "test.d", "to": "test2.d", "$db": "admin"},
    {"drop": "view"},
    {"drop": "folded"},
    {"drop": "d", "$db": "test2"},
]


def test_catalog_changes_replicate_to_every_member(rs):
    from bson import SON

    initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        for step in CATALOG_STEPS:
            step = dict(step)
            db = step.pop("$db", "test")
            c[db].command(SON(list(step.items()) + [("writeConcern", {"w": 3, "wtimeout": 10000})]))
            want = member_state(rs.members[0])
            for m in rs.members[1:]:
                assert member_state(m) == want, (step, rs.host(m))
    assert "test2.d" not in want and want == {}, want


def test_a_retried_write_waits_for_its_write_concern_again(rs):
    """A retryable write retried after its first attempt completed gets the first attempt's
    result without running again, but only once its write concern holds (MongoDB waits for
    the retry's write concern too): with a member down, a retried `w: 3` insert times out
    again (error 64) instead of passing for replicated, as does an update that matches
    nothing; once the member is back the retry succeeds."""
    import uuid

    import bson

    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    rs.members[2].kill()
    lsid = {"id": bson.Binary(uuid.uuid4().bytes, 4)}
    insert = {"insert": "c", "documents": [{"_id": "once"}], "lsid": lsid, "txnNumber": bson.Int64(1),
              "writeConcern": {"w": 3, "wtimeout": 300}, "$db": "test"}
    sock = wire.connect(primary.port)
    try:
        for attempt in ("first", "retry"):
            r = wire.command(sock, insert)
            assert r["ok"] == 1 and r["n"] == 1, (attempt, r)
            assert r.get("writeConcernError", {}).get("code") == 64, (attempt, r)
        # A write that changes nothing waits for what the member logged before it too.
        r = wire.command(sock, {"update": "c", "updates": [{"q": {"_id": "none"}, "u": {"$set": {"x": 1}}}],
                                "writeConcern": {"w": 3, "wtimeout": 300}, "$db": "test"})
        assert r["ok"] == 1 and r["n"] == 0 and r.get("writeConcernError", {}).get("code") == 64, r
        rs.members[2].restart()
        rs.wait_for_state(rs.members[2], "SECONDARY", 30)
        r = wire.command(sock, {**insert, "writeConcern": {"w": 3, "wtimeout": 20000}})
        assert r["ok"] == 1 and r["n"] == 1 and "writeConcernError" not in r, r
    finally:
        sock.close()
    with primary.client() as c:
        assert list(c.test.c.find({"_id": "once"})) == [{"_id": "once"}]


# Commands sent to the primary of a three-member set with both secondaries down: whether
# each waits for a majority (the implicit default, MongoDB 5.0+'s for a set without arbiters)
# and so ends in a write concern timeout, or is acknowledged at once. `wtimeout` without `w`
# keeps the default's `w` (MongoDB's isExplicitWithoutWField).
IMPLICIT_DEFAULT_CASES = [
    ("insert naming none", {"insert": "d", "documents": [{"_id": 1}]}, True),
    ("insert naming {}", {"insert": "d", "documents": [{"_id": 2}], "writeConcern": {}}, True),
    ("insert naming only wtimeout", {"insert": "d", "documents": [{"_id": 3}], "writeConcern": {"wtimeout": 400}}, True),
    ("insert naming only j", {"insert": "d", "documents": [{"_id": 4}], "writeConcern": {"j": True}}, True),
    ("update naming none", {"update": "d", "updates": [{"q": {"_id": 1}, "u": {"$set": {"x": 1}}}]}, True),
    ("delete naming none", {"delete": "d", "deletes": [{"q": {"_id": 2}, "limit": 1}]}, True),
    ("findAndModify naming none", {"findAndModify": "d", "query": {"_id": 3}, "update": {"$set": {"y": 1}}}, True),
    ("create naming none", {"create": "d2"}, True),
    ("createIndexes naming none", {"createIndexes": "d", "indexes": [{"key": {"x": 1}, "name": "x_1"}]}, True),
    ("$out naming none", {"aggregate": "d", "pipeline": [{"$out": "d3"}], "cursor": {}}, True),
    ("insert naming w: 1", {"insert": "d", "documents": [{"_id": 5}], "writeConcern": {"w": 1}}, False),
    ("insert naming w: 1, j", {"insert": "d", "documents": [{"_id": 6}], "writeConcern": {"w": 1, "j": True}}, False),
    ("find", {"find": "d", "filter": {}}, False),
    ("aggregate reading", {"aggregate": "d", "pipeline": [{"$match": {}}], "cursor": {}}, False),
    ("count", {"count": "d"}, False),
]


def test_a_write_naming_no_write_concern_waits_for_a_majority(rs):
    """Seed 000's lab: "The default write concern is 'majority'". A write that names none (or
    `{}`, or no `w`) is acknowledged only once a majority holds it: with both secondaries
    down it times out with MongoDB's errInfo naming the implicit default; `w: 1` writes and
    reads are not held; a transaction's statements take no default, its commit does."""
    import bson

    primary = initiated_with_a_long_lease(rs)
    for m in rs.members:
        with m.client(directConnection=True) as c:
            got = c.admin.command("getDefaultRWConcern")
            assert got["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}, got
            assert got["defaultReadConcern"] == {"level": "local"}, got
            assert got["defaultWriteConcernSource"] == got["defaultReadConcernSource"] == "implicit", got
    sock = wire.connect(primary.port)
    try:
        # With the set whole, the default is met at once.
        r = wire.command(sock, {"insert": "d", "documents": [{"_id": 0}], "$db": "test"})
        assert r["ok"] == 1 and r["n"] == 1 and "writeConcernError" not in r, r
        for m in rs.members[1:]:
            m.kill()
        for label, body, waits in IMPLICIT_DEFAULT_CASES:
            cmd = {**body, "$db": "test"}
            if waits and "wtimeout" not in cmd.get("writeConcern", {}):
                cmd["maxTimeMS"] = 400
            started = time.monotonic()
            r = wire.command(sock, cmd)
            took = time.monotonic() - started
            assert r["ok"] == 1, (label, r)
            if waits:
                wce = r.get("writeConcernError")
                assert wce and wce["code"] in (50, 64), (label, r)
                assert took >= 0.3, (label, took)
                if wce["code"] == 64:
                    assert wce["errInfo"]["writeConcern"]["w"] == "majority", (label, r)
                    assert wce["errInfo"]["writeConcern"]["provenance"] == "implicitDefault", (label, r)
            else:
                assert "writeConcernError" not in r, (label, r)
                assert took < 2, (label, took)
        # A transaction: its statements are not held, its commit is.
        lsid = {"id": bson.Binary(__import__("uuid").uuid4().bytes, 4)}
        txn = {"lsid": lsid, "txnNumber": bson.Int64(1), "autocommit": False, "$db": "test"}
        started = time.monotonic()
        r = wire.command(sock, {"insert": "d", "documents": [{"_id": "t"}], "startTransaction": True, **txn})
        assert r["ok"] == 1 and "writeConcernError" not in r and time.monotonic() - started < 2, r
        r = wire.command(sock, {"commitTransaction": 1, "writeConcern": {"wtimeout": 400}, **{**txn, "$db": "admin"}})
        assert r["ok"] == 1 and r.get("writeConcernError", {}).get("code") == 64, r
        assert r["writeConcernError"]["errInfo"]["writeConcern"] == \
            {"w": "majority", "wtimeout": 400, "provenance": "implicitDefault"}, r
        # Everything was written all the same; once a secondary is back the default is met.
        rs.members[1].restart()
        rs.wait_for_state(rs.members[1], "SECONDARY", 60)
        r = wire.command(sock, {"insert": "d", "documents": [{"_id": "after"}], "maxTimeMS": 20000, "$db": "test"})
        assert r["ok"] == 1 and "writeConcernError" not in r, r
        r = wire.command(sock, {"find": "d", "filter": {}, "sort": {"_id": 1}, "$db": "test"})
        ids = [d["_id"] for d in r["cursor"]["firstBatch"]]
        assert ids == [0, 1, 3, 4, 5, 6, "after", "t"], ids
    finally:
        sock.close()


def test_global_default_read_and_write_concerns_replace_the_implicit_ones(rs):
    """`setDefaultRWConcern` on the primary is replicated (every member reports it) and
    taken by commands naming no concern: a write waits for the default's `w` (errInfo
    provenance `customDefault`; a write concern without `w` takes the default's), a read
    waits for the default read concern (`majority`: nothing uncommitted is visible, so with
    the secondaries down it waits); `w: 1` as the default makes writes naming none
    acknowledged at once again."""
    primary = initiated_with_a_long_lease(rs)
    with primary.client() as c:
        with pytest.raises(NotPrimaryError):
            with rs.members[1].client(directConnection=True) as sc:
                sc.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 1}})
        c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 3, "wtimeout": 300},
                         "defaultReadConcern": {"level": "majority"}, "writeConcern": {"w": 3}})
    for m in rs.members:
        def defaults(m=m):
            with m.client(directConnection=True) as mc:
                got = mc.admin.command("getDefaultRWConcern")
            return got if got["defaultWriteConcernSource"] == "global" else None
        got = wait_until(defaults, 20, f"{rs.host(m)} has the global defaults")
        assert got["defaultWriteConcern"] == {"w": 3, "wtimeout": 300}, got
        assert got["defaultReadConcern"] == {"level": "majority"}, got
    sock = wire.connect(primary.port)
    try:
        r = wire.command(sock, {"insert": "g", "documents": [{"_id": 0}], "$db": "test"})
        assert r["ok"] == 1 and "writeConcernError" not in r, r
        rs.members[2].kill()
        cases = [
            ({}, {"w": 3, "wtimeout": 300, "provenance": "customDefault"}),
            ({"writeConcern": {}}, {"w": 3, "wtimeout": 300, "provenance": "customDefault"}),
            ({"writeConcern": {"wtimeout": 200}}, {"w": 3, "wtimeout": 200, "provenance": "customDefault"}),
        ]
        for i, (extra, shown) in enumerate(cases, start=1):
            r = wire.command(sock, {"insert": "g", "documents": [{"_id": i}], **extra, "$db": "test"})
            wce = r.get("writeConcernError", {})
            assert r["ok"] == 1 and wce.get("code") == 64, (extra, r)
            assert wce["errInfo"]["writeConcern"] == shown, (extra, r)
        r = wire.command(sock, {"insert": "g", "documents": [{"_id": "w1"}], "writeConcern": {"w": 1}, "$db": "test"})
        assert r["ok"] == 1 and "writeConcernError" not in r, r
        # With only the primary left, nothing more commits: a read naming no read concern
        # (the default, majority) waits; a local one does not.
        rs.members[1].kill()
        r = wire.command(sock, {"insert": "g", "documents": [{"_id": "uncommitted"}], "writeConcern": {"w": 1},
                                "$db": "test"})
        assert r["ok"] == 1, r
        for cmd in ({"find": "g", "filter": {"_id": "w1"}}, {"count": "g"},
                    {"aggregate": "g", "pipeline": [], "cursor": {}}):
            r = wire.command(sock, {**cmd, "maxTimeMS": 500, "$db": "test"})
            assert r["ok"] == 0 and r["code"] == 50, (cmd, r)
        r = wire.command(sock, {"find": "g", "filter": {"_id": "uncommitted"}, "readConcern": {"level": "local"},
                                "$db": "test"})
        assert r["ok"] == 1 and r["cursor"]["firstBatch"] == [{"_id": "uncommitted"}], r
        # `w: 1` as the default: writes naming none are acknowledged at once.
        r = wire.command(sock, {"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 1},
                                "writeConcern": {"w": 1}, "$db": "admin"})
        assert r["ok"] == 1 and r["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}, r
        r = wire.command(sock, {"insert": "g", "documents": [{"_id": "after"}], "$db": "test"})
        assert r["ok"] == 1 and "writeConcernError" not in r, r
    finally:
        sock.close()


def test_a_transaction_larger_than_a_bson_document_replicates(rs):
    """A transaction's oplog entry is one Raft entry, which can be far past the 16 MiB a
    request between members may hold (pymongo's test_transaction_starts_with_batched_write
    commits 48 MiB): it travels in fragments, every member applies it, and the set keeps
    replicating after it (before, such an entry was refused by every secondary forever,
    and nothing after it replicated)."""
    from pymongo import WriteConcern

    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    big = "\0" * (1024 * 1024)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        coll = c.test.big
        coll.insert_one({"_id": "before"})
        with c.start_session() as s:
            with s.start_transaction(write_concern=WriteConcern(w=3, wtimeout=60000)):
                coll.insert_many([{"_id": i, "a": big} for i in range(24)], session=s)
        coll.with_options(write_concern=WriteConcern(w=3, wtimeout=30000)).insert_one({"_id": "after"})
    for m in rs.members[1:]:
        with m.client(directConnection=True, readPreference="secondaryPreferred") as mc:
            ids = [d["_id"] for d in mc.test.big.find({}, {"_id": 1})]
            assert sorted(ids, key=str) == sorted([*range(24), "before", "after"], key=str), (rs.host(m), ids)


def test_get_default_rw_concern_without_an_initiated_set(client, rs_client):
    """A standalone has no defaults to show (MongoDB's 51300); the implicit one-member set
    acknowledges at w: 1 (a single server: nothing can roll its writes back), and says so;
    the command runs on the admin database only."""
    with pytest.raises(OperationFailure) as e:
        client.admin.command("getDefaultRWConcern")
    assert (e.value.code, e.value.details["errmsg"]) == (
        51300, "'getDefaultRWConcern' is not supported on standalone nodes.")
    got = rs_client.admin.command("getDefaultRWConcern", inMemory=True)
    assert got["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}, got
    assert got["defaultReadConcern"] == {"level": "local"} and got["inMemory"] is True, got
    with pytest.raises(OperationFailure) as e:
        rs_client.test.command("getDefaultRWConcern")
    assert (e.value.code, e.value.details["errmsg"]) == (
        13, "getDefaultRWConcern may only be run against the admin database.")


def test_secondaries_apply_the_last_write_soon_after_writes_stop(rs):
    """Raft's broadcast of each commit index is off: a secondary learns it from the next
    append, or, once writes stop, from one the primary sends a few milliseconds later; not
    from Raft's heartbeat (every electionTimeoutMillis / 5: 12 s here), which it would
    otherwise wait for before applying the last write (secondaries apply committed entries)."""
    from pymongo import WriteConcern

    rs.initiate(priorities=[3, 2, 1], settings={"electionTimeoutMillis": 60000})
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 60,
               "the priority-3 member as primary")
    secondaries = rs.members[1:]
    for m in secondaries:
        rs.wait_for_state(m, "SECONDARY", 60)
    readers = [m.client(readPreference="secondaryPreferred") for m in secondaries]
    try:
        with rs.members[0].client() as c:
            coll = c.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000))
            for i in range(5):
                coll.insert_one({"_id": i})
                for m, r in zip(secondaries, readers):
                    wait_until(lambda r=r, i=i: r.test.c.find_one({"_id": i}), 5,
                               f"{rs.host(m)} applies the write {i}")
                time.sleep(0.2)
    finally:
        for r in readers:
            r.close()


def test_majority_writes_survive_failover(rs):
    from pymongo import WriteConcern

    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    acked = []
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000, retryWrites="true")) as c:
        coll = c.test.get_collection("h", write_concern=WriteConcern(w="majority", wtimeout=15000))
        for i in range(50):
            coll.insert_one({"_id": i})
            acked.append(i)
        primary.kill()
        deadline = time.monotonic() + 30
        i = 50
        while time.monotonic() < deadline and i < 80:
            try:
                coll.insert_one({"_id": i})
                acked.append(i)
                i += 1
            except PyMongoError:
                time.sleep(0.05)
        assert i == 80, "writes did not resume after the failover"
    primary.restart()
    rs.wait_for_state(primary, "PRIMARY", 30)
    for m in rs.members:
        got = wait_until(lambda m=m: (lambda ids: ids if set(acked) <= ids else None)(
            {d["_id"] for d in member_docs(m, "h")}), 20, f"{rs.host(m)} holds every acknowledged write")
        assert set(acked) <= got


def test_killed_primary_is_replaced_well_within_the_default_election_timeout(rs):
    """MongoDB's default electionTimeoutMillis (10 s): a SIGKILLed primary's port refuses
    connections, so the secondaries leave its lease and the priority-2 member campaigns at
    once (ARCHITECTURE "Replica sets": a primary whose process is gone). Writes keep going
    under load through pymongo's retryable writes; every w:majority-acknowledged write is on
    the survivors and no retried write fails as already applied."""
    import threading

    from pymongo import WriteConcern

    rs.initiate(priorities=[3, 2, 1])
    # Another member may win the first election; priority takeover hands the role over.
    primary = rs.members[0]
    rs.wait_for_state(primary, "PRIMARY", 60)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY", 60)
    # (id, when acknowledged, the primary the client knew then)
    acked: list[tuple[int, float, tuple | None]] = []
    errors: list[str] = []
    stop = threading.Event()

    def writer():
        with MongoClient(rs.uri(serverSelectionTimeoutMS=30000, retryWrites="true")) as c:
            coll = c.test.get_collection("fo", write_concern=WriteConcern(w="majority", wtimeout=30000))
            i = 0
            while not stop.is_set():
                try:
                    coll.insert_one({"_id": i})
                    acked.append((i, time.monotonic(), c.primary))
                    i += 1
                except PyMongoError as e:
                    errors.append(repr(e)[:300])
                    time.sleep(0.02)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 50, 30, "writes before the kill")
        primary.kill()
        killed_at = time.monotonic()
        old = ("127.0.0.1", primary.port)
        # A reply the old primary sent just before dying may be read after the kill.
        first = wait_until(lambda: next((at for _, at, p in acked if at > killed_at and p not in (None, old)), None),
                           20, "a write acknowledged by a new primary")
        failover = first - killed_at
        print(f"\nfailover at the default electionTimeoutMillis (10 s), SIGKILL -> first "
              f"w:majority write: {failover:.2f} s")
        assert failover < 6.0, failover
        wait_until(lambda: len([1 for _, at, _p in acked if at > killed_at]) >= 20, 30, "writes after the kill")
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    # A write the old primary applied and replicated but did not acknowledge is retried by
    # the driver on the new primary, which answers with the first attempt's result (the
    # statement's record was applied with its oplog entry), not a duplicate key error.
    assert not [e for e in errors if "E11000" in e], errors[:3]
    # The priority-2 member leads while the priority-3 one is down.
    rs.wait_for_state(rs.members[1], "PRIMARY", 20)
    ids = {i for i, _, _p in acked}
    for m in rs.members[1:]:
        got = wait_until(lambda m=m: (lambda have: have if ids <= have else None)(
            {d["_id"] for d in member_docs(m, "fo")}), 20, f"{rs.host(m)} holds every acknowledged write")
        assert ids <= got


def test_stopped_primary_keeps_its_lease_until_the_election_timeout(rs):
    """A SIGSTOPped primary refuses nothing (its port accepts, it never answers): the
    secondaries wait out the election timeout as Raft's check-quorum lease requires."""
    import signal

    timeout_ms = 3000
    rs.initiate(priorities=[3, 2, 1], settings={"electionTimeoutMillis": timeout_ms, "heartbeatIntervalMillis": 500})
    primary = rs.wait_for_primary(30)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=10000)) as c:
        c.test.c.insert_one({"_id": "before"})
    primary.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        new = rs.wait_for_primary(timeout_ms / 1000 + 15, exclude=primary)
        elected = time.monotonic() - stopped_at
    finally:
        primary.proc.send_signal(signal.SIGCONT)
    print(f"\nSIGSTOPped primary replaced after {elected:.2f} s (electionTimeoutMillis={timeout_ms})")
    assert new is not primary
    # Raft's followers campaign 1.1 to 1.3 election timeouts after their last heartbeat
    # (sent at most 0.2 timeouts before the stop).
    assert elected >= 0.8 * timeout_ms / 1000, elected
    # The old primary, resumed, follows the new one (its higher priority then takes the
    # role back once caught up).
    wait_until(lambda: (lambda h: h if h and (h.get("secondary") or h.get("isWritablePrimary")) else None)(rs.hello(primary)),
               30, "resumed member rejoins")


def test_out_and_merge_on_a_secondary_write_through_the_primary(rs):
    """MongoDB 5.0+: with a read preference that allows it, a secondary runs an aggregate
    ending in `$out`/`$merge`, reading its own data and writing through the primary."""
    from pymongo import WriteConcern

    primary = initiated(rs)
    secondary = next(m for m in rs.members if m is not primary)
    rs.wait_for_state(secondary, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        all3 = WriteConcern(w=3, wtimeout=15000)
        c.test.get_collection("src", write_concern=all3).insert_many(
            [{"_id": i, "v": i % 3, "k": f"k{i}"} for i in range(12)])
        dst = c.test.get_collection("dst", write_concern=all3)
        dst.insert_one({"_id": "old"})
        dst.create_index([("v", 1)], name="v_1")
        tgt = c.test.get_collection("tgt", write_concern=all3)
        tgt.insert_many([{"_id": 0, "old": True, "k": "k0"}, {"_id": 100, "keep": 1}])
        tgt.create_index([("k", 1)], name="k_1", unique=True)
        wait_same_data(rs, rs.members, coll="tgt")

    secondary_ok = {"mode": "secondaryPreferred"}
    majority = {"w": "majority", "wtimeout": 15000}
    sock = wire.connect(secondary.port)
    try:
        def agg(pipeline, **extra):
            return wire.command(sock, {"aggregate": "src", "pipeline": pipeline, "cursor": {},
                                       "$db": "test", **extra})

        # Without secondaryOk the secondary refuses, as it refuses writes.
        r = agg([{"$out": "dst"}])
        assert (r["ok"], r["code"]) == (0.0, 10107), r
        r = agg([{"$match": {"v": 1}}, {"$out": "dst"}], **{"$readPreference": secondary_ok,
                                                            "writeConcern": majority})
        assert r["ok"] == 1.0 and r["cursor"]["firstBatch"] == [], r
        # $merge: merge into matches, insert the rest; on a unique non-_id field.
        r = agg([{"$match": {"v": 0}}, {"$project": {"k": 1, "n": "$v"}},
                 {"$merge": {"into": "tgt", "on": "k"}}],
                **{"$readPreference": secondary_ok, "writeConcern": majority})
        assert r["ok"] == 1.0, r
        # MongoDB's errors come back from the primary (or from the local catalog check).
        r = agg([{"$merge": {"into": "tgt", "on": "v"}}], **{"$readPreference": secondary_ok})
        assert (r["ok"], r["code"]) == (0.0, 51183), r
        r = agg([{"$match": {"_id": 0}}, {"$merge": {"into": "tgt", "whenMatched": "fail"}}],
                **{"$readPreference": secondary_ok})
        assert (r["ok"], r["code"]) == (0.0, 11000), r
        r = agg([{"$match": {"_id": 5}}, {"$merge": {"into": "tgt", "whenNotMatched": "fail"}}],
                **{"$readPreference": secondary_ok})
        assert (r["ok"], r["code"]) == (0.0, 13113), r
        # A whenMatched pipeline with let variables: the first run inserts the results (none
        # matches), the second updates each through the pipeline on the primary.
        piped = [{"$match": {"v": 2}}, {"$project": {"k": 1}},
                 {"$merge": {"into": "tgt", "on": "k", "let": {"key": "$k"}, "whenMatched": [
                     {"$set": {"hits": {"$add": [{"$ifNull": ["$hits", 0]}, 1]}, "by": "$$key"}}]}}]
        for _ in range(2):
            r = agg(piped, **{"$readPreference": secondary_ok, "writeConcern": majority})
            assert r["ok"] == 1.0, r
    finally:
        sock.close()

    with primary.client() as pc:
        # $out replaced dst (indexes kept) with the secondary's v == 1 documents.
        assert sorted(d["_id"] for d in pc.test.dst.find()) == [1, 4, 7, 10]
        assert "v_1" in [ix["name"] for ix in pc.test.dst.list_indexes()]
        assert [n for n in pc.test.list_collection_names() if n.startswith("tmp.agg_out")] == []
        assert sorted(pc.test.tgt.find(), key=lambda d: str(d["_id"])) == sorted(
            [{"_id": 0, "old": True, "k": "k0", "n": 0}, {"_id": 100, "keep": 1}]
            + [{"_id": i, "k": f"k{i}", "n": 0} for i in (3, 6, 9)]
            + [{"_id": i, "k": f"k{i}", "hits": 1, "by": f"k{i}"} for i in (2, 5, 8, 11)],
            key=lambda d: str(d["_id"]))
    # Every member converges on the primary's result.
    assert len(wait_same_data(rs, rs.members, coll="dst")) == 4


def test_capped_evictions_replicate_as_deletes(rs):
    """A secondary does not evict from a capped collection on its own: it applies the
    primary's `d` entries, so every member holds the primary's documents."""
    from pymongo import WriteConcern

    initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        c.test.create_collection("capped", capped=True, size=8192, max=5)
        maj = c.test.get_collection("capped", write_concern=WriteConcern(w="majority", wtimeout=10000))
        for i in range(12):
            maj.insert_one({"_id": i, "pad": "p" * (i * 50)})
        expected = list(c.test.capped.find())
        assert [d["_id"] for d in expected] == [7, 8, 9, 10, 11]
        deletes = sorted(e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "test.capped", "op": "d"}))
        assert deletes == [0, 1, 2, 3, 4, 5, 6]
    want = sorted(expected, key=lambda d: str(d["_id"]))
    for m in rs.members:
        wait_until(lambda m=m: member_docs(m, "capped") == want, 15, f"{rs.host(m)} capped contents")
        with m.client() as mc:
            # Natural (insertion) order is the primary's, and the member's oplog holds the
            # primary's delete entries.
            assert list(mc.test.capped.find()) == expected
            assert mc.local["oplog.rs"].count_documents({"ns": "test.capped", "op": "d"}) == 7


def test_create_indexes_commit_quorum(rs, client):
    """`createIndexes.commitQuorum` (MongoDB 4.4+): the command returns once that many voting
    members hold the build, echoes the quorum, and refuses what MongoDB refuses."""
    from pymongo.errors import ExecutionTimeout

    # A standalone refuses the option (jstests/noPassthrough/commit_quorum_standalones.js).
    with pytest.raises(OperationFailure) as e:
        client.test.command("createIndexes", "cq", indexes=[{"key": {"x": 1}, "name": "x_1"}],
                            commitQuorum="majority")
    assert (e.value.code, e.value.details["codeName"]) == (2, "BadValue")

    primary = initiated(rs)
    for m in rs.members:
        if m is not primary:
            rs.wait_for_state(m, "SECONDARY")
    with primary.client() as c:
        db = c.test

        def create(name, quorum, **extra):
            return db.command("createIndexes", "q", indexes=[{"key": {name: 1}, "name": name}],
                              commitQuorum=quorum, **extra)

        for quorum, field in [("votingMembers", "a"), ("majority", "b"), (3, "c"), (0, "d")]:
            reply = create(field, quorum)
            assert reply["commitQuorum"] == quorum
            assert reply["numIndexesAfter"] == reply["numIndexesBefore"] + 1
        # Every member gets the indexes (votingMembers waited for all three to hold them).
        for m in rs.members:
            with m.client() as mc:
                wait_until(lambda mc=mc: {"a", "b", "c", "d"} <= {ix["name"] for ix in mc.test.q.list_indexes()},
                           10, "indexes on every member")
        for quorum, code in [(4, 278), ("someTag", 79), ({"w": 1}, 9), (-1, 9), (51, 9), ("", 9)]:
            with pytest.raises(OperationFailure) as e:
                create("bad", quorum)
            assert e.value.code == code, (quorum, e.value.details)
        assert "bad" not in {ix["name"] for ix in db.q.list_indexes()}
        # With one voting member down, "votingMembers" cannot be reached: the command waits
        # until its maxTimeMS; "majority" still returns.
        rs.members[[i for i, m in enumerate(rs.members) if m is not primary][-1]].kill()
        with pytest.raises(ExecutionTimeout):
            create("e", "votingMembers", maxTimeMS=1000)
        assert create("f", "majority")["commitQuorum"] == "majority"


def test_retry_on_a_primary_elected_again_finds_what_the_other_primary_ran(rs):
    """A member that knew sessions at an older txnNumber, then stepped down while another
    primary ran the sessions' next retryable writes, must find those writes' records when it
    is primary again and the client retries them there: each statement applied once, the
    first attempt's reply returned. One session per statement (only a session's latest
    number may be retried)."""
    import uuid

    from bson import Binary, Int64
    from pymongo import WriteConcern

    primary = initiated(rs)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    majority = {"w": "majority", "wtimeout": 15000}

    def run(member, lsid, txn_number, command):
        sock = wire.connect(member.port)
        try:
            return wire.command(sock, dict(command, lsid=lsid, txnNumber=Int64(txn_number),
                                           writeConcern=majority, **{"$db": "test"}))
        finally:
            sock.close()

    # (command, the reply fields a retry must repeat)
    statements = [
        ({"insert": "r", "documents": [{"_id": 1, "n": 0}, {"_id": 2, "n": 0}]}, {"n": 2}),
        ({"update": "r", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]},
         {"n": 1, "nModified": 1}),
        ({"findAndModify": "r", "query": {"_id": 2}, "update": {"$inc": {"n": 10}}, "new": True},
         {"value": {"_id": 2, "n": 10}}),
        ({"delete": "r", "deletes": [{"q": {"_id": 0}, "limit": 1}]}, {"n": 1}),
        ({"insert": "r", "documents": [{"_id": 3}]}, {"n": 1}),
        ({"findAndModify": "r", "query": {"_id": 4}, "update": {"$set": {"u": 1}}, "upsert": True,
          "new": True}, {"value": {"_id": 4, "u": 1}}),
        ({"findAndModify": "r", "query": {"_id": 3}, "remove": True}, {"value": {"_id": 3}}),
    ]
    sessions = [{"id": Binary(uuid.uuid4().bytes, 4)} for _ in statements]
    # The first primary learns every session at txnNumber 1.
    for i, lsid in enumerate(sessions):
        reply = run(primary, lsid, 1, {"insert": "seen", "documents": [{"_id": i}]})
        assert reply["ok"] == 1.0 and reply["n"] == 1, reply
    with primary.client() as c:
        c.test.get_collection("r", write_concern=WriteConcern(w="majority")).insert_one({"_id": 0})
        c.admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=4)
    other = rs.wait_for_primary(10, exclude=primary)
    first = []
    for lsid, (command, _) in zip(sessions, statements):
        reply = run(other, lsid, 2, command)
        assert reply["ok"] == 1.0 and "writeErrors" not in reply, reply
        first.append(reply)
    rs.wait_for_state(primary, "PRIMARY", 30)
    for lsid, (command, expected), was in zip(sessions, statements, first):
        reply = run(primary, lsid, 2, command)
        assert reply["ok"] == 1.0 and "writeErrors" not in reply, (command, reply)
        for field, value in expected.items():
            assert reply[field] == value == was[field], (command, field, reply)
    with primary.client() as c:
        assert list(c.test.r.find({}, sort=[("_id", 1)])) == [
            {"_id": 1, "n": 1}, {"_id": 2, "n": 10}, {"_id": 4, "u": 1}]
        # A number new to the session runs.
        reply = run(primary, sessions[1], 3, statements[1][0])
        assert reply["nModified"] == 1, reply
        assert c.test.r.find_one({"_id": 1})["n"] == 2
