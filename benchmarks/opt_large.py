"""OPT-scale models above 2 GB: export with external data, load in onnxruntime, measure with ltsedge's runner.

The largest model of the OPT-scale space (29 layers x d_model 1472 x d_inner 6080, 16 heads: 848 M
parameters, 3.39 GB in fp32) is over protobuf's 2 GB, so its weights go to ``model.onnx_data``. For
each variant (forward, generate) this prints: export and write times, file sizes, creating an
onnxruntime session in this process (and its logits against the PyTorch reference on a few tokens),
then the runner's measurement in its worker: forward at --sequence tokens, or prefill of --sequence
tokens and decode after --context cached tokens. Peak memory (VmHWM, reset before each step) of this
process per step, and the worker's peak over its resting RSS. Sequence 2048 on such a model takes
minutes per run on 2 cores: the default workload is short (128 tokens) and the timing budget small.

    python benchmarks/opt_large.py [--n-layer 29 --d-model 1472 --d-inner 6080 --n-head 16]
                                   [--sequence 128 --context 128 --max-seconds 30] [--variant both]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.devices import load_profile
from ltsedge.exporters import export_model, weight_seed
from ltsedge.exporters.options import ExportOptions
from ltsedge.proxy import count_params
from ltsedge.runners import Runner
from ltsedge.runners.memory import peak_rss_bytes, release_memory, reset_peak, rss_bytes

MB, GB = 2**20, 1e9


class Step:
    """Wall time and this process's peak RSS (MB) of a block: ``with Step() as s: ...; s.seconds, s.peak_mb``."""

    def __enter__(self) -> Step:
        release_memory()
        reset_peak()
        self.rss_before_mb = rss_bytes() / MB
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.peak_mb = (peak_rss_bytes() or 0) / MB


def reference_diff(arch: Architecture, session, variant: str, tokens: int = 8) -> float:
    """Max |logits - PyTorch reference| on a few tokens: the >2 GB file holds the right weights."""
    import torch

    from ltsedge.backbones import get_backbone

    model = get_backbone(arch.backbone).build_model(arch, weight_seed(arch), shared_weights=True)
    ids = np.arange(1, tokens + 1, dtype=np.int64)[None]
    feeds = {"input_ids": ids}
    if variant == "generate":
        feeds.update(attention_mask=np.ones_like(ids), position_ids=np.arange(tokens)[None])
        for t in session.get_inputs():
            if t.name.startswith("past_key_values"):
                feeds[t.name] = np.zeros((1, t.shape[1], 0, t.shape[3]), np.float32)
    (logits,) = session.run(["logits"], feeds)
    with torch.no_grad():
        expected = model(torch.from_numpy(ids)).numpy()
    return float(np.abs(logits - expected).max())


def run_variant(arch: Architecture, variant: str, directory: Path, profile) -> dict:
    import onnxruntime as ort

    path = directory / f"{variant}.onnx"
    with Step() as export:
        exported = export_model(arch, ExportOptions(variant=variant))
    with Step() as write:
        files = exported.save_files(path, digest=False)  # external data: it is over protobuf's 2 GB
    sizes = {name: (directory / name).stat().st_size for name in files}
    del exported
    with Step() as load:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    diff = reference_diff(arch, session, variant)
    del session
    release_memory()
    with Runner(profile) as runner:
        t0 = time.perf_counter()
        m = runner.measure(path)
        measure_s = time.perf_counter() - t0
    for name in files:
        (directory / name).unlink()
    if not m.ok:
        raise SystemExit(f"{variant}: measurement failed: {m.error}")
    return {"variant": variant, "files": sizes, "export": export, "write": write, "load": load, "diff": diff,
            "m": m, "measure_s": measure_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-layer", type=int, default=29)
    parser.add_argument("--d-model", type=int, default=1472)
    parser.add_argument("--d-inner", type=int, default=6080)
    parser.add_argument("--n-head", type=int, default=16)
    parser.add_argument("--sequence", type=int, default=128, help="forward / prefill tokens")
    parser.add_argument("--context", type=int, default=128, help="cached tokens before a decode step")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="timed runs per workload")
    parser.add_argument("--variant", choices=("forward", "generate", "both"), default="both")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    n = args.n_layer
    arch = Architecture(backbone="opt", n_layer=n, d_model=args.d_model, n_head=[args.n_head] * n,
                        d_inner=[args.d_inner] * n, vocab_size=50272, n_positions=2048)
    counts = count_params(arch)
    profile = load_profile(args.device).replace(sequence=args.sequence, context=args.context, warmup=1, min_runs=3,
                                                max_runs=20, max_seconds=args.max_seconds, drift_check_every=0)
    variants = ("forward", "generate") if args.variant == "both" else (args.variant,)
    print(f"OPT {n} x {args.d_model} x {args.d_inner}, {args.n_head} heads: {counts.total_params / 1e6:.0f} M params "
          f"({counts.decoder_params / 1e6:.1f} M decoder), fp32 weights {counts.total_params * 4 / GB:.2f} GB; "
          f"process RSS at start {rss_bytes() / MB:.0f} MB")
    export_model(Architecture(backbone="opt", n_layer=1, d_model=64, n_head=[4], d_inner=[64], vocab_size=100))
    rows = []  # (the tiny export above paid the imports, as benchmarks/export.py does)
    with tempfile.TemporaryDirectory(prefix="opt-large-") as tmp:
        for variant in variants:
            rows.append(run_variant(arch, variant, Path(tmp), profile))
    print()
    print("| variant | model.onnx | model.onnx_data | export | write | ORT session (this process) | "
          "max abs diff vs PyTorch | this process's peak RSS: export / write / load | runner: load | runner: workloads | "
          "worker peak over rest | weights |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["m"]
        sizes = r["files"]
        onnx_kb = sizes.get(f"{r['variant']}.onnx", 0) / 1e3
        data_gb = sizes.get(f"{r['variant']}.onnx_data", 0) / GB
        if m.workload == "forward":
            latency = f"forward {args.sequence}: {m.latency_ms / 1e3:.2f} s ({m.runs} runs)"
        else:
            w = m.workloads
            latency = (f"prefill {args.sequence}: {m.prefill_latency_ms / 1e3:.2f} s ({w['prefill']['runs']} runs); "
                       f"decode after {args.context}: {m.decode_latency_ms:.0f} ms/token ({w['decode']['runs']} runs), "
                       f"KV cache {m.kv_cache_mb:.1f} MB")
        print(f"| {r['variant']} | {onnx_kb:.0f} kB | {data_gb:.2f} GB | {r['export'].seconds:.2f} s | "
              f"{r['write'].seconds:.1f} s | {r['load'].seconds:.1f} s | {r['diff']:.1e} | "
              f"{r['export'].peak_mb:.0f} / {r['write'].peak_mb:.0f} / {r['load'].peak_mb:.0f} MB | "
              f"{m.load_seconds:.1f} s | {latency} | {m.peak_memory_mb:.0f} MB | {m.weights_mb:.0f} MB |")
    print("\nwall time of the runner's measurements: "
          + ", ".join(f"{r['variant']} {r['measure_s']:.0f} s" for r in rows))


if __name__ == "__main__":
    main()
