"""Llama's two graph forms side by side: standard ONNX operators (plain) against onnxruntime's fused
operators (contrib: GroupQueryAttention with fused rotary, SkipSimplifiedLayerNormalization, at int4 a
GatherBlockQuantized embedding), at fp32 and int4, for SmolLM2-135M's shape (random weights).

Decode (one token after a cache of --context tokens) and prefill (--sequence tokens), the runs interleaved
between the four models' workers (benchmarks/llama_sessions.py), medians and the contrib / plain ratios;
peak memory of each worker. Exported for --target-ort (the contrib form needs 1.22).

    python benchmarks/llama_graph_form.py [--context 2048] [--sequence 512] [--rounds 30]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions

from llama_sessions import SideBySide

SMOLLM2_135M = dict(backbone="llama", n_layer=30, d_model=576, n_head=[9] * 30, n_kv_head=[3] * 30, head_dim=64,
                    d_inner=[1536] * 30, vocab_size=49152, n_positions=8192, rope_theta=100000.0,
                    tie_embeddings=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--sequence", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds per workload")
    parser.add_argument("--target-ort", default="1.22")
    parser.add_argument("--precisions", default="fp32,int4")
    args = parser.parse_args()
    arch = Architecture(**SMOLLM2_135M)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for precision in args.precisions.split(","):
            for form in ("plain", "contrib"):
                options = ExportOptions(variant="generate", target_ort=args.target_ort, precision=precision,
                                        graph_form=form)
                start = time.perf_counter()
                exported = export_model(arch, options)
                path = Path(tmp) / f"{form}-{precision}.onnx"
                exported.save(path, digest=False)
                seconds = time.perf_counter() - start
                print(f"exported {form} {precision}: {exported.nbytes / 1e6:.1f} MB in {seconds:.1f} s", flush=True)
                models[f"{form} {precision}"] = str(path)
        bench = SideBySide(models, context=args.context, sequence=args.sequence, vocab=arch.vocab_size,
                           head_size=arch.d_head[0])
        bench.time("decode", args.rounds, 10)
        bench.time("prefill", args.rounds, 1)
        peaks = bench.close()
    print(f"\nSmolLM2-135M shape, decode after {args.context} tokens, prefill of {args.sequence}; medians of "
          f"{args.rounds} interleaved rounds (decode 10 runs, prefill 1 run each)")
    print(f"{'model':<16}{'decode ms':>10}{'prefill ms':>11}{'peak MiB':>9}")
    for label in models:
        print(f"{label:<16}{bench.median(label, 'decode'):>10.2f}{bench.median(label, 'prefill'):>11.1f}"
              f"{peaks[label]:>9.0f}")
    for precision in args.precisions.split(","):
        c, p = f"contrib {precision}", f"plain {precision}"
        print(f"contrib / plain at {precision} (median of the rounds' ratios): decode "
              f"{bench.ratio(c, p, 'decode'):.3f}, prefill {bench.ratio(c, p, 'prefill'):.3f}, "
              f"peak {peaks[c] / peaks[p]:.3f}")


if __name__ == "__main__":
    main()
