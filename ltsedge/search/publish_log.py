"""What publishing measured, kept in ``--out`` so that a re-run publishes the same front from the same figures.

``published.jsonl`` is a candidate log (``checkpoint.CandidateLog``: the run's identity in its header,
append-only, a line cut short by a kill skipped) of the figures publishing took: a front model's
re-measurement from its file, keyed by the policy and the file's sha256 (the very bytes measured), and a
baseline model's, keyed by its architecture id (how it is exported is part of the run's identity). The
identity already holds the machine, the device settings and the export target, and a resumed run keeps
the milliseconds' scale it started with: a figure found here is one this run would measure now, and
answers for it. So a re-run of a finished search measures nothing and publishes what it published, and
one killed while publishing measures only what it had not, then publishes what it would have.
"""

from __future__ import annotations

from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.runners.measurement import Measurement
from ltsedge.search.checkpoint import CandidateLog

PUBLISH_LOG = "published.jsonl"


class PublishLog:
    """The figures an earlier run's publishing took (``figure``) and this run's, added as they are taken."""

    def __init__(self, out_dir: Path, identity: str):
        self._log = CandidateLog(out_dir, identity, name=PUBLISH_LOG)
        self._figures: dict[str, Measurement] = {}
        self.taken = 0  # figures this run took from the log
        for record in self._log.records():
            try:
                key, measurement = record["key"], Measurement.from_record(record["measurement"])
            except (KeyError, TypeError, ValueError, LtsedgeError):
                continue  # not one of ours, or damaged: measured again
            if isinstance(key, str):
                self._figures[key] = measurement

    def figure(self, key: str) -> Measurement | None:
        return self._figures.get(key)

    def take(self, key: str) -> Measurement | None:
        """``figure``, counted in ``taken`` when there is one."""
        found = self._figures.get(key)
        self.taken += found is not None
        return found

    def add(self, key: str, measurement: Measurement) -> None:
        self._figures[key] = measurement
        self._log.append({"key": key, "measurement": measurement.to_dict()})


def remeasured_key(policy: str, sha256: str) -> str:
    """A front model's figure at ``policy`` ("profile", "strict"), of the file with that sha256."""
    return f"{policy}:{sha256}"


def baseline_key(arch_id: str) -> str:
    return f"baseline:{arch_id}"
