"""The three latency workloads of one architecture, measured side by side in one worker.

For 2 x 256, 6 x 512 and 12 x 768 (vocabulary 50257): the forward variant's full pass of 192 tokens,
and the generate variant's prefill of 192 tokens and per-token decode after a cache of 192 tokens,
with the KV cache's size and the runs behind each median (sub-millisecond decode steps are timed in
batches). Ratios between figures of one run are what to compare on a noisy machine.

    python benchmarks/workloads.py [--device cpu]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.devices import load_profile
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.runners import Runner

SHAPES = [(2, 256), (6, 512), (12, 768)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    profile = load_profile(args.device).replace(sequence=192, context=192, drift_check_every=0)
    print(f"{'architecture':<12}{'forward ms':>11}{'prefill ms':>11}{'decode ms/token':>16}"
          f"{'forward/decode':>15}{'KV cache MB':>12}{'peak MB (gen)':>14}{'decode runs':>12}")
    with tempfile.TemporaryDirectory() as tmp, Runner(profile) as runner:
        for n_layer, d_model in SHAPES:
            heads = 8 if d_model >= 512 else 4
            arch = Architecture(n_layer=n_layer, d_model=d_model, n_head=[heads] * n_layer,
                                d_inner=[4 * d_model] * n_layer)
            paths = []
            for variant in ("forward", "generate"):
                path = Path(tmp) / f"{arch.id}-{variant}.onnx"
                export_model(arch, ExportOptions(variant=variant)).save(path, digest=False)
                paths.append(path)
            forward, generate = runner.measure_many(paths)
            decode = generate.workloads["decode"]
            print(f"{n_layer:>2} x {d_model:<7}{forward.latency_ms:>11.2f}{generate.prefill_latency_ms:>11.2f}"
                  f"{generate.decode_latency_ms:>16.3f}{forward.latency_ms / generate.decode_latency_ms:>14.1f}x"
                  f"{generate.kv_cache_mb:>12.2f}{generate.peak_memory_mb:>14.1f}{decode['runs']:>12}")


if __name__ == "__main__":
    main()
