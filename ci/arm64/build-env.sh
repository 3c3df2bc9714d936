#!/usr/bin/env bash
# Build (or reuse) an emulated aarch64 Python 3.11 environment for ltsedge's arm64 smoke test.
#
#   ci/arm64/build-env.sh [--force] DIR
#
# Result: DIR/python runs Debian bookworm's aarch64 python3.11 under qemu-user (no binfmt_misc needed)
# with DIR/site -- aarch64 wheels of ltsedge's runtime and test dependencies -- on PYTHONPATH. Its
# sys.executable is DIR/python itself (qemu's -0 sets the guest argv[0]), so subprocess/multiprocessing
# workers started from sys.executable re-enter emulation. There is no pip inside: put the checkout on
# PYTHONPATH, e.g.  PYTHONPATH=$PWD DIR/python -m ltsedge ...
#
# Idempotent and cached: each stage (host tools, arm64 root, wheels, site) records a key of its inputs
# and is skipped when the key matches; change a pin below and only the stages it affects rebuild.
# Stages build into *.tmp and are renamed into place, so an interrupted run never leaves a half stage
# that looks finished. A lock file serialises concurrent runs on the same DIR.
#
# Pins, and why:
#   onnxruntime 1.26.0 -- the pin of the shared recipe. 1.28 and later segfault at import under qemu-user 7.2
#                         when the guest sees the host's x86 /proc/cpuinfo; with the ARM cpuinfo that step 2b
#                         provides, 1.28.0 and 1.31.1 import and run too. Override: ARM64_ONNXRUNTIME=1.31.1
#   torch 2.5.1        -- later aarch64 torch wheels on PyPI depend on CUDA packages (per the shared recipe)
#   onnx 1.17.0        -- writes at most opset 22 / IR 10, so ltsedge's stamping is capped by the writer, not the
#                         runtime (onnxruntime 1.26 loads up to opset 26 / IR 13). Newer onnx also works for
#                         ltsedge's explicitly stamped models, but needs ml_dtypes (1.19+), and its defaults
#                         (1.22: opset 27; 1.23: IR 14) make models onnxruntime 1.26 refuses.
#                         Override: ARM64_ONNX=1.20.0
#   sympy 1.13.1       -- torch 2.5.1 requires exactly this version
set -euo pipefail

usage() { echo "usage: $0 [--force] DIR" >&2; exit 2; }
FORCE=0
DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "build-env: unknown option $1" >&2; usage ;;
    *) [ -z "$DIR" ] || usage; DIR=$1 ;;
  esac
  shift
done
[ -n "$DIR" ] || usage

SUITE=bookworm
ROOT_PACKAGES=python3,python3-venv,libgomp1
# Resolved together, with dependencies (markers are evaluated for the host, which is also CPython 3.11).
SPECS=(
  "onnxruntime==${ARM64_ONNXRUNTIME:-1.26.0}" "onnx==${ARM64_ONNX:-1.17.0}" numpy "pymoo>=0.6.1" psutil typer rich pytest
  # torch 2.5.1's pure-python dependencies (torch itself is fetched with --no-deps, see below)
  "sympy==1.13.1" networkx jinja2 filelock fsspec typing_extensions
)
# torch's own metadata lists x86-64-only CUDA wheels behind platform_machine markers that pip evaluates
# for the x86 host, so torch is fetched without dependencies and they are listed in SPECS instead.
NODEPS_SPECS=("torch==2.5.1")
PY_TAGS=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
         --platform any --platform manylinux2014_aarch64)
for g in 17 24 26 27 28 31 34 36; do PY_TAGS+=(--platform "manylinux_2_${g}_aarch64"); done  # bookworm: glibc 2.36

log() { printf '[build-env %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-env] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
quiet_pip() { grep -v -e 'is ignored' -e '^$' >&2 || true; }
hash_of() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }

# retry N CMD...: run CMD up to N times with a growing pause; output of failed attempts is shown.
retry() {
  local n=$1 i=1; shift
  until "$@"; do
    [ "$i" -ge "$n" ] && { log "failed $n times: $*"; return 1; }
    log "attempt $i/$n failed, retrying in $((i * 5))s: $*"
    sleep $((i * 5)); i=$((i + 1))
  done
}

T_START=$(now)
DIR=$(realpath -m "$DIR")
mkdir -p "$DIR" || die "cannot create $DIR"
exec 9>"$DIR/.lock"
flock -w 1800 9 || die "another build-env.sh holds $DIR/.lock for over 30 minutes"
# Stages left half-built by an interrupted run (we hold the lock, so nobody is writing them).
rm -rf "$DIR/root.tmp" "$DIR/wheels.tmp" "$DIR/site.tmp" "$DIR/python.tmp"

# --- 1. host tools -------------------------------------------------------------------------------
t=$(now)
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root"
  log "installing host packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  retry 3 apt-get update -qq || die "apt-get update failed"
  retry 3 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
fi
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 \
  || die "host python3 with pip is needed to fetch the aarch64 wheels"
QEMU=$(command -v qemu-aarch64-static)
log "host tools ready ($(elapsed "$t")): $("$QEMU" --version | head -1)"

# --- 2. Debian arm64 root (debootstrap first stage + every .deb unpacked; no maintainer scripts run) --
ROOT_KEY=$(hash_of "$SUITE" "$ROOT_PACKAGES" minbase v2)
if [ "$FORCE" = 0 ] && [ -x "$DIR/root/usr/bin/python3.11" ] && [ "$(cat "$DIR/root/.ltsedge-key" 2>/dev/null)" = "$ROOT_KEY" ]; then
  log "arm64 root: cached"
else
  t=$(now)
  MIRROR=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  log "arm64 root: debootstrap $SUITE from $MIRROR (log: $DIR/debootstrap.log)"
  bootstrap() {
    rm -rf "$DIR/root.tmp"
    debootstrap --arch=arm64 --foreign --variant=minbase --include="$ROOT_PACKAGES" \
      "$SUITE" "$DIR/root.tmp" "$MIRROR" >"$DIR/debootstrap.log" 2>&1
  }
  retry 3 bootstrap || { tail -n 20 "$DIR/debootstrap.log" >&2; die "debootstrap failed (full log: $DIR/debootstrap.log)"; }
  for deb in "$DIR"/root.tmp/var/cache/apt/archives/*.deb; do
    dpkg -x "$deb" "$DIR/root.tmp" || die "cannot unpack $deb"
  done
  rm -f "$DIR"/root.tmp/var/cache/apt/archives/*.deb
  [ -x "$DIR/root.tmp/usr/bin/python3.11" ] || die "the arm64 root has no usr/bin/python3.11 (see $DIR/debootstrap.log)"
  # Bytecode is the same on every architecture: compile the stdlib with the host's 3.11 (much faster than
  # letting each emulated run compile it). Debian's postinst would have done this; we skip postinst.
  if python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python3 -m compileall -q -j 0 "$DIR/root.tmp/usr/lib/python3.11" >/dev/null 2>&1 || true
  fi
  # qemu's -L looks every absolute path up in the root first and falls back to the host only when it is
  # not there -- directories included, so the root's empty /tmp, /run, /sys and its /dev would hide the
  # host's from the guest (listing /tmp shows nothing; /dev/shm is missing). Remove them.
  rm -rf "$DIR/root.tmp/dev" "$DIR/root.tmp/sys" "$DIR/root.tmp/tmp" "$DIR/root.tmp/run"
  echo "$ROOT_KEY" >"$DIR/root.tmp/.ltsedge-key"
  rm -rf "$DIR/root"
  mv "$DIR/root.tmp" "$DIR/root"
  log "arm64 root: built ($(elapsed "$t"))"
fi

# --- 2b. an ARM /proc/cpuinfo ------------------------------------------------------------------------
# Under qemu-user the guest reads the host's /proc/cpuinfo: an x86 CPU. onnxruntime's cpuinfo then warns
# "Unknown CPU vendor" on stderr at every import, and ltsedge's fingerprint names the x86 host. What a
# Raspberry Pi 4 kernel shows (Cortex-A72 cores; as many as the host has, so thread counts agree), and a
# device-tree board name that says what this really is, make the guest look like the board it stands
# for. Cost: /proc is then the root's folder, so *listing* /proc finds only these (psutil.pids() and
# process_iter() see no processes); opening /proc/<pid>/... and /proc/self/... still reaches the host.
identity_file() {  # identity_file PATH: stdin -> PATH, replaced atomically and only when it changed
  mkdir -p "$(dirname "$1")"
  cat >"$1.new"
  if cmp -s "$1.new" "$1"; then rm -f "$1.new"; else mv "$1.new" "$1"; fi
}
NCPU=$(nproc)
for ((i = 0; i < NCPU; i++)); do
  printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n' "$i"
  printf 'CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n'
done | identity_file "$DIR/root/proc/cpuinfo"
printf 'QEMU user-mode aarch64 emulation (ltsedge ci/arm64)\0' | identity_file "$DIR/root/proc/device-tree/model"

# --- 3. aarch64 wheels -----------------------------------------------------------------------------
SITE_KEY=$(hash_of "${SPECS[@]}" -- "${NODEPS_SPECS[@]}" -- "${PY_TAGS[@]}" v2)
if [ "$FORCE" = 0 ] && [ "$(cat "$DIR/wheels/.ltsedge-key" 2>/dev/null)" = "$SITE_KEY" ]; then
  log "wheels: cached ($(find "$DIR/wheels" -name '*.whl' | wc -l) files)"
else
  t=$(now)
  rm -rf "$DIR/wheels.tmp"
  mkdir -p "$DIR/wheels.tmp"
  # Seed from an earlier download so a changed pin does not refetch everything.
  [ -d "$DIR/wheels" ] && cp -l "$DIR"/wheels/*.whl "$DIR/wheels.tmp/" 2>/dev/null || true
  # (pipefail: the pipeline fails when pip does; the filter only hides pip's notes about absent indexes)
  fetch() {
    python3 -m pip download -q --disable-pip-version-check --progress-bar off "${PY_TAGS[@]}" \
      -d "$DIR/wheels.tmp" "$@" 2>&1 | quiet_pip
  }
  log "wheels: downloading ${SPECS[*]} ${NODEPS_SPECS[*]}"
  retry 3 fetch "${SPECS[@]}" || die "pip download failed for: ${SPECS[*]}"
  retry 3 fetch --no-deps "${NODEPS_SPECS[@]}" || die "pip download failed for: ${NODEPS_SPECS[*]}"
  echo "$SITE_KEY" >"$DIR/wheels.tmp/.ltsedge-key"
  rm -rf "$DIR/wheels"
  mv "$DIR/wheels.tmp" "$DIR/wheels"
  log "wheels: $(find "$DIR/wheels" -name '*.whl' | wc -l) files, $(du -sh "$DIR/wheels" | cut -f1) ($(elapsed "$t"))"
fi

# --- 4. site folder: exactly the wheels pip resolves from that folder -------------------------------
if [ "$FORCE" = 0 ] && [ "$(cat "$DIR/site/.ltsedge-key" 2>/dev/null)" = "$SITE_KEY" ]; then
  log "site: cached"
  BUILT_SITE=0
else
  t=$(now)
  rm -rf "$DIR/site.tmp"
  # pip install --target (not unzip) so *.data/ folders land where they belong and stale wheels left in
  # the folder from earlier pins are not installed; --no-index keeps it offline.
  install() {
    # --no-warn-conflicts: pip would compare the target with the *host's* installed packages
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-warn-conflicts \
      --no-index --find-links "$DIR/wheels" --no-compile --upgrade \
      --target "$DIR/site.tmp" "${PY_TAGS[@]}" "$@" 2>&1 | quiet_pip
  }
  install "${SPECS[@]}" || die "pip install --target failed for: ${SPECS[*]}"
  install --no-deps "${NODEPS_SPECS[@]}" || die "pip install --target failed for: ${NODEPS_SPECS[*]}"
  rm -rf "$DIR/site.tmp/bin"  # console scripts with the host's python in their #! line: of no use here
  if python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python3 -m compileall -q -j 0 "$DIR/site.tmp" >/dev/null 2>&1 || true
  fi
  (cd "$DIR/site.tmp" && ls -d -- *.dist-info | sed 's/\.dist-info$//' | sort) >"$DIR/site.tmp/.ltsedge-versions"
  echo "$SITE_KEY" >"$DIR/site.tmp/.ltsedge-key"
  rm -rf "$DIR/site"
  mv "$DIR/site.tmp" "$DIR/site"
  log "site: $(wc -l <"$DIR/site/.ltsedge-versions") distributions, $(du -sh "$DIR/site" | cut -f1) ($(elapsed "$t"))"
  BUILT_SITE=1
fi

# --- 5. the python wrapper (always rewritten; cheap) ------------------------------------------------
cat >"$DIR/python.tmp" <<EOF
#!/bin/sh
# aarch64 python3.11 under qemu-user; generated by ltsedge ci/arm64/build-env.sh.
# -0 makes the guest's argv[0] (hence sys.executable) this script, so child processes re-enter qemu.
# The site folder goes after the caller's PYTHONPATH, as site-packages would (so a checkout or a test
# override wins), and only once (a child inherits the parent's PYTHONPATH).
case ":\${PYTHONPATH:-}:" in
  *":$DIR/site:"*) ;;
  *) PYTHONPATH="\${PYTHONPATH:+\$PYTHONPATH:}$DIR/site" ;;
esac
PYTHONNOUSERSITE=1  # the host's ~/.local would otherwise be visible through qemu's -L fallback
export PYTHONPATH PYTHONNOUSERSITE
exec "$QEMU" -0 "$DIR/python" -L "$DIR/root" "$DIR/root/usr/bin/python3.11" "\$@"
EOF
chmod +x "$DIR/python.tmp"
mv "$DIR/python.tmp" "$DIR/python"

# --- 6. verify ----------------------------------------------------------------------------------------
t=$(now)
if [ "$BUILT_SITE" = 1 ]; then
  CHECK='import platform, onnxruntime, onnx, torch, pymoo, numpy, typer
print(platform.machine(), "python", platform.python_version(), "onnxruntime", onnxruntime.__version__,
      "onnx", onnx.__version__, "torch", torch.__version__, "numpy", numpy.__version__)'
else
  CHECK='import platform; print(platform.machine(), "python", platform.python_version())'
fi
out=$("$DIR/python" -c "$CHECK" 2>"$DIR/verify.err") || { cat "$DIR/verify.err" >&2; die "$DIR/python does not start (stderr above)"; }
case "$out" in aarch64*) ;; *) die "$DIR/python reports machine '${out%% *}', expected aarch64" ;; esac
log "verify: $out ($(elapsed "$t"))"
log "ready: $DIR/python (total $(elapsed "$T_START"))"
