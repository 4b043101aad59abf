"""Start and stop `nidus` servers for tests (used by conftest.py and pymongo_suite/run.py).

Only ever binds 127.0.0.1 and only ever signals the processes it started itself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / "tests" / ".logs"
HOST = "127.0.0.1"


class NidusError(RuntimeError):
    pass


def clone_id() -> str:
    """The name of this clone's default build directory (`scripts/lib.sh` computes it too):
    the first 12 hex digits of the SHA-256 of the clone's path."""
    return hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]


def binary_candidates() -> list[Path]:
    out = []
    if os.environ.get("NIDUS_BIN"):
        out.append(Path(os.environ["NIDUS_BIN"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        out.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "nidus")
    out.append(Path.home() / ".cache" / f"nidus-target-{clone_id()}" / "release" / "nidus")
    out.append(ROOT / "target" / "release" / "nidus")
    return out


def find_binary() -> Path:
    """The nidus binary: $NIDUS_BIN, else $CARGO_TARGET_DIR/release/nidus, else the defaults."""
    cands = binary_candidates()
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise NidusError(
        "nidus binary not found; looked at:\n  "
        + "\n  ".join(str(c) for c in cands)
        + "\nBuild it with `cargo build --release` (or run scripts/test.sh), or set NIDUS_BIN."
    )


def wait_until(pred, timeout: float, what: str, tolerate: tuple = ()):
    """Polls `pred` every 50 ms until it returns something truthy (returned) or `timeout`
    seconds pass (AssertionError naming `what` and the last value). Exceptions of the
    `tolerate` types count as a falsy try (their repr is the last value)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except tolerate as e:
            last = repr(e)
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def member_state(m, dbs=("test", "test2")) -> dict:
    """Everything a replica set member holds that the set must agree on, per namespace: a
    collection's UUID, options, index specs and documents; a view's options."""
    with m.client(serverSelectionTimeoutMS=2000) as c:
        out = {}
        for db in dbs:
            for info in c[db].list_collections():
                name = info["name"]
                if info.get("type") == "view":
                    out[f"{db}.{name}"] = {"view": info.get("options")}
                    continue
                out[f"{db}.{name}"] = {
                    "uuid": info["info"]["uuid"],
                    "options": info.get("options"),
                    "indexes": sorted((dict(ix) for ix in c[db][name].list_indexes()), key=lambda ix: ix["name"]),
                    "docs": sorted(c[db][name].find({}), key=lambda d: repr(d["_id"])),
                }
        return out


class NidusServer:
    """One nidus process on 127.0.0.1:<port> with its own dbpath and log file."""

    def __init__(
        self,
        dbpath: str | os.PathLike | None = None,
        port: int | None = None,
        binary: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
        test_commands: bool = True,
        log_name: str | None = None,
        client_options: dict | None = None,
    ):
        self.binary = Path(binary) if binary else find_binary()
        self._own_dbpath = dbpath is None
        # A dbpath made here is removed by remove_dbpath() (ReplicaSet.stop does so).
        self.owns_dbpath = dbpath is None
        self.dbpath = Path(dbpath) if dbpath else Path(tempfile.mkdtemp(prefix="nidus-db-"))
        self.port = port
        self.extra_args = list(extra_args or [])
        self.test_commands = test_commands
        # MongoClient options every client of this server needs (e.g. tls=True under requireTLS).
        self.client_options = dict(client_options or {})
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        name = log_name or f"nidus-{os.getpid()}-{int(time.time() * 1000)}"
        self.log_path = LOG_DIR / f"{name}.log"
        self.log_path.unlink(missing_ok=True)  # one log per server object, appended across restarts
        self.proc: subprocess.Popen | None = None
        self._log_file = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def uri(self) -> str:
        return f"mongodb://{HOST}:{self.port}/?directConnection=true"

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    def argv(self) -> list[str]:
        args = [
            str(self.binary),
            "--port", str(self.port),
            "--bind_ip", HOST,
            "--dbpath", str(self.dbpath),
        ]
        if self.test_commands:
            args += ["--setParameter", "enableTestCommands=1"]
        return args + self.extra_args

    def start(self, timeout: float = 60.0) -> "NidusServer":
        if self.is_running():
            raise NidusError("already running")
        self.dbpath.mkdir(parents=True, exist_ok=True)
        fixed_port = self.port is not None
        last_err = None
        for _attempt in range(1 if fixed_port else 4):
            if not fixed_port:
                self.port = free_port()
            self._log_file = open(self.log_path, "ab")
            self._log_file.write(f"\n### start {' '.join(self.argv())}\n".encode())
            self._log_file.flush()
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.dbpath.parent),
                env={**os.environ, "RUST_BACKTRACE": "1"},
            )
            try:
                self.wait_ready(timeout)
                return self
            except NidusError as e:
                last_err = e
                if self.proc.poll() is None:
                    self.kill()
                self._close_log()
                if "Address already in use" not in self.log_tail():
                    break
        raise NidusError(f"nidus did not start: {last_err}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Waits until the server accepts connections and answers `ping`."""
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        deadline = time.monotonic() + timeout
        last = "no attempt"
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                rc = None if self.proc is None else self.proc.returncode
                raise NidusError(f"process exited with {rc} before answering ping; log tail:\n{self.log_tail()}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    pass
            except OSError as e:
                last = f"connect: {e}"
                time.sleep(0.05)
                continue
            try:
                c = MongoClient(HOST, self.port, directConnection=True,
                                serverSelectionTimeoutMS=2000, connectTimeoutMS=2000,
                                **self.client_options)
                try:
                    c.admin.command("ping")
                    return
                finally:
                    c.close()
            except PyMongoError as e:
                last = f"ping: {e!r}"
                time.sleep(0.1)
        raise NidusError(f"no answer to ping within {timeout}s ({last}); log tail:\n{self.log_tail()}")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; SIGKILL after `timeout`. Returns the exit code (negative = signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                self._close_log()
                raise NidusError(f"did not exit within {timeout}s of SIGTERM; killed. log tail:\n{self.log_tail()}")
        self._close_log()
        return self.proc.returncode

    def remove_dbpath(self) -> None:
        """Deletes the dbpath if this object made it (a temporary directory); stopped only."""
        if self.owns_dbpath and not self.is_running():
            shutil.rmtree(self.dbpath, ignore_errors=True)

    def kill(self) -> int | None:
        """SIGKILL (a crash)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_log()
        return self.proc.returncode

    def restart(self, timeout: float = 60.0) -> "NidusServer":
        """Starts again on the same port and dbpath (after stop() or kill())."""
        if self.is_running():
            raise NidusError("stop it first")
        return self.start(timeout)

    def _close_log(self) -> None:
        if self._log_file is not None:
            try:
                self._log_file.close()
            except OSError:
                pass
            self._log_file = None

    # ---------------------------------------------------------------- helpers
    def client(self, **kwargs):
        from pymongo import MongoClient

        kwargs.setdefault("directConnection", True)
        kwargs.setdefault("serverSelectionTimeoutMS", 10000)
        for k, v in self.client_options.items():
            kwargs.setdefault(k, v)
        return MongoClient(HOST, self.port, **kwargs)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def panics(self) -> list[str]:
        return [l for l in self.log_text().splitlines() if "panicked at" in l]

    def __enter__(self):
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        except NidusError:
            pass


class ReplicaSet:
    """`n` nidus processes started with `--replSet NAME` on free loopback ports, each with its
    own dbpath. Only ever signals its own processes."""

    def __init__(self, n: int = 3, name: str = "rs0", extra_args: list[str] | None = None):
        self.name = name
        stamp = f"{os.getpid()}-{int(time.time() * 1000)}"
        self.members = [
            NidusServer(
                port=free_port(),
                extra_args=["--replSet", name] + list(extra_args or []),
                log_name=f"rs-{name}-{i}-{stamp}",
            )
            for i in range(n)
        ]

    def start(self) -> "ReplicaSet":
        for m in self.members:
            m.start()
        return self

    def stop(self) -> None:
        """Stops every member and deletes the temporary dbpaths (a set is not restarted)."""
        for m in self.members:
            try:
                m.stop(timeout=15)
            except NidusError:
                pass
            m.remove_dbpath()

    def host(self, m: NidusServer) -> str:
        return f"{HOST}:{m.port}"

    def config(self, priorities: list[float] | None = None, settings: dict | None = None,
               member_options: list[dict] | None = None) -> dict:
        members = []
        for i, m in enumerate(self.members):
            d = {"_id": i, "host": self.host(m)}
            if priorities is not None:
                d["priority"] = priorities[i]
            if member_options is not None:
                d.update(member_options[i])
            members.append(d)
        conf = {"_id": self.name, "members": members}
        if settings:
            conf["settings"] = settings
        return conf

    def initiate(self, via: int = 0, **kw) -> dict:
        with self.members[via].client() as c:
            return c.admin.command("replSetInitiate", self.config(**kw))

    def uri(self, **options) -> str:
        hosts = ",".join(self.host(m) for m in self.members)
        opts = {"replicaSet": self.name, **options}
        return f"mongodb://{hosts}/?" + "&".join(f"{k}={v}" for k, v in opts.items())

    def hello(self, m: NidusServer) -> dict | None:
        """`hello` from one member, or None when it does not answer."""
        if not m.is_running():
            return None
        from pymongo.errors import PyMongoError

        try:
            with m.client(serverSelectionTimeoutMS=1000, connectTimeoutMS=1000) as c:
                return c.admin.command("hello")
        except PyMongoError:
            return None

    def wait_for_primary(self, timeout: float = 30.0, exclude: NidusServer | None = None) -> NidusServer:
        """The member that reports itself writable primary (and that every other running
        member names as primary), within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if m is exclude:
                    continue
                h = self.hello(m)
                if h and h.get("isWritablePrimary"):
                    return m
            time.sleep(0.05)
        raise NidusError(f"no primary within {timeout}s: " + repr([self.hello(m) for m in self.members]))

    def wait_for_state(self, m: NidusServer, state: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            h = self.hello(m)
            last = h
            if h is not None:
                if state == "PRIMARY" and h.get("isWritablePrimary"):
                    return
                if state == "SECONDARY" and h.get("secondary"):
                    return
            time.sleep(0.05)
        raise NidusError(f"{self.host(m)} not {state} within {timeout}s: {last!r}")
