"""The user's text as token windows: some to measure importance on (calibration), others, never seen by
calibration, to measure held-out loss on.

The stream is cut into consecutive windows of ``window`` tokens; the held-out ones are spread evenly over it,
and the calibration ones evenly over the rest, so both sample the whole text (a manual's index at its end, its
tutorial at its start) and no token is in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltsedge.errors import LtsedgeError


@dataclass(frozen=True)
class TokenWindows:
    calibration: np.ndarray  # [n_calibration, window] int64
    held_out: np.ndarray  # [n_held_out, window] int64


def split_windows(tokens, window: int, calibration: int, held_out: int) -> TokenWindows:
    """``calibration`` and ``held_out`` windows of ``window`` tokens from the stream ``tokens``, disjoint;
    a stream too short for them is one line saying how many tokens they need."""
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if window < 2 or calibration < 0 or held_out < 1:
        raise LtsedgeError(f"token windows: need a window of at least 2 tokens and at least one held-out window "
                           f"(got window {window}, {calibration} calibration, {held_out} held out)")
    needed = (calibration + held_out) * window
    if len(tokens) < needed:
        raise LtsedgeError(f"the text has {len(tokens):,} tokens: {calibration} calibration and {held_out} held-out "
                           f"windows of {window} need {needed:,}")
    windows = tokens[: len(tokens) // window * window].reshape(-1, window)
    held = spread(len(windows), held_out)
    rest = np.setdiff1d(np.arange(len(windows)), held)
    return TokenWindows(windows[rest[spread(len(rest), calibration)]], windows[held])


def spread(n: int, k: int) -> np.ndarray:
    """``k`` distinct indices of ``0 .. n-1`` spread evenly, the first and last included where k > 1."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64)) if k > 1 else np.array([n // 2])
