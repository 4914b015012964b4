#!/usr/bin/env bash
# Build (idempotently) an aarch64 CPython 3.11 + Apache TVM environment that
# runs on an x86_64 Debian 12 host under qemu-user (no binfmt registration).
#
#   bash .ci/aarch64_env.sh [DIR]     # DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/graphselect/aarch64
#   "$DIR/python" -c 'import tvm; print(tvm.__version__)'
#   "$DIR/python" -m tvm.exec.rpc_server --tracker 127.0.0.1:9190 --key a64 --host 127.0.0.1 --port 9100 --port-end 9110
#
# Layout of DIR:
#   sysroot/  arm64 Debian packages (python3.11 + the shared libs it and TVM
#             need) unpacked with dpkg -x; nothing is installed system-wide and
#             the host's dpkg architecture list is left alone (a private apt
#             state directory with APT::Architecture=arm64 is used instead).
#   site/     aarch64 manylinux wheels installed by the HOST pip (--target).
#   python    wrapper: qemu-aarch64 -L sysroot -0 DIR/python sysroot/usr/bin/python3.11.
#             "-0" makes sys.executable the wrapper itself, so subprocesses
#             that re-exec sys.executable (TVM's PopenWorker, multiprocessing
#             "spawn") go back through qemu: without binfmt an aarch64 ELF
#             cannot be exec'd directly ("Exec format error").
#
# Needs root (or sudo) only to apt-get install the host tools when missing.
# Reached networks: Debian apt mirrors and the Python package index only.
set -euo pipefail

DIR="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/graphselect/aarch64}"
HOST_PY="${HOST_PYTHON:-$(command -v python3 || command -v python)}"

# Wheels for the aarch64 side (versions tested together under qemu 7.2).
# apache-tvm-ffi is pinned like the project's own dependency (pyproject.toml).
PIP_REQS=(
    apache-tvm==0.27.0.post1
    apache-tvm-ffi==0.1.14.post1
    numpy==2.4.6
    ml_dtypes==0.7.0
    typing_extensions==4.16.0
    tornado==6.6.1
    cloudpickle==3.1.3
    psutil==7.2.2
)
# arm64 Debian packages; apt resolves their dependency closure (libc6,
# libgcc-s1, libssl3, libffi8, libexpat1, zlib1g, libsqlite3-0, ...).
DEB_ROOTS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libstdc++6 libgcc-s1)
HOST_DEBS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)

log() { echo "[aarch64_env] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"; fi
}

# ---------------------------------------------------------------- 1. host tools
missing=()
for p in "${HOST_DEBS[@]}"; do
    st="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
    [ "$st" = installed ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    aptlog="$(mktemp)"
    { as_root apt-get -q update && as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1 ||
        { cat "$aptlog" >&2; rm -f "$aptlog"; die "apt-get install ${missing[*]} failed"; }
    rm -f "$aptlog"
fi
QEMU="$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)"
[ -n "$QEMU" ] || die "qemu-aarch64 not found after installing qemu-user"
command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc not found"
[ -n "$HOST_PY" ] && "$HOST_PY" -m pip --version >/dev/null 2>&1 || die "host python with pip not found (set HOST_PYTHON)"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"

# One builder at a time per DIR (e.g. parallel CI jobs / pytest workers).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$DIR/.lock"
    flock 9
fi

STAMP_SYS="sysroot: ${DEB_ROOTS[*]}"
STAMP_SITE="site: ${PIP_REQS[*]}"
built=0

# ---------------------------------------------------------------- 2. sysroot
if [ ! -x "$DIR/sysroot/usr/bin/python3.11" ] || [ "$(cat "$DIR/sysroot/.complete" 2>/dev/null)" != "$STAMP_SYS" ]; then
    log "downloading arm64 Debian packages (private apt state in $DIR/apt)"
    A="$DIR/apt"
    rm -rf "$A" "$DIR/sysroot.tmp"
    mkdir -p "$A/lists/partial" "$A/archives/partial" "$A/preferences.d"
    : >"$A/status"
    # Same sources and keyrings as the host (and its apt.conf.d, e.g. proxies),
    # but arm64-only indexes, an empty dpkg status and private lists/cache, so
    # the host's apt state and `dpkg --print-foreign-architectures` are untouched.
    cat >"$A/apt.conf" <<EOF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
APT::Install-Recommends "false";
Dir::State "$A";
Dir::State::lists "$A/lists";
Dir::State::status "$A/status";
Dir::Cache "$A";
Dir::Cache::archives "$A/archives";
Dir::Etc::Preferences "$A/preferences";
Dir::Etc::PreferencesParts "$A/preferences.d";
EOF
    export APT_CONFIG="$A/apt.conf"
    # Non-Debian sources without arm64 may make update report errors; the
    # download below is what must succeed.
    apt-get -q update >"$A/update.log" 2>&1 || log "warning: arm64 apt-get update reported errors (see $A/update.log)"
    apt-get -q -y install --download-only "${DEB_ROOTS[@]}" >"$A/download.log" 2>&1 ||
        { cat "$A/download.log" >&2; die "could not download arm64 packages"; }
    unset APT_CONFIG
    mkdir -p "$DIR/sysroot.tmp"
    n=0
    for deb in "$A"/archives/*.deb; do
        dpkg-deb -x "$deb" "$DIR/sysroot.tmp"
        n=$((n + 1))
    done
    log "unpacked $n arm64 packages"
    rm -rf "$DIR/sysroot.tmp/usr/share/doc" "$DIR/sysroot.tmp/usr/share/man" "$DIR/sysroot.tmp/usr/share/locale"
    [ -x "$DIR/sysroot.tmp/usr/bin/python3.11" ] || die "python3.11 missing from the unpacked packages"
    # Byte-compile the stdlib now (same 3.11 magic number on host and target)
    # instead of paying for it under emulation on the first imports.
    if "$HOST_PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
        "$HOST_PY" -m compileall -q -j0 -x 'lib2to3/tests|test/' "$DIR/sysroot.tmp/usr/lib/python3.11" >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR/sysroot" "$A"
    mv "$DIR/sysroot.tmp" "$DIR/sysroot"
    echo "$STAMP_SYS" >"$DIR/sysroot/.complete"
    built=1
fi

# ---------------------------------------------------------------- 3. wheels
if [ ! -d "$DIR/site/tvm" ] || [ "$(cat "$DIR/site/.complete" 2>/dev/null)" != "$STAMP_SITE" ]; then
    log "installing aarch64 wheels into $DIR/site"
    rm -rf "$DIR/site.tmp"
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "$HOST_PY" -m pip install -q \
        --no-warn-script-location --no-warn-conflicts --target "$DIR/site.tmp" \
        --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
        --only-binary=:all: --python-version 3.11 --implementation cp \
        "${PIP_REQS[@]}" >"$DIR/pip.log" 2>&1; then
        cat "$DIR/pip.log" >&2
        die "pip could not install the aarch64 wheels"
    fi
    rm -f "$DIR/pip.log"
    [ -f "$DIR/site.tmp/tvm/__init__.py" ] || die "pip did not install apache-tvm into $DIR/site.tmp"
    rm -rf "$DIR/site.tmp/bin"   # host-shebang console scripts, useless here
    rm -rf "$DIR/site"
    mv "$DIR/site.tmp" "$DIR/site"
    echo "$STAMP_SITE" >"$DIR/site/.complete"
    built=1
fi

# ---------------------------------------------------------------- 4. wrapper
cat >"$DIR/python.tmp" <<'EOF'
#!/bin/sh
# aarch64 CPython 3.11 under qemu-user; generated by .ci/aarch64_env.sh.
D="$(dirname "$(readlink -f "$0")")"
case ":${PYTHONPATH:-}:" in
    *":$D/site:"*) ;;
    *) PYTHONPATH="$D/site${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
# PYTHONHOME: never fall back to the host's /usr/lib/python3*;
# PYTHONNOUSERSITE: never pick up the host's x86_64 ~/.local site-packages.
PYTHONHOME="$D/sysroot/usr"
PYTHONNOUSERSITE=1
QEMU_LD_PREFIX="$D/sysroot"
export PYTHONPATH PYTHONHOME PYTHONNOUSERSITE QEMU_LD_PREFIX
EOF
cat >>"$DIR/python.tmp" <<EOF
QEMU="\${QEMU_AARCH64:-$QEMU}"
EOF
cat >>"$DIR/python.tmp" <<'EOF'
# -0 sets argv[0], hence sys.executable, to this wrapper (see .ci/aarch64_env.sh).
exec "$QEMU" -L "$D/sysroot" -0 "$D/python" "$D/sysroot/usr/bin/python3.11" "$@"
EOF
chmod +x "$DIR/python.tmp"
mv "$DIR/python.tmp" "$DIR/python"

# ---------------------------------------------------------------- 5. check
if [ "$built" = 1 ] || [ ! -f "$DIR/.verified" ]; then
    rm -f "$DIR/.verified"
    log "checking the environment under qemu (import tvm takes ~10 s)"
    "$DIR/python" -c '
import platform, subprocess, sys
import numpy, tvm
assert platform.machine() == "aarch64", platform.machine()
assert sys.executable.endswith("/python"), sys.executable
r = subprocess.run([sys.executable, "-c", "import platform; print(platform.machine())"],
                   capture_output=True, text=True, check=True)
assert r.stdout.strip() == "aarch64", r
print("[aarch64_env] ok: python %s, tvm %s, numpy %s" % (platform.python_version(), tvm.__version__, numpy.__version__), file=sys.stderr)
' || die "the aarch64 environment in $DIR does not work"
    touch "$DIR/.verified"
fi
log "ready: $DIR/python"
