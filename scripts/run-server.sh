#!/usr/bin/env bash
# Installs what the build needs (Debian packages, Rust) if missing, builds the release binary
# and runs it in the foreground. Arguments are passed to nidus (mongod's flag names); without
# any it listens on 127.0.0.1:27017 with data in ./data of the checkout.
#   scripts/run-server.sh
#   scripts/run-server.sh --port 27018 --dbpath /tmp/nidus --setParameter enableTestCommands=1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_build_deps
build_release

if [ $# -eq 0 ]; then
    mkdir -p "$NIDUS_ROOT/data"
    # A one-member replica set: drivers use transactions and retryable writes only there.
    set -- --port 27017 --bind_ip 127.0.0.1 --dbpath "$NIDUS_ROOT/data" --replSet rs0
fi
log "exec $NIDUS_BIN $*"
exec "$NIDUS_BIN" "$@"
