"""A check's result read back, without torch: the fitted proxy a search may optimise (``--proxy FILE``), and
the line a search's report shows.

The fitted proxy predicts held-out loss from ``ln(decoder parameters)`` and ``n_layer`` (``report.FORM``),
with the coefficients the check fitted on the user's text. It ranks architectures of the backbone it was
fitted on; a file of another backbone is refused.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.files import parse_json, read_text
from ltsedge.proxy import count_params
from ltsedge.proxycheck import RESULT
from ltsedge.validate import is_number

PROXIES = ("decoder",)  # the built-in proxy names; anything else is a check's file
MAX_EXPONENT = 300.0  # of merit's depth factor: e^300 is far inside a float's range
# The largest predicted loss (nats) a fit may give anywhere in a search's space: a loss is a few nats, and a
# larger prediction (or one past a float's range, written as Infinity) is of damaged or meaningless coefficients;
# it also stays far below the search's objective for a failed candidate (search/problem.py, 1e9).
MAX_PREDICTION = 1e6


@dataclass(frozen=True)
class FittedProxy:
    a: float
    b: float  # per ln(decoder parameters)
    c: float  # per layer
    backbone: str
    sha256: str  # of the check's file: a resumed search must use the same one
    loo_rmse: float | None

    def predict(self, arch: Architecture) -> float:
        """The held-out loss the check's fit predicts for ``arch`` (lower is better)."""
        return self.a + self.b * math.log(max(count_params(arch).decoder_params, 1)) + self.c * arch.n_layer

    def merit(self, arch: Architecture, decoder_params: int) -> float:
        """The front's quality axis under this fit (search/pareto.py), higher better: the decoder parameters
        scaled by the fit's depth term, P * exp(c / b * n_layer). As the loss is a + b ln(that), it ranks
        exactly as ``predict`` does (b < 0, ``load_proxy``), and a ratio of two merits is a difference of
        predicted loss (|b| ln ratio nats): publishing's resolution and the baseline comparison keep their
        meaning, in predicted loss."""
        exponent = max(-MAX_EXPONENT, min(MAX_EXPONENT, self.c / self.b * arch.n_layer))  # load_proxy keeps a
        return max(decoder_params, 1) * math.exp(exponent)  # space's models inside; a model beyond is clipped

    def identity(self) -> dict:
        # "ranks": what the fit decides in a search (NSGA-II's objective and the published front)
        return {"kind": "fitted", "a": self.a, "b": self.b, "c": self.c, "backbone": self.backbone,
                "sha256": self.sha256, "ranks": "front"}


def read_check(path: str | Path, what: str = "proxy-check result") -> dict:
    """A check's JSON, its fields a report or a search reads checked (a copied file may be damaged)."""
    text = read_text(path, what)
    data = parse_json(text, f"{what} {path}")
    if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("ranking"), dict) \
            or not isinstance(data.get("space"), dict):
        raise LtsedgeError(f"{what} {path} is not the JSON of an ltsedge proxy-check")
    data["_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return data


def load_proxy(path: str | Path, backbone: str, space=None) -> FittedProxy:
    """``--proxy FILE``: the fitted proxy of a check of ``backbone``'s space, for a search of ``space`` (a
    ``SearchSpace``; None: checked without one)."""
    data = read_check(path, "--proxy")
    fitted = data.get("fitted")
    coefficients = fitted.get("coefficients") if isinstance(fitted, dict) else None
    if not isinstance(coefficients, dict) or not all(is_number(coefficients.get(k)) and math.isfinite(coefficients[k])
                                                     for k in "abc"):
        raise LtsedgeError(f"--proxy {path} holds no fitted proxy (a check fits one from 5 models up)")
    checked = data["space"].get("backbone")
    if checked != backbone:
        raise LtsedgeError(f"--proxy {path} was fitted on a {checked} space, not this search's {backbone}")
    if coefficients["b"] >= 0:  # a search would then prefer the smallest models: no quality objective at all
        raise LtsedgeError(f"--proxy {path}: its fit predicts no lower loss for more decoder parameters "
                           f"(b = {coefficients['b']:+.3g} per ln parameter); search with --proxy decoder, or check "
                           "with more tokens per model")
    max_layers = space.max_layers if space is not None else None
    depth_term = abs(coefficients["c"] / coefficients["b"]) * (max_layers or 0)
    if depth_term > MAX_EXPONENT:  # merit's exponent: beyond it the depth term would be clipped, and ranks lost
        raise LtsedgeError(f"--proxy {path}: its fit is too flat in parameters to rank this space (its depth term "
                           f"is worth a factor e^{depth_term:.0f} of decoder parameters over {max_layers} layers); "
                           "search with --proxy decoder, or check with more tokens per model")
    if space is not None:
        _check_predictions(path, coefficients, space)
    loo = fitted.get("loo_rmse")
    return FittedProxy(float(coefficients["a"]), float(coefficients["b"]), float(coefficients["c"]), backbone,
                       data["_sha256"], float(loo) if is_number(loo) else None)


def _check_predictions(path, coefficients: dict, space) -> None:
    """Refuse a fit whose predicted loss leaves ``MAX_PREDICTION`` anywhere in ``space``. The prediction is
    linear in ln(decoder parameters) and n_layer, so its extremes lie at the corners of their ranges: from one
    parameter (``predict``'s floor) to the widest model, from the fewest layers to the most."""
    import dataclasses

    widest = []
    for depth in space.n_layer:  # the widest model at each depth, as the hypervolume's scale takes it
        at_depth = dataclasses.replace(space, n_layer=(depth,))
        widest.append(count_params(at_depth.decode(at_depth.upper_bounds)).decoder_params)
    a, b, c = (coefficients[k] for k in "abc")
    sizes, depths = (0.0, math.log(max(*widest, 1))), (min(space.n_layer), space.max_layers)
    corners = [a + b * x + c * n for x in sizes for n in depths]  # as predict computes it
    if not all(math.isfinite(v) and abs(v) <= MAX_PREDICTION for v in corners):
        worst = max(corners, key=lambda v: abs(v) if math.isfinite(v) else math.inf)
        raise LtsedgeError(f"--proxy {path}: its fit predicts a held-out loss of {worst:.3g} nats in this space, "
                           f"beyond {MAX_PREDICTION:.0e} (a loss is a few nats): not the fit of a check; run the "
                           "check again, or search with --proxy decoder")


def find_check(out_dir: str | Path) -> Path | None:
    """A check's result kept with a search: ``OUT/proxy-check.json`` or ``OUT/proxy-check/proxy-check.json``."""
    for path in (Path(out_dir) / RESULT, Path(out_dir) / "proxy-check" / RESULT):
        if path.is_file():
            return path
    return None


def check_line(data: dict, space: dict | None) -> str:
    """One line for a search's report: the check's Spearman with its interval and verdict, and whether it was
    of this search's space."""
    r = data["ranking"].get("decoder_params")
    if not isinstance(r, dict) or not all(is_number(r.get(k)) for k in ("spearman", "low", "high", "models")):
        head = "too few models for a ranking"
    else:
        head = (f"Spearman(decoder parameters, -held-out loss) {r['spearman']:.2f} "
                f"[{r['low']:.2f}, {r['high']:.2f}] over {r['models']} models: {r.get('verdict', '')}")
    same = space is not None and data["space"] == space
    where = "this search's space" if same else "another space than this search's"
    text = data.get("text") if isinstance(data.get("text"), dict) else {}
    tokens = f", {data['tokens_per_model']:,} tokens per model" if is_number(data.get("tokens_per_model")) else ""
    return f"{head} (on {text.get('source', 'the text')}{tokens}; {where})"
