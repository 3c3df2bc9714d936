"""Which loop times a generation bundle: onnxruntime-genai's ``Generator`` (the app's) or a plain session.

A device profile's ``generate_loop``: "auto" (genai's loop wherever onnxruntime-genai is installed and runs
the profile's provider; the default), "genai" (required: refused in one line where it cannot run) or
"session" (a plain onnxruntime session fed a past: for bundles aimed at other runtimes). Forward models
are always timed in a session. Which loop timed a figure is in its store key (``keys.py``) and in every
output. The parent decides; the worker runs it (``genai_loop.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.runners.genai_loop import CONFIG_FILE, PROVIDERS, version

SESSION_LABEL = "onnxruntime session"


def _why_not_genai(profile) -> str | None:
    installed = version()
    if installed is None:
        return "onnxruntime-genai is not installed (pip install onnxruntime-genai)"
    if profile.execution_provider not in PROVIDERS:
        return f"onnxruntime-genai does not run {profile.execution_provider}"
    if profile.execution_provider == "CUDAExecutionProvider" and not _genai_has_cuda():
        return "the installed onnxruntime-genai has no CUDA (pip install onnxruntime-genai-cuda)"
    if profile.batch != 1:
        return f"genai's loop is timed for a batch of 1 (a rewind to the past needs it), the profile's is {profile.batch}"
    return None


def _genai_has_cuda() -> bool:
    from importlib import metadata

    try:
        metadata.version("onnxruntime-genai-cuda")
        return True
    except metadata.PackageNotFoundError:
        return False


def genai_runs(profile) -> bool:
    """Whether ``profile`` times generation bundles in genai's loop; "genai" where it cannot is bad input."""
    choice = getattr(profile, "generate_loop", "auto")
    if choice == "session":
        return False
    why = _why_not_genai(profile)
    if why is not None and choice == "genai":
        raise LtsedgeError(f"{profile.label}: generate_loop = \"genai\", but {why}")
    return why is None


def loop_label(profile, variant: str) -> str:
    """What timed a ``variant`` model under ``profile``, as outputs say it."""
    if variant != "forward" and genai_runs(profile):
        return f"onnxruntime-genai {version()} Generator"
    return SESSION_LABEL


def bundle_config(path: str | Path) -> Path | None:
    """The genai_config.json that loads ``path`` (beside it, naming it as its decoder file), or None."""
    path = Path(path)
    config = path.parent / CONFIG_FILE
    if not config.is_file():
        return None
    return config if _decoder_file(config) == path.name else None


def bundle_model(path: str | Path) -> Path:
    """A bundle directory stands for its model: the file its genai_config.json names."""
    path = Path(path)
    if not path.is_dir():
        return path
    config = path / CONFIG_FILE
    if not config.is_file():
        raise LtsedgeError(f"{path} is a directory without {CONFIG_FILE}: give a model file or a bundle")
    filename = _decoder_file(config)
    if not isinstance(filename, str) or Path(filename).name != filename:
        raise LtsedgeError(f"{config}: model.decoder.filename must name a file in the bundle, got {filename!r}")
    return path / filename


def _decoder_file(config: Path):
    """The model file a genai_config.json names (as written: checked by the caller)."""
    try:
        return json.loads(config.read_text())["model"]["decoder"]["filename"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LtsedgeError(f"{config} is not an onnxruntime-genai config ({e})") from None


def config_sha256(path: str | Path) -> str | None:
    """The sha256 of the genai_config.json beside ``path`` (its loop's settings are part of a figure)."""
    config = bundle_config(path)
    return hashlib.sha256(config.read_bytes()).hexdigest() if config is not None else None
