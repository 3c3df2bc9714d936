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


# Slow tests in modules that were being edited by others when the `slow` marks were applied: marked here
# until each carries its own @pytest.mark.slow (then delete its entry). Searches, fleets, long measurements.
SLOW_ELSEWHERE = {
    "test_cli_profile.py": {
        "test_a_searchs_raced_out_or_coarse_figure_is_never_served_to_profile",
        "test_a_failure_caused_by_a_limit_is_not_answered_from_the_store",
        "test_profile_with_a_shape_is_keyed_by_that_shape",
        "test_profile_json_of_an_architecture_then_from_the_store",
        "test_profile_of_the_generate_variant_reports_prefill_decode_and_the_cache",
        "test_profile_json_of_a_file_carries_its_sha256",
        "test_the_measuring_worker_never_imports_from_the_working_directory",
        "test_profile_of_an_onnx_file_prints_a_table",
    },
    "test_bad_input.py": {"test_a_search_whose_every_measurement_failed_exits_1_and_says_why"},
    "test_safety_search.py": {
        "test_rerunning_a_finished_or_killed_while_publishing_search_publishes_without_evolving",
        "test_a_damaged_checkpoint_or_log_is_one_line",
        "test_a_model_with_external_data_is_measured_on_the_fleet_and_its_figure_served_here",
    },
    "test_bundle.py": {
        "test_onnxruntime_genai_generates_the_reference_tokens",
        "test_bundle_with_trained_weights_matches_the_reference",
    },
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.originalname in SLOW_ELSEWHERE.get(item.path.name, ()):
            item.add_marker(pytest.mark.slow)
