"""One bundle in onnxruntime-genai's Generator, as an app runs it, for benchmarks that time several side by side.

Started as ``python genai_worker.py BUNDLE_DIR THREADS``; reads one JSON request a line on stdin, answers one
JSON line on stdout:
  {"prompt": P, "steps": N}  -> {"prefill_ms": ..., "decode_ms": [N per-token ms]}: a new Generator, append_tokens
                                of P tokens (timed), then N generate_next_token calls (each timed), greedy
  {"peak": true}             -> {"peak_mib": VmHWM - RSS before the model was loaded, "rss_mib": ...}
Each model in its own process: its peak is its own, and one model's allocator never serves another's.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


def main() -> None:
    import onnxruntime_genai as og

    folder, threads = sys.argv[1], int(sys.argv[2])
    before = _kib("VmRSS:")
    config = og.Config(folder)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    model = og.Model(config)
    vocab = json.load(open(f"{folder}/genai_config.json"))["model"]["vocab_size"]
    rng = np.random.default_rng(0)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("peak"):
            print(json.dumps({"peak_mib": (_kib("VmHWM:") - before) / 1024, "rss_mib": _kib("VmRSS:") / 1024}),
                  flush=True)
            continue
        prompt, steps = request["prompt"], request["steps"]
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt + steps + 1, do_sample=False)
        generator = og.Generator(model, params)
        tokens = rng.integers(3, vocab, prompt, dtype=np.int64).astype(np.int32)
        t0 = time.perf_counter()
        generator.append_tokens(tokens)
        prefill_ms = (time.perf_counter() - t0) * 1000
        generator.generate_next_token()  # the prompt's next token, chosen from the prefill's logits: no model run
        decode_ms = []
        for _ in range(steps):
            t0 = time.perf_counter()
            generator.generate_next_token()
            decode_ms.append((time.perf_counter() - t0) * 1000)
        del generator
        print(json.dumps({"prefill_ms": prefill_ms, "decode_ms": decode_ms}), flush=True)


if __name__ == "__main__":
    main()
