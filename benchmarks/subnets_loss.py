"""Sub-networks of a trained model, their weights inherited, their held-out loss measured (ltsedge.subnets).

A Hugging Face Llama folder (SmolLM2-135M-Instruct with its trained weights, made by
``../shared/tools/smollm2-hf.sh``) and its tokenizer on a text (default: the Python 3.11 manual in Info form,
Debian's ``python3.11-doc``): importance from one pass over calibration windows, then the held-out loss
(windows calibration never saw) of the parent and of the known heuristics: drop the layers of least block
influence (ShortGPT), narrow every SwiGLU alike, drop a key/value group per layer. An evaluation's time is
the median of --repeats runs of the parent's, wall and CPU (on a shared machine the CPU time, over the
threads, is what a quiet one would take); --transformers also times transformers' own loss on the same
windows and checks that the figures agree.

    python benchmarks/subnets_loss.py [--hf /tmp/smollm2] [--text FILE] [--window 512] [--held-out 4]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from ltsedge.architecture import Architecture
from ltsedge.subnets.genes import SubnetSpace
from ltsedge.subnets.heuristics import drop_least_influential, uniform_ffn, uniform_kv_groups
from ltsedge.subnets.importance import measure_importance
from ltsedge.subnets.loss import held_out_loss
from ltsedge.subnets.parent import parent_weights
from ltsedge.subnets.slicing import slice_state_dict
from ltsedge.subnets.windows import split_windows

DEFAULT_TEXT = Path("/usr/share/info/python3.11.info.gz")


def architecture(folder: Path) -> Architecture:
    """The folder's config.json as a llama architecture (the fields SmolLM2's config sets)."""
    c = json.loads((folder / "config.json").read_text())
    layers = c["num_hidden_layers"]
    return Architecture(backbone="llama", n_layer=layers, d_model=c["hidden_size"],
                        n_head=[c["num_attention_heads"]] * layers, n_kv_head=[c["num_key_value_heads"]] * layers,
                        head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                        d_inner=[c["intermediate_size"]] * layers, vocab_size=c["vocab_size"],
                        n_positions=c["max_position_embeddings"], rope_theta=c["rope_theta"],
                        rms_norm_eps=c["rms_norm_eps"], tie_embeddings=c.get("tie_word_embeddings", True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf", type=Path, default=Path("/tmp/smollm2"))
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT, help="plain or .gz text")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--held-out", type=int, default=4, help="held-out windows")
    parser.add_argument("--calibration", type=int, default=8, help="calibration windows")
    parser.add_argument("--repeats", type=int, default=3, help="timed evaluations of the parent")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--transformers", action="store_true", help="also time transformers' loss")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    parent = architecture(args.hf)
    weights = parent_weights(parent, load_file(str(args.hf / "model.safetensors")), "model.safetensors")
    raw = gzip.open(args.text, "rt") if args.text.suffix == ".gz" else open(args.text)
    with raw:
        tokens = Tokenizer.from_file(str(args.hf / "tokenizer.json")).encode(raw.read()).ids
    windows = split_windows(tokens, args.window, args.calibration, args.held_out)
    print(f"{args.text}: {len(tokens):,} tokens; {args.calibration} calibration and {args.held_out} held-out "
          f"windows of {args.window}; torch threads {torch.get_num_threads()}", flush=True)
    started = time.perf_counter()
    importance = measure_importance(parent, weights, windows.calibration)
    print(f"importance: {importance.tokens:,} tokens in {time.perf_counter() - started:.1f} s", flush=True)
    runs, cpu = [], []
    for _ in range(args.repeats):
        started = time.process_time()
        runs.append(held_out_loss(parent, weights, windows.held_out))
        cpu.append(time.process_time() - started)
    base = runs[0]
    print(f"parent: {base.nats:.4f} nats/token (perplexity {base.perplexity:.2f}) on {base.tokens:,} predictions; "
          f"an evaluation {statistics.median(r.seconds for r in runs):.2f} s wall, "
          f"{statistics.median(cpu):.2f} s CPU (medians of {args.repeats}: "
          f"{', '.join(f'{r.seconds:.2f}' for r in runs)} wall); load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.transformers:
        time_transformers(args.hf, windows.held_out, base.nats)
    space = SubnetSpace(parent)
    order = sorted(range(parent.n_layer), key=lambda i: importance.block_influence[i])
    print(f"block influence, least first: {', '.join(f'{i} ({importance.block_influence[i]:.3f})' for i in order)}")
    cases = [(f"drop {k} layers of least block influence", drop_least_influential(space, importance, k))
             for k in (3, 6, 10)]
    cases += [(f"FFN {parent.d_inner[0]} -> {w} in every layer", uniform_ffn(space, w)) for w in (1280, 1024, 768)]
    groups = parent.kv_heads[0]
    cases += [(f"{groups - 1} of {groups} key/value groups in every layer", uniform_kv_groups(space, groups - 1))]
    print(f"\n{'change':<48}{'loss':>7}{'delta':>8}{'ppl':>7}{'s':>6}")
    print(f"{'none (parent)':<48}{base.nats:>7.3f}{0:>+8.3f}{base.perplexity:>7.1f}{base.seconds:>6.2f}")
    for label, genes in cases:
        child, state = slice_state_dict(parent, weights, genes, importance)
        loss = held_out_loss(child, state, windows.held_out)
        print(f"{label:<48}{loss.nats:>7.3f}{loss.nats - base.nats:>+8.3f}{loss.perplexity:>7.1f}{loss.seconds:>6.2f}",
              flush=True)


def time_transformers(folder: Path, windows, nats: float) -> None:
    """transformers' own loss on the same windows (each window's mean, averaged: the windows are equal)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = torch.as_tensor(windows)
    with torch.inference_mode():
        started, cpu = time.perf_counter(), time.process_time()
        loss = model(ids, labels=ids).loss.item()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"transformers: {loss:.4f} nats/token ({loss - nats:+.1e} from ltsedge's) in {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
