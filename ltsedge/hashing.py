"""Short stable hashes of JSON-like settings: the same settings hash the same in every process."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def settings_hash(settings: dict[str, Any]) -> str:
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
