"""``models.jsonl``: a check's log of finished models, one JSON line each (fsynced), and its reading back.

A resumed check trusts only lines it could have written itself: every field of its type and range, of the
planned model at that index (its role, id and architecture), with the recipe's steps, tokens and
checkpoints. A line that is not (edited by hand, damaged, of another version) is left out and its model
trained again, as the measurement store measures a damaged row again: one bad line costs one model, and a
later reader (the statistics, the report) never meets a value it cannot use.
"""

from __future__ import annotations

import json
import math
import os

from ltsedge.errors import LtsedgeError
from ltsedge.proxycheck.report import FORMAT
from ltsedge.search.outdir import OutputDir
from ltsedge.validate import is_int, is_number

LOG = "models.jsonl"
RESTART_HINT = "pass --restart to discard it, or choose another --out"


def read_log(outdir: OutputDir, identity: str, planned: list, recipe, per_model: int) -> tuple[dict[int, dict], int]:
    """(the models a previous run finished under this identity, by index; how many lines were refused). A
    log of other settings is refused. A line cut short by a kill is dropped (and cut off the file, so the
    next line starts clean); a damaged line is left out, and a later good line of the same model kept."""
    path = outdir.root / LOG
    if not (outdir.owns(LOG) and path.is_file()):
        return {}, 0
    raw = path.read_bytes()
    complete = raw[:raw.rfind(b"\n") + 1]
    if len(complete) != len(raw):
        with open(path, "r+b") as f:
            f.truncate(len(complete))
    lines = complete.decode(errors="replace").splitlines()
    header = _json(lines[0]) if lines else {}
    if lines and (not isinstance(header, dict) or header.get("identity") != identity):
        raise LtsedgeError(f"{outdir.root} holds a check of other settings (text, tokenizer, space, models, tokens, "
                           f"recipe or device); {RESTART_HINT}")
    by_index = {p.index: p for p in planned}
    expected = _Expected(recipe, per_model)
    done, refused = {}, 0
    for line in lines[1:]:
        record = _json(line)
        if expected.holds(record, by_index):
            done[record["index"]] = record
        else:
            refused += 1
    return done, refused


def append(outdir: OutputDir, identity: str, record: dict) -> None:
    """One finished model's line (the header first in a new log), flushed to disk before the next model."""
    path = outdir.path(LOG)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "ab") as f:
        if new:
            f.write((json.dumps({"identity": identity, "format": FORMAT}, allow_nan=False) + "\n").encode())
        f.write((json.dumps(record, allow_nan=False) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def _json(line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _loss(value) -> bool:
    """A held-out or training loss as the log holds it: nats (finite, not negative), or None (diverged)."""
    return value is None or (is_number(value) and math.isfinite(value) and value >= 0)


class _Expected:
    """What every line of this check's log must hold, beside its planned model."""

    def __init__(self, recipe, per_model: int):
        self.steps = recipe.steps(per_model)
        self.tokens = self.steps * recipe.tokens_per_step
        self.checkpoints = [(fraction, step, step * recipe.tokens_per_step)
                            for step, fraction in recipe.checkpoints(self.steps).items()]
        self._counts: dict[int, dict] = {}  # by index: the planned model's parameter counts

    def holds(self, r, by_index: dict) -> bool:
        if not isinstance(r, dict) or not is_int(r.get("index")) or r["index"] not in by_index:
            return False
        planned = by_index[r["index"]]
        arch = planned.arch
        return (_same(r, role=planned.role, id=arch.id, n_layer=arch.n_layer, d_model=arch.d_model,
                      steps=self.steps, tokens=self.tokens, **self._counted(planned))
                and r.get("architecture") == json.loads(json.dumps(arch.to_dict()))
                and self._checkpoints(r.get("checkpoints"))
                and isinstance(r.get("diverged"), bool) and r["diverged"] == (r.get("held_out_loss") is None)
                and _loss(r.get("held_out_loss")) and r.get("held_out_loss") == r["checkpoints"][-1]["held_out_loss"]
                and _loss(r.get("train_loss"))
                and is_number(r.get("seconds")) and 0 <= r["seconds"] < math.inf
                and (r.get("tokens_per_second") is None or (is_number(r["tokens_per_second"])
                                                            and 0 < r["tokens_per_second"] < math.inf))
                and isinstance(r.get("device"), str))

    def _counted(self, planned) -> dict[str, int]:
        """The planned model's decoder, total and attention parameters."""
        if planned.index not in self._counts:
            from ltsedge.proxycheck.sampling import counts  # the attention count builds a model (torch)

            self._counts[planned.index] = counts(planned.arch)
        return self._counts[planned.index]

    def _checkpoints(self, marks) -> bool:
        if not isinstance(marks, list) or len(marks) != len(self.checkpoints):
            return False
        return all(isinstance(m, dict) and _same(m, fraction=fraction, step=step, tokens=tokens)
                   and _loss(m.get("held_out_loss")) for m, (fraction, step, tokens) in zip(marks, self.checkpoints))


def _same(record: dict, **want) -> bool:
    """Each field is the value wanted, and of its type (JSON's true is not 1, nor 2.0 a step)."""
    return all(type(record.get(k)) is type(v) and record[k] == v for k, v in want.items())
