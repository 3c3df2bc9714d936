"""What ``predict`` says where it has no cost model: the command that makes the one it looked for, and
the settings for which the store already holds one.

Both commands are printed with every option that files the figures (``Setting``) and the store, so
that run as printed they make, or use, exactly the model named.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from ltsedge.costmodel.fit import MIN_SAMPLES
from ltsedge.costmodel.model import complete_samples
from ltsedge.costmodel.setting import Setting
from ltsedge.errors import LtsedgeError

SHOWN = 3  # settings named at most: the line stays one line


def options(setting: Setting, store_path: Path | None, backbone: bool) -> list[str]:
    """The command-line options of ``setting`` (those left at their defaults left out, but the device)."""
    words = ["--device", setting.device]
    if setting.preset != "default":
        words += ["--preset", setting.preset]
    if backbone and setting.backbone:  # predict takes it from the architecture
        words += ["--backbone", setting.backbone]
    for flag, value in (("--variant", setting.variant), ("--target-ort", setting.target_ort),
                        ("--precision", setting.precision), ("--sequence", setting.sequence)):
        if value is not None:
            words += [flag, str(value)]
    if store_path is not None:
        words += ["--store", str(store_path)]
    return words


def how_to_build(setting: Setting, store_path: Path | None = None) -> str:
    return shlex.join(["ltsedge", "costmodel", *options(setting, store_path, backbone=True)])


def how_to_predict(arch_file: Path | str, setting: Setting, store_path: Path | None = None) -> str:
    return shlex.join(["ltsedge", "predict", str(arch_file), *options(setting, store_path, backbone=False)])


def settings_with_a_model(store, like, asked: Setting) -> list[tuple[Setting, int]]:
    """(setting, measured architectures) of every other preset, variant and precision of ``asked`` (same
    device, backbone, onnxruntime target, sequence) for which the store holds a cost model's worth of
    this machine's figures; the options ``asked`` gave are kept where they resolve the same."""
    from ltsedge.backbones import get_backbone
    from ltsedge.precision import PRECISIONS
    from ltsedge.search.presets import PRESETS

    found, seen = [], {asked.key()}
    for preset in PRESETS:
        for variant in get_backbone(like.backbone).variants:
            for precision in PRECISIONS:
                try:
                    setting = _plain(replace(asked, preset=preset, variant=variant, precision=precision), asked)
                    key = setting.key()
                except LtsedgeError:
                    continue  # e.g. a preset of another backbone, a precision this device cannot run
                if key in seen:
                    continue
                seen.add(key)
                profile, _, variant = setting.resolve()
                count = len(complete_samples(setting.samples(store, like), variant))
                if count >= MIN_SAMPLES:
                    found.append((setting, count))
    return found


def no_model(arch_file: Path | str, asked: Setting, store_path: Path | None, measured: int,
             elsewhere: list[tuple[Setting, int]]) -> str:
    """The one-line refusal of ``predict`` without a cost model."""
    text = (f"no cost model for this machine and these settings ({measured} measured architectures, {MIN_SAMPLES} "
            f"needed); make one with `{how_to_build(asked, store_path)}`")
    if not elsewhere:
        return text
    uses = "; ".join(f"`{how_to_predict(arch_file, s, store_path)}` ({n} measured architectures)"
                     for s, n in elsewhere[:SHOWN])
    more = f" and {len(elsewhere) - SHOWN} more" if len(elsewhere) > SHOWN else ""
    return f"{text}; the store holds one for other settings: {uses}{more}"


def _plain(setting: Setting, asked: Setting) -> Setting:
    """``setting`` with the variant and precision ``asked`` gave (or left out) where they resolve the same:
    the command then differs from the user's only where the settings do."""
    for field in ("variant", "precision"):
        kept = replace(setting, **{field: getattr(asked, field)})
        try:
            if kept.key() == setting.key():
                setting = kept
        except LtsedgeError:
            pass
    return setting
