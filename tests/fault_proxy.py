"""A fault-injecting TCP proxy for replica set tests (loopback only).

Each member gets a proxy listening on 127.0.0.2:<member port> that forwards to the member on
127.0.0.1:<member port>; the set's configuration names the proxies, so every connection
between members and from clients goes through them (nidus treats all of 127.0.0.0/8 as
loopback, so a member still recognizes itself in the configuration).

Faults:
- `delay(ms)`: each forwarded chunk is delivered `ms` milliseconds after it was read (both
  directions; chunks in flight do not wait for each other, as with netem).
- `isolate(member)`: connections to the member and connections from it (a member's first
  request names it in `fromHost`) are cut and refused until `heal()`.
"""

from __future__ import annotations

import collections
import socket
import threading
import time

PROXY_HOST = "127.0.0.2"
TARGET_HOST = "127.0.0.1"


class Faults:
    """Shared fault state for all proxies of one replica set."""

    def __init__(self):
        self.lock = threading.Lock()
        self.delay_s = 0.0
        self.isolated: set[int] = set()  # member ports
        self.generation = 0  # bumped on each new partition: open connections re-check

    def delay(self, ms: float) -> None:
        with self.lock:
            self.delay_s = ms / 1000.0

    def isolate(self, port: int) -> None:
        with self.lock:
            self.isolated.add(port)
            self.generation += 1

    def heal(self) -> None:
        with self.lock:
            self.isolated.clear()
            self.generation += 1

    def cut(self, target: int, source: int | None) -> bool:
        with self.lock:
            return target in self.isolated or (source is not None and source in self.isolated)


class Proxy:
    def __init__(self, port: int, faults: Faults):
        self.port = port
        self.faults = faults
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((PROXY_HOST, port))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.stopping = False
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        self.sock.close()
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self.stopping:
            try:
                client, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(0.2)
        # The first message tells which member (if any) is calling.
        first = b""
        deadline = time.monotonic() + 5
        while len(first) < 4 or len(first) < int.from_bytes(first[:4], "little"):
            if time.monotonic() > deadline or self.stopping:
                client.close()
                return
            try:
                chunk = client.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                client.close()
                return
            if not chunk:
                client.close()
                return
            first += chunk
        source = None
        at = first.find(b"fromHost\x00")
        if at >= 0:
            # BSON string: int32 length, bytes, NUL.
            n = int.from_bytes(first[at + 9:at + 13], "little")
            host = first[at + 13:at + 13 + n - 1].decode(errors="replace")
            try:
                source = int(host.rsplit(":", 1)[1])
            except (IndexError, ValueError):
                source = None
        if self.faults.cut(self.port, source):
            client.close()
            return
        try:
            upstream = socket.create_connection((TARGET_HOST, self.port), timeout=2)
        except OSError:
            client.close()
            return
        upstream.settimeout(0.2)
        self.conns += [client, upstream]
        gen = self.faults.generation
        done = threading.Event()

        def close_both() -> None:
            for s in (client, upstream):
                try:
                    s.close()
                except OSError:
                    pass

        def pump(src: socket.socket, dst: socket.socket, pending: bytes) -> None:
            # Each chunk is delivered `delay` after it was read, independently of the chunks
            # before it (as netem delays packets): a delay adds latency, not a bandwidth limit.
            queue: collections.deque = collections.deque()
            cond = threading.Condition()
            ended = threading.Event()

            def deliver() -> None:
                try:
                    while True:
                        with cond:
                            while not queue and not ended.is_set() and not done.is_set():
                                cond.wait(0.2)
                            if not queue or done.is_set():
                                return
                            due, data = queue.popleft()
                        wait = due - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                        dst.sendall(data)
                except OSError:
                    pass
                finally:
                    done.set()
                    close_both()

            def enqueue(data: bytes) -> None:
                with cond:
                    queue.append((time.monotonic() + self.faults.delay_s, data))
                    cond.notify()

            deliverer = threading.Thread(target=deliver, daemon=True)
            deliverer.start()
            try:
                if pending:
                    enqueue(pending)
                while not done.is_set() and not self.stopping:
                    if self.faults.generation != gen and self.faults.cut(self.port, source):
                        # A partition drops what is in flight.
                        done.set()
                        close_both()
                        break
                    try:
                        data = src.recv(65536)
                    except socket.timeout:
                        continue
                    if not data:
                        break
                    enqueue(data)
            except OSError:
                pass
            finally:
                # What was read is still delivered; then both sides close.
                with cond:
                    ended.set()
                    cond.notify()
                deliverer.join(5)

        t = threading.Thread(target=pump, args=(upstream, client, b""), daemon=True)
        t.start()
        pump(client, upstream, first)
        t.join(5)


class ProxiedSet:
    """Proxies in front of every member of a `ReplicaSet`; `config()`/`uri()` name them."""

    def __init__(self, rs):
        self.rs = rs
        self.faults = Faults()
        self.proxies = [Proxy(m.port, self.faults) for m in rs.members]

    def host(self, m) -> str:
        return f"{PROXY_HOST}:{m.port}"

    def config(self, priorities=None, settings=None) -> dict:
        conf = self.rs.config(priorities=priorities, settings=settings)
        for d, m in zip(conf["members"], self.rs.members):
            d["host"] = self.host(m)
        return conf

    def initiate(self, **kw) -> dict:
        with self.rs.members[0].client() as c:
            return c.admin.command("replSetInitiate", self.config(**kw))

    def uri(self, **options) -> str:
        hosts = ",".join(self.host(m) for m in self.rs.members)
        opts = {"replicaSet": self.rs.name, **options}
        return f"mongodb://{hosts}/?" + "&".join(f"{k}={v}" for k, v in opts.items())

    def close(self) -> None:
        for p in self.proxies:
            p.close()
