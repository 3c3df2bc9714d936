"""The README's uses, run as a user copies them: each section's shell and Python blocks, in order, in a fresh
folder holding the repository's examples/. What one use writes the next one reads (the bundle the app runs,
CI gates and a fleet measures), as in the README. The fleet's port is the one change: a free one."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
USES = ("Search on a board", "Ship a model to an app", "Make your trained model faster on your device",
        "Gate CI on budgets", "A fleet of boards")

pytestmark = pytest.mark.slow


def blocks(section: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of the README's ``## section``."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start:end if end > 0 else None], re.S)


def test_every_use_has_an_example():
    for section in USES:
        assert blocks(section, "bash"), f"the README's {section!r} has no shell example"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", folder / "examples")
    return folder


def environment(work: Path) -> dict:
    """The user's environment: this interpreter's scripts first on the path, a store of the folder's own."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "LTSEDGE_STORE": str(work / "measurements.sqlite")}


def run_shell(block: str, work: Path, timeout: float) -> subprocess.CompletedProcess:
    """The block in bash, in a session of its own: what it leaves running in the background (a fleet's
    scheduler and agent) is ended with the session once the block is done. Its output goes to files, which a
    process left behind cannot hold open as it would a pipe."""
    out, err = work / "block.out", work / "block.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + block], cwd=work, env=environment(work),
                                stdout=stdout, stderr=stderr, text=True, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    done = subprocess.CompletedProcess(proc.args, code, out.read_text(), err.read_text())
    assert code == 0, f"{block}\nexit {code}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_search_on_a_board(work):
    (block,) = blocks("Search on a board", "bash")
    run_shell(block, work, timeout=900)
    assert (work / "frontier" / "frontier.csv").exists()
    assert (work / "frontier" / "report" / "index.html").exists()


def test_ship_a_model_to_an_app(work):
    (shell,) = blocks("Ship a model to an app", "bash")
    run_shell(shell, work, timeout=600)
    assert (work / "bundle" / "model.onnx").exists() and (work / "bundle" / "genai_config.json").exists()
    (python,) = blocks("Ship a model to an app", "python")
    if importlib.util.find_spec("onnxruntime_genai") is None:
        pytest.skip("onnxruntime-genai is not installed: the app's lines are not run")
    proc = subprocess.run([sys.executable, "-c", python], cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    ids = [int(i) for i in re.findall(r"\d+", proc.stdout)]
    assert ids[:4] == [1, 2, 3, 4] and len(ids) == 24  # the prompt, then what the model generated to max_length


def test_make_your_trained_model_faster(work):
    """The section's command on a tiny LlamaForCausalLM folder of the same name, with a search and windows
    sized for it (the README's example is SmolLM2-135M)."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from tests.test_prune import prune_args, tiny_folder

    (block,) = blocks("Make your trained model faster on your device", "bash")
    tiny = work / "tiny"
    tiny.mkdir()
    tiny_folder(tiny)
    shutil.copytree(tiny / "model", work / "SmolLM2-135M-Instruct")
    shutil.copy(tiny / "text.txt", work / "notes.txt")
    small = " ".join(map(str, prune_args(tiny, "faster")[7:]))  # the options after --from, --text and -o
    run_shell(block.replace("-o faster", f"-o faster {small}"), work, timeout=600)
    frontier = (work / "faster" / "frontier.csv").read_text()
    assert frontier.startswith("name,") and ("speedup-" in frontier or "front-" in frontier)
    assert (work / "faster" / "models" / "parent" / "model.onnx").exists()


def test_gate_ci_on_budgets(work):
    if not (work / "bundle").exists():
        test_ship_a_model_to_an_app(work)
    (block,) = blocks("Gate CI on budgets", "bash")
    run_shell(block, work, timeout=1200)
    assert (work / "report.xml").exists() and '"results"' in (work / "baseline.json").read_text()


def test_a_fleet_of_boards(work):
    if shutil.which("dask", path=str(Path(sys.executable).parent)) is None and shutil.which("dask") is None:
        pytest.skip("Dask's distributed is not installed")
    if not (work / "bundle").exists():
        test_ship_a_model_to_an_app(work)
    (block,) = blocks("A fleet of boards", "bash")
    assert "8786" in block
    proc = run_shell(block.replace("8786", str(free_port())), work, timeout=900)
    assert "decode per token" in proc.stdout
