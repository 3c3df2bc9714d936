"""The README's install table, pyproject.toml's extras and the line each command prints without its extra agree:
each row lists the packages pyproject gives its install, every command a row names runs with that install alone
(the light row) or says, in one line and exit 2, the extra its row names, and every module ltsedge requires is
named with the extra that installs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.extras import require
from ltsedge.files import tomllib
from tests.helpers import FAST_DEVICE, ltsedge_cli, ltsedge_process, no_traceback, one_line_exit_2

ROOT = Path(__file__).resolve().parents[1]
DEVELOPERS = "test"  # the extra the tests need: `make test` installs it, the README's table is for users

# How each command the install table names is run here. The extras' commands get input that fails after their
# dependencies are checked (an unknown device, a shape the model lacks), so that unblocking them ends quickly.
RUNS = {
    "search": ["search", "--preset", "smoke", "--device", "no-such-device", "--out", "{tmp}/out"],
    "export": ["export", "{arch}", "-o", "{tmp}/m.onnx", "--precision", "int4"],
    "prune": ["prune", "--from", "{tmp}", "--text", "{text}", "--device", "no-such-device", "-o", "{tmp}/pruned"],
    "costmodel": ["costmodel", "--device", "no-such-device"],
    "predict": ["predict", "{arch}", "--device", "no-such-device"],
    "proxy-check": ["proxy-check", "--text", "{text}", "--device", "no-such-device", "--out", "{tmp}/check"],
    "profile ARCH.json": ["profile", "{arch}", "--device", "{device}", "--precision", "int4", "--shape", "none=1x4"],
    "agent": ["agent", "--scheduler", "tcp://127.0.0.1:9"],
    "--scheduler": ["profile", "{arch}", "--device", "{device}", "--scheduler", "tcp://127.0.0.1:9"],
    "params": ["params", "{arch}"],
    "space": ["space", "--preset", "quick"],
    "devices": ["devices"],
}
# The light commands that need a model or a search first: tests/test_light_install.py and ci/light-install.sh
# run them without torch and pymoo.
LIGHT_ELSEWHERE = {"check", "profile", "report", "compare"}


def name(requirement: str) -> str:
    """A requirement's distribution name, normalised as an import name is spelt (onnx-ir: onnx_ir)."""
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())[0].lower().replace("-", "_").replace(".", "_")


def pyproject() -> tuple[set[str], dict[str, set[str]]]:
    """What every install pulls (requirements with an environment marker left out) and each extra's packages."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {name(r) for r in project["dependencies"] if ";" not in r}
    return base, {extra: {name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()}


def install_table() -> dict[str | None, tuple[list[str], set[str]]]:
    """The README's install rows: extra (None for the light install) -> (the commands it gives, the names it pulls)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Install\n"):]
    section = section[:section.index("\n## ", 1)]
    rows = {}
    for install, gives, pulls in re.findall(r"^\| `pip install ([^`]*)` \| (.*?) \| (.*?) \|$", section, re.M):
        extra = re.search(r"\[(\w+)\]", install)
        rows[extra[1] if extra else None] = (re.findall(r"`([^`]+)`", gives),
                                             {name(t) for t in re.findall(r"[A-Za-z][\w.-]*", pulls)})
    return rows


def test_each_install_row_lists_what_pyproject_installs():
    base, extras = pyproject()
    rows = install_table()
    assert set(rows) == {None, *extras} - {DEVELOPERS}, "the README's install rows and pyproject's extras differ"
    known = base.union(*extras.values())
    assert rows[None][1] & known == base
    for extra, (_, pulls) in rows.items():
        if extra is not None:
            assert pulls & known == extras[extra], f"the README's [{extra}] row lists other packages than pyproject"


def test_every_module_ltsedge_requires_is_named_with_the_extra_that_installs_it(monkeypatch):
    _, extras = pyproject()
    rows = install_table()
    source = "\n".join(p.read_text() for p in (ROOT / "ltsedge").rglob("*.py"))
    required = set(re.findall(r"\brequire\(\s*\"(\w+)\"", source))
    assert {"torch", "pymoo", "tokenizers", "distributed"} <= required
    for module in required:
        monkeypatch.setitem(sys.modules, module, None)
        with pytest.raises(LtsedgeError) as missing:
            require(module, "this")
        extra = re.search(r'"ltsedge\[(\w+)\]"', str(missing.value))
        assert extra, f"the line for {module} names no extra: {missing.value}"
        assert module in extras.get(extra[1], ()) and extra[1] in rows, f"{module}: {missing.value}"


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    arch = tmp_path / "arch.json"
    arch.write_text('{"n_layer": 1, "d_model": 32, "n_head": [2], "d_inner": [64], "vocab_size": 100, '
                    '"n_positions": 32}')
    text = tmp_path / "text.txt"
    text.write_text("some text to train on " * 50)
    device = tmp_path / "fast.toml"
    device.write_text(FAST_DEVICE)
    return {"tmp": tmp_path, "arch": arch, "text": text, "device": device}


def run(command: str, inputs: dict[str, Path], blocked: set[str], monkeypatch) -> subprocess.CompletedProcess:
    """``command`` as RUNS has it, in this process, its ``blocked`` modules made unimportable."""
    assert command in RUNS, f"the README's install table names {command!r}: add how to run it to RUNS"
    with monkeypatch.context() as patch:
        for module in blocked:
            patch.setitem(sys.modules, module, None)
        return ltsedge_cli(*[a.format(**inputs) for a in RUNS[command]],
                           env={"LTSEDGE_STORE": str(inputs["tmp"] / "store.sqlite")})


@pytest.mark.parametrize("extra, command", [(extra, command) for extra, (commands, _) in install_table().items()
                                            if extra is not None for command in commands])
def test_a_command_without_its_extra_names_the_extra_its_row_names(extra, command, inputs, monkeypatch):
    """All of the extra's modules blocked, then unblocked one by one as the command names each: every one it
    needs is named with the README row's extra, one line, exit 2."""
    blocked = set(pyproject()[1][extra])
    named = []
    while blocked:
        proc = run(command, inputs, blocked, monkeypatch)
        missing = re.search(r" needs (\w+): ", proc.stderr)
        if proc.returncode != 2 or not missing or missing[1] not in blocked:
            break
        one_line_exit_2(proc, f'"ltsedge[{extra}]"')
        blocked.remove(missing[1])
        named.append(missing[1])
    assert named, f"{command} ran without the [{extra}] extra, which the README says it needs"


LIGHT = [c for c in install_table()[None][0] if c not in LIGHT_ELSEWHERE]


@pytest.mark.parametrize("command", LIGHT)
def test_the_light_commands_run_without_any_extra(command, inputs, tmp_path):
    """In a process whose imports of every extra's modules fail, as after `pip install ltsedge`."""
    assert command in RUNS, f"the README's light row names {command!r}: add how to run it to RUNS"
    blocked = set().union(*pyproject()[1].values()) - pyproject()[0]
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(
        "import sys\n\nclass Blocked:\n    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(blocked)!r}:\n"
        "            raise ImportError(f'No module named {name!r}')\n\nsys.meta_path.insert(0, Blocked())\n")
    proc = no_traceback(ltsedge_process(*[a.format(**inputs) for a in RUNS[command]],
                                        env={"PYTHONPATH": os.pathsep.join([str(tmp_path / "block"),
                                                                             os.environ.get("PYTHONPATH", "")])}))
    assert proc.returncode == 0, proc.stderr
