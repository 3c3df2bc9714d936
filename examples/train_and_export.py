"""Search -> pick -> train -> export -> generate: the path from a frontier to a model an app runs.

    ltsedge search --preset quick --out ltsedge-out               # 1. the frontier (random weights)
    python examples/train_and_export.py ltsedge-out/frontier.json my_corpus.txt --out my-model
    #                                                               2-4. pick, train, export a bundle
    # 5. run it: the script generates from a prompt with onnxruntime-genai (or plain onnxruntime)

It picks a frontier model (``--id``, else the fastest with at least ``--min-params`` decoder
parameters), trains ltsedge's PyTorch reference model of that architecture for a few hundred steps on
your text file with byte-level tokens (ids 0-255: any vocabulary of at least 256 tokens holds them;
nothing is downloaded), saves the state_dict and exports the generation bundle with those weights.
A real model wants a real tokenizer and far more training; the example shows the mechanics.

Quantization's cost is not in the decoder-parameter proxy, so the script also measures it: the last
tenth of the text is held out from training, and each of ``--check-precisions`` (int8, int4) is
exported with the trained weights and compared with the fp32 file on it — perplexity, and how often
its next-token choice agrees with fp32's — all in plain onnxruntime. ``--precision`` is what the bundle
ships at.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.exporters import export_model
from ltsedge.exporters.bundle import export_to_path
from ltsedge.exporters.options import ExportOptions


def pick(frontier_file: Path, model_id: str | None, min_params: int) -> Architecture:
    models = json.loads(frontier_file.read_text())["models"]
    if model_id:
        chosen = [m for m in models if m["id"] == model_id]
        if not chosen:
            sys.exit(f"error: {model_id} is not in {frontier_file} (ids: {', '.join(m['id'] for m in models)})")
    else:
        chosen = sorted((m for m in models if m["decoder_params"] >= min_params), key=lambda m: m["latency_ms"])
        if not chosen:
            sys.exit(f"error: no frontier model has {min_params} decoder parameters or more")
    arch = Architecture.from_dict(chosen[0]["architecture"])
    if arch.vocab_size < 256:
        sys.exit(f"error: {arch.id} has a vocabulary of {arch.vocab_size}: byte-level tokens need 256")
    return arch


def train(arch: Architecture, text: bytes, steps: int, batch: int, seq: int, lr: float, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    data = torch.tensor(np.frombuffer(text, dtype=np.uint8).astype(np.int64))
    if len(data) < seq + 2:
        sys.exit(f"error: the text has {len(data)} bytes; give at least {seq + 2}")
    model = get_backbone(arch.backbone).build_model(arch, seed=seed).train()
    for p in model.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    started = time.time()
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(data) - seq - 1, (batch,))
        x = torch.stack([data[s:s + seq] for s in starts])
        y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
        # cross_entropy normalises with log_softmax: the adaptive softmax's log-probabilities pass unchanged
        loss = F.cross_entropy(model(x).reshape(-1, arch.vocab_size), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:  # cosine decay
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        optimizer.step()
        if step % max(1, steps // 10) == 0 or step == 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  ({time.time() - started:.0f} s)")
    return model.eval()


def held_out_figures(arch: Architecture, weights: Path, held_out: bytes, seq: int,
                     precisions: list[str]) -> dict[str, tuple[float, float]]:
    """Per precision: (perplexity on the held-out bytes, share of positions whose most likely next token
    is fp32's), each the forward ONNX model with the trained weights, in non-overlapping windows."""
    import onnxruntime as ort

    state = torch.load(weights, weights_only=True)
    ids = np.frombuffer(held_out, dtype=np.uint8).astype(np.int64)
    windows = np.stack([ids[i:i + seq + 1] for i in range(0, len(ids) - seq - 1, seq)])
    figures, reference = {}, None
    for precision in ["fp32", *precisions]:
        exported = export_model(arch, ExportOptions(variant="forward", precision=precision), weights=state)
        session = ort.InferenceSession(exported.to_bytes(), providers=["CPUExecutionProvider"])
        logits = session.run(None, {"input_ids": windows[:, :-1]})[0].astype(np.float64)
        logits -= logits.max(-1, keepdims=True)  # log-softmax (an adaptive softmax's log-probs pass unchanged)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll = -np.take_along_axis(log_probs, windows[:, 1:, None], -1).mean()
        top1 = log_probs.argmax(-1)
        reference = top1 if reference is None else reference
        figures[precision] = (float(np.exp(nll)), float((top1 == reference).mean()))
    return figures


def generate(bundle: Path, prompt: bytes, n_new: int) -> bytes:
    """Greedy generation with onnxruntime-genai when installed, else with plain onnxruntime."""
    prompt_ids = list(prompt)
    try:
        import onnxruntime_genai as og
    except ImportError:
        import onnxruntime as ort

        from ltsedge.generation import greedy

        session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
        tokens = greedy(session, np.array([prompt_ids]), n_new).tokens[0].tolist()
        print("(generated with onnxruntime; pip install onnxruntime-genai to use its generator)")
    else:
        model = og.Model(str(bundle))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt_ids) + n_new)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt_ids)
        tokens = []
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        print("(generated with onnxruntime-genai)")
    return bytes(t for t in tokens if t < 256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("frontier", type=Path, help="frontier.json of an ltsedge search")
    parser.add_argument("text", type=Path, help="a text file to train on (byte-level tokens)")
    parser.add_argument("--out", type=Path, default=Path("trained-model"), help="output directory")
    parser.add_argument("--id", help="the frontier model to train (default: the fastest with --min-params)")
    parser.add_argument("--min-params", type=int, default=0, help="smallest decoder-parameter count to pick")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--generate", type=int, default=40, help="tokens to generate after training")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4"],
                        help="the precision the bundle ships at")
    parser.add_argument("--check-precisions", default="int8,int4",
                        help="precisions compared with fp32 on the held-out text (comma-separated; '' for none)")
    args = parser.parse_args(argv)

    arch = pick(args.frontier, args.id, args.min_params)
    seq = min(args.seq, arch.n_positions - 1)
    print(f"training {arch.id} ({arch.n_layer} layers, d_model {arch.d_model}) on {args.text}")
    text = args.text.read_bytes()
    cut = len(text) - max(len(text) // 10, seq + 2)  # the last tenth (at least a window) is held out
    model = train(arch, text[:cut], args.steps, args.batch, seq, args.lr, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / "weights.pt"
    torch.save(model.state_dict(), weights)
    (args.out / "architecture.json").write_text(arch.to_json(indent=2) + "\n")
    bundle = args.out / "bundle"
    export_to_path(arch, bundle, ExportOptions(variant="generate", precision=args.precision), weights=weights)
    print(f"wrote {weights} and the bundle {bundle}/ (same as: ltsedge export {args.out / 'architecture.json'} "
          f"--variant generate --weights {weights} --precision {args.precision} -o {bundle})")
    precisions = [p for p in args.check_precisions.split(",") if p and p != "fp32"]
    figures = held_out_figures(arch, weights, text[cut:], seq, precisions)
    print(f"held-out text ({len(text) - cut} bytes): precision, perplexity, next token as fp32's")
    for precision, (perplexity, agreement) in figures.items():
        change = perplexity / figures["fp32"][0] - 1
        print(f"  {precision:5s} {perplexity:8.3f} ({change:+.1%})  {agreement:.1%}")
    generated = generate(bundle, args.prompt.encode(), args.generate)
    print(repr(args.prompt + generated.decode(errors="replace")))


if __name__ == "__main__":
    main()
