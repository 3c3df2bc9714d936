"""One evaluated sub-network of a pruning run, and the log its measured loss is appended to."""

from __future__ import annotations

import json
from dataclasses import dataclass

LOSSES = "losses.jsonl"


@dataclass
class Evaluated:
    """One sub-network: its genes, architecture, measured loss and speed figures."""

    genes: object
    arch: object
    loss: object  # HeldOutLoss
    repaired: bool
    speed: object  # latency.Speed
    generation: int
    source: str  # "parent", a heuristic's name, "search"

    @property
    def decode_ms(self) -> float:
        return self.speed.decode_ms


def append_loss(outdir, identity: str, key: str, loss) -> None:
    path = outdir.path(LOSSES)
    with open(path, "a") as f:
        f.write(json.dumps({"identity": identity, "key": key, **loss.to_dict()}, allow_nan=False) + "\n")
