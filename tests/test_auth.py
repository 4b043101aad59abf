"""Authentication and authorization: a nidus started with --auth.

One server for the module. Its first user (root) is created through the localhost
exception; the other users are created by root. SCRAM is checked with pymongo (both
mechanisms, negotiated and speculative) and with a small SCRAM client written here, which
also drives the raw saslStart/saslContinue conversation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from bson import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from nidus_harness import NidusServer

ROOT_PWD = "r00t-pw"


@pytest.fixture(scope="module")
def auth_server(nidus_binary, tmp_path_factory):
    server = NidusServer(dbpath=tmp_path_factory.mktemp("nidus-auth") / "db", binary=nidus_binary,
                         log_name="nidus-auth", extra_args=["--auth"])
    server.start()
    anon = server.client()
    # Before any user exists: the localhost exception allows the first user, in admin only.
    with pytest.raises(OperationFailure) as e:
        anon.app.command("createUser", "early", pwd="x", roles=["read"])
    assert e.value.code == 13
    anon.admin.command("createUser", "root", pwd=ROOT_PWD, roles=["root"])
    anon.close()
    yield server
    assert server.is_running(), "the --auth server died during the tests"
    assert not server.panics(), server.panics()
    server.stop()


def login(server, user, pwd, source="admin", mechanism=None, **kw):
    uri = f"mongodb://{user}:{pwd}@127.0.0.1:{server.port}/?authSource={source}&directConnection=true"
    if mechanism:
        uri += f"&authMechanism={mechanism}"
    return MongoClient(uri, serverSelectionTimeoutMS=10000, **kw)


@pytest.fixture(scope="module")
def root(auth_server):
    c = login(auth_server, "root", ROOT_PWD)
    yield c
    c.close()


@pytest.fixture
def anon(auth_server):
    # One connection, so a conversation's steps and their effect share it.
    c = auth_server.client(maxPoolSize=1)
    yield c
    c.close()


def make_user(root, name, roles, pwd="pw", db="admin", **kw):
    try:
        root[db].command("dropUser", name)
    except OperationFailure:
        pass
    root[db].command("createUser", name, pwd=pwd, roles=roles, **kw)


def code_of(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code, str(e.value.details.get("errmsg", ""))


def test_unauthenticated_commands_refused(anon):
    for db, cmd in [("app", {"find": "c"}), ("app", {"insert": "c", "documents": [{}]}),
                    ("admin", {"listDatabases": 1}), ("admin", {"serverStatus": 1}),
                    ("app", {"count": "c"}), ("app", {"usersInfo": 1})]:
        code, msg = code_of(lambda: anon[db].command(cmd))
        name = next(iter(cmd))
        assert (code, msg) == (13, f"Command {name} requires authentication"), (cmd, code, msg)
    # The handshake, ping, buildInfo and connectionStatus need no user.
    assert anon.admin.command("ping")["ok"] == 1
    assert anon.admin.command("hello")["isWritablePrimary"] is True
    assert anon.admin.command("buildInfo")["version"]
    status = anon.admin.command("connectionStatus")
    assert status["authInfo"]["authenticatedUsers"] == []


def test_localhost_exception_closes_after_first_user(anon):
    code, _ = code_of(lambda: anon.admin.command("createUser", "second", pwd="x", roles=[]))
    assert code == 13


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256", None])
def test_login_with_each_mechanism(auth_server, root, mechanism):
    make_user(root, "alice", [{"role": "readWrite", "db": "app"}], pwd="s3cret")
    c = login(auth_server, "alice", "s3cret", mechanism=mechanism)
    try:
        c.app.c.insert_one({"m": mechanism or "default"})
        assert c.app.c.count_documents({"m": mechanism or "default"}) >= 1
        status = c.admin.command("connectionStatus")["authInfo"]
        assert status["authenticatedUsers"] == [{"user": "alice", "db": "admin"}]
        assert {"role": "readWrite", "db": "app"} in status["authenticatedUserRoles"]
    finally:
        c.close()


def test_wrong_password_and_unknown_user(auth_server, root):
    make_user(root, "bob", ["readAnyDatabase"], pwd="right")
    for user, pwd, mech in [("bob", "wrong", "SCRAM-SHA-256"), ("bob", "wrong", "SCRAM-SHA-1"),
                            ("nobody", "x", "SCRAM-SHA-256"), ("bob", "right", None)]:
        c = login(auth_server, user, pwd, mechanism=mech)
        try:
            if pwd == "right":
                assert c.admin.command("ping")["ok"] == 1
                continue
            code, msg = code_of(lambda: c.admin.command("ping"))
            assert (code, msg) == (18, "Authentication failed."), (user, mech)
        finally:
            c.close()
    # A user is looked up in its authentication database only.
    c = login(auth_server, "bob", "right", source="app")
    try:
        assert code_of(lambda: c.admin.command("ping"))[0] == 18
    finally:
        c.close()


def test_read_user_cannot_write(auth_server, root):
    root.app.docs.drop()
    root.app.docs.insert_many([{"_id": i} for i in range(3)])
    make_user(root, "reader", [{"role": "read", "db": "app"}])
    c = login(auth_server, "reader", "pw")
    try:
        assert c.app.docs.count_documents({}) == 3
        assert [d["_id"] for d in c.app.docs.find().sort("_id", 1)] == [0, 1, 2]
        code, msg = code_of(lambda: c.app.docs.insert_one({"_id": 9}))
        assert code == 13
        assert msg.startswith('not authorized on app to execute command { insert: "docs"'), msg
        for op in [lambda: c.app.docs.update_one({}, {"$set": {"x": 1}}),
                   lambda: c.app.docs.delete_one({}),
                   lambda: c.app.docs.drop(),
                   lambda: c.app.docs.create_index("x"),
                   lambda: c.other.docs.find_one(),
                   lambda: c.admin.command("serverStatus"),
                   lambda: c.app.command("createUser", "x", pwd="x", roles=[])]:
            assert code_of(op)[0] == 13
        assert root.app.docs.count_documents({}) == 3
        # A user may look at its own entry, and at nobody else's.
        me = c.admin.command("usersInfo", "reader")["users"]
        assert [u["user"] for u in me] == ["reader"] and "credentials" not in me[0]
        assert code_of(lambda: c.admin.command("usersInfo", "root"))[0] == 13
        assert code_of(lambda: c.admin.command("usersInfo", 1))[0] == 13
    finally:
        c.close()


def test_read_write_user(auth_server, root):
    make_user(root, "writer", [{"role": "readWrite", "db": "app"}])
    c = login(auth_server, "writer", "pw")
    try:
        c.app.rw.drop()
        c.app.rw.insert_one({"_id": 1})
        c.app.rw.update_one({"_id": 1}, {"$set": {"a": 1}})
        c.app.rw.update_one({"_id": 2}, {"$set": {"a": 2}}, upsert=True)
        assert c.app.rw.find_one_and_update({"_id": 1}, {"$inc": {"a": 1}})["a"] == 1
        assert list(c.app.rw.aggregate([{"$match": {"_id": 2}}])) == [{"_id": 2, "a": 2}]
        c.app.rw.create_index("a")
        c.app.rw.delete_one({"_id": 2})
        assert root.app.rw.find_one({"_id": 1}) == {"_id": 1, "a": 2}
        # Privileges stop at the database: no writes elsewhere, no $out into another database.
        assert code_of(lambda: c.other.rw.insert_one({}))[0] == 13
        assert code_of(lambda: list(c.app.rw.aggregate([{"$out": {"db": "other", "coll": "x"}}])))[0] == 13
        # listDatabases without the cluster privilege lists only the user's databases.
        names = c.list_database_names()
        assert names == ["app"], names
        assert "admin" in root.list_database_names()
    finally:
        c.close()


def test_users_info_hides_credentials(root):
    make_user(root, "carol", [{"role": "read", "db": "app"}], pwd="hunter2", customData={"team": "x"})
    info = root.admin.command("usersInfo", "carol")["users"]
    assert len(info) == 1
    u = info[0]
    assert u["_id"] == "admin.carol" and u["user"] == "carol" and u["db"] == "admin"
    assert u["roles"] == [{"role": "read", "db": "app"}]
    assert u["customData"] == {"team": "x"}
    assert sorted(u["mechanisms"]) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert "credentials" not in u
    shown = root.admin.command("usersInfo", "carol", showCredentials=True)["users"][0]["credentials"]
    assert set(shown) == {"SCRAM-SHA-1", "SCRAM-SHA-256"}
    for mech, iterations, salt_len in [("SCRAM-SHA-1", 10000, 16), ("SCRAM-SHA-256", 15000, 28)]:
        c = shown[mech]
        assert set(c) == {"iterationCount", "salt", "storedKey", "serverKey"}
        assert c["iterationCount"] == iterations
        assert len(base64.b64decode(c["salt"])) == salt_len
    # The stored document holds salted keys only, never the password.
    stored = root.admin["system.users"].find_one({"_id": "admin.carol"})
    assert "hunter2" not in repr(stored) and "pwd" not in stored
    assert stored["credentials"] == shown
    # The keys are the ones SCRAM derives from the password (SHA-1 over MongoDB's digest).
    for mech, name, pwd in [("SCRAM-SHA-1", "sha1", hashlib.md5(b"carol:mongo:hunter2").hexdigest()),
                            ("SCRAM-SHA-256", "sha256", "hunter2")]:
        c = shown[mech]
        salted = hashlib.pbkdf2_hmac(name, pwd.encode(), base64.b64decode(c["salt"]), c["iterationCount"])
        client_key = hmac.new(salted, b"Client Key", name).digest()
        assert base64.b64decode(c["storedKey"]) == hashlib.new(name, client_key).digest()
        assert base64.b64decode(c["serverKey"]) == hmac.new(salted, b"Server Key", name).digest()
    all_users = {u["user"] for u in root.admin.command("usersInfo", 1)["users"]}
    assert {"root", "carol"} <= all_users
    assert root.app.command("usersInfo", 1)["users"] == []


def test_user_management_errors(root):
    make_user(root, "dave", ["read"], db="app")
    code, msg = code_of(lambda: root.app.command("createUser", "dave", pwd="x", roles=[]))
    assert (code, msg) == (51003, 'User "dave@app" already exists')
    code, msg = code_of(lambda: root.app.command("createUser", "eve", pwd="x", roles=["nosuch"]))
    assert (code, msg) == (31, "Could not find role: nosuch@app")
    assert code_of(lambda: root.app.command("createUser", "eve", roles=[]))[0] == 2
    assert code_of(lambda: root.app.command("createUser", "eve", pwd="x"))[0] == 40414
    code, msg = code_of(lambda: root.app.command("dropUser", "nosuch"))
    assert (code, msg) == (11, "User 'nosuch@app' not found")
    assert code_of(lambda: root.app.command("updateUser", "nosuch", pwd="x"))[0] == 11
    assert root.app.command("dropAllUsersFromDatabase")["n"] == 1
    assert root.app.command("usersInfo", "dave")["users"] == []


def test_password_change_and_drop_take_effect(auth_server, root):
    make_user(root, "frank", [{"role": "read", "db": "app"}], pwd="old")
    live = login(auth_server, "frank", "old")
    try:
        assert live.app.docs.count_documents({}) >= 0
        root.admin.command("updateUser", "frank", pwd="new")
        for pwd, ok in [("old", False), ("new", True)]:
            c = login(auth_server, "frank", pwd)
            try:
                if ok:
                    c.admin.command("ping")
                    c.app.docs.find_one()
                else:
                    assert code_of(lambda: c.admin.command("ping"))[0] == 18
            finally:
                c.close()
        # Granting and revoking roles changes what a logged-in connection may do.
        assert code_of(lambda: live.app.docs.insert_one({}))[0] == 13
        root.admin.command("grantRolesToUser", "frank", roles=[{"role": "readWrite", "db": "app"}])
        live.app.frank.insert_one({"ok": 1})
        root.admin.command("revokeRolesFromUser", "frank", roles=[{"role": "readWrite", "db": "app"}])
        assert code_of(lambda: live.app.frank.insert_one({}))[0] == 13
        root.admin.command("dropUser", "frank")
        code, msg = code_of(lambda: live.app.docs.find_one())
        assert code == 13
    finally:
        live.close()


def test_cursor_belongs_to_its_user(auth_server, root):
    root.app.cur.drop()
    root.app.cur.insert_many([{"_id": i} for i in range(10)])
    make_user(root, "u1", [{"role": "read", "db": "app"}])
    make_user(root, "u2", [{"role": "read", "db": "app"}])
    c1, c2 = login(auth_server, "u1", "pw"), login(auth_server, "u2", "pw")
    try:
        reply = c1.app.command("find", "cur", batchSize=2)
        cid = reply["cursor"]["id"]
        assert cid != 0
        code, msg = code_of(lambda: c2.app.command("getMore", cid, collection="cur"))
        assert (code, msg) == (13, f"cursor id {cid} was not created by the authenticated user")
        assert code_of(lambda: c2.app.command("killCursors", "cur", cursors=[cid]))[0] == 13
        more = c1.app.command("getMore", cid, collection="cur", batchSize=3)
        assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3, 4]
        assert c1.app.command("killCursors", "cur", cursors=[cid])["cursorsKilled"] == [cid]
    finally:
        c1.close()
        c2.close()


def test_user_defined_role(auth_server, root):
    for r in ["onlyOne"]:
        try:
            root.app.command("dropRole", r)
        except OperationFailure:
            pass
    root.app.only.drop()
    root.app.only.insert_one({"_id": 1})
    root.app.command("createRole", "onlyOne", roles=[],
                     privileges=[{"resource": {"db": "app", "collection": "only"}, "actions": ["find"]}])
    code, msg = code_of(lambda: root.app.command(
        "createRole", "wide", roles=[], privileges=[{"resource": {"cluster": True}, "actions": ["find"]}]))
    assert code == 49, msg
    info = root.app.command("rolesInfo", "onlyOne", showPrivileges=True)["roles"][0]
    assert info["role"] == "onlyOne" and info["isBuiltin"] is False
    assert info["privileges"] == [{"resource": {"db": "app", "collection": "only"}, "actions": ["find"]}]
    make_user(root, "gina", [{"role": "onlyOne", "db": "app"}])
    c = login(auth_server, "gina", "pw")
    try:
        assert c.app.only.find_one() == {"_id": 1}
        assert code_of(lambda: c.app.docs.find_one())[0] == 13
        # authorizedCollections lists what the role reaches; a plain listCollections is refused.
        names = c.app.list_collection_names(authorizedCollections=True)
        assert names == ["only"], names
        assert code_of(lambda: c.app.command("listCollections"))[0] == 13
        root.app.command("dropRole", "onlyOne")
        assert code_of(lambda: c.app.only.find_one())[0] == 13
        assert root.admin.command("usersInfo", "gina")["users"][0]["roles"] == []
    finally:
        c.close()


def test_cluster_monitor_and_root(auth_server, root):
    make_user(root, "mon", ["clusterMonitor"])
    c = login(auth_server, "mon", "pw")
    try:
        assert c.admin.command("serverStatus")["ok"] == 1
        assert code_of(lambda: c.app.docs.find_one())[0] == 13
    finally:
        c.close()
    assert root.admin.command("serverStatus")["ok"] == 1
    assert root.admin.command("getCmdLineOpts")["parsed"]["security"] == {"authorization": "enabled"}


# --- the SASL conversation by hand ----------------------------------------------------------

def scram_client(user, pwd, mechanism):
    """A minimal SCRAM client: yields client messages, receives server messages."""
    name = "sha1" if mechanism == "SCRAM-SHA-1" else "sha256"
    secret = hashlib.md5(f"{user}:mongo:{pwd}".encode()).hexdigest() if name == "sha1" else pwd
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={user},r={nonce}"
    server_first = yield f"n,,{bare}".encode()
    attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
    assert attrs["r"].startswith(nonce)
    salted = hashlib.pbkdf2_hmac(name, secret.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = yield f"{without_proof},p={proof}".encode()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, name).digest()).decode()
    assert server_final.decode() == f"v={expected}"
    yield None


def test_raw_sasl_conversation_without_skip_empty_exchange(anon, root):
    make_user(root, "hank", [{"role": "read", "db": "app"}], pwd="pw", db="app")
    for mech in ["SCRAM-SHA-1", "SCRAM-SHA-256"]:
        conv = scram_client("hank", "pw", mech)
        first = next(conv)
        r1 = anon.app.command("saslStart", 1, mechanism=mech, payload=Binary(first))
        assert r1["done"] is False and isinstance(r1["conversationId"], int)
        r2 = anon.app.command("saslContinue", 1, conversationId=r1["conversationId"],
                              payload=Binary(conv.send(r1["payload"])))
        assert r2["done"] is False
        assert conv.send(r2["payload"]) is None
        r3 = anon.app.command("saslContinue", 1, conversationId=r1["conversationId"], payload=Binary(b""))
        assert r3["done"] is True and r3["payload"] == b""
        users = anon.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"]
        assert users == [{"user": "hank", "db": "app"}]
        assert anon.app.command("count", "docs")["n"] >= 0
        anon.app.command("logout")
        assert code_of(lambda: anon.app.docs.find_one())[0] == 13


def test_speculative_authentication_in_hello(auth_server, root):
    make_user(root, "ivy", [{"role": "read", "db": "app"}], pwd="pw")
    c = auth_server.client(maxPoolSize=1)
    try:
        conv = scram_client("ivy", "pw", "SCRAM-SHA-256")
        hello = c.admin.command("hello", saslSupportedMechs="admin.ivy", speculativeAuthenticate={
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(next(conv)),
            "db": "admin", "options": {"skipEmptyExchange": True}})
        assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
        spec = hello["speculativeAuthenticate"]
        r = c.admin.command("saslContinue", 1, conversationId=spec["conversationId"],
                            payload=Binary(conv.send(spec["payload"])))
        assert r["done"] is True
        assert conv.send(r["payload"]) is None
        assert c.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
            {"user": "ivy", "db": "admin"}]
        # Unknown users get no saslSupportedMechs and no speculative reply.
        hello = c.admin.command("hello", saslSupportedMechs="admin.nobody")
        assert "saslSupportedMechs" not in hello
    finally:
        c.close()


def test_sasl_errors(anon):
    code, msg = code_of(lambda: anon.admin.command("saslStart", 1, mechanism="PLAIN", payload=Binary(b"x")))
    assert (code, msg) == (334, "Received authentication for mechanism PLAIN which is unknown or not enabled")
    assert code_of(lambda: anon.admin.command("saslContinue", 1, conversationId=7, payload=Binary(b"x")))[0] == 17
    code, msg = code_of(lambda: anon.admin.command("saslStart", 1, mechanism="SCRAM-SHA-256",
                                                     payload=Binary(b"garbage")))
    assert (code, msg) == (18, "Authentication failed.")


def test_mongosh_logs_in(auth_server, root, tmp_path):
    import subprocess

    from test_mongosh import find_mongosh
    exe = find_mongosh()
    cfg = tmp_path / ".mongodb" / "mongosh"
    cfg.mkdir(parents=True)
    (cfg / "config").write_text('{"enableTelemetry": false, "disableGreetingMessage": true}')
    make_user(root, "shell", [{"role": "readWrite", "db": "app"}], pwd="pw")
    uri = (f"mongodb://shell:pw@127.0.0.1:{auth_server.port}/app?authSource=admin"
           "&directConnection=true&serverSelectionTimeoutMS=10000")
    env = {**os.environ, "HOME": str(tmp_path), "MONGOSH_NO_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    r = subprocess.run([exe, uri, "--quiet", "--eval",
                        "db.sh.insertOne({a: 1}); print('N', db.sh.countDocuments({a: 1})); "
                        "print('ME', db.runCommand({connectionStatus: 1}).authInfo.authenticatedUsers[0].user)"],
                       capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "ME shell" in r.stdout and "N " in r.stdout, r.stdout


# --- changeOwnPassword / changeOwnCustomData, counters, getMore by ownership ----------------

def test_change_own_password_and_custom_data(auth_server, root):
    """MongoDB's checkAuthForTypedCommand(UpdateUserCommand): pwd needs changePassword on the
    user's database or changeOwnPassword when the user updates itself; customData likewise."""
    try:
        root.admin.command("dropRole", "selfService")
    except OperationFailure:
        pass
    root.admin.command("createRole", "selfService", roles=[], privileges=[
        {"resource": {"db": "admin", "collection": ""},
         "actions": ["changeOwnPassword", "changeOwnCustomData"]}])
    make_user(root, "sam", ["selfService"], pwd="old")
    make_user(root, "tom", [{"role": "read", "db": "app"}], pwd="pw")
    sam, tom = login(auth_server, "sam", "old"), login(auth_server, "tom", "pw")
    try:
        sam.admin.command("updateUser", "sam", pwd="new", customData={"team": "x"})
        info = root.admin.command("usersInfo", "sam")["users"][0]
        assert info["customData"] == {"team": "x"}
        fresh = login(auth_server, "sam", "new")
        assert fresh.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
            {"user": "sam", "db": "admin"}]
        fresh.close()
        # Not for somebody else, and not its own roles.
        assert code_of(lambda: sam.admin.command("updateUser", "tom", pwd="x")) == (
            13, "Not authorized to change password of user: tom@admin")
        assert code_of(lambda: sam.admin.command("updateUser", "tom", customData={})) == (
            13, "Not authorized to change customData of user: tom@admin")
        assert code_of(lambda: sam.admin.command("updateUser", "sam", roles=["root"]))[0] == 13
        # Without the actions a user cannot change itself either.
        assert code_of(lambda: tom.admin.command("updateUser", "tom", pwd="x")) == (
            13, "Not authorized to change password of user: tom@admin")
        assert code_of(lambda: tom.admin.command("updateUser", "tom", customData={"a": 1})) == (
            13, "Not authorized to change customData of user: tom@admin")
        # The role's actions are validated and reported like any other.
        role = root.admin.command("rolesInfo", "selfService", showPrivileges=True)["roles"][0]
        assert sorted(role["privileges"][0]["actions"]) == ["changeOwnCustomData", "changeOwnPassword"]
    finally:
        sam.close()
        tom.close()


def _mech_counters(root, mech):
    auth = root.admin.command("serverStatus")["security"]["authentication"]
    return auth["saslSupportedMechsReceived"], auth["mechanisms"][mech]


def test_authentication_counters(auth_server, root, anon):
    """serverStatus().security.authentication (MongoDB's AuthCounter: saslStart counts
    `authenticate.received`, plus `speculativeAuthenticate.received` inside hello; a completed
    conversation counts `successful`)."""
    make_user(root, "cnt", [{"role": "read", "db": "app"}], pwd="pw", mechanisms=["SCRAM-SHA-1"])
    mechs = root.admin.command("serverStatus")["security"]["authentication"]["mechanisms"]
    assert sorted(mechs) == ["MONGODB-X509", "SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert set(mechs["SCRAM-SHA-1"]) == {"speculativeAuthenticate", "clusterAuthenticate", "authenticate"}
    ssm0, c0 = _mech_counters(root, "SCRAM-SHA-1")

    # A full conversation by saslStart/saslContinue.
    conv = scram_client("cnt", "pw", "SCRAM-SHA-1")
    r = anon.admin.command("saslStart", 1, mechanism="SCRAM-SHA-1", payload=Binary(next(conv)),
                           options={"skipEmptyExchange": True})
    r = anon.admin.command("saslContinue", 1, conversationId=r["conversationId"],
                           payload=Binary(conv.send(r["payload"])))
    assert r["done"] is True
    anon.admin.command("logout")
    # A wrong password: received, not successful.
    bad = scram_client("cnt", "nope", "SCRAM-SHA-1")
    r = anon.admin.command("saslStart", 1, mechanism="SCRAM-SHA-1", payload=Binary(next(bad)))
    with pytest.raises(OperationFailure):
        anon.admin.command("saslContinue", 1, conversationId=r["conversationId"],
                           payload=Binary(bad.send(r["payload"])))
    # A speculative one in hello, finished by saslContinue; and a saslSupportedMechs ask.
    conv = scram_client("cnt", "pw", "SCRAM-SHA-1")
    hello = anon.admin.command("hello", saslSupportedMechs="admin.cnt", speculativeAuthenticate={
        "saslStart": 1, "mechanism": "SCRAM-SHA-1", "payload": Binary(next(conv)),
        "db": "admin", "options": {"skipEmptyExchange": True}})
    spec = hello["speculativeAuthenticate"]
    r = anon.admin.command("saslContinue", 1, conversationId=spec["conversationId"],
                           payload=Binary(conv.send(spec["payload"])))
    assert r["done"] is True
    anon.admin.command("logout")

    ssm1, c1 = _mech_counters(root, "SCRAM-SHA-1")
    assert ssm1 - ssm0 == 1
    assert c1["authenticate"]["received"] - c0["authenticate"]["received"] == 3
    assert c1["authenticate"]["successful"] - c0["authenticate"]["successful"] == 2
    assert c1["speculativeAuthenticate"]["received"] - c0["speculativeAuthenticate"]["received"] == 1
    assert c1["speculativeAuthenticate"]["successful"] - c0["speculativeAuthenticate"]["successful"] == 1
    assert c1["clusterAuthenticate"] == {"received": 0, "successful": 0}


def test_get_more_is_checked_by_ownership_only(auth_server, root):
    """checkAuthForGetMore: an authenticated user may getMore the cursors it opened, even after
    losing the privilege that opened them; others may not."""
    root.app.own.drop()
    root.app.own.insert_many([{"_id": i} for i in range(6)])
    make_user(root, "olga", [{"role": "read", "db": "app"}])
    c = login(auth_server, "olga", "pw")
    try:
        cid = c.app.command("find", "own", batchSize=2)["cursor"]["id"]
        root.admin.command("revokeRolesFromUser", "olga", roles=[{"role": "read", "db": "app"}])
        assert code_of(lambda: c.app.own.find_one())[0] == 13
        more = c.app.command("getMore", cid, collection="own", batchSize=2)
        assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3]
        code, msg = code_of(lambda: root.app.command("getMore", cid, collection="own"))
        assert (code, msg) == (13, f"cursor id {cid} was not created by the authenticated user")
    finally:
        c.close()
