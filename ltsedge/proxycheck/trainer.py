"""The training of a check's planned models: one at a time in this process, or several at once in processes of
their own (``workers``); each finished model is appended to the log (``models_log``) as it ends, so a kill
loses at most the models in training.
"""

from __future__ import annotations

import os

from ltsedge.proxy import count_params
from ltsedge.proxycheck import sampling
from ltsedge.proxycheck.models_log import append
from ltsedge.proxycheck.progress import CheckProgress
from ltsedge.search.outdir import OutputDir

# Models trained at once: small models leave a GPU mostly idle; a CPU trains one per core, one thread each
# (None), since one small model scales poorly over threads (two ran 2.5-3.5x slower than one on a busy
# 2-core machine: docs/proxy-check.md).
DEFAULT_PARALLEL = {"cuda": 4, "cpu": None}


def plan_workers(kind: str, parallel: int | None, threads: int | None, models: int, cores: int | None = None
                 ) -> tuple[int, int]:
    """(models trained at once, torch threads each): as given, else ``DEFAULT_PARALLEL`` of the device (a
    CPU: one per core), never more than the models left; the cores shared among them."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(parallel or DEFAULT_PARALLEL[kind] or cores, models))
    return workers, threads or max(1, cores // workers)


def train_models(todo: list, planned: list, done: dict, parts, recipe, per_model: int, device: str, kind: str,
                 options, outdir: OutputDir, identity: str, log, data) -> None:
    """Train ``todo`` (of ``planned``), one at a time or several in processes, each finished model appended to
    the log and to ``done``; a model that fails is said so and left for a rerun."""
    import torch

    from ltsedge.proxycheck.training import flops_per_token, train_one

    workers, threads = plan_workers(kind, options.parallel, options.threads, len(todo))
    steps = recipe.steps(per_model)
    work = {p.index: flops_per_token(p.arch, recipe.sequence) * steps * recipe.tokens_per_step for p in planned}
    by_index = {p.index: p for p in planned}
    total = len(planned)

    progress = CheckProgress(sum(work.values()), sum(work[i] for i in done), total, len(done), quiet=options.quiet)

    def started(index: int) -> None:
        p = by_index[index]
        progress.started(index, f"{p.role} {p.arch.n_layer}x{p.arch.d_model} "
                                f"{count_params(p.arch).decoder_params / 1e6:.2f}M", steps, work[index])

    def finished(index: int, result: dict) -> None:
        p = by_index[index]
        record = {"index": index, "role": p.role, "id": p.arch.id, "n_layer": p.arch.n_layer,
                  "d_model": p.arch.d_model, **sampling.counts(p.arch), **result, "architecture": p.arch.to_dict()}
        append(outdir, identity, record)
        done[index] = record
        progress.finished(index)
        loss = f"{result['held_out_loss']:.4f}" if result["held_out_loss"] is not None else "diverged"
        progress.print(f"[{len(done)}/{total}] {p.role} {p.arch.id} {record['decoder_params'] / 1e6:.2f}M decoder "
                       f"parameters: held-out loss {loss} ({result['tokens']:,} tokens in {result['seconds']:.0f} s, "
                       f"{result['tokens_per_second'] or 0:,.0f} tokens/s)")

    def failed(index: int, why: str) -> None:
        progress.finished(index, trained=False)
        log(f"warning: {by_index[index].arch.id} failed ({why}); the others go on, and a rerun tries it again")

    with progress:
        if workers == 1:
            torch.set_num_threads(threads)  # by default every core, for the one model in training
            for p in todo:
                started(p.index)
                try:
                    result = train_one(p.arch, recipe, parts.train, parts.held_out, per_model, options.seed, device,
                                       on_step=lambda step, _, i=p.index: progress.step(i, step))
                except (RuntimeError, ValueError) as e:  # e.g. out of memory: this model only
                    failed(p.index, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                    continue
                finished(p.index, result)
        else:
            from ltsedge.proxycheck.workers import Job, run_parallel

            jobs = [Job(p.index, p.arch.to_dict(), per_model, options.seed, work[p.index]) for p in todo]
            run_parallel(jobs, workers, data, recipe.to_dict(), device, threads if kind == "cpu" else 1,
                         on_start=started, on_step=progress.step, on_done=finished, on_error=failed)
