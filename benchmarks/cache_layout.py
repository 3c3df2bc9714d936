"""Decode time per token of a generate export, per-layer vs uniform KV-cache layout (prints figures).

A 6 x 512 GPT-2 with per-layer heads [2, 4, 8, 2, 4, 8], onnxruntime CPU (one thread), batch 1, one new token
after a cache of CONTEXT tokens; the two layouts alternate run by run, each figure the median of many runs
(thread CPU time: the machine is shared). Run: python benchmarks/cache_layout.py [rounds] [threads].
"""
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

from ltsedge.architecture import Architecture
from ltsedge.backbones.kv_cache import uniform_heads
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions

CONTEXT, ROUNDS = 192, int(sys.argv[1]) if len(sys.argv) > 1 else 400
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 1


def session(arch, layout):
    exported = export_model(arch, ExportOptions(variant="generate", cache_layout=layout))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = THREADS
    s = ort.InferenceSession(exported.to_bytes(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"input_ids": np.array([[7]], np.int64), "attention_mask": np.ones((1, CONTEXT + 1), np.int64),
             "position_ids": np.array([[CONTEXT]], np.int64)}
    for t in exported.spec.input("past"):
        feeds[t.name] = rng.standard_normal((1, t.dims[1], CONTEXT, t.dims[3])).astype(np.float32)
    return s, feeds


def main():
    for vocab in (50257, 512):
        for heads in ([2, 4, 8, 2, 4, 8],):
            arch = Architecture(n_layer=6, d_model=512, n_head=heads, d_inner=[2048] * 6, vocab_size=vocab,
                                n_positions=1024)
            sessions = {layout: session(arch, layout) for layout in ("per-layer", "uniform")}
            times = {layout: [] for layout in sessions}
            for s, feeds in sessions.values():
                for _ in range(5):
                    s.run(None, feeds)  # warm-up
            order = list(sessions.items())
            for round_ in range(ROUNDS):  # alternate run by run (ABBA): the machine's load hits both alike
                for layout, (s, feeds) in (order if round_ % 2 else order[::-1]):
                    start = time.thread_time()  # CPU time of this thread (one ORT thread: the work), not the
                    s.run(None, feeds)           # wall clock other processes' load stretches
                    times[layout].append((time.thread_time() - start) * 1e3)
            med = {k: statistics.median(v) for k, v in times.items()}
            paired = statistics.median(u / p for u, p in zip(times["uniform"], times["per-layer"]))
            print(f"vocab {vocab:5d} heads {heads} (H = {uniform_heads(arch)}) context {CONTEXT} threads {THREADS}: "
                  f"per-layer {med['per-layer']:.3f} ms/token, uniform {med['uniform']:.3f} ms/token, "
                  f"uniform/per-layer {med['uniform'] / med['per-layer'] - 1:+.1%} (median of paired runs {paired - 1:+.1%})",
                  flush=True)


main()
