"""What a generator's user feels, gated and optimised: check's decode/prefill budgets and the prefill
objective of a search."""

from __future__ import annotations

import json

import pytest

from ltsedge.search.api import SearchOptions, resolve
from ltsedge.search.loop import SearchRun
from ltsedge.store import MeasurementStore
from tests.helpers import GENERATE_DEVICE, run_ltsedge as run


def test_check_gates_the_decode_and_prefill_latencies(tmp_path, arch_file):
    device = tmp_path / "gen.toml"
    device.write_text(GENERATE_DEVICE)
    bundle = tmp_path / "bundle"
    assert run("export", arch_file(), "--variant", "generate", "-o", bundle).returncode == 0
    model = bundle / "model.onnx"
    ok = run("check", model, "--device", device, "--max-decode-ms", "10000", "--max-prefill-ms", "10000",
             "--json")
    assert ok.returncode == 0, ok.stderr
    checks = {c["metric"]: c for c in json.loads(ok.stdout)["results"][0]["checks"]}
    assert {"decode", "prefill"} <= set(checks) and all(checks[m]["passed"] for m in ("decode", "prefill"))
    assert checks["decode"]["value"] > 0 and checks["prefill"]["value"] > 0
    over = run("check", model, "--device", device, "--max-decode-ms", "0.000001", "--max-prefill-ms", "10000",
               "--json")
    assert over.returncode == 1
    checks = {c["metric"]: c for c in json.loads(over.stdout)["results"][0]["checks"]}
    assert checks["decode"]["verdict"] == "FAIL" and checks["prefill"]["passed"]


@pytest.mark.slow
def test_a_search_can_optimise_the_prefill(tmp_path):
    options = SearchOptions(preset="smoke", out=tmp_path / "out", generations=1, seed=5, objective="prefill",
                            store_path=tmp_path / "store.sqlite", quiet=True, baseline=False)
    settings, profile = resolve(options)
    with MeasurementStore(options.store_path) as store:
        result = SearchRun(settings, profile, options.out, store, log=lambda m: None).run()
    frontier = json.loads((result.out_dir / "frontier.json").read_text())
    assert frontier["objective"] == "prefill" and frontier["models"]
    models = frontier["models"]
    assert all(m["prefill_latency_ms"] > 0 and m["decode_latency_ms"] > 0 for m in models)

    def key(m):  # what the front was computed on: the prefill latency
        return (-m["decoder_params"], m["prefill_latency_ms"], m["peak_memory_mb"])

    for a in models:
        assert not any(all(x <= y for x, y in zip(key(b), key(a))) and key(b) != key(a) for b in models)
