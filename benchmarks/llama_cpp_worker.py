"""One GGUF model in llama.cpp (llama-cpp-python), answering genai_worker.py's requests, so benchmarks time it beside
onnxruntime-genai bundles side by side.

Started as ``python llama_cpp_worker.py MODEL.gguf THREADS CONTEXT``; the same protocol as genai_worker.py:
  {"prompt": P, "steps": N}  -> {"prefill_ms": ..., "decode_ms": [N per-token ms]}: the cache cleared, P random
                                tokens evaluated (timed), then N greedy tokens (each one model step, timed)
  {"peak": true}             -> {"peak_mib": VmHWM - RSS before the model was loaded, "rss_mib": ...}
llama-cpp-python's defaults otherwise (batches of 512 tokens, its own attention), THREADS for prompt and decode.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from genai_worker import _kib


def main() -> None:
    import llama_cpp

    path, threads, context = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    before = _kib("VmRSS:")
    llm = llama_cpp.Llama(model_path=path, n_ctx=context, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    vocab = llm.n_vocab()
    rng = np.random.default_rng(0)

    def next_token() -> int:  # greedy, from the last evaluated position's logits
        return int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,)).argmax())

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("peak"):
            print(json.dumps({"peak_mib": (_kib("VmHWM:") - before) / 1024, "rss_mib": _kib("VmRSS:") / 1024}),
                  flush=True)
            continue
        prompt, steps = request["prompt"], request["steps"]
        llm.reset()
        tokens = rng.integers(3, vocab, prompt).tolist()
        t0 = time.perf_counter()
        llm.eval(tokens)
        prefill_ms = (time.perf_counter() - t0) * 1000
        token, decode_ms = next_token(), []
        for _ in range(steps):
            t0 = time.perf_counter()
            llm.eval([token])
            token = next_token()
            decode_ms.append((time.perf_counter() - t0) * 1000)
        print(json.dumps({"prefill_ms": prefill_ms, "decode_ms": decode_ms}), flush=True)


if __name__ == "__main__":
    main()
