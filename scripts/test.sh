#!/usr/bin/env bash
# Runs every check of the project, installing what is missing first (idempotent):
#   1. cargo fmt --all -- --check
#   2. cargo build --release --workspace --all-targets   (the nidus binary + test binaries)
#   3. cargo clippy --release --workspace --all-targets -- -D warnings
#   4. cargo test --workspace --release
#   5. pytest tests/                              (driver-level tests against the binary)
#   6. tests/pymongo_suite/run.py                 (pymongo's own test suite vs. the baseline)
#   7. bench/bench.py --size tiny --no-peers      (benchmark smoke run, ~10 s, writes nothing)
# All steps run even when one fails; the exit status is non-zero if any failed.
# The release profile and the same package/target selection (--workspace --all-targets) are
# used by build, clippy and test, so that Cargo resolves the same features for all three and
# RocksDB's C++ build (librocksdb-sys, ~15 min on 2 cores) is done once and shared. (A build of
# a subset, e.g. `-p nidus-server`, can resolve other features and rebuild RocksDB.)
#
# Options:
#   --ci              the CI subset of the pymongo suite (tests/pymongo_suite/suite.json "ci")
#   --pymongo-full    every file listed in suite.json "files" (slow)
#   --skip-lint       skip fmt and clippy
#   --skip-cargo-test skip cargo test
#   --skip-pytest     skip tests/
#   --skip-pymongo    skip the pymongo suite
#   --skip-bench      skip the benchmark smoke run
#   -- ARGS           extra arguments for pytest (e.g. -- -k hello -x)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$NIDUS_ROOT"

pymongo_mode="--ci"
lint=1 cargo_test=1 pytest_run=1 pymongo=1 bench=1
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --ci) pymongo_mode="--ci" ;;
        --pymongo-full) pymongo_mode="--all" ;;
        --skip-lint) lint=0 ;;
        --skip-cargo-test) cargo_test=0 ;;
        --skip-pytest) pytest_run=0 ;;
        --skip-pymongo) pymongo=0 ;;
        --skip-bench) bench=0 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) die "unknown option $1 (see the header of $0)" ;;
    esac
    shift
done

failed=()
passed_steps=0
step() {
    local name="$1" t0=$SECONDS rc=0
    shift
    log "$name"
    "$@" || rc=$?
    if [ $rc -eq 0 ]; then
        echo "--- $name: ok ($((SECONDS - t0)) s)"
        passed_steps=$((passed_steps + 1))
    else
        echo "--- $name: FAILED (exit $rc, $((SECONDS - t0)) s)"
        failed+=("$name")
    fi
    return 0
}

log "dependencies"
ensure_build_deps
ensure_venv
ensure_mongosh
ensure_mongo_tools
ensure_node_drivers
# the openssl CLI makes the certificates of tests/test_tls.py (which skips without it)
(ensure_apt openssl) || log "openssl could not be installed: tests/test_tls.py will skip"
mkdir -p "$NIDUS_ROOT/tests/.logs"

[ $lint -eq 1 ] && step "cargo fmt --check" cargo fmt --all -- --check
step "cargo build --release" cargo build --release --workspace --all-targets
if [ ! -x "$NIDUS_BIN" ]; then
    echo "summary: $passed_steps passed, $(( ${#failed[@]} + 1 )) failed"
    die "no server binary at $NIDUS_BIN; the build failed (see above)"
fi
[ $lint -eq 1 ] && step "cargo clippy" cargo clippy --release --workspace --all-targets -- -D warnings
[ $cargo_test -eq 1 ] && step "cargo test" cargo test --workspace --release

py_pass=0 py_fail=0 py_skip=0
if [ $pytest_run -eq 1 ]; then
    junit="$NIDUS_ROOT/tests/.logs/pytest.xml"
    rm -f "$junit"
    step "pytest tests/" python -m pytest tests -rfEs --junitxml "$junit" ${pytest_args[@]+"${pytest_args[@]}"}
    if [ -f "$junit" ]; then
        read -r py_pass py_fail py_skip < <(python - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
suites = [r] if r.tag == "testsuite" else list(r)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
s = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - s, f, s)
PY
)
    fi
fi
if [ $pymongo -eq 1 ]; then
    step "pymongo suite (baseline)" python tests/pymongo_suite/run.py "$pymongo_mode"
fi
if [ $bench -eq 1 ]; then
    # Nidus and its floors only (no PostgreSQL/SQLite), one repetition: checks that the harness
    # and the storage floor binary still work; bench/run.sh is the real benchmark.
    step "bench smoke (tiny, no peers)" python bench/bench.py --size tiny --no-peers --no-save \
        --runs 1 --nidus "$NIDUS_BIN" --floor "$CARGO_TARGET_DIR/release/examples/floor"
fi

# Closing line: our pytest tests, plus each other step counted as one test.
non_py_fail=${#failed[@]}
[[ " ${failed[*]-} " == *" pytest tests/ "* ]] && non_py_fail=$((non_py_fail - 1))
non_py_pass=$passed_steps
[ $pytest_run -eq 1 ] && [[ " ${failed[*]-} " != *" pytest tests/ "* ]] && non_py_pass=$((non_py_pass - 1))
if [ ${#failed[@]} -gt 0 ]; then
    echo
    echo "failed steps: ${failed[*]}"
    if [ "$py_fail" -eq 0 ] && [[ " ${failed[*]} " == *" pytest tests/ "* ]]; then py_fail=1; fi
fi
echo "summary: $((py_pass + non_py_pass)) passed, $((py_fail + non_py_fail)) failed, $py_skip skipped"
[ ${#failed[@]} -eq 0 ]
