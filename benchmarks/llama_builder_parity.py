"""ltsedge's int4 Llama export against onnxruntime-genai's model builder, as apps run them.

SmolLM2-135M's shape in transformers with random weights (``LlamaForCausalLM(config).save_pretrained``,
a word-level tokenizer.json beside it), converted by genai's own builder (``python -m
onnxruntime_genai.models.builder -i DIR -o OUT -p int4 -e cpu``, offline) and by ``ltsedge export
--variant generate --precision int4 --weights DIR/model.safetensors`` (the same weights) as a user runs it
("default": the default target and graph form) and in each graph form for --target-ort. The models are
timed side by side (benchmarks/llama_sessions.py: one worker each, interleaved runs, inputs made by name
alike): decode ms per token after a cache of --context tokens, prefill of --sequence tokens, peak memory;
ratios to the builder's. Also the wall time of each export, and the
largest difference between ltsedge's logits and the builder's on one prefill.

    python benchmarks/llama_builder_parity.py [--context 2048] [--sequence 512] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llama_graph_form import SMOLLM2_135M
from llama_sessions import SideBySide, feeds

# genai 0.18's builder imports names of transformers 5; with 4.x they are absent, and none is used for llama.
BUILDER = """
import runpy, sys, transformers
for name in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
    if not hasattr(sys.modules["transformers"], name):
        setattr(sys.modules["transformers"], name, type(name, (), {}))
sys.argv = ["builder", *sys.argv[1:]]
runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
"""


def hf_folder(path: Path) -> None:
    """SmolLM2-135M's config with random weights, and a tokenizer.json, as transformers saves them."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    a = SMOLLM2_135M
    config = LlamaConfig(vocab_size=a["vocab_size"], hidden_size=a["d_model"], intermediate_size=a["d_inner"][0],
                         num_hidden_layers=a["n_layer"], num_attention_heads=a["n_head"][0],
                         num_key_value_heads=a["n_kv_head"][0], head_dim=a["head_dim"],
                         max_position_embeddings=a["n_positions"], rope_theta=a["rope_theta"], rms_norm_eps=1e-5,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                         rope_scaling={"rope_type": "default"})  # the builder reads rope_scaling as a dict
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    vocab = {f"t{i}": i for i in range(a["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", bos_token="t0",
                            eos_token="t0").save_pretrained(path)


def timed(command: list[str], what: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def largest_logit_difference(paths: dict[str, str], reference: str, sequence: int) -> dict[str, float]:
    import onnxruntime as ort

    logits = {}
    for label, path in paths.items():
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        logits[label] = session.run(["logits"], feeds(session, "prefill", 0, sequence, SMOLLM2_135M["vocab_size"],
                                                      SMOLLM2_135M["head_dim"]))[0]
    return {label: float(np.abs(value - logits[reference]).max()) for label, value in logits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--sequence", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds per workload")
    parser.add_argument("--target-ort", default="1.22", help="of ltsedge's exports (the contrib form needs 1.22)")
    parser.add_argument("--forms", default="default,contrib", help="default (no --target-ort, no --graph-form) "
                        "and graph forms exported for --target-ort")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        hf_folder(tmp / "hf")
        seconds = {"builder": timed([sys.executable, "-c", BUILDER, "-i", str(tmp / "hf"), "-o", str(tmp / "builder"),
                                     "-p", "int4", "-e", "cpu"], "the builder")}
        models = {"builder": str(tmp / "builder" / "model.onnx")}
        arch_file = tmp / "smollm2.json"
        arch_file.write_text(json.dumps(SMOLLM2_135M))
        for form in args.forms.split(","):
            out = tmp / f"ltsedge-{form}"
            settings = [] if form == "default" else ["--target-ort", args.target_ort, "--graph-form", form]
            seconds[f"ltsedge {form}"] = timed(
                [sys.executable, "-m", "ltsedge", "export", str(arch_file), "--variant", "generate", "--precision",
                 "int4", *settings, "--weights", str(tmp / "hf" / "model.safetensors"), "-o", str(out)],
                f"ltsedge export ({form})")
            models[f"ltsedge {form}"] = str(out / "model.onnx")
        sizes = {label: sum(f.stat().st_size for f in Path(path).parent.glob("model.onnx*")) / 1e6
                 for label, path in models.items()}
        differences = largest_logit_difference(models, "builder", 16)
        bench = SideBySide(models, context=args.context, sequence=args.sequence,
                           vocab=SMOLLM2_135M["vocab_size"], head_size=SMOLLM2_135M["head_dim"])
        bench.time("decode", args.rounds, 10)
        bench.time("prefill", args.rounds, 1)
        peaks = bench.close()
    print(f"SmolLM2-135M shape at int4, decode after {args.context} tokens, prefill of {args.sequence}; medians of "
          f"{args.rounds} interleaved rounds (decode 10 runs, prefill 1 run each); ltsedge's forms for --target-ort "
          f"{args.target_ort}")
    print(f"{'model':<16}{'export s':>9}{'files MB':>9}{'decode ms':>10}{'prefill ms':>11}{'peak MiB':>9}"
          f"{'max |logit diff|':>17}")
    for label in models:
        print(f"{label:<16}{seconds[label]:>9.1f}{sizes[label]:>9.1f}{bench.median(label, 'decode'):>10.2f}"
              f"{bench.median(label, 'prefill'):>11.1f}{peaks[label]:>9.0f}{differences[label]:>17.3f}")
    base = "builder"
    for label in models:
        if label != base:
            print(f"{label} / builder (median of the rounds' ratios): decode "
                  f"{bench.ratio(label, base, 'decode'):.3f}, prefill {bench.ratio(label, base, 'prefill'):.3f}, "
                  f"peak {peaks[label] / peaks[base]:.3f}")


if __name__ == "__main__":
    main()
