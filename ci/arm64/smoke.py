"""arm64 smoke test: ltsedge's CLI end to end on (emulated) aarch64, as a user on a Raspberry Pi runs it.

Run by ci/arm64/smoke.sh with the emulated interpreter and the checkout on PYTHONPATH:

    PYTHONPATH=$REPO $ARM64_ENV/python ci/arm64/smoke.py [--work DIR] [-k NAME]

Each step runs ``python -m ltsedge ...`` in a child process (sys.executable, which re-enters qemu) and
asserts what the x86 tests assert. The commands are in COMMANDS below: adjust them there when the CLI
changes. Ends with "arm64 smoke: N passed, M failed"; exit status 1 when anything failed.
Everything here is stdlib + onnxruntime/numpy, so it also runs natively (then the machine check fails
unless --any-machine is given), which is handy when editing it.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# The tiny architecture of the profile step, and the CLI commands under test ({...} are filled in).
TINY_ARCH = {"n_layer": 2, "d_model": 64, "n_head": [2, 2], "d_inner": [128, 128], "vocab_size": 500, "n_positions": 64}
# The same size in the study's second backbone (relative positions, recurrence memory).
TINY_XL_ARCH = {**TINY_ARCH, "backbone": "transfo_xl", "mem_len": 16}
# profile and check measure on {device}: the builtin "cpu" profile resized the way the search's smoke preset
# resizes it. Plain `--device cpu` cannot work here: it measures at sequence 192, beyond the tiny models'
# n_positions 64 (every measurement errors), and its drift check waits up to 120 s for a "cool-down"
# whenever emulated timings wander, which they do.
SMOKE_DEVICE_TOML = """\
name = "smoke-cpu"
description = "builtin cpu profile sized for the emulated arm64 smoke test"
[workload]
sequence = 16
context = 16
[repeats]
warmup = 1
min_runs = 3
max_runs = 5
max_seconds = 1.0
tolerance = 0.1
drift_check_every = 0
"""
COMMANDS = {
    "profile": ["profile", "{arch}", "--device", "{device}", "--json"],
    "search": ["search", "--preset", "smoke", "--out", "{out}", "--device", "cpu", "--quiet"],
    "check": ["check", "{models...}", "--device", "{device}", "--max-latency-ms", "100000", "--max-memory-mb", "100000",
              "--json"],
}
# Per command: generous limits for emulation (qemu-user is 50-200x slower than native).
TIMEOUT_S = {"profile": 300, "search": 600, "check": 300}


class SmokeFailure(AssertionError):
    pass


def check(condition, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


class Smoke:
    def __init__(self, work: Path, any_machine: bool):
        self.work = work
        self.any_machine = any_machine
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.env = dict(os.environ)
        # A store of its own: every run measures (the user's cache must neither help nor be touched).
        self.env["LTSEDGE_STORE"] = str(work / "store.sqlite")
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.device = work / "smoke-cpu.toml"
        self.device.write_text(SMOKE_DEVICE_TOML)

    # -- running -----------------------------------------------------------------------------------
    def step(self, name: str, fn, *needs: str) -> None:
        missing = [n for n in needs if n not in self.passed]
        t0 = time.monotonic()
        if missing:
            self.failed.append((name, f"not run: needs {', '.join(missing)}"))
            print(f"FAIL {name}: not run, needs {', '.join(missing)}", flush=True)
            return
        print(f"---- {name}", flush=True)
        try:
            detail = fn()
        except SmokeFailure as e:
            self.failed.append((name, str(e)))
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - a smoke test reports everything
            self.failed.append((name, f"{type(e).__name__}: {e}"))
            traceback.print_exc()
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): {type(e).__name__}: {e}", flush=True)
        else:
            self.passed.append(name)
            print(f"ok   {name} ({time.monotonic() - t0:.1f}s){': ' + detail if detail else ''}", flush=True)

    def ltsedge(self, command: str, **fill) -> subprocess.CompletedProcess:
        args = []
        for a in COMMANDS[command]:
            if a == "{models...}":
                args += fill["models"]
            else:
                args.append(a.format(device=self.device, **fill))
        cmd = [sys.executable, "-m", "ltsedge", *args]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=TIMEOUT_S[command])
        except subprocess.TimeoutExpired as e:
            _show("stdout", e.stdout)
            _show("stderr", e.stderr)
            raise SmokeFailure(f"`ltsedge {command}` still running after {TIMEOUT_S[command]}s") from None
        print(f"  exit {proc.returncode} after {time.monotonic() - t0:.1f}s", flush=True)
        if proc.returncode != 0:
            _show("stdout", proc.stdout)
            _show("stderr", proc.stderr)
        return proc

    # -- steps -------------------------------------------------------------------------------------
    def machine(self) -> str:
        m = platform.machine()
        check(m == "aarch64" or self.any_machine, f"platform.machine() is {m!r}, expected 'aarch64'")
        return f"{m}, python {platform.python_version()}, sys.executable {sys.executable}"

    def imports(self) -> str:
        import numpy
        import onnx
        import onnxruntime

        import ltsedge
        from ltsedge.ortcompat import local_target

        origin = Path(ltsedge.__file__).resolve().parent.parent
        check(origin == REPO, f"imported ltsedge from {origin}, expected the checkout {REPO}")
        t = local_target()
        return (f"ltsedge {ltsedge.__version__}, onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, "
                f"numpy {numpy.__version__}; models stamped opset {t.opset} IR {t.ir_version}")

    def profile(self, architecture: dict = TINY_ARCH) -> str:
        arch = self.work / f"{architecture.get('backbone', 'gpt2')}.json"
        arch.write_text(json.dumps(architecture))
        proc = self.ltsedge("profile", arch=arch)
        check(proc.returncode == 0, f"`ltsedge profile` exited {proc.returncode}")
        r = _json_output(proc.stdout, "profile")
        check(isinstance(r, dict), f"profile --json printed {type(r).__name__}, expected an object")
        _check_measurement(r, "profile --json")
        if "ok" in r:
            check(r["ok"] is True, f"profile --json says ok={r['ok']!r}: {r.get('error')}")
        fp = r.get("fingerprint") or {}
        check(fp.get("arch") == "aarch64" or self.any_machine, f"profile's fingerprint says arch {fp.get('arch')!r}")
        return (f"latency {r['latency_ms']:.2f} ms, peak memory {r['peak_memory_mb']:.1f} MB "
                f"on {fp.get('cpu_model')} ({fp.get('arch')})")

    def profile_xl(self) -> str:
        return "Transformer-XL: " + self.profile(TINY_XL_ARCH)

    def search(self) -> str:
        out = self.work / "out"
        proc = self.ltsedge("search", out=out)
        check(proc.returncode == 0, f"`ltsedge search` exited {proc.returncode}")
        frontier = out / "frontier.json"
        check(frontier.is_file(), f"{frontier} was not written")
        data = json.loads(frontier.read_text())
        entries = data.get("models") if isinstance(data, dict) else data
        check(isinstance(entries, list) and entries, f"{frontier} lists no models")
        import numpy as np
        import onnxruntime as ort

        for entry in entries:
            rel = entry.get("onnx") or entry.get("path")
            check(rel, f"frontier entry {entry.get('id')} names no model file")
            path = Path(rel) if Path(rel).is_absolute() else out / rel
            check(path.is_file(), f"frontier model {path} does not exist")
            _check_measurement(entry, f"frontier entry {entry.get('id')}")
            vocab = (entry.get("architecture") or {}).get("vocab_size", 2)
            ids = np.arange(8, dtype=np.int64).reshape(1, 8) % vocab
            try:
                session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                if [i.name for i in session.get_inputs()] == ["input_ids"]:  # the forward variant
                    (logits,) = session.run(None, {"input_ids": ids})
                    check(logits.shape[:2] == (1, 8) and np.isfinite(logits).all(), f"{path}: bad logits {logits.shape}")
                else:  # a generation bundle: prefill, then tokens with the cache fed back, as an app runs it
                    from ltsedge.generation import greedy

                    generated = greedy(session, ids, 4)
                    check(generated.tokens.shape == (1, 4) and all(np.isfinite(l).all() for l in generated.logits),
                          f"{path}: bad generation {generated.tokens.shape}")
            except SmokeFailure:
                raise
            except Exception as e:  # noqa: BLE001
                raise SmokeFailure(f"onnxruntime cannot run {path}: {e}") from None
        return f"{len(entries)} frontier models, each loads and runs (generates) in onnxruntime"

    def check_models(self) -> str:
        pattern = self.work / "out" / "models" / "**" / "*.onnx"  # model files or bundles (DIR/model.onnx)
        found = sorted(glob.glob(str(pattern), recursive=True))
        check(found, f"no {pattern} to check")
        # Two models prove that check measures several on aarch64. All of them would tie the step's time to the
        # frontier's size, which varies from run to run (6 models took 235 s under emulation, 8 ran past 300 s).
        models = found[:1] + found[-1:] if len(found) > 1 else found
        proc = self.ltsedge("check", models=models)
        check(proc.returncode == 0, f"`ltsedge check` exited {proc.returncode} (expected 0: budgets are huge)")
        r = _json_output(proc.stdout, "check")
        results = list(_measurements(r))
        check(len(results) >= len(models), f"check --json reports {len(results)} measurements for {len(models)} models")
        for m in results:
            _check_measurement(m, "check --json")
        return f"{len(models)} of {len(found)} frontier models within budget"


def _show(label: str, text) -> None:
    if text:
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        lines = text.rstrip().splitlines()
        print(f"  {label} (last {min(len(lines), 40)} lines):")
        for line in lines[-40:]:
            print(f"    {line[:1500]}{' ...' if len(line) > 1500 else ''}")


def _json_output(stdout: str, what: str):
    """The JSON a --json command printed (the whole stdout, else its last line that parses)."""
    try:
        return json.loads(stdout)
    except ValueError:
        pass
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    _show("stdout", stdout)
    raise SmokeFailure(f"`ltsedge {what} --json` printed no JSON")


def _measurements(obj):
    """Every dict in a JSON document that carries a latency (how check --json nests them may change)."""
    if isinstance(obj, dict):
        if "latency_ms" in obj:
            yield obj
        else:
            for v in obj.values():
                yield from _measurements(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _measurements(v)


def _check_measurement(r: dict, where: str) -> None:
    for key in ("latency_ms", "peak_memory_mb"):
        check(key in r, f"{where}: no {key!r} (keys: {sorted(r)})")
        v = r[key]
        check(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
              f"{where}: {key} = {v!r}, expected a positive number")


REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="Scratch directory (default: a new temporary one, left in place).")
    ap.add_argument("-k", dest="only", action="append", default=[], help="Run only these steps (repeatable).")
    ap.add_argument("--any-machine", action="store_true", help="Do not require aarch64 (for editing this script).")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ltsedge-arm64-smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"arm64 smoke: work directory {work}", flush=True)

    s = Smoke(work.resolve(), args.any_machine)
    steps = [("machine", s.machine, ()), ("import", s.imports, ()), ("profile", s.profile, ("import",)),
             ("profile_xl", s.profile_xl, ("import",)), ("search", s.search, ("import",)), ("check", s.check_models, ("search",))]
    t0 = time.monotonic()
    for name, fn, needs in steps:
        if args.only and name not in args.only:
            continue
        s.step(name, fn, *(n for n in needs if not args.only or n in args.only))
    print(f"arm64 smoke: {time.monotonic() - t0:.0f}s")
    for name, why in s.failed:
        print(f"  failed: {name}: {why}")
    print(f"arm64 smoke: {len(s.passed)} passed, {len(s.failed)} failed", flush=True)
    return 1 if s.failed else 0


if __name__ == "__main__":
    sys.exit(main())
