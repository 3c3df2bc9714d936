"""A generation bundle timed in onnxruntime-genai's own generator loop, as an app runs it.

Apps run bundles through genai's ``Generator``: ``append_tokens`` for the prompt, then
``generate_next_token`` per token. That loop owns the KV cache (with ``past_present_share_buffer`` a
step writes into one buffer allocated at the generator's ``max_length`` and copies nothing), so a plain
onnxruntime session fed a past is not what an app sees (a plain graph decoded 1.33-1.41x slower in genai
than its session figure said, against the builder's model: docs/benchmarks.md).

- prefill: a new ``Generator`` and ``append_tokens`` of ``sequence`` tokens, as each request of an app.
- decode: one ``Generator`` fills a past of ``context`` tokens once; each sample is one
  ``generate_next_token`` after ``rewind_to(context)`` (untimed): a step with exactly that past, the
  token chosen greedily over the logits as an app's loop does. Where genai cannot rewind (0.18, a cache
  of per-layer shapes in separate past and present buffers), a step's past is context to context + 15.

The bundle's files are loaded as they are: the device profile's runtime settings (threads, graph
optimisation, arena, spinning, provider) are applied through genai's in-memory config overlay.
Imported by the measuring worker only, and onnxruntime_genai only inside: the worker stays light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.runners.protocol import RunSettings

CONFIG_FILE = "genai_config.json"
GENAI_REFUSED = "onnxruntime-genai cannot run the bundle"  # how a failure to load or run in genai begins
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
PROVIDERS = {"CPUExecutionProvider": None, "CUDAExecutionProvider": "cuda"}
# Tokens past the prompt the decode generator has room for: the step after the rewind, and the one it samples.
DECODE_ROOM = 2
# Where genai cannot rewind (``GenaiBundle.decode``): steps after one fill of the past, at most this many.
DRIFT = 16


def overlay(settings: RunSettings) -> dict[str, Any]:
    """genai's config overlay for the profile's runtime settings (genai's own session option names; an
    unknown name is an onnxruntime session config entry, as the spinning switches are)."""
    spin = "1" if settings.allow_spinning else "0"
    options = {"intra_op_num_threads": settings.intra_op_threads, "inter_op_num_threads": settings.inter_op_threads,
               "graph_optimization_level": LEVELS[settings.graph_optimization],
               "enable_cpu_mem_arena": settings.enable_cpu_mem_arena,
               "enable_mem_pattern": settings.enable_mem_pattern,
               "session.intra_op.allow_spinning": spin, "session.inter_op.allow_spinning": spin}
    return {"model": {"decoder": {"session_options": options}}}


class GenaiBundle:
    """One bundle loaded into genai (``og.Model``), and the runs of each workload on it."""

    def __init__(self, directory: str | Path, settings: RunSettings):
        import onnxruntime_genai as og

        self.og, self.settings = og, settings
        directory = Path(directory)
        document = json.loads((directory / CONFIG_FILE).read_text())
        self.vocab_size = int(document["model"]["vocab_size"])
        self.context_length = int(document["model"]["context_length"])
        config = og.Config(str(directory))
        # One buffer for past and present, allocated at a generator's max_length: a rewind costs nothing.
        self.shared = bool(document.get("search", {}).get("past_present_share_buffer", False))
        config.overlay(json.dumps(overlay(settings)))
        provider = PROVIDERS.get(settings.execution_provider, "unsupported")
        if provider == "unsupported":
            raise RuntimeError(f"onnxruntime-genai does not run {settings.execution_provider} here")
        if provider is not None:
            config.clear_providers()
            config.append_provider(provider)
            for name, value in settings.provider_options.items():
                config.set_provider_option(provider, name, str(value))
        self.model = og.Model(config)
        self.rng = np.random.default_rng(0)

    def check_lengths(self, workload: str) -> None:
        """The workload's tokens fit the bundle's context_length (genai refuses a longer max_length)."""
        if workload == "decode" and self.settings.context + DECODE_ROOM > self.context_length:
            raise LtsedgeError(f"a decode step after {self.settings.context} tokens needs {DECODE_ROOM} more in "
                               f"genai's loop, past the bundle's context_length {self.context_length}; use a "
                               f"profile with context <= {self.context_length - DECODE_ROOM}")
        if workload == "prefill" and self.settings.sequence + 1 > self.context_length:
            raise LtsedgeError(f"a prompt of {self.settings.sequence} tokens is longer than the bundle's "
                               f"context_length {self.context_length}; use a profile with sequence <= "
                               f"{self.context_length - 1}")

    def _tokens(self, count: int) -> np.ndarray:
        return self.rng.integers(0, self.vocab_size, count, dtype=np.int64).astype(np.int32)

    def _generator(self, max_length: int):
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=max_length, do_sample=False, batch_size=self.settings.batch)
        return self.og.Generator(self.model, params)

    def prefill(self):
        """A run: a new generator takes a prompt of ``sequence`` tokens (for every row of the batch)."""
        prompt = self._tokens(self.settings.sequence * self.settings.batch)

        def run_once():
            generator = self._generator(self.settings.sequence + 1)
            generator.append_tokens(prompt)

        return run_once

    def decode(self):
        """(run, prepare): a step after a past of ``context`` tokens, and its untimed preparation: a rewind to
        that past. genai 0.18 cannot rewind a cache of per-layer shapes that is not one shared buffer: there
        the steps go on, and a new generator fills the past again once they are ``DRIFT`` tokens past it."""
        context = max(1, self.settings.context)
        # A shared buffer is allocated at max_length: no room beyond the step's, so its memory is the app's.
        max_length = context + DECODE_ROOM if self.shared else min(context + DRIFT + DECODE_ROOM, self.context_length)
        drift = max_length - context - DECODE_ROOM
        state = {"steps": 0, "rewinds": True}

        def fill():
            state["generator"] = None  # the old cache freed before the new one is filled
            generator = self._generator(max_length)
            generator.append_tokens(self._tokens(context * self.settings.batch))
            generator.generate_next_token()  # chooses the prompt's next token: the step after it runs the model
            state["generator"], state["steps"] = generator, 0

        def prepare():
            if state["rewinds"]:
                try:
                    state["generator"].rewind_to(context)
                    return
                except RuntimeError:  # genai's "Requested length of rewind is greater than the current length"
                    state["rewinds"] = False  # and the failed rewind left the generator unusable
                    state["steps"] = drift
            if state["steps"] >= drift:
                fill()

        def run():
            state["generator"].generate_next_token()
            state["steps"] += 1

        fill()
        run()  # one step, so that the first rewind has a step to take back
        self.decoding = state  # held: its cache is the app's memory while it generates
        return run, prepare

    def close(self) -> None:
        self.decoding = None
        self.model = None


def version() -> str | None:
    """The installed onnxruntime-genai's version (None where it is not installed); imports nothing."""
    from importlib import metadata

    for name in ("onnxruntime-genai", "onnxruntime-genai-cuda"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
