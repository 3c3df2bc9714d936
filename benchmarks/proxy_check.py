"""Does the decoder-parameter count rank held-out loss on real text, and what does a CPU afford to find out?

The text (``--corpus``), cut at ``--corpus-mb`` and kept in ``--work`` for reruns; nothing is downloaded:

- ``docs``: English prose from two Debian packages' documentation, installed beforehand with
  ``apt-get install linux-doc-6.1 python3.11-doc`` (any version): the Linux kernel's Documentation
  (reStructuredText and plain text, about 28 MB) and Python's library reference and tutorial (HTML, its text
  only, about 10 MB);
- ``site-packages``: every .py, .txt, .rst and .md file under this Python's site-packages, concatenated in
  sorted order (tens to hundreds of MB of code and English that every install has).

Part ``throughput``: training tokens per second on this machine (the check's CPU recipe unless given:
batch 8 x sequence 64, a vocabulary of 8192) for GPT-2 models of 0.1 to 10 M decoder parameters, then the
budget an hour affords: for N models log-spaced over a 10x range of sizes, the tokens per model that N
trainings fit into ``--hours`` -- computed from the measured rates, not measured.

Part ``check``: ``ltsedge proxy-check`` itself on the corpus (its JSON and PNG in ``--work``): the ranking,
the control, the depth set, the fitted proxy, the ranking at each checkpoint.

Part ``gpu``: the GPU targets in one run. Two architecture samples (seeds 0 and 1) of ``--models`` (12)
standard GPT-2 models of the default space, ``--tokens-per-model`` (16 M) each, on the same text: the wall
time and models per hour of each (target: 12 x 16 M in 10 min or less), each sample's Spearman and their
difference (target: within 0.05).

    python benchmarks/proxy_check.py --part throughput [--threads 1] [--batch 8] [--sequence 64]
    python benchmarks/proxy_check.py --part gpu [--models 12] [--tokens-per-model 16000000] [--parallel N]
    python benchmarks/proxy_check.py --part check [--corpus docs] [--preset quick] [--models 12]
                                     [--tokens-per-model 1000000] [--device auto] [--parallel N] [--threads T]
                                     [--max-params P] [--space FILE] [--batch B] [--sequence S] [--lr LR]
"""

from __future__ import annotations

import argparse
import gzip
import html.parser
import json
import math
import site
import sys
import time
from pathlib import Path

import numpy as np

SUFFIXES = (".py", ".txt", ".rst", ".md")
SIZES = ((2, 64, 256), (2, 128, 512), (4, 192, 768), (4, 256, 1024), (6, 384, 1536))  # layers, d_model, d_inner
VOCAB = 8192


# HTML elements without an end tag: they open no depth
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _TextOf(html.parser.HTMLParser):
    """The text of a Sphinx page's body (its ``role="main"`` element): no navigation, footer or scripts."""

    def __init__(self):
        super().__init__()
        self.parts, self.depth, self.skipping = [], 0, 0  # depth: open elements inside the body, 0 outside

    def handle_starttag(self, tag, attrs):
        if self.depth:
            self.depth += tag not in VOID
            self.skipping += tag in ("script", "style")
        elif ("role", "main") in attrs:
            self.depth = 1

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1
            self.skipping -= tag in ("script", "style") and self.skipping > 0

    def handle_data(self, data):
        if self.depth and not self.skipping:
            self.parts.append(data)


def _docs_files() -> list[tuple[Path, str]]:
    """(file, kind) of the Debian documentation packages' text, in sorted order."""
    doc = Path("/usr/share/doc")
    linux = sorted(p for d in doc.glob("linux-doc-*") for p in (d / "Documentation").rglob("*.gz")
                   if p.name.endswith((".rst.gz", ".txt.gz")))
    python = sorted(p for d in doc.glob("python3*-doc") for sub in ("library", "tutorial", "howto", "reference")
                    for p in (d / "html" / sub).rglob("*.html"))
    if not linux or not python:
        sys.exit("the docs corpus needs Debian's linux-doc-6.1 and python3.11-doc installed "
                 "(apt-get install linux-doc-6.1 python3.11-doc)")
    return [(p, "gz") for p in linux] + [(p, "html") for p in python]


def _read(file: Path, kind: str) -> str:
    if kind == "gz":
        return gzip.decompress(file.read_bytes()).decode("utf-8")
    if kind == "html":
        parser = _TextOf()
        parser.feed(file.read_text(encoding="utf-8"))
        lines = (line.strip() for line in "".join(parser.parts).splitlines())
        return "\n".join(line for line in lines if line)
    return file.read_text(encoding="utf-8")


def _site_packages_files() -> list[tuple[Path, str]]:
    roots = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    return [(p, "text") for root in roots
            for p in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file())]


def corpus(work: Path, megabytes: int, source: str = "site-packages") -> Path:
    """The chosen text, concatenated once into ``work``."""
    path = work / f"{source}-{megabytes}MB.txt"
    if path.is_file():
        return path
    files = _docs_files() if source == "docs" else _site_packages_files()
    limit, written, used = megabytes << 20, 0, 0
    work.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".partial"), "w", encoding="utf-8") as out:
        for file, kind in files:
            try:
                text = _read(file, kind)
            except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
                continue
            out.write(text + "\n")
            written, used = written + len(text.encode()) + 1, used + 1
            if written >= limit:
                break
    path.with_suffix(".partial").rename(path)
    print(f"corpus: {written / 1e6:.1f} MB from {used} files ({source})")
    return path


def throughput(args) -> None:
    import torch

    from ltsedge.architecture import Architecture
    from ltsedge.proxy import count_params
    from ltsedge.proxycheck.training import Recipe, flops_per_token, train_one

    torch.set_num_threads(args.threads)
    recipe = Recipe(batch=args.batch, sequence=args.sequence, lr=args.lr)
    rng = np.random.default_rng(0)
    train = rng.integers(0, VOCAB, 2_000_000).astype(np.uint16)
    held = train[:4 * (args.sequence + 1)].reshape(4, args.sequence + 1)
    rows = []
    warm = Architecture(n_layer=1, d_model=128, n_head=[2], d_inner=[256], vocab_size=VOCAB)
    train_one(warm, recipe, train, held, 4 * recipe.tokens_per_step, 0, "cpu")  # torch's first-call costs
    for n_layer, d_model, d_inner in SIZES:
        arch = Architecture(n_layer=n_layer, d_model=d_model, n_head=[4] * n_layer, d_inner=[d_inner] * n_layer,
                            vocab_size=VOCAB)
        started = time.time()
        result = train_one(arch, recipe, train, held, args.steps * recipe.tokens_per_step, 0, "cpu")
        rate = result["tokens"] / (time.time() - started)
        rows.append((count_params(arch).decoder_params, rate, flops_per_token(arch, args.sequence)))
        print(f"{n_layer}x{d_model} (d_inner {d_inner}): {rows[-1][0] / 1e6:6.2f} M decoder parameters, "
              f"{rate:8.0f} tokens/s, {rate * rows[-1][2] / 1e9:5.1f} GFLOP/s", flush=True)
    budget(rows, args.hours)


def budget(rows, hours: float) -> None:
    """Tokens per model that N models log-spaced over [low, 10 x low] fit into ``hours``, from the measured
    rates (interpolated in log-log)."""
    sizes = np.log([r[0] for r in rows])
    rates = np.log([r[1] for r in rows])

    def rate(p: float) -> float:
        return float(np.exp(np.interp(math.log(p), sizes, rates)))  # flat beyond the measured sizes

    print(f"\nbudget for {hours:g} h on this machine (computed from the rates above, not measured):")
    print(f"{'models':>6} {'decoder params':>17} {'tokens/model':>13} {'tokens/param of largest':>24}")
    for low in (1e5, 3e5, 1e6):
        for n in (8, 12, 16):
            seconds_per_token = sum(1 / rate(p) for p in np.geomspace(low, 10 * low, n))
            tokens = hours * 3600 / seconds_per_token
            print(f"{n:>6} {low / 1e6:7.1f}-{10 * low / 1e6:4.1f} M {tokens:>13,.0f} {tokens / (10 * low):>24.1f}")


def check(args) -> None:
    from ltsedge.proxycheck import report
    from ltsedge.proxycheck.run import CheckOptions, run_check

    text = corpus(args.work, args.corpus_mb, args.corpus)
    options = CheckOptions(text=text, space_file=args.space, preset=args.preset, backbone=args.backbone,
                           models=args.models, tokens_per_model=args.tokens_per_model, max_params=args.max_params,
                           batch=args.batch, sequence=args.sequence, lr=args.lr, device=args.device,
                           parallel=args.parallel, threads=args.threads,
                           depths=args.depths, control_models=args.control_models, out=args.work / "check",
                           seed=args.seed)
    started = time.time()
    summary = run_check(options, log=lambda m: print(m, file=sys.stderr, flush=True))
    for line in report.lines(summary):
        print(line)
    print(f"wall time {time.time() - started:.0f} s; result in {args.work / 'check'}")
    print(json.dumps({"verdict": summary["verdict"], "ranking": summary["ranking"]}, indent=1))


def gpu(args) -> None:
    from ltsedge.proxycheck.run import CheckOptions, run_check

    text = corpus(args.work, args.corpus_mb, args.corpus)
    results = []
    for seed in (0, 1):
        options = CheckOptions(text=text, preset="default", models=args.models, depths=0, control_models=0,
                               tokens_per_model=args.tokens_per_model or 16_000_000, max_params=args.max_params,
                               batch=args.batch, sequence=args.sequence, lr=args.lr, device=args.device,
                               parallel=args.parallel, seed=seed, out=args.work / f"gpu-sample-{seed}", quiet=True)
        started = time.time()
        summary = run_check(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        wall = time.time() - started
        r = summary["ranking"].get("decoder_params") or {}
        results.append({"seed": seed, "wall_s": round(wall),
                        "models_per_hour": round(len(summary["models"]) * 3600 / wall, 1),
                        "spearman": r.get("spearman"), "interval": [r.get("low"), r.get("high")],
                        "verdict": summary["verdict"], "tokens_per_model": summary.get("tokens_per_model")})
        print(json.dumps(results[-1]), flush=True)
    a, b = (r["spearman"] for r in results)
    gap = abs(a - b) if a is not None and b is not None else None
    print(json.dumps({"target_10_min": all(r["wall_s"] <= 600 for r in results), "spearman_gap": gap,
                      "target_gap_0.05": gap is not None and gap <= 0.05}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("throughput", "check", "gpu"), default="throughput")
    parser.add_argument("--work", type=Path, default=Path("proxy-check-bench"))
    parser.add_argument("--corpus", choices=("docs", "site-packages"), default="docs")
    parser.add_argument("--corpus-mb", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    parser.add_argument("--batch", type=int, default=None,
                        help="sequences per step (default: the check's for the device)")
    parser.add_argument("--sequence", type=int, default=None, help="tokens per sequence (default: the check's)")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the check's)")
    parser.add_argument("--steps", type=int, default=6, help="throughput: training steps timed per size")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--space", type=Path, default=None)
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--control-models", type=int, default=None)
    parser.add_argument("--depths", type=int, default=4)
    parser.add_argument("--tokens-per-model", type=int, default=None)
    parser.add_argument("--max-params", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--parallel", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.part == "throughput":
        import os

        args.threads = args.threads or len(os.sched_getaffinity(0))
        from ltsedge.proxycheck.run import DEFAULT_RECIPE

        cpu = DEFAULT_RECIPE["cpu"]
        args.batch = args.batch or cpu["batch"]
        args.sequence = args.sequence or cpu["sequence"]
        args.lr = args.lr or cpu["lr"]
        throughput(args)
    elif args.part == "gpu":
        gpu(args)
    else:
        check(args)


if __name__ == "__main__":
    main()
