"""`setDefaultRWConcern` / `getDefaultRWConcern` on one member (`--replSet`, the implicit
one-member set) and on a standalone: MongoDB's checks, codes and messages
(`read_write_concern_defaults.cpp`, `rwc_defaults_commands.cpp`), what the replies show, and
that the defaults are stored (they survive a restart). The three-member behaviour (defaults
replicated, taken by writes and reads naming none) is in test_replset.py."""

from __future__ import annotations

import bson
import pytest
from pymongo.errors import OperationFailure

# (setDefaultRWConcern arguments, code, errmsg)
REFUSALS = [
    ({}, 2, 'At least one of the "defaultReadConcern" or "defaultWriteConcern" fields must be present'),
    ({"defaultWriteConcern": {"j": True}}, 2, "Default write concern must have 'w' field."),
    ({"defaultWriteConcern": {"wtimeout": 10}}, 2, "Default write concern must have 'w' field."),
    ({"defaultWriteConcern": {"w": 0}}, 2,
     "Unacknowledged write concern is not suitable for the default write concern"),
    ({"defaultWriteConcern": {"w": 1, "provenance": "clientSupplied"}}, 2,
     "'provenance' must be unset in default write concern"),
    ({"defaultWriteConcern": {"w": "dc"}}, 79, "No write concern mode named 'dc' found in replica set configuration"),
    ({"defaultWriteConcern": {"w": 2}}, 100, "Not enough data-bearing nodes"),
    ({"defaultWriteConcern": {"w": -1}}, 9, "w cannot be a negative value"),
    ({"defaultReadConcern": {"level": "snapshot"}}, 2, "level: 'snapshot' is not suitable for the default read concern"),
    ({"defaultReadConcern": {"level": "linearizable"}}, 2,
     "level: 'linearizable' is not suitable for the default read concern"),
    ({"defaultReadConcern": {"level": "bogus"}}, 2,
     "Enumeration value 'bogus' for field 'defaultReadConcern.level' is not a valid value."),
    ({"defaultReadConcern": {"level": "majority", "afterClusterTime": bson.Timestamp(1, 1)}}, 2,
     "'afterClusterTime' is not suitable for the default read concern"),
    ({"defaultReadConcern": {"level": "local", "provenance": "clientSupplied"}}, 2,
     "'provenance' must be unset in default read concern"),
    ({"defaultWriteConcern": {"w": 1}, "bogus": 1}, 40415, "BSON field 'setDefaultRWConcern.bogus' is an unknown field."),
]


@pytest.fixture
def member(start_nidus):
    return start_nidus(extra_args=["--replSet", "rs0"])


@pytest.mark.parametrize("args,code,errmsg", REFUSALS, ids=[e for _, _, e in REFUSALS])
def test_refusals(member, args, code, errmsg):
    with member.client() as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.command({"setDefaultRWConcern": 1, **args})
        assert (e.value.code, e.value.details["errmsg"]) == (code, errmsg)
        # Nothing was stored.
        got = c.admin.command("getDefaultRWConcern")
        assert got["defaultWriteConcernSource"] == got["defaultReadConcernSource"] == "implicit", got


def test_standalone_and_database_refusals(client, member):
    for command in ("getDefaultRWConcern", "setDefaultRWConcern"):
        with pytest.raises(OperationFailure) as e:
            client.admin.command({command: 1, "defaultWriteConcern": {"w": 1}} if command.startswith("set")
                                 else {command: 1})
        assert (e.value.code, e.value.details["errmsg"]) == (
            51300, f"'{command}' is not supported on standalone nodes.")
        with member.client() as c, pytest.raises(OperationFailure) as e:
            c.test.command({command: 1})
        assert (e.value.code, e.value.details["errmsg"]) == (
            13, f"{command} may only be run against the admin database.")


def test_set_get_unset_and_restart(member):
    with member.client() as c:
        got = c.admin.command("getDefaultRWConcern", inMemory=True)
        assert got["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}, got
        assert got["defaultReadConcern"] == {"level": "local"} and got["inMemory"] is True, got
        assert "updateOpTime" not in got, got

        set_w = c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": "majority", "j": 1}})
        assert set_w["defaultWriteConcern"] == {"w": "majority", "j": True, "wtimeout": 0}, set_w
        assert set_w["defaultWriteConcernSource"] == "global", set_w
        assert set_w["defaultReadConcern"] == {"level": "local"}, set_w
        assert set_w["defaultReadConcernSource"] == "implicit", set_w
        assert isinstance(set_w["updateOpTime"], bson.Timestamp), set_w

        # Setting the read concern keeps the write concern.
        set_r = c.admin.command({"setDefaultRWConcern": 1, "defaultReadConcern": {"level": "majority"}})
        assert set_r["defaultReadConcern"] == {"level": "majority"}, set_r
        assert set_r["defaultWriteConcern"] == {"w": "majority", "j": True, "wtimeout": 0}, set_r
        assert set_r["updateOpTime"] > set_w["updateOpTime"], (set_r, set_w)
        got = c.admin.command("getDefaultRWConcern")
        assert {k: got[k] for k in set_r if k not in ("ok", "localUpdateWallClockTime", "$clusterTime",
                                                       "operationTime")} == \
            {k: set_r[k] for k in set_r if k not in ("ok", "localUpdateWallClockTime", "$clusterTime",
                                                      "operationTime")}
        # Writes and reads naming none take them (one member: both are met at once).
        c.test.d.insert_one({"_id": 1})
        assert c.test.d.find_one({"_id": 1}) == {"_id": 1}

        # A set write concern cannot be taken away; a read concern can.
        with pytest.raises(OperationFailure) as e:
            c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {}})
        assert (e.value.code, e.value.details["errmsg"]) == (
            20, "The global default write concern cannot be unset once it is set.")
        unset = c.admin.command({"setDefaultRWConcern": 1, "defaultReadConcern": {}})
        assert unset["defaultReadConcern"] == {"level": "local"}, unset
        assert unset["defaultReadConcernSource"] == "implicit", unset
        assert unset["defaultWriteConcernSource"] == "global", unset
        # Stored in config.settings, as MongoDB stores it.
        stored = c.config.settings.find_one({"_id": "ReadWriteConcernDefaults"})
        assert stored["defaultWriteConcern"] == {"w": "majority", "j": True, "wtimeout": 0}, stored
        assert "defaultReadConcern" not in stored, stored

    member.stop()
    member.restart()
    with member.client() as c:
        got = c.admin.command("getDefaultRWConcern")
        assert got["defaultWriteConcern"] == {"w": "majority", "j": True, "wtimeout": 0}, got
        assert got["defaultWriteConcernSource"] == "global", got
