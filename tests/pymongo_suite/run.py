#!/usr/bin/env python3
"""Runs files of pymongo's own test suite (from its PyPI sdist) against nidus.

    python tests/pymongo_suite/run.py --ci                 # the CI subset (suite.json "ci")
    python tests/pymongo_suite/run.py --all                # every file in suite.json "files"
    python tests/pymongo_suite/run.py test/test_cursor.py  # chosen files
    ... --update-baseline                                  # rewrite baseline.json for the files run

For each file: a fresh nidus (own port, own dbpath, --setParameter enableTestCommands=1), then
`pytest <file>` in the unpacked sdist with DB_IP=127.0.0.1 DB_PORT=<port>, killed after the
file's timeout. Counts come from the junit XML (or from the -v lines if the run was killed).
Results go to tests/pymongo_suite/results.json; logs to tests/pymongo_suite/logs/.
Exit status 1 if any file passes fewer tests than baseline.json records for it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nidus_harness import NidusError, NidusServer, ReplicaSet, find_binary  # noqa: E402

SUITE = json.loads((HERE / "suite.json").read_text())
VERSION = SUITE["pymongo_version"]
SRC_PARENT = ROOT / "tests" / ".pymongo-src"
SRC = SRC_PARENT / f"pymongo-{VERSION}"
LOGS = HERE / "logs"
RESULTS = HERE / "results.json"
BASELINE = HERE / "baseline.json"
COUNT_KEYS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
# A file run against a three-member replica set is tracked under its name plus this suffix, so
# that its counts and the same file's one-member counts each have their own baseline.
RS3 = " [3 members]"


def log(msg: str) -> None:
    print(msg, flush=True)


def ensure_source() -> Path:
    if (SRC / "test" / "__init__.py").is_file():
        return SRC
    SRC_PARENT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        log(f"downloading pymongo=={VERSION} sdist")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "--disable-pip-version-check", "-q", "-d", tmp, f"pymongo=={VERSION}"], check=True)
        tars = list(Path(tmp).glob("pymongo-*.tar.gz"))
        if not tars:
            raise SystemExit(f"pip download produced no sdist in {tmp}: {os.listdir(tmp)}")
        with tarfile.open(tars[0]) as tf:
            tf.extractall(SRC_PARENT, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(SRC_PARENT)
    if not (SRC / "test" / "__init__.py").is_file():
        raise SystemExit(f"unexpected sdist layout under {SRC_PARENT}")
    return SRC


def parse_junit(path: Path) -> dict:
    counts = dict.fromkeys(COUNT_KEYS, 0)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
        elif "error" in kinds:
            counts["errors"] += 1
        elif "skipped" in kinds:
            sk = next(c for c in case if c.tag == "skipped")
            if (sk.get("type") or "").endswith("xfail"):
                counts["xfailed"] += 1
            else:
                counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


_VLINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_VMAP = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped",
         "XFAIL": "xfailed", "XPASS": "xpassed"}


def parse_verbose(text: str) -> dict:
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for line in text.splitlines():
        m = _VLINE.match(line)
        if m:
            counts[_VMAP[m.group(2)]] += 1
    return counts


def skip_reasons(path: Path, limit: int = 8) -> list[str]:
    """The most common skip reasons (to see what the suite thinks the server lacks)."""
    reasons: dict[str, int] = {}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return []
    for sk in root.iter("skipped"):
        msg = (sk.get("message") or "").strip()[:160]
        reasons[msg] = reasons.get(msg, 0) + 1
    return [f"{n}x {m}" for m, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:limit]]


def failure_reasons(path: Path, limit: int = 8) -> list[str]:
    """The most common failure/error messages, numbers blurred so that alike ones group."""
    reasons: dict[str, int] = {}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return []
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                msg = " ".join((child.get("message") or child.tag).split())
                msg = re.sub(r"0x[0-9a-f]+|\d{3,}", "N", msg)[:160]
                reasons[msg] = reasons.get(msg, 0) + 1
    return [f"{n}x {m}" for m, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:limit]]


class Deployment:
    """What one file runs against: a one-member set (`server_args`) or a three-member set whose
    primary the suite is pointed at (pymongo's client_context discovers the other members
    from `hello`, as a user's client would)."""

    def __init__(self, servers: list[NidusServer], port: int, replset: ReplicaSet | None):
        self.servers = servers
        self.port = port
        self.replset = replset

    def stop(self) -> int | None:
        if self.replset is not None:
            self.replset.stop()
            return None
        return self.servers[0].stop()


def start_deployment(tmp: str, slug: str, binary: Path, members: int) -> Deployment:
    if members == 1:
        server = NidusServer(dbpath=Path(tmp) / "db", binary=binary, log_name=f"pymongo-{slug}",
                             extra_args=list(SUITE.get("server_args", [])))
        server.start()
        return Deployment([server], server.port, None)
    rs = ReplicaSet(members)
    try:
        rs.start()
        # Member 0 is the one the suite is pointed at; priorities keep it primary, as the
        # suite's own CI topologies do.
        rs.initiate(priorities=[2] + [1] * (members - 1))
        primary = rs.members[0]
        # Another member may lead first, until member 0's priority takeover.
        rs.wait_for_state(primary, "PRIMARY", timeout=60)
        for m in rs.members[1:]:
            rs.wait_for_state(m, "SECONDARY", timeout=60)
    except NidusError:
        rs.stop()
        raise
    return Deployment(rs.members, primary.port, rs)


def run_file(src: Path, tracked: str, timeout: int, binary: Path) -> dict:
    """Runs one tracked entry: a test file, or a test file plus RS3 for three members."""
    test_file, members = (tracked[: -len(RS3)], 3) if tracked.endswith(RS3) else (tracked, 1)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", tracked).strip("_")
    LOGS.mkdir(parents=True, exist_ok=True)
    junit = LOGS / f"{slug}.xml"
    out_path = LOGS / f"{slug}.out"
    junit.unlink(missing_ok=True)
    result = {"file": tracked, "status": "ok", **dict.fromkeys(COUNT_KEYS, 0)}
    with tempfile.TemporaryDirectory(prefix="nidus-pymongo-") as tmp:
        try:
            deployment = start_deployment(tmp, slug, binary, members)
        except NidusError as e:
            result.update(status="server-did-not-start", detail=str(e)[-2000:])
            return result
        env = {**os.environ, "DB_IP": "127.0.0.1", "DB_PORT": str(deployment.port),
               "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
        for var in ("DB_USER", "DB_PASSWORD", "COMPRESSORS", "MONGODB_API_VERSION", "TEST_LOAD_BALANCER"):
            env.pop(var, None)
        cmd = [sys.executable, "-m", "pytest", test_file, "-v", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "faulthandler_timeout=0", "--timeout=120"]
        for node in SUITE.get("deselect", {}).get(tracked, []):
            cmd += ["--deselect", node]
        t0 = time.monotonic()
        with open(out_path, "w") as out:
            proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the pytest we started, and its children
                proc.wait()
                result["status"] = "timeout"
        result["seconds"] = round(time.monotonic() - t0, 1)
        result["pytest_exit"] = proc.returncode
        servers = deployment.servers
        dead = [m for m in servers if not m.is_running()]
        panics = [p for m in servers for p in m.panics()]
        try:
            rc = deployment.stop()
        except NidusError as e:
            rc = None
            result["shutdown"] = str(e)[:500]
        if dead:
            result["status"] = "server-crashed"
            result["server_log_tail"] = dead[0].log_tail(30)
        if panics:
            result["panics"] = panics[:5]
        result["server_exit"] = rc
    text = out_path.read_text(errors="replace")
    if junit.is_file():
        result.update(parse_junit(junit))
        reasons = skip_reasons(junit)
        if reasons:
            result["top_skip_reasons"] = reasons
        failures = failure_reasons(junit)
        if failures:
            result["top_failure_reasons"] = failures
        if any("Cannot connect to MongoDB" in r for r in reasons) and result["status"] == "ok":
            result["status"] = "cannot-connect"
    else:
        result.update(parse_verbose(text))
        if result["status"] == "ok":
            result["status"] = "no-junit"
            result["output_tail"] = text[-2000:]
    if result["pytest_exit"] in (3, 4):  # internal error / usage error: collection broke
        result["output_tail"] = text[-2000:]
    return result


def compare(results: list[dict], baseline: dict) -> list[str]:
    drops = []
    for r in results:
        b = baseline.get(r["file"])
        if b is None:
            continue
        slack = SUITE.get("tolerances", {}).get(r["file"], 0)  # for files with timing-dependent tests
        if r["passed"] < b["passed"] - slack:
            drops.append(f"{r['file']}: passed {r['passed']} < baseline {b['passed']}"
                         + (f" - tolerance {slack}" if slack else "") + f" (status {r['status']})")
    return drops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="test files relative to the sdist (test/test_x.py)")
    ap.add_argument("--ci", action="store_true", help="run suite.json's CI subset")
    ap.add_argument("--all", action="store_true", help="run every file in suite.json")
    ap.add_argument("--update-baseline", action="store_true", help="record these results as the baseline")
    ap.add_argument("--timeout", type=int, default=None, help="per-file timeout in seconds (default: suite.json)")
    args = ap.parse_args()

    if args.files:
        files = args.files
    elif args.all:
        files = SUITE["files"]
    else:
        files = SUITE["ci"]
    try:
        binary = find_binary()
    except NidusError as e:
        print(e, file=sys.stderr)
        return 2
    src = ensure_source()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.is_file() else {}
    baseline = baseline.get("files", baseline)

    results = []
    t_all = time.monotonic()
    for f in files:
        timeout = args.timeout or SUITE.get("timeouts", {}).get(f, SUITE["default_timeout"])
        if args.ci and not args.timeout:
            timeout = min(timeout, SUITE.get("ci_timeout", timeout))
        log(f"--- {f} (timeout {timeout}s)")
        r = run_file(src, f, timeout, binary)
        results.append(r)
        b = baseline.get(f)
        log(f"    {r['status']}: " + ", ".join(f"{r[k]} {k}" for k in COUNT_KEYS if r[k])
            + f" in {r.get('seconds', 0)}s" + (f" (baseline passed {b['passed']})" if b else " (no baseline)"))
        for reason in r.get("top_skip_reasons", [])[:3]:
            log(f"      skip: {reason}")
    total = {k: sum(r[k] for r in results) for k in COUNT_KEYS}
    RESULTS.write_text(json.dumps({"pymongo_version": VERSION, "binary": str(binary),
                                   "seconds": round(time.monotonic() - t_all, 1),
                                   "total": total, "files": results}, indent=2) + "\n")
    log(f"results: {RESULTS.relative_to(ROOT)}; logs: {LOGS.relative_to(ROOT)}/")

    if args.update_baseline:
        merged = dict(baseline)
        for r in results:
            merged[r["file"]] = {k: r[k] for k in ("passed", "failed", "errors", "skipped")} | {"status": r["status"]}
        BASELINE.write_text(json.dumps({"pymongo_version": VERSION,
                                        "note": "pass counts may only go up; rewrite with run.py --update-baseline",
                                        "files": dict(sorted(merged.items()))}, indent=2) + "\n")
        log(f"baseline updated: {BASELINE.relative_to(ROOT)}")
        return 0

    drops = compare(results, baseline)
    ups = [f"{r['file']}: {r['passed']} > {baseline[r['file']]['passed']}" for r in results
           if r["file"] in baseline and r["passed"] > baseline[r["file"]]["passed"]]
    if ups:
        log("above the baseline (consider --update-baseline): " + "; ".join(ups))
    # Not pytest's closing-line shape on purpose: these counts are the driver suite's, not ours.
    log(f"pymongo suite totals -- {total['passed']} pass / {total['failed'] + total['errors']} fail / "
        f"{total['skipped']} skip")
    if drops:
        log("BELOW BASELINE:\n  " + "\n  ".join(drops))
        return 1
    log("baseline check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
