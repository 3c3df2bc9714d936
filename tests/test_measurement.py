"""A measurement is one typed object from the runner to the search's outputs: its workloads' figures,
its ratio to the reference, its completeness and its milliseconds on another run's scale are read
through it, not by string keys."""

from __future__ import annotations

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.runners.measurement import Measurement

DECODE = {"latency_ms": 4.0, "latency_low_ms": 3.8, "latency_high_ms": 4.2, "latency_ratio": 2.0}
PREFILL = {"latency_ms": 20.0, "latency_low_ms": 19.0, "latency_high_ms": 21.0, "latency_ratio": 10.0, "coarse": True}


def generate_measurement(**changes) -> Measurement:
    fields = dict(ok=True, workload="decode", latency_ms=4.0, latency_low_ms=3.8, latency_high_ms=4.2,
                  latency_ratio=2.0, decode_latency_ms=4.0, prefill_latency_ms=20.0, calibration_ms=2.0,
                  peak_memory_mb=50.0, workloads={"decode": dict(DECODE), "prefill": dict(PREFILL)})
    return Measurement(**{**fields, **changes})


def test_each_workload_s_figures_and_ratio_come_from_its_own_entry():
    m = generate_measurement()
    assert m.ratio("decode") == 2.0 and m.ratio("prefill") == 10.0
    assert m.figures("prefill")["latency_high_ms"] == 21.0
    assert m.ratio("forward") is None and m.figures("forward") == {}


def test_a_forward_measurement_s_primary_figures_are_its_workload_s():
    m = Measurement(ok=True, latency_ms=3.0, latency_ratio=1.5, latency_low_ms=2.9, latency_high_ms=3.1)
    assert m.workload == "forward" and m.ratio("forward") == 1.5
    assert (m.figures("forward")["latency_low_ms"], m.figures("forward")["latency_high_ms"]) == (2.9, 3.1)
    assert m.ratio("decode") is None


def test_a_coarse_workload_or_a_raced_out_figure_is_not_complete():
    assert not generate_measurement().complete  # prefill timed coarsely
    assert generate_measurement(workloads={"decode": dict(DECODE), "prefill": {**PREFILL, "coarse": False}}).complete
    assert not Measurement(ok=True, latency_ms=1.0, stopped_early=True).complete


def test_rescaled_moves_every_millisecond_by_the_calibrations_and_keeps_the_ratios():
    m = generate_measurement()
    r = m.rescaled(3.0)  # this run's reference is 1.5x slower
    assert r.calibration_ms == 3.0 and r is not m and m.calibration_ms == 2.0  # the original is untouched
    assert (r.latency_ms, r.latency_low_ms, r.decode_latency_ms, r.prefill_latency_ms) == pytest.approx((6, 5.7, 6, 30))
    assert r.figures("prefill")["latency_ms"] == pytest.approx(30.0) and r.ratio("prefill") == 10.0
    assert m.workloads["prefill"]["latency_ms"] == 20.0
    failure = Measurement.failure("timed out")
    assert failure.rescaled(3.0) is failure


def test_a_decode_figure_of_an_earlier_pin_is_converted_to_the_machine_s_new_compute_bandwidth_scale():
    decode = {**DECODE, "reference": "bandwidth", "reference_scale": 0.5}
    m = generate_measurement(workloads={"decode": decode, "prefill": {**PREFILL, "reference": "compute"}})
    # Reference samples recorded x 0.5 then, x 0.25 now: each ratio to them doubles.
    r = m.rescaled(2.0, bandwidth_scale=0.25)
    assert r.ratio("decode") == pytest.approx(4.0) and r.latency_ratio == pytest.approx(4.0)
    assert (r.latency_ms, r.latency_high_ms, r.decode_latency_ms) == pytest.approx((8.0, 8.4, 8.0))
    assert r.workloads["decode"]["reference_scale"] == 0.25
    assert r.ratio("prefill") == 10.0 and r.prefill_latency_ms == 20.0  # timed beside the compute reference
    both = m.rescaled(3.0, bandwidth_scale=0.25)  # and a slower machine's milliseconds
    assert both.decode_latency_ms == pytest.approx(12.0) and both.prefill_latency_ms == pytest.approx(30.0)
    assert m.rescaled(2.0, bandwidth_scale=0.5) is m  # the same pin: nothing to do
    # Recorded by an older version, without its scale: its unit is unknown, so it is kept as it is.
    old = generate_measurement(workloads={"decode": {**DECODE, "reference": "bandwidth"}, "prefill": dict(PREFILL)})
    assert old.rescaled(2.0, bandwidth_scale=0.25).ratio("decode") == 2.0


def test_a_record_of_another_version_is_read_leniently_a_peer_s_reply_strictly():
    record = {**generate_measurement().to_dict(), "a_field_of_a_later_version": 1}
    assert Measurement.from_record(record).ratio("decode") == 2.0
    with pytest.raises(LtsedgeError, match="a_field_of_a_later_version"):
        Measurement.from_dict(record)
    with pytest.raises(LtsedgeError, match="boolean 'ok'"):
        Measurement.from_record({"latency_ms": 1.0})


def test_a_prediction_round_trips_through_the_candidate_log_as_a_prediction():
    from ltsedge.costmodel.fit import Prediction
    from ltsedge.costmodel.model import Estimate
    from ltsedge.search.screening import predicted_measurement

    estimate = Estimate({"prefill": Prediction(10.0, 9.0, 11.0), "decode": Prediction(2.0, 1.8, 2.4)},
                        Prediction(50.0, 45.0, 55.0))
    m = predicted_measurement(estimate, "decode", "generate", calibration_ms=2.0)
    assert m.predicted and m.ratio("decode") == 2.0 and m.latency_ms == 4.0 and m.prefill_latency_ms == 20.0
    assert (m.memory_low_mb, m.memory_high_mb) == (45.0, 55.0)
    back = Measurement.from_record(m.to_dict())
    assert back == m
