"""Helpers shared by the test modules, imported explicitly (``from tests.helpers import ...``).

A plain module rather than conftest.py: conftest is pytest's plugin file (fixtures, hooks), loaded by pytest
itself, and a plain module is ordinary Python any test (or a script) imports; helpers kept inside test modules
and imported from one another tied each module's edits to the others'. Fixtures stay in conftest.py.

Running the CLI: ``ltsedge_cli`` runs ``ltsedge ARGS`` in this process through ``ltsedge.cli.main`` (its own
one-line errors and exit codes), its output captured by typer's ``CliRunner``; no interpreter start and no
torch import per call. ``ltsedge_process`` runs ``python -m ltsedge ARGS`` as a real process: for what only a
process shows (signals, environment read at start-up, the working directory, the entry point itself).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from unittest import mock

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.space import SearchSpace

# --- tiny architectures: small vocabularies, short sequences, few layers -------------------------

TINY_VOCAB = 500


def tiny_arch(**overrides) -> Architecture:
    fields = dict(n_layer=2, d_model=64, n_head=[2, 4], d_inner=[128, 192], vocab_size=TINY_VOCAB, n_positions=64)
    fields.update(overrides)
    return Architecture(**fields)


def tiny_space(**overrides) -> SearchSpace:
    """A small space of small models: fast to export and measure."""
    fields = dict(n_layer=(1, 2, 3), d_model=(32, 64), n_head=(2, 4), d_inner=tuple(range(64, 257, 32)),
                  d_embed=(16, 32, 64), div_val=(1, 2), vocab_size=TINY_VOCAB, n_positions=64)
    fields.update(overrides)
    return SearchSpace(**fields)


def random_tiny_archs(n: int, seed: int) -> list[Architecture]:
    """Random heterogeneous tiny architectures, a third of them with adaptive embeddings."""
    rng = random.Random(seed)
    archs = []
    for _ in range(n):
        d_model = rng.choice([32, 48, 64, 96])
        n_layer = rng.randint(1, 3)
        adaptive = rng.random() < 0.67
        archs.append(Architecture(
            n_layer=n_layer, d_model=d_model,
            n_head=[rng.choice([1, 2, 4, 8]) for _ in range(n_layer)],
            d_inner=[rng.randint(16, 300) for _ in range(n_layer)],
            d_embed=rng.choice([16, 32, 64]) if adaptive else None,
            div_val=rng.choice([1, 2, 4]) if adaptive else 1,
            vocab_size=rng.randint(200, 800), n_positions=rng.choice([32, 64]),
        ))
    return archs


# --- the command line --------------------------------------------------------------------------------


def ltsedge_cli(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``ltsedge ARGS`` in this process: returncode, stdout and stderr as a real run gives them (an exception
    ltsedge does not handle comes back as its traceback on stderr and exit code 1, as Python would)."""
    from typer.testing import CliRunner

    from ltsedge.cli import main

    argv = ["ltsedge", *map(str, args)]
    with CliRunner().isolation(env=env) as (stdout, stderr, _), mock.patch.object(sys, "argv", argv):
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # noqa: BLE001 - what an uncaught exception does to a real process
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    return subprocess.CompletedProcess(argv, code, out, err)


def ltsedge_process(*args, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``python -m ltsedge ARGS`` as a real process, ``env`` added to this one's environment."""
    return subprocess.run([sys.executable, "-m", "ltsedge", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, **kwargs)


def no_traceback(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The run, after asserting it printed no traceback (the house rule: one line, never a traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_ltsedge(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``ltsedge_cli``, after asserting the run printed no traceback."""
    return no_traceback(ltsedge_cli(*args, env=env))


def one_line_exit_2(proc: subprocess.CompletedProcess, *messages: str) -> None:
    """The house rule for bad input: exit code 2, one line on stderr holding every message, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for message in messages:
        assert message in lines[0], proc.stderr


# --- parameter counts --------------------------------------------------------------------------------


def counted_by_torch(arch) -> tuple[int, int]:
    """(decoder, total) parameters of the backbone's PyTorch module, built on the meta device (no memory);
    decoder parameters are those under the module's ``DECODER_MODULES``."""
    from ltsedge.backbones import get_backbone

    model = get_backbone(arch.backbone).empty_model(arch)

    def in_decoder(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in model.DECODER_MODULES)

    decoder = sum(p.numel() for name, p in model.named_parameters() if in_decoder(name))
    return decoder, sum(p.numel() for p in model.parameters())


# --- references for exported graphs -----------------------------------------------------------------


def randomize(model, seed: int):
    """Every parameter random, biases and LayerNorms too, so no term of the graph can hide."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if p.dim() == 1 else 0.0) * 0.1)
    return model


def max_diff(arch, model, onnx_model, batch=2, seq=11, seed=0) -> float:
    """Largest |logits difference| between the ONNX model (bytes, or a session kept across calls) and
    the PyTorch reference on random token ids."""
    import onnxruntime as ort
    import torch

    ids = np.random.default_rng(seed).integers(0, arch.vocab_size, (batch, seq))
    session = onnx_model if isinstance(onnx_model, ort.InferenceSession) else ort.InferenceSession(
        onnx_model, providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"input_ids": ids})
    with torch.no_grad():
        expected = model(torch.from_numpy(ids)).numpy()
    assert logits.shape == (batch, seq, arch.vocab_size)
    return float(np.abs(logits - expected).max())


def onnx_from_torch(arch, model, opset) -> bytes:
    """The backbone's graph at ``opset`` with ``model``'s weights, checked, as serialized bytes."""
    import onnx
    from onnx import helper, numpy_helper

    from ltsedge.backbones import get_backbone

    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph, initializers = get_backbone(arch.backbone).build_graph(arch, weights, opset, "forward")
    graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in initializers.items())
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString()


def larger_than_init(model, seed: int = 0):
    """Weights drawn larger than the init (std 0.02 makes nearly flat logits, where a greedy choice would
    hinge on rounding), biases and LayerNorms random around 1, so no term of the graph can hide."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if p.dim() == 1 else 0))
    return model


def exported(arch, seed: int = 0):
    """An ONNX session and its PyTorch reference, sharing weights drawn larger than the init (std 0.02
    makes nearly flat logits, where a greedy choice would hinge on rounding), exported via ``weights``."""
    import onnxruntime as ort

    from ltsedge.backbones import get_backbone
    from ltsedge.exporters import export_model
    from ltsedge.exporters.options import ExportOptions

    model = larger_than_init(get_backbone(arch.backbone).build_model(arch), seed)
    exported_model = export_model(arch, ExportOptions(variant="generate"), weights=model.state_dict())
    return ort.InferenceSession(exported_model.to_bytes(), providers=["CPUExecutionProvider"]), model


def prompts(arch, batch: int, length: int, seed: int = 0):
    """Random prompts and their attention mask; with a batch, the second is left-padded to half length."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, arch.vocab_size, (batch, length))
    mask = np.ones_like(prompt)
    if batch > 1:
        mask[1, : length // 2] = 0  # left padding: the second prompt is shorter
    return prompt, mask


def reference_greedy(model, prompt: np.ndarray, mask: np.ndarray, n_new: int):
    """Greedy decoding with the PyTorch model and no cache: the whole sequence again at every step."""
    import torch

    ids, mask = torch.from_numpy(prompt), torch.from_numpy(mask)
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(n_new):
            positions = (mask.cumsum(1) - 1).clamp(min=0)
            out, _ = model.forward_with_cache(ids, mask, positions)
            last = out[:, -1, :]
            logits.append(last.numpy())
            nxt = last.argmax(-1, keepdim=True)
            tokens.append(nxt[:, 0].numpy())
            ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
    return np.stack(tokens, 1), logits


def reference_tokens(model, prompt: list[int], n: int) -> list[int]:
    """The PyTorch model's ``n`` greedy tokens after one unpadded prompt, recomputed in full each step."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            mask = torch.ones_like(ids)
            logits, _ = model.forward_with_cache(ids, mask, torch.arange(ids.size(1))[None])
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return ids[0, len(prompt):].tolist()


def trained_like_weights(arch, path) -> None:
    """The reference model's random initial weights, scaled up: a random init predicts one token over
    and over, trained weights (like these) a varied sequence."""
    import torch

    from ltsedge.backbones import get_backbone

    model = get_backbone(arch.backbone).build_model(arch, seed=1)
    torch.save({name: tensor * 8 for name, tensor in model.state_dict().items()}, path)


def genai_greedy(bundle, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """onnxruntime-genai's greedy generation from a bundle directory: the tokens, and before each the
    last position's logits (call after ``pytest.importorskip("onnxruntime_genai")``)."""
    import onnxruntime_genai as og

    genai_model = og.Model(str(bundle))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(prompt) + steps)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(prompt)
    tokens, logits = [], []
    for _ in range(steps):
        logits.append(np.array(generator.get_logits()[0, -1]))
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, logits


# --- measurements and device profiles ----------------------------------------------------------------


def meas(latency=10.0, memory=100.0, *, cv=0.01, runs=20, converged=True, p90=None, low=None):
    """A successful measurement with the given figures."""
    from ltsedge.runners import Measurement

    return Measurement(ok=True, latency_ms=latency, latency_p90_ms=p90 if p90 is not None else latency * 1.05,
                       latency_min_ms=low if low is not None else latency * 0.95, latency_cv=cv, runs=runs,
                       converged=converged, peak_memory_mb=memory, weights_mb=1.0, load_seconds=0.1,
                       inference_seconds=0.2)


def fake_fingerprint(profile, **changes) -> dict:
    fp = {"arch": "x86_64", "cpu_model": "Test CPU 9000", "board": None, "logical_cores": 4, "physical_cores": 4,
          "memory_total_gb": 16, "system": "Linux", "onnxruntime": "1.20.0", "settings": profile.settings()}
    fp.update(changes)
    return fp


# A cpu profile with few short runs, and the same measuring a generator (prefill over a 24-token context).
FAST_DEVICE = """
name = "fast"
description = "cpu, few short runs"
[workload]
sequence = 16
[repeats]
warmup = 1
min_runs = 3
max_runs = 5
max_seconds = 1.0
tolerance = 0.1
drift_check_every = 0
"""
GENERATE_DEVICE = FAST_DEVICE.replace("sequence = 16", "sequence = 16\ncontext = 24")


# --- search checkpoints ------------------------------------------------------------------------------


def _smoke_problem():
    from ltsedge.search.budgets import Budgets
    from ltsedge.search.presets import get_preset
    from ltsedge.search.problem import ArchitectureProblem

    space = get_preset("smoke").space()
    return space, ArchitectureProblem(space, Budgets(max_latency_ms=40.0))


def fresh_algorithm(seed=3, generations=6):
    """NSGA-II set up on the smoke preset's space (population 8), not yet run."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.termination.max_gen import MaximumGenerationTermination

    from ltsedge.search.problem import make_operators

    space, problem = _smoke_problem()
    algorithm = NSGA2(pop_size=8, **make_operators(space, 0.3))
    algorithm.setup(problem, termination=MaximumGenerationTermination(generations), seed=seed, verbose=False)
    return algorithm


def generation(algorithm) -> np.ndarray:
    """One ask/evaluate/tell with made-up but deterministic costs (some infeasible); the asked genes."""
    from pymoo.core.evaluator import Evaluator
    from pymoo.problems.static import StaticProblem

    from ltsedge.proxy import count_params

    space, problem = _smoke_problem()
    pop = algorithm.ask()
    archs = [space.decode(x) for x in pop.get("X")]
    F, G = zip(*(problem.objectives(count_params(a).decoder_params, a.n_layer * 20.0 + a.d_model / 8,
                                    sum(a.d_inner) / 50, ok=a.n_layer * a.d_model != 128) for a in archs))
    Evaluator().eval(StaticProblem(problem, F=list(F), G=list(G)), pop)
    algorithm.tell(infills=pop)
    return pop.get("X").copy()


# --- processes (the fleet) ---------------------------------------------------------------------------

# A fleet agent's device profile: few short runs, the generate variant's context included.
FLEET_DEVICE = """name = "fleet"
[workload]
sequence = 16
context = 16
[repeats]
warmup = 1
min_runs = 3
max_runs = 8
max_seconds = 1.0
tolerance = 0.1
"""



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, log: Path) -> subprocess.Popen:
    """A background process in its own session, its output in ``log``; its measuring workers obey the
    test-only fault switch (models that crash them on purpose)."""
    from ltsedge.runners.worker import TEST_FAULTS_ENV

    env = {**os.environ, TEST_FAULTS_ENV: "1"}
    return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True, env=env)


def wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# --- pins ----------------------------------------------------------------------------------------------


def graph_digest(model_bytes: bytes) -> str:
    """sha256 of an exported model without its metadata_props (they carry the ltsedge version): what the
    pins (tests/test_pins.py, tests/test_contract.py) hold."""
    import hashlib

    import onnx

    proto = onnx.load_from_string(model_bytes)
    del proto.metadata_props[:]
    return hashlib.sha256(proto.SerializeToString()).hexdigest()
