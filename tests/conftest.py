"""Shared fixtures. The plain helpers (tiny architectures, the CLI runners, reference checks) live in
tests/helpers.py; the tiny architectures are re-exported here for the modules that import them from conftest."""

from __future__ import annotations

import pytest

from ltsedge.architecture import Architecture
from tests.helpers import TINY_VOCAB, random_tiny_archs, tiny_arch, tiny_space  # noqa: F401 (re-exported)


@pytest.fixture
def arch_file(tmp_path):
    def write(arch: Architecture | None = None, text: str | None = None):
        path = tmp_path / "arch.json"
        path.write_text(text if text is not None else (arch or tiny_arch()).to_json())
        return path
    return write

