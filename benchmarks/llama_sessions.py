"""Generate models timed side by side, as an app runs them: one worker process per model, the timed runs
interleaved between the workers (so a load that comes and goes on a shared machine falls on all of them
alike), medians and peak memory per model. Shared by benchmarks/llama_graph_form.py and
benchmarks/llama_builder_parity.py.

Each worker builds its onnxruntime session with ltsedge's own options (``runners.session.session_options``
of the ``cpu`` profile: default threads, no spinning, glibc's mmap threshold fixed) and feeds inputs made
by name the same way for every model: ``input_ids`` random ids, ``attention_mask`` ones, ``position_ids``
(where the model has it) counting on from the cache, every past key/value ``[1, kv heads, context, head
size]`` standard normal from a seed of its name, so two models with the same cache shapes see the same
numbers. Workloads: ``decode`` one token after a cache of ``context`` tokens, ``prefill`` ``sequence``
tokens after an empty cache. Peak memory: the kernel's peak resident memory of the worker over loading
and every run, less its resident memory before loading (``runners.memory``).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import zlib

import numpy as np

from ltsedge.devices import load_profile
from ltsedge.runners.memory import fix_mmap_threshold, peak_rss_bytes, release_memory, reset_peak, rss_bytes
from ltsedge.runners.protocol import RunSettings
from ltsedge.runners.session import session_options


def feeds(session, workload: str, context: int, sequence: int, vocab: int, head_size: int) -> dict:
    """Inputs of one workload, by name (see the module's docstring); ``head_size`` sizes a symbolic last axis."""
    past, new = (context, 1) if workload == "decode" else (0, sequence)
    out = {}
    for i in session.get_inputs():
        rng = np.random.default_rng(zlib.crc32(i.name.encode()))
        if i.name == "input_ids":
            out[i.name] = rng.integers(0, vocab, (1, new), dtype=np.int64)
        elif i.name == "attention_mask":
            out[i.name] = np.ones((1, past + new), np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.arange(past, past + new, dtype=np.int64)[None]
        elif i.name.startswith("past_key_values"):
            heads = i.shape[1]
            size = i.shape[3] if isinstance(i.shape[3], int) else head_size
            out[i.name] = rng.standard_normal((1, heads, past, size), dtype=np.float32)
        else:
            raise ValueError(f"input {i.name!r}: no rule to feed it")
    return out


def _worker(conn, path: str, context: int, sequence: int, vocab: int, head_size: int) -> None:
    import onnxruntime as ort

    settings = RunSettings.from_profile(load_profile("cpu"))
    fix_mmap_threshold(settings.malloc_mmap_threshold_kb)
    release_memory()
    reset_peak()
    before = rss_bytes()
    session = ort.InferenceSession(path, session_options(settings), providers=["CPUExecutionProvider"])
    inputs = {w: feeds(session, w, context, sequence, vocab, head_size) for w in ("decode", "prefill")}
    for w in inputs:  # warm-up
        session.run(None, inputs[w])
    conn.send("ready")
    while True:
        request = conn.recv()
        if request is None:
            break
        workload, runs = request
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, inputs[workload])
            times.append((time.perf_counter() - start) * 1e3)
        conn.send(times)
    conn.send((peak_rss_bytes() - before) / 2**20)


class SideBySide:
    """Workers for ``models`` (label -> model path), started at once; ``time`` interleaves their runs."""

    def __init__(self, models: dict[str, str], *, context: int, sequence: int, vocab: int, head_size: int):
        ctx = mp.get_context("spawn")
        self.conns = {}
        self.procs = []
        for label, path in models.items():
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, path, context, sequence, vocab, head_size), daemon=True)
            proc.start()
            self.conns[label], self.procs = parent, [*self.procs, proc]
        for conn in self.conns.values():
            assert conn.recv() == "ready"
        self.rounds: dict[tuple[str, str], list[list[float]]] = {}  # each round's runs

    def time(self, workload: str, rounds: int, runs: int) -> None:
        """``rounds`` rounds, each model in turn (the order rotating) running ``runs`` timed runs."""
        labels = list(self.conns)
        for r in range(rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                self.conns[label].send((workload, runs))
                self.rounds.setdefault((label, workload), []).append(self.conns[label].recv())

    def median(self, label: str, workload: str) -> float:
        return statistics.median(t for runs in self.rounds[label, workload] for t in runs)

    def ratio(self, label: str, base: str, workload: str) -> float:
        """The median over rounds of ``label``'s median / ``base``'s in the same round: a load that changes
        between rounds cancels out."""
        pairs = zip(self.rounds[label, workload], self.rounds[base, workload])
        return statistics.median(statistics.median(a) / statistics.median(b) for a, b in pairs)

    def close(self) -> dict[str, float]:
        """Stop the workers; each one's peak memory in MiB."""
        peaks = {}
        for label, conn in self.conns.items():
            conn.send(None)
            peaks[label] = conn.recv()
        for proc in self.procs:
            proc.join()
        return peaks
