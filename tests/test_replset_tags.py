"""Replica set tags: members' `tags` in the configuration and in `hello` (what drivers select
members by for read preference tag sets), and custom write concern modes
(`settings.getLastErrorModes`, `w: "<mode>"`) as MongoDB's ReplSetTagConfig defines them:
a write satisfies a mode once the members holding it carry, for each of the mode's tags, at
least that many distinct values.

Three nidus processes on loopback ports; every wait is bounded."""

from __future__ import annotations

import copy
import time

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.read_preferences import Secondary

from nidus_harness import ReplicaSet, wait_until

SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}
# Two members in one data centre, one in another; every member its own rack.
TAGS = [{"dc": "east", "rack": "e1"}, {"dc": "east", "rack": "e2"}, {"dc": "west", "rack": "w1"}]
MODES = {
    "multiDC": {"dc": 2},
    "twoRacks": {"rack": 2},
    "threeDCs": {"dc": 3},
}


def tagged_config(rs: ReplicaSet, modes=None) -> dict:
    return rs.config(priorities=[3, 2, 1], settings={**SETTINGS, "getLastErrorModes": modes or MODES},
                     member_options=[{"tags": t} for t in TAGS])


def with_member_tags(conf: dict, i: int, tags) -> dict:
    conf = copy.deepcopy(conf)
    conf["members"][i]["tags"] = tags
    return conf


def with_modes(conf: dict, modes) -> dict:
    conf = copy.deepcopy(conf)
    conf["settings"]["getLastErrorModes"] = modes
    return conf


# (what is wrong, the configuration change, code, codeName, message) as MongoDB's MemberConfig
# and ReplSetWriteConcernModeDefinitions refuse them.
CONFIG_ERRORS = [
    ("tag value not a string", lambda c: with_member_tags(c, 1, {"dc": 5}),
     14, "TypeMismatch", "tags.dc field has non-string value of type int"),
    ("tags not an object", lambda c: with_member_tags(c, 1, ["east"]),
     14, "TypeMismatch", "BSON field 'MemberConfig.tags' is the wrong type 'array', expected type 'object'"),
    ("modes not an object", lambda c: with_modes(c, 3),
     14, "TypeMismatch", "Expected getLastErrorModes to be an Object, it actually had type int"),
    ("mode not an object", lambda c: with_modes(c, {"m": "dc"}),
     14, "TypeMismatch", "Expected getLastErrorModes.m to be an Object, not string"),
    ("count not a number", lambda c: with_modes(c, {"m": {"dc": "2"}}),
     14, "TypeMismatch", "Expected getLastErrorModes.m.dc to be a number, not string"),
    ("count zero", lambda c: with_modes(c, {"m": {"dc": 0}}),
     2, "BadValue", "Value of getLastErrorModes.m.dc must be positive, but found 0"),
    ("count negative", lambda c: with_modes(c, {"m": {"dc": -1}}),
     2, "BadValue", "Value of getLastErrorModes.m.dc must be positive, but found -1"),
    ("unknown tag key", lambda c: with_modes(c, {"m": {"region": 1}}),
     4, "NoSuchKey", "No replica set tag key region in config"),
]


@pytest.mark.parametrize("case", CONFIG_ERRORS, ids=[c[0] for c in CONFIG_ERRORS])
def test_invalid_tags_and_modes_are_refused(case):
    _, change, code, code_name, message = case
    # The checks run before the configuration is looked at any further: one member is enough.
    rs = ReplicaSet(1, name=f"rs{abs(hash(case[0])) % 10000}").start()
    try:
        conf = rs.config(settings={**SETTINGS, "getLastErrorModes": {}},
                         member_options=[{"tags": {"dc": "east"}}])
        conf["members"].append({"_id": 1, "host": "127.0.0.1:1", "priority": 0, "votes": 0,
                                "tags": {"dc": "west"}})
        with rs.members[0].client() as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("replSetInitiate", change(conf))
            assert (e.value.code, e.value.details["codeName"], e.value.details["errmsg"]) == (
                code, code_name, message)
            # Nothing was initiated.
            with pytest.raises(OperationFailure) as e:
                c.admin.command("replSetGetStatus")
            assert e.value.code == 94
    finally:
        rs.stop()


def test_tags_in_hello_read_preference_tag_sets_and_custom_write_modes(rs):
    with rs.members[0].client() as c:
        c.admin.command("replSetInitiate", tagged_config(rs))
    wait_until(lambda: (rs.hello(rs.members[0]) or {}).get("isWritablePrimary"), 30,
               "the priority-3 member as primary")
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")

    # Each member reports its own tags; the configuration keeps tags and modes as given.
    for m, tags in zip(rs.members, TAGS):
        assert rs.hello(m)["tags"] == tags
    with rs.members[0].client() as c:
        conf = c.admin.command("replSetGetConfig")["config"]
    assert [m["tags"] for m in conf["members"]] == TAGS
    assert conf["settings"]["getLastErrorModes"] == MODES

    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        coll = c.test.tagged
        # A mode both data centres satisfy: acknowledged without a write concern error.
        multi = coll.with_options(write_concern=WriteConcern(w="multiDC", wtimeout=15000))
        r = multi.insert_one({"_id": 1})
        assert r.acknowledged
        two_racks = coll.with_options(write_concern=WriteConcern(w="twoRacks", wtimeout=15000))
        two_racks.insert_one({"_id": 2})

        # Read preference tag sets: the driver picks the member whose hello tags match.
        wait_until(lambda: c.test.tagged.count_documents({}) == 2, 10, "both documents")
        west = coll.with_options(read_preference=Secondary(tag_sets=[{"dc": "west"}]))
        for _ in range(5):
            cursor = west.find({"_id": 1})
            assert list(cursor) == [{"_id": 1}]
            assert cursor.address == ("127.0.0.1", rs.members[2].port)
        east = coll.with_options(read_preference=Secondary(tag_sets=[{"dc": "east"}]))
        for _ in range(5):
            cursor = east.find({"_id": 1})
            list(cursor)
            assert cursor.address == ("127.0.0.1", rs.members[1].port)

        # A mode no set of members can satisfy (two dc values exist): the write is done and
        # the reply carries UnsatisfiableWriteConcern.
        three = coll.with_options(write_concern=WriteConcern(w="threeDCs", wtimeout=15000))
        with pytest.raises(WriteConcernError) as e:
            three.insert_one({"_id": 3})
        assert (e.value.code, e.value.details["codeName"], e.value.details["errmsg"]) == (
            100, "UnsatisfiableWriteConcern", 'Not enough nodes match write concern mode "threeDCs"')
        assert coll.find_one({"_id": 3}) == {"_id": 3}

        # A mode the configuration does not define fails the command before it writes.
        unknown = coll.with_options(write_concern=WriteConcern(w="nope"))
        with pytest.raises(OperationFailure) as e:
            unknown.insert_one({"_id": 4})
        assert (e.value.code, e.value.details["errmsg"]) == (
            79, "No write concern mode named 'nope' found in replica set configuration")
        assert coll.find_one({"_id": 4}) is None

    # createIndexes' commitQuorum takes the modes too: built on members of both data centres.
    with rs.members[0].client() as c:
        r = c.test.command("createIndexes", "tagged", indexes=[{"key": {"v": 1}, "name": "v_1"}],
                           commitQuorum="multiDC", maxTimeMS=15000)
        assert r["commitQuorum"] == "multiDC"
        for mode, code in [("threeDCs", 278), ("nope", 79)]:
            with pytest.raises(OperationFailure) as e:
                c.test.command("createIndexes", "tagged",
                               indexes=[{"key": {"w": 1}, "name": f"w_{mode}"}], commitQuorum=mode)
            assert e.value.code == code, mode

    # Without the west member, a write no longer reaches two data centres: it times out
    # (done on the east members), while a mode the east members satisfy still succeeds.
    rs.members[2].stop()
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        coll = c.test.tagged
        multi = coll.with_options(write_concern=WriteConcern(w="multiDC", wtimeout=1500))
        started = time.monotonic()
        with pytest.raises(WriteConcernError) as e:
            multi.insert_one({"_id": 5})
        assert time.monotonic() - started >= 1.4
        assert (e.value.code, e.value.details["codeName"]) == (64, "WriteConcernTimeout")
        assert e.value.details["errInfo"]["writeConcern"]["w"] == "multiDC"
        assert coll.find_one({"_id": 5}) == {"_id": 5}
        two_racks = coll.with_options(write_concern=WriteConcern(w="twoRacks", wtimeout=15000))
        two_racks.insert_one({"_id": 6})


def test_a_custom_mode_without_a_replica_set(client, rs_client):
    # A standalone has no modes (MongoDB's validateWriteConcern); the implicit one-member set
    # has a configuration without any.
    for c, code, message in [
        (client, 2, "cannot use non-majority 'w' mode dc when a host is not a member of a replica set"),
        (rs_client, 79, "No write concern mode named 'dc' found in replica set configuration"),
    ]:
        coll = c.test.custom_mode.with_options(write_concern=WriteConcern(w="dc"))
        with pytest.raises(OperationFailure) as e:
            coll.insert_one({"x": 1})
        assert (e.value.code, e.value.details["errmsg"]) == (code, message)
        assert c.test.custom_mode.count_documents({}) == 0
