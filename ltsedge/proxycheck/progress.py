"""Live progress of a check (rich): one bar for the whole check, one per model in training, each with its ETA.

The whole check's bar counts estimated training FLOPs, not models: a model ten times larger takes about ten
times longer, so the overall ETA holds from the first model on. Without a terminal nothing is drawn and
each finished model is a line on stderr; ``--quiet`` prints neither (warnings and the result still print).
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn


class CheckProgress:
    def __init__(self, total_work: float, done_work: float, models: int, done_models: int, quiet: bool = False,
                 console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = not quiet and self.console.is_terminal
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=True)
        self.models, self.done_models = models, done_models
        self.overall = self.progress.add_task("all models", total=max(total_work, 1.0), completed=done_work,
                                              count=self._models())
        self.tasks: dict[int, TaskID] = {}
        self.work: dict[int, float] = {}  # per model: work per step
        self.quiet = quiet

    def __enter__(self) -> CheckProgress:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.progress.stop()

    def started(self, index: int, label: str, steps: int, work: float) -> None:
        self.tasks[index] = self.progress.add_task(label, total=steps, count=f"0/{steps} steps")
        self.work[index] = work / steps

    def step(self, index: int, step: int) -> None:
        task = self.tasks.get(index)
        if task is None:
            return
        state = next(t for t in self.progress.tasks if t.id == task)
        advance = (step - state.completed) * self.work[index]
        self.progress.update(task, completed=step, count=f"{step}/{state.total:.0f} steps")
        self.progress.advance(self.overall, advance)

    def finished(self, index: int, trained: bool = True) -> None:
        task = self.tasks.pop(index, None)
        if task is not None:
            self.progress.remove_task(task)
        self.done_models += trained
        self.progress.update(self.overall, count=self._models())

    def _models(self) -> str:
        return f"{self.done_models}/{self.models} models"

    def print(self, line: str) -> None:
        """A line above the bars (or on stderr without them)."""
        if self.live:
            self.progress.console.print(line, markup=False, highlight=False)
        elif not self.quiet:
            print(line, file=sys.stderr, flush=True)
