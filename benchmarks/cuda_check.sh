#!/usr/bin/env bash
# The `cuda` profile on a real GPU, in one short pass: the CUDA tests, a few architectures profiled at
# each precision and variant, the quick search, and the repeatability of forward figures between two
# workers. Needs onnxruntime-gpu (CUDAExecutionProvider) and ltsedge's own dependencies importable.
#
#     bash benchmarks/cuda_check.sh OUT_DIR [DEVICE]      # DEVICE: cuda (default), or cpu to try the script
#
# Every step has its own time limit and log in OUT_DIR; a failing step does not stop the others. The
# figures are recorded in docs/benchmarks.md ("The cuda profile on an NVIDIA H100").
set -u
out=${1:?usage: cuda_check.sh OUT_DIR [DEVICE]}
device=${2:-cuda}
py=${PYTHON:-python3}
mkdir -p "$out"
export LTSEDGE_STORE="$out/store.sqlite"
export PYTHONUNBUFFERED=1
work=$(mktemp -d)

step() {  # step NAME SECONDS COMMAND...: run, log, and say how it ended
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "step $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
}

step environment 60 bash -c "nvidia-smi; $py -c 'import onnxruntime as o, torch; \
print(\"onnxruntime\", o.__version__, o.get_available_providers()); print(\"torch\", torch.__version__)'"

step tests 240 "$py" -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/test_runners.py::test_cuda_measurement tests/test_devices.py tests/test_fingerprint.py \
    tests/test_quantize.py -k "cuda or fp16 or gpu or profile or fingerprint"

"$py" -m ltsedge space --sample 3 --seed 7 >"$work/sample.json" 2>"$out/sample.log"
"$py" - "$work" <<'EOF'
import json, sys, pathlib
work = pathlib.Path(sys.argv[1])
text = (work / "sample.json").read_text()
archs = json.loads(text) if text.lstrip().startswith("[") else [json.loads(line) for line in text.splitlines() if line.strip()]
for i, arch in enumerate(archs):
    (work / f"arch{i}.json").write_text(json.dumps(arch))
EOF
for i in 0 2; do  # the smallest and the largest of the sample
    for variant in forward generate; do
        for precision in fp32 fp16 int4; do
            [ "$device" = cpu ] && [ "$precision" = fp16 ] && continue
            step "profile-$i-$variant-$precision" 120 "$py" -m ltsedge profile "$work/arch$i.json" --device "$device" \
                --variant "$variant" --precision "$precision" --json
        done
    done
done

step quick-search 300 "$py" -m ltsedge search --preset quick --device "$device" --out "$out/quick" --quiet
mapfile -t published < <(find "$out/quick" -name '*.onnx' | sort | head -3)
step check 120 "$py" -m ltsedge check "${published[@]}" --device "$device" --max-latency-ms 1000 --max-memory-mb 100000
step repeatability 300 "$py" benchmarks/repeatability.py --device "$device" --models 8 --conditions quiet quiet
step repeatability-generate 300 "$py" benchmarks/repeatability.py --device "$device" --models 8 --variant generate \
    --conditions quiet quiet
rm -rf "$work"
