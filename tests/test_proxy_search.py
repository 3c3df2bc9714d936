"""A proxy-check's result in the search: ``--proxy FILE`` makes NSGA-II minimise the fitted held-out loss, the
file is part of the search's identity (a resume with another proxy is refused), and a search's report shows
the check kept with it or given to it."""

from __future__ import annotations

import json
import math
import sys

import pytest

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params
from ltsedge.proxycheck import RESULT, report
from ltsedge.proxycheck.fitted import load_proxy
from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.budgets import Budgets
from ltsedge.search.checkpoint import CandidateLog, identity_hash
from ltsedge.search.presets import get_preset
from ltsedge.search.problem import FAILED_PENALTY, ArchitectureProblem
from tests.helpers import one_line_exit_2, run_ltsedge


def check_result(path, space, depth_cost: float = 0.05, backbone: str | None = None) -> str:
    """A check's JSON as ``report.summarize`` writes it, of 8 models whose loss falls with size and rises
    with depth by ``depth_cost`` per layer."""
    models = []
    for i, arch in enumerate(space.sample(40, seed=1)[:8]):
        p = count_params(arch).decoder_params
        loss = 9.0 - 0.3 * math.log(p) + depth_cost * arch.n_layer + 0.01 * (i % 3)
        models.append({"index": i, "role": "sample", "id": arch.id, "n_layer": arch.n_layer, "d_model": arch.d_model,
                       "decoder_params": p, "total_params": count_params(arch).total_params, "attention_params": p // 3,
                       "held_out_loss": loss, "checkpoints": [{"fraction": 1.0, "tokens": 640, "held_out_loss": loss}],
                       "tokens": 640, "seconds": 1.0})
    summary = report.summarize(models, {"space": {**space.to_dict(), **({"backbone": backbone} if backbone else {})},
                                        "text": {"source": "my-corpus.txt"}, "tokens_per_model": 640})
    path.write_text(json.dumps(summary))
    return str(path)


def test_a_fitted_proxy_is_the_quality_objective(tmp_path):
    space = get_preset("smoke").space()
    proxy = load_proxy(check_result(tmp_path / "c.json", space, depth_cost=0.05), "gpt2")
    assert proxy.c == pytest.approx(0.05, abs=0.01) and proxy.b == pytest.approx(-0.3, abs=0.02)
    problem = ArchitectureProblem(space, Budgets(), quality=proxy)
    shallow, deep = (Architecture(n_layer=n, d_model=64, n_head=[2] * n, d_inner=[d] * n, vocab_size=512,
                                  n_positions=64) for n, d in ((1, 256), (2, 64)))
    f_shallow, _ = problem.objectives(count_params(shallow).decoder_params, 1.0, 1.0, True, shallow)
    f_deep, _ = problem.objectives(count_params(deep).decoder_params, 1.0, 1.0, True, deep)
    assert f_shallow[0] == pytest.approx(proxy.predict(shallow))
    assert count_params(deep).decoder_params > count_params(shallow).decoder_params * 0.9
    assert f_shallow[0] < f_deep[0]  # the fit says depth costs more than these extra parameters give
    failed, _ = problem.objectives(0, None, None, False, deep)
    assert failed[0] == FAILED_PENALTY  # a failed candidate is the worst loss, not the best
    plain, _ = ArchitectureProblem(space, Budgets()).objectives(1000, 1.0, 1.0, True, deep)
    assert plain[0] == -1000.0  # without --proxy: decoder parameters, as before


def test_the_proxy_is_part_of_the_search_identity(tmp_path):
    space = get_preset("smoke").space()
    first = check_result(tmp_path / "a.json", space, depth_cost=0.05)
    other = check_result(tmp_path / "b.json", space, depth_cost=0.2)

    def identity(proxy: str) -> str:
        settings, profile = resolve(SearchOptions(preset="smoke", proxy=proxy))
        return identity_hash(settings.identity(profile, {}))

    plain, a, b = identity("decoder"), identity(first), identity(other)
    assert len({plain, a, b}) == 3
    settings, profile = resolve(SearchOptions(preset="smoke"))
    assert "proxy" not in settings.identity(profile, {})  # searches of decoder parameters resume as before
    CandidateLog(tmp_path, a).append({"id": "x"})
    with pytest.raises(LtsedgeError, match="different settings"):  # resumed with the other proxy: refused
        CandidateLog(tmp_path, b).records()
    assert CandidateLog(tmp_path, a).records() == [{"id": "x"}]


def test_a_bad_proxy_file_is_one_line(tmp_path):
    space = get_preset("smoke").space()
    other = check_result(tmp_path / "txl.json", space, backbone="transfo_xl")
    unfitted = tmp_path / "few.json"
    unfitted.write_text(json.dumps({**json.loads((tmp_path / "txl.json").read_text()), "fitted": None}))
    for path, message in ((tmp_path / "none.json", "not found"), (other, "fitted on a transfo_xl space"),
                          (unfitted, "holds no fitted proxy")):
        one_line_exit_2(run_ltsedge("search", "--preset", "smoke", "--proxy", path, "--out", tmp_path / "o"), message)


def test_a_search_report_shows_the_check_of_its_space(tmp_path):
    from ltsedge.report import write_report

    space = get_preset("smoke").space()
    out = tmp_path / "search"
    out.mkdir()
    search = {"settings": {"objective": "forward", "population": 4, "generations": 1, "space": space.to_dict(),
                           "budgets": {}}, "device": {"name": "laptop"}, "fingerprint": {}}
    (out / "search.json").write_text(json.dumps(search))
    (out / "frontier.json").write_text(json.dumps({"device": "laptop", "objective": "forward", "models": []}))
    (out / "candidates.jsonl").write_text(json.dumps({"format": 1}) + "\n")
    check_result(out / RESULT, space)
    write_report(out, tmp_path / "r", png=False)
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Spearman(decoder parameters, -held-out loss)" in page and "this search&#x27;s space" in page
    assert "over 8 models" in page and "my-corpus.txt" in page
    elsewhere = check_result(tmp_path / "other.json", get_preset("quick").space())
    proc = run_ltsedge("report", out, "--html", "--out", tmp_path / "r2", "--proxy-check", elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "another space than this search" in (tmp_path / "r2" / "index.html").read_text()


def test_without_tokenizers_proxy_check_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the proxy extra were not installed
    text = tmp_path / "t.txt"
    text.write_text("some text " * 100)
    one_line_exit_2(run_ltsedge("proxy-check", "--text", text, "--out", tmp_path / "o"),
                    'proxy-check needs tokenizers: pip install "ltsedge[proxy]"')
