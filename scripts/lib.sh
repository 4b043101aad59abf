# shellcheck shell=bash
# Shared helpers for scripts/*.sh. Source it; do not run it.
# Everything here is idempotent: it installs only what is missing.

NIDUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
# One build directory per clone, named by a hash of its path: cargo names the builds of this
# workspace's own crates by crate and version alone and judges them fresh by the files of the
# clone that built them last, so clones sharing a directory would get each other's builds.
# tests/nidus_harness.py computes the same name.
NIDUS_CLONE_ID="$(printf '%s' "$NIDUS_ROOT" | sha256sum | cut -c1-12)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nidus-target-$NIDUS_CLONE_ID}"
NIDUS_BIN="${NIDUS_BIN:-$CARGO_TARGET_DIR/release/nidus}"
export NIDUS_BIN
NIDUS_VENV="${NIDUS_VENV:-$NIDUS_ROOT/tests/.venv}"
NIDUS_NODE_PREFIX="${NIDUS_NODE_PREFIX:-$NIDUS_ROOT/tests/.node}"
# Pinned so that a run is reproducible; bump deliberately.
MONGOSH_VERSION="${MONGOSH_VERSION:-2.12.0}"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}

_apt_updated=""
# ensure_apt PKG...: installs the Debian packages that are not installed yet.
ensure_apt() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing packages (${missing[*]}) and no apt-get"
    log "apt-get install ${missing[*]}"
    if [ -z "$_apt_updated" ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        _apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Rust toolchain (rustup), with rustfmt and clippy.
ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        ensure_apt curl ca-certificates
        log "installing Rust with rustup"
        curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if command -v rustup >/dev/null 2>&1; then
        local have
        have="$(rustup component list --installed 2>/dev/null || true)"
        for c in rustfmt clippy; do
            grep -q "^$c" <<<"$have" || rustup component add "$c"
        done
    fi
}

# Everything needed to build the server (RocksDB's C++ and bindgen need clang/libclang).
ensure_build_deps() {
    ensure_apt build-essential clang libclang-dev pkg-config git ca-certificates
    ensure_rust
}

# The same package and target selection as scripts/test.sh (`--workspace --all-targets`), so
# that Cargo resolves the same features and both scripts share one RocksDB build.
build_release() {
    log "cargo build --release --workspace --all-targets (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    (cd "$NIDUS_ROOT" && cargo build --release --workspace --all-targets)
    [ -x "$NIDUS_BIN" ] || die "build finished but $NIDUS_BIN is missing"
}

# ensure_venv_at VENV REQUIREMENTS: a Python venv with those requirements, re-installed only
# when the requirements file changes.
ensure_venv_at() {
    local venv="$1" req="$2" stamp="$1/.requirements.sha256" sum
    if ! command -v python3 >/dev/null 2>&1; then ensure_apt python3; fi
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then ensure_apt python3-venv; fi
    if [ ! -x "$venv/bin/python" ]; then
        log "creating venv $venv"
        python3 -m venv "$venv"
    fi
    sum="$(sha256sum "$req" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
        log "pip install -r ${req#"$NIDUS_ROOT"/} into $venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
        echo "$sum" >"$stamp"
    fi
}

# Python venv with the test requirements, first on PATH.
ensure_venv() {
    ensure_venv_at "$NIDUS_VENV" "$NIDUS_ROOT/tests/requirements.txt"
    export PATH="$NIDUS_VENV/bin:$PATH"
}

# mongosh from npm into tests/.node (bin: tests/.node/bin/mongosh). Never fatal: the
# mongosh test skips with the reason written to tests/.node/INSTALL_ERROR.
ensure_mongosh() {
    local bin="$NIDUS_NODE_PREFIX/bin/mongosh"
    if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "$MONGOSH_VERSION" ]; then
        export MONGOSH="$bin"; return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        ensure_apt nodejs npm || true
    fi
    mkdir -p "$NIDUS_NODE_PREFIX"
    rm -f "$NIDUS_NODE_PREFIX/INSTALL_ERROR"
    if ! command -v npm >/dev/null 2>&1; then
        echo "npm is not installed and could not be installed" >"$NIDUS_NODE_PREFIX/INSTALL_ERROR"
        return 0
    fi
    log "npm install mongosh@$MONGOSH_VERSION into $NIDUS_NODE_PREFIX"
    if ! timeout 900 npm install -g --prefix "$NIDUS_NODE_PREFIX" --no-audit --no-fund --loglevel=error \
            "mongosh@$MONGOSH_VERSION" >"$NIDUS_NODE_PREFIX/npm.log" 2>&1; then
        { echo "npm install mongosh@$MONGOSH_VERSION failed:"; tail -20 "$NIDUS_NODE_PREFIX/npm.log"; } \
            >"$NIDUS_NODE_PREFIX/INSTALL_ERROR"
        cat "$NIDUS_NODE_PREFIX/INSTALL_ERROR" >&2
        return 0
    fi
    export MONGOSH="$bin"
}

# MongoDB's database tools (mongodump, mongorestore, mongoexport, mongoimport), built offline
# from the vendored source in ../shared/tools (the Go module proxy does not serve them) into
# tests/.tools/bin. Never fatal: tests/test_tools.py skips with the reason written to
# tests/.tools/INSTALL_ERROR. Rebuilt only when a binary is missing or the tarball changes.
NIDUS_TOOLS_DIR="${NIDUS_TOOLS_DIR:-$NIDUS_ROOT/tests/.tools}"
NIDUS_TOOLS_TARBALL="${NIDUS_TOOLS_TARBALL:-$NIDUS_ROOT/../shared/tools/mongo-tools-100.18.0.tar.gz}"
ensure_mongo_tools() {
    local bin="$NIDUS_TOOLS_DIR/bin" stamp="$NIDUS_TOOLS_DIR/.tarball.sha256" sum t src
    local tools=(mongodump mongorestore mongoexport mongoimport)
    mkdir -p "$bin"
    rm -f "$NIDUS_TOOLS_DIR/INSTALL_ERROR"
    if [ ! -f "$NIDUS_TOOLS_TARBALL" ]; then
        echo "no tools source at $NIDUS_TOOLS_TARBALL" >"$NIDUS_TOOLS_DIR/INSTALL_ERROR"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        ensure_apt golang-go || true
    fi
    if ! command -v go >/dev/null 2>&1; then
        echo "go is not installed and could not be installed" >"$NIDUS_TOOLS_DIR/INSTALL_ERROR"
        return 0
    fi
    sum="$(sha256sum "$NIDUS_TOOLS_TARBALL" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then rm -f "${tools[@]/#/$bin/}"; fi
    for t in "${tools[@]}"; do
        [ -x "$bin/$t" ] && continue
        src="$NIDUS_TOOLS_DIR/src"
        if [ ! -d "$src/mongo-tools-100.18.0" ]; then
            rm -rf "$src" && mkdir -p "$src"
            tar xzf "$NIDUS_TOOLS_TARBALL" -C "$src"
        fi
        log "go build $t into $bin"
        if ! (cd "$src"/mongo-tools-* && GOTOOLCHAIN=local GOFLAGS=-mod=vendor \
                go build -o "$bin/$t" "./$t/main") >"$NIDUS_TOOLS_DIR/build.log" 2>&1; then
            { echo "go build $t failed:"; tail -20 "$NIDUS_TOOLS_DIR/build.log"; } \
                >"$NIDUS_TOOLS_DIR/INSTALL_ERROR"
            cat "$NIDUS_TOOLS_DIR/INSTALL_ERROR" >&2
            return 0
        fi
    done
    echo "$sum" >"$stamp"
    export NIDUS_TOOLS_BIN="$bin"
}

# The Node.js driver and Mongoose from npm into tests/.node/drivers (tests/test_node.py).
# Never fatal: the test skips with the reason written to tests/.node/drivers/INSTALL_ERROR.
NODE_DRIVER_VERSION="${NODE_DRIVER_VERSION:-7.8.0}"
MONGOOSE_VERSION="${MONGOOSE_VERSION:-9.12.1}"
ensure_node_drivers() {
    local dir="$NIDUS_NODE_PREFIX/drivers" want
    want="mongodb@$NODE_DRIVER_VERSION mongoose@$MONGOOSE_VERSION"
    if [ -d "$dir/node_modules/mongoose" ] && [ "$(cat "$dir/.installed" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        ensure_apt nodejs npm || true
    fi
    mkdir -p "$dir"
    rm -f "$dir/INSTALL_ERROR"
    if ! command -v npm >/dev/null 2>&1; then
        echo "npm is not installed and could not be installed" >"$dir/INSTALL_ERROR"
        return 0
    fi
    log "npm install $want into $dir"
    # shellcheck disable=SC2086
    if ! (cd "$dir" && timeout 900 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
            --no-save $want) >"$dir/npm.log" 2>&1; then
        { echo "npm install $want failed:"; tail -20 "$dir/npm.log"; } >"$dir/INSTALL_ERROR"
        cat "$dir/INSTALL_ERROR" >&2
        return 0
    fi
    echo "$want" >"$dir/.installed"
}
