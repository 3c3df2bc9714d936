"""Training several models at once: each in a process of its own (spawned, so CUDA starts clean in each),
all reading the same token file, sharing the GPU (or splitting the CPU's cores).

Small models leave most of a GPU idle: a model of a few million parameters at a batch of 64 x 256 keeps a
fraction of an H100 busy, so several at once finish the check sooner. The largest models go first (the
longest jobs first keep the processes evenly busy to the end). A worker that dies (killed, out of memory)
loses only its model, reported as failed; the others go on. A worker whose parent is gone (the check was
killed) stops at its next step instead of training for nobody.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

STEP_REPORT_S = 0.5  # a worker reports its step at most this often
POLL_S = 1.0


@dataclass(frozen=True)
class Job:
    index: int
    architecture: dict
    tokens: int
    seed: int
    work: float  # estimated FLOPs, for the order


@dataclass(frozen=True)
class Data:
    """Where a worker finds the text's tokens and how the check split them."""

    tokens_path: str
    dtype: str
    window: int
    split_seed: int


def run_parallel(jobs: list[Job], workers: int, data: Data, recipe: dict, device: str, threads: int,
                 on_start: Callable[[int], None], on_step: Callable[[int, int], None],
                 on_done: Callable[[int, dict], None], on_error: Callable[[int, str], None]) -> None:
    ctx = multiprocessing.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for job in sorted(jobs, key=lambda j: -j.work):
        tasks.put(job)
    for _ in range(workers):
        tasks.put(None)
    procs = [ctx.Process(target=_work, args=(tasks, results, data, recipe, device, threads, os.getpid()), daemon=True)
             for _ in range(workers)]
    for p in procs:
        p.start()
    running: dict[int, int] = {}  # worker pid -> the job it trains
    pending = {j.index for j in jobs}
    try:
        while pending:
            try:
                kind, pid, index, payload = results.get(timeout=POLL_S)
            except queue.Empty:
                _reap(procs, running, pending, on_error)
                if not any(p.is_alive() for p in procs):
                    for index in sorted(pending):
                        on_error(index, "no worker process left to train it")
                    return
                continue
            if kind == "start":
                running[pid] = index
                on_start(index)
            elif kind == "step":
                on_step(index, payload)
            else:
                running.pop(pid, None)
                pending.discard(index)
                (on_done if kind == "done" else on_error)(index, payload)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)


def _reap(procs, running: dict[int, int], pending: set[int], on_error) -> None:
    """Jobs of workers that died without a word (killed, out of memory) fail; the rest go on."""
    for p in procs:
        if not p.is_alive() and p.pid in running:
            index = running.pop(p.pid)
            pending.discard(index)
            on_error(index, f"its worker process died (exit code {p.exitcode})")


def _work(tasks, results, data: Data, recipe: dict, device: str, threads: int, parent: int) -> None:
    import numpy as np
    import torch

    from ltsedge.architecture import Architecture
    from ltsedge.proxycheck.tokens import split
    from ltsedge.proxycheck.training import Recipe, train_one

    torch.set_num_threads(threads)
    parts = split(np.fromfile(data.tokens_path, dtype=data.dtype), data.window, data.split_seed)
    pid = os.getpid()
    while (job := tasks.get()) is not None:
        results.put(("start", pid, job.index, None))
        last = [0.0]

        def report(step: int, steps: int, index: int = job.index) -> None:
            if os.getppid() != parent:  # the check is gone: stop, nobody would record this model
                os._exit(1)
            now = time.time()
            if now - last[0] >= STEP_REPORT_S or step == steps:
                last[0] = now
                results.put(("step", pid, index, step))

        try:
            record = train_one(Architecture.from_dict(job.architecture), Recipe(**recipe), parts.train,
                               parts.held_out, job.tokens, job.seed, device, on_step=report)
            results.put(("done", pid, job.index, record))
        except Exception as e:  # noqa: BLE001 - one model's failure (e.g. out of GPU memory) is reported, not fatal
            results.put(("error", pid, job.index, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
