#!/usr/bin/env bash
# Benchmarks Nidus against PostgreSQL (jsonb) and SQLite (JSON) and against its floors (a
# protocol round trip, the raw RocksDB engine), all measured side by side in one run on this
# machine. Installs what is missing (build deps, Rust, PostgreSQL from Debian, a venv in
# bench/.venv), builds the workspace, starts nidus and PostgreSQL on free 127.0.0.1 ports with
# data under a temporary directory, stops them at the end (also on error or Ctrl-C), prints a
# table and writes bench/results/<UTC date>-<git rev>.json, latest.md and latest.png.
#
#   bench/run.sh [--size tiny|small|large] [--runs N] [--no-peers] [--no-save] [--skip-build]
#
#   --size        tiny (CI smoke, < 1 min), small (default, a few minutes), large
#   --runs N      repetitions of every measurement (default 3; min/median/max are reported)
#   --only A,B    only these workloads (keys as in bench/bench.py WORKLOADS, e.g. agg_group)
#   --no-peers    Nidus and its floors only (no PostgreSQL, no SQLite)
#   --no-save     print the table, write nothing under bench/results/
#   --skip-build  use the binaries already in $CARGO_TARGET_DIR/release
#   --out DIR     write the results elsewhere
#   --update-readme  also put the table into README.md's Performance section
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$NIDUS_ROOT"

BENCH_VENV="${BENCH_VENV:-$NIDUS_ROOT/bench/.venv}"
peers=1 build=1
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-peers) peers=0; args+=("$1") ;;
        --no-save|--update-readme) args+=("$1") ;;
        --skip-build) build=0 ;;
        --size|--runs|--out|--only)
            [ $# -ge 2 ] || die "$1 needs a value"
            args+=("$1" "$2"); shift ;;
        --size=*|--runs=*|--out=*|--only=*) args+=("$1") ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see bench/run.sh --help)" ;;
    esac
    shift
done

if [ $build -eq 1 ]; then
    ensure_build_deps
fi
ensure_venv_at "$BENCH_VENV" "$NIDUS_ROOT/bench/requirements.txt"
if [ $peers -eq 1 ] && ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    ensure_apt postgresql
fi
if [ $build -eq 1 ]; then
    # The same package/target selection as scripts/test.sh, so RocksDB is built once and the
    # storage floor (crates/storage-rocks/examples/floor.rs) is built with the server.
    log "cargo build --release --workspace --all-targets (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    cargo build --release --workspace --all-targets
fi
floor="$CARGO_TARGET_DIR/release/examples/floor"
[ -x "$NIDUS_BIN" ] || die "no server binary at $NIDUS_BIN"
[ -x "$floor" ] || die "no storage floor binary at $floor"
exec "$BENCH_VENV/bin/python" "$NIDUS_ROOT/bench/bench.py" --nidus "$NIDUS_BIN" --floor "$floor" \
    ${args[@]+"${args[@]}"}
