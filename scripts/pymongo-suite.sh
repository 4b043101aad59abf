#!/usr/bin/env bash
# Runs pymongo's own test suite (pymongo==4.20.0 sdist, unpacked in tests/.pymongo-src/) against
# a fresh nidus per file and compares pass counts with tests/pymongo_suite/baseline.json.
#   scripts/pymongo-suite.sh                       CI subset
#   scripts/pymongo-suite.sh --all                 every tracked file (suite.json "files")
#   scripts/pymongo-suite.sh test/test_cursor.py   chosen files
#   scripts/pymongo-suite.sh --all --update-baseline
# Set NIDUS_SKIP_BUILD=1 to use the binary as it is.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$NIDUS_ROOT"

if [ "${NIDUS_SKIP_BUILD:-0}" != 1 ]; then
    ensure_build_deps
    build_release
fi
ensure_venv
[ $# -eq 0 ] && set -- --ci
exec python tests/pymongo_suite/run.py "$@"
