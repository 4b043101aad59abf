"""pytest fixtures: one nidus server for the session, plus a factory for extra servers.

    nidus_server  session  the NidusServer (port, uri, dbpath, log_path)
    client        session  pymongo.MongoClient connected to it (directConnection=True)
    uri / port    session  its address
    db            function a database named after the test, dropped before the test
    start_nidus   function factory: start_nidus(dbpath=None, **kw) -> a started NidusServer,
                           stopped (or killed) when the test ends
The binary is $NIDUS_BIN, else $CARGO_TARGET_DIR/release/nidus, else this clone's default
build directory (~/.cache/nidus-target-<clone id>/release/nidus, see scripts/lib.sh), else
target/release/nidus.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nidus_harness import NidusError, NidusServer, ReplicaSet, find_binary  # noqa: E402


def pytest_report_header(config):
    try:
        return f"nidus binary: {find_binary()}"
    except NidusError:
        return "nidus binary: NOT FOUND"


@pytest.fixture(scope="session")
def nidus_binary():
    try:
        return find_binary()
    except NidusError as e:
        pytest.exit(str(e), returncode=3)


@pytest.fixture(scope="session")
def nidus_server(nidus_binary, tmp_path_factory):
    server = NidusServer(dbpath=tmp_path_factory.mktemp("nidus-main") / "db", binary=nidus_binary,
                         log_name="nidus-session")
    try:
        server.start()
    except NidusError as e:
        pytest.exit(f"could not start {nidus_binary}: {e}", returncode=3)
    yield server
    alive = server.is_running()
    rc = server.stop()
    problems = []
    if not alive:
        problems.append(f"the session's server died during the tests (exit code {rc})")
    elif rc != 0:
        problems.append(f"the session's server exited with {rc} on SIGTERM (expected 0)")
    if server.panics():
        problems.append("panics in the server log:\n" + "\n".join(server.panics()[:10]))
    if problems:
        pytest.fail("\n".join(problems) + f"\nlog: {server.log_path}\n{server.log_tail()}", pytrace=False)


@pytest.fixture(scope="session")
def client(nidus_server):
    c = nidus_server.client()
    yield c
    c.close()


@pytest.fixture(scope="session")
def uri(nidus_server):
    return nidus_server.uri


@pytest.fixture(scope="session")
def port(nidus_server):
    return nidus_server.port


def db_name_for(nodeid: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", nodeid.split("::", 1)[-1])
    return ("t_" + name)[:60]


@pytest.fixture
def db(client, request):
    name = db_name_for(request.node.nodeid)
    client.drop_database(name)
    return client[name]


@pytest.fixture
def start_nidus(nidus_binary, tmp_path):
    """start_nidus(dbpath=None, port=None, extra_args=None) -> started NidusServer."""
    started: list[NidusServer] = []

    def start(dbpath=None, **kwargs):
        if dbpath is None:
            dbpath = tmp_path / f"db{len(started)}"
        kwargs.setdefault("log_name", f"{db_name_for(str(tmp_path.name))}-{len(started)}")
        s = NidusServer(dbpath=dbpath, binary=nidus_binary, **kwargs)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        if s.is_running():
            try:
                s.stop()
            except NidusError:
                s.kill()


@pytest.fixture
def rs():
    """A started three-member ReplicaSet (not initiated); stopped afterwards, and no member
    may have panicked."""
    r = ReplicaSet(3).start()
    try:
        yield r
    finally:
        r.stop()
        for m in r.members:
            assert m.panics() == [], m.log_tail()


@pytest.fixture(scope="module")
def rs_member(nidus_binary, tmp_path_factory, request):
    """A one-member replica set (`--replSet rs0`) of the test module's own, for what a
    standalone refuses (oplog, change streams)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    server = NidusServer(dbpath=tmp_path_factory.mktemp(name) / "db", binary=nidus_binary,
                         extra_args=["--replSet", "rs0"], log_name=f"nidus-{name}")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rs_client(rs_member):
    c = rs_member.client()
    yield c
    c.close()
