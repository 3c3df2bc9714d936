"""Export cost per candidate: build + export + onnxruntime session load, and one inference.

For three architectures (2 layers x d_model 256, 6 x 512, 16 x 1024; vocabulary 50257; sequence 192),
print the wall time of building the PyTorch model and exporting it to ONNX (in memory), writing the
file, creating the onnxruntime session from it, and one run: a forward pass of 192 tokens (forward
variant) or one decode step after a cache of 192 tokens (generate variant). Medians over --repeats
runs, each in a fresh state for the model (the shared weight buffer stays warm, as in a search).

    python benchmarks/export.py [--repeats 3] [--fresh-weights] [--variant forward|generate|both]

``--quantized`` instead: what quantizing adds to an export (int8: onnxruntime's ONNXQuantizer as
quantize_dynamic drives it; int4: its MatMulNBitsQuantizer; ltsedge.exporters.quantize), the export time
at each precision minus fp32's, for 2 x 256 and 6 x 512 (``--shapes`` for others, e.g. 12x768); then
fp32 / int8 / int4 side by side in one Runner (generate variant: prefill of 192 tokens, decode per token
after 192, peak memory) with each file's size (``--cost-only``: the first table only).

    python benchmarks/export.py --quantized [--repeats 3] [--shapes 2x256,6x512,12x768] [--cost-only]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.proxy import count_params

SHAPES = [(2, 256), (6, 512), (16, 1024)]


def arch_for(n_layer: int, d_model: int) -> Architecture:
    n_head = 8 if d_model >= 512 else 4
    return Architecture(n_layer=n_layer, d_model=d_model, n_head=[n_head] * n_layer,
                        d_inner=[min(4 * d_model, 4096)] * n_layer)


def feeds_for(exported, context: int = 192) -> dict:
    if exported.spec.variant == "forward":
        return {"input_ids": np.zeros((1, 192), dtype=np.int64)}
    feeds = {"input_ids": np.zeros((1, 1), dtype=np.int64), "attention_mask": np.ones((1, context + 1), np.int64),
             "position_ids": np.array([[context]])}
    for t in exported.spec.input("past"):
        feeds[t.name] = np.zeros((1, t.dims[1], context, t.dims[3]), np.float32)
    return feeds


def one_run(arch: Architecture, path: Path, shared: bool, variant: str) -> dict:
    t0 = time.perf_counter()
    exported = export_model(arch, ExportOptions(variant=variant), shared_weights=shared)
    t1 = time.perf_counter()
    exported.save(path, digest=False)  # as the search writes its scratch files
    t2 = time.perf_counter()
    options = ort.SessionOptions()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    t3 = time.perf_counter()
    feeds = feeds_for(exported)
    session.run(None, feeds)  # first run: allocations
    t4 = time.perf_counter()
    session.run(None, feeds)
    t5 = time.perf_counter()
    return {"export": t1 - t0, "save": t2 - t1, "load": t3 - t2, "first_run": t4 - t3, "inference": t5 - t4,
            "total": t3 - t0, "mb": exported.nbytes / 1e6}


PRECISIONS = ("fp32", "int8", "int4")
QUANTIZED_SHAPES = [(2, 256), (6, 512)]


def quantized(repeats: int, shapes: list[tuple[int, int]] = QUANTIZED_SHAPES, measure: bool = True) -> None:
    """Quantization's cost per candidate, then (``measure``) the three precisions measured side by side."""
    from ltsedge.devices import load_profile
    from ltsedge.runners import Runner

    export_model(arch_for(1, 64), ExportOptions(precision="int4"))  # the quantizers' imports, paid once per process
    print(f"{'architecture':<14}{'variant':>9}" + "".join(f"{p + ' export':>13}" for p in PRECISIONS)
          + f"{'int8 adds':>11}{'int4 adds':>11}")
    for n_layer, d_model in shapes:
        arch = arch_for(n_layer, d_model)
        for variant in ("forward", "generate"):
            times = {}
            for precision in PRECISIONS:
                runs = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    export_model(arch, ExportOptions(variant=variant, precision=precision))
                    runs.append(time.perf_counter() - t0)
                times[precision] = statistics.median(runs)
            print(f"{n_layer:>2} x {d_model:<9}{variant:>9}" + "".join(f"{times[p]:>12.2f}s" for p in PRECISIONS)
                  + f"{times['int8'] - times['fp32']:>10.2f}s{times['int4'] - times['fp32']:>10.2f}s", flush=True)
    if not measure:
        return

    profile = load_profile("cpu").replace(sequence=192, context=192, drift_check_every=0)
    print(f"\n{'architecture':<14}{'precision':>10}{'file MB':>9}{'prefill ms':>11}{'decode ms/token':>16}"
          f"{'peak MB':>9}{'decode runs':>12}")
    with tempfile.TemporaryDirectory() as tmp, Runner(profile) as runner:
        for n_layer, d_model in shapes:
            arch = arch_for(n_layer, d_model)
            paths, sizes = [], []
            for precision in PRECISIONS:
                path = Path(tmp) / f"{arch.id}-{precision}.onnx"
                exported = export_model(arch, ExportOptions(variant="generate", precision=precision))
                exported.save(path, digest=False)
                paths.append(path)
                sizes.append(path.stat().st_size / 1e6)
            for precision, size, m in zip(PRECISIONS, sizes, runner.measure_many(paths), strict=True):
                if not m.ok:
                    print(f"{n_layer:>2} x {d_model:<9}{precision:>10}{size:>9.0f}  failed: {m.error}")
                    continue
                print(f"{n_layer:>2} x {d_model:<9}{precision:>10}{size:>9.0f}{m.prefill_latency_ms:>11.2f}"
                      f"{m.decode_latency_ms:>16.3f}{m.peak_memory_mb:>9.0f}{m.workloads['decode']['runs']:>12}")


def shapes_arg(text: str) -> list[tuple[int, int]]:
    try:
        return [(int(n), int(d)) for n, d in (s.lower().split("x") for s in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give LxD pairs, e.g. 2x256,6x512") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fresh-weights", action="store_true", help="initialise every tensor (no shared buffer)")
    parser.add_argument("--variant", choices=("forward", "generate", "both"), default="both")
    parser.add_argument("--quantized", action="store_true", help="quantization's cost and fp32/int8/int4 figures")
    parser.add_argument("--shapes", type=shapes_arg, default=QUANTIZED_SHAPES,
                        help="--quantized: LxD architectures, comma-separated (default 2x256,6x512)")
    parser.add_argument("--cost-only", action="store_true", help="--quantized: the export costs only, no Runner")
    args = parser.parse_args()
    if args.quantized:
        quantized(args.repeats, args.shapes, measure=not args.cost_only)
        return
    variants = ("forward", "generate") if args.variant == "both" else (args.variant,)
    export_model(arch_for(1, 64))  # imports and the onnxruntime probe, paid once per process
    print(f"{'architecture':<14}{'variant':>9}{'params':>8}{'file MB':>9}{'export':>8}{'save':>7}{'load':>7}"
          f"{'build+export+load':>19}{'one run':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n_layer, d_model in SHAPES:
            arch = arch_for(n_layer, d_model)
            for variant in variants:
                runs = [one_run(arch, Path(tmp) / "m.onnx", not args.fresh_weights, variant)
                        for _ in range(args.repeats)]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                params = count_params(arch).total_params / 1e6
                print(f"{n_layer:>2} x {d_model:<9}{variant:>9}{params:>7.0f}M{med['mb']:>9.0f}{med['export']:>7.2f}s"
                      f"{med['save']:>6.2f}s{med['load']:>6.2f}s{med['total']:>18.2f}s{med['inference']:>9.3f}s")


if __name__ == "__main__":
    main()
