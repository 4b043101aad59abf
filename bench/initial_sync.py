#!/usr/bin/env python3
"""Initial sync time, logical vs file copy based (issue 19): a two-member set holding N
documents (two secondary indexes) with its Raft log compacted (1 MB bound), then a third
member added with `initialSyncMethod` set; time from `replSetReconfig` to the new member
reporting SECONDARY (the file copy includes its restart onto the copied files).

    bench/initial_sync.py [N] [logical|fileCopyBased ...] [--ports BASE]

Free loopback ports unless `--ports BASE` (BASE..BASE+2). Measures; asserts only that the new
member holds N documents. Only stops the processes it started.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from nidus_harness import NidusServer, wait_until  # noqa: E402
from pymongo import WriteConcern  # noqa: E402

BASE = None
if "--ports" in sys.argv:
    i = sys.argv.index("--ports")
    BASE = int(sys.argv[i + 1])
    del sys.argv[i:i + 2]

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000

def run(method, base):
    ms = []
    try:
        for i in range(3):
            args = ["--replSet", "rs0"]
            if i == 2:
                args += ["--setParameter", f"initialSyncMethod={method}"]
            port = None if base is None else base + i
            ms.append(NidusServer(port=port, extra_args=args, log_name=f"bench-{method}-{i}"))
            ms[-1].start()
        h = lambda m: f"127.0.0.1:{m.port}"
        with ms[0].client() as c:
            c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
                {"_id": 0, "host": h(ms[0]), "priority": 2}, {"_id": 1, "host": h(ms[1])}]})
        wait_until(lambda: ms[0].client().admin.command("hello").get("isWritablePrimary"), 30, "primary")
        for m in ms:
            with m.client() as c:
                c.admin.command("setParameter", 1, raftLogMaxSizeBytes=1 << 20)
        with ms[0].client() as c:
            coll = c.test.get_collection("c", write_concern=WriteConcern(w="majority"))
            coll.create_index("a"); coll.create_index([("b", 1), ("a", -1)])
            for s in range(0, N, 5000):
                coll.insert_many([{"_id": i, "a": i % 1000, "b": f"k{i % 777}", "pad": "x" * 150} for i in range(s, s + 5000)])
            conf = c.admin.command("replSetGetConfig")["config"]
        conf["version"] += 1
        conf["members"].append({"_id": 2, "host": h(ms[2])})
        t0 = time.monotonic()
        with ms[0].client() as c:
            c.admin.command("replSetReconfig", conf)
        def secondary():
            try:
                with ms[2].client(serverSelectionTimeoutMS=500) as c:
                    return c.admin.command("hello").get("secondary")
            except Exception:
                return False
        wait_until(secondary, 600, "third secondary")
        dt = time.monotonic() - t0
        with ms[2].client(readPreference="secondaryPreferred") as c:
            n = c.test.c.count_documents({})
        assert n == N, n
        print(f"{method}: {N} documents, initial sync {dt:.2f} s", flush=True)
    finally:
        for m in ms:
            m.stop(); m.remove_dbpath()

for method in sys.argv[2:] or ["logical", "fileCopyBased"]:
    run(method, BASE)
