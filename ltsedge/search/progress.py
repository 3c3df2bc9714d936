"""Live progress of a search (rich): generation, measured / cached / failed, front size, hypervolume, ETA."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


class SearchProgress:
    def __init__(self, total_generations: int, population: int, evaluator_stats=None, console: Console | None = None):
        self.total_generations = total_generations
        self.population = population
        self.stats = evaluator_stats
        self.generation = 0
        self.front_size = 0
        self.hypervolume = 0.0
        self.started = time.time()
        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]}[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"),
            console=console or Console(stderr=True), transient=False,
            auto_refresh=False,  # no refresh thread: nothing of ours may use the CPU while a model is timed
        )
        self.task = self.progress.add_task("search", total=total_generations * population, phase="gen 1",
                                           status="", eta="?")

    def attach(self, stats) -> None:
        self.stats = stats

    def start(self) -> None:
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def resume_at(self, generation: int, evaluated: int) -> None:
        self.generation = generation
        self.progress.update(self.task, completed=min(evaluated, generation * self.population))

    def candidate_done(self) -> None:
        # After the last generation the evaluator still measures (settling the front): the bar is full.
        if self.progress.tasks[0].completed < (self.progress.tasks[0].total or 0):
            self.progress.advance(self.task)
        self._refresh()

    def generation_done(self, generation: int, record: dict) -> None:
        self.generation = generation
        self.front_size = record["front_size"]
        self.hypervolume = record["hypervolume"]
        self.progress.update(self.task, completed=generation * self.population)
        self._refresh()

    def _refresh(self) -> None:
        s = self.stats
        counts = f"measured {s.measured} · cached {s.cached} · failed {s.failed}" if s else ""
        done = self.progress.tasks[0].completed
        total = self.progress.tasks[0].total or 1
        elapsed = time.time() - self.started
        eta = "?" if done == 0 else _clock(elapsed / done * max(total - done, 0))
        phase = f"gen {min(self.generation + 1, self.total_generations)}/{self.total_generations}"
        if self.generation >= self.total_generations:
            phase, eta = "settling the front", "-"  # then publishing: no per-candidate clock to extrapolate
        self.progress.update(self.task, phase=phase, eta=eta,
                             status=f"{counts} · front {self.front_size} · HV {self.hypervolume:.3f}")
        self.progress.refresh()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
