"""GPT-2's two graph forms side by side in onnxruntime-genai's own loop, as an app runs a bundle: standard ONNX
operators (plain: the cache concatenated each step) against onnxruntime's fused attention (contrib:
GroupQueryAttention writing one shared past/present buffer in place), random weights.

Each bundle in its own process (genai_worker.py), prompts of each --prompts length and --steps greedy tokens
after it, the bundles in alternating order for --rounds rounds; medians of the per-token decode ms, the prefill,
and each worker's peak memory.

    python benchmarks/gpt2_graph_form.py [--layers 12] [--width 768] [--heads 12 | 4,8,12,16] [--cache-layout per-layer]
                                           [--prompts 192,960]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import write_bundle
from ltsedge.exporters.options import ExportOptions

WORKER = Path(__file__).with_name("genai_worker.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", default="12", help="heads per layer: one count, or a list cycled over the layers")
    parser.add_argument("--cache-layout", default=None, help="uniform (GPT-2's default) or per-layer")
    parser.add_argument("--ffn", type=int, default=3072)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--prompts", default="192,960")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    heads = [int(h) for h in args.heads.split(",")]
    arch = Architecture(n_layer=args.layers, d_model=args.width, n_head=[heads[i % len(heads)] for i in range(args.layers)],
                        d_inner=[args.ffn] * args.layers, vocab_size=50257, n_positions=1024)
    prompts = [int(p) for p in args.prompts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        bundles = {}
        for form in ("plain", "contrib"):
            options = ExportOptions(variant="generate", target_ort="1.22", graph_form=form, precision=args.precision,
                                    cache_layout=args.cache_layout)
            bundles[form] = Path(tmp) / form
            write_bundle(export_model(arch, options), bundles[form])
            shared = json.loads((bundles[form] / "genai_config.json").read_text())["search"]["past_present_share_buffer"]
            print(f"{form}: past_present_share_buffer {shared}", flush=True)
        workers = {form: subprocess.Popen([sys.executable, str(WORKER), str(path), str(args.threads)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                   for form, path in bundles.items()}
        for worker in workers.values():
            worker.stdout.readline()

        def ask(form: str, request: dict) -> dict:
            workers[form].stdin.write(json.dumps(request) + "\n")
            workers[form].stdin.flush()
            return json.loads(workers[form].stdout.readline())

        print(f"\n{args.layers} x {args.width}, heads {args.heads}, FFN {args.ffn}, {args.precision}, "
              f"cache layout {args.cache_layout or 'default'}, "
              f"{args.threads} thread(s), {args.steps} tokens after each prompt, {args.rounds} rounds; "
              f"{cpu_name()}")
        for prompt in prompts:
            decode = {form: [] for form in workers}
            prefill = {form: [] for form in workers}
            for r in range(args.rounds):
                for form in (list(workers) if r % 2 == 0 else list(workers)[::-1]):
                    out = ask(form, {"prompt": prompt, "steps": args.steps})
                    decode[form].append(statistics.median(out["decode_ms"]))
                    prefill[form].append(out["prefill_ms"])
            base_d, base_p = statistics.median(decode["plain"]), statistics.median(prefill["plain"])
            for form in workers:
                d, p = statistics.median(decode[form]), statistics.median(prefill[form])
                print(f"prompt {prompt:5d}  {form:8s} decode {d:7.2f} ms/token ({d / base_d:.3f}x)   "
                      f"prefill {p:8.1f} ms ({p / base_p:.3f}x)", flush=True)
        for form in workers:
            print(f"{form:8s} peak {ask(form, {'peak': True})['peak_mib']:.0f} MiB")
            workers[form].stdin.close()
            workers[form].wait()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
