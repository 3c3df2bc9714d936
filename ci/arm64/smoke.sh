#!/usr/bin/env bash
# arm64 smoke test: build (or reuse) the emulated aarch64 environment, then run ci/arm64/smoke.py in it.
#
#   ci/arm64/smoke.sh [smoke.py options, e.g. -k profile]
#
# ARM64_ENV      where the environment is built and cached (default /tmp/ltsedge-arm64)
# SMOKE_TIMEOUT  overall limit in seconds for smoke.py (default 900)
# KEEP_WORK=1    keep the scratch directory (models, logs, store) even when everything passed
# ARM64_ONNXRUNTIME, ARM64_ONNX   other versions for the environment (see build-env.sh; each gets its own
#                DIR cache key, so point ARM64_ENV elsewhere to keep the default environment too)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ENV_DIR=${ARM64_ENV:-/tmp/ltsedge-arm64}
SMOKE_TIMEOUT=${SMOKE_TIMEOUT:-900}
start=$(date +%s)

echo "== arm64 environment: $ENV_DIR"
"$REPO/ci/arm64/build-env.sh" "$ENV_DIR"
built=$(date +%s)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ltsedge-arm64-smoke.XXXXXX")
echo "== arm64 smoke (scratch: $WORK, limit ${SMOKE_TIMEOUT}s)"
set +e
# cd to the scratch directory so nothing lands in the checkout; the checkout comes from PYTHONPATH.
(cd "$WORK" && PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" \
  timeout --kill-after=30 "$SMOKE_TIMEOUT" "$ENV_DIR/python" "$REPO/ci/arm64/smoke.py" --work "$WORK" "$@")
rc=$?
set -e
end=$(date +%s)
[ "$rc" = 124 ] && echo "arm64 smoke: FAILED, stopped after ${SMOKE_TIMEOUT}s (SMOKE_TIMEOUT)"
echo "== timings: environment $((built - start))s, smoke $((end - built))s, total $((end - start))s"
if [ "$rc" = 0 ] && [ "${KEEP_WORK:-0}" != 1 ]; then
  rm -rf "$WORK"
else
  echo "== scratch directory kept: $WORK"
fi
exit "$rc"
