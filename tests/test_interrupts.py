"""Ctrl-C and SIGTERM stop a command in order: while torch builds a model they land after it."""

from __future__ import annotations

import os
import signal

import pytest

from ltsedge.backbones import get_backbone
from ltsedge.interrupts import Terminated, exit_code, interrupts_deferred, terminate_as_interrupt
from tests.helpers import tiny_arch

torch = pytest.importorskip("torch")


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler, as a terminal's `ltsedge search` has it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_a_model_is_built_on_the_meta_device_lands_once_it_is_built(monkeypatch, python_sigint_handler):
    # A CI run interrupted a search inside torch's mode stack: torch raised "trying to pop from empty mode
    # stack" in place of the KeyboardInterrupt, and the search ended in a traceback without its frontier.
    arch = tiny_arch(n_layer=3, n_head=[2, 2, 2], d_inner=[128, 128, 128])
    original = torch.nn.Linear.reset_parameters
    built = []

    def reset_parameters(layer):
        built.append(layer)
        original(layer)

    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", reset_parameters)
    get_backbone("gpt2").empty_model(arch)
    layers = len(built)
    assert layers >= 6  # two per block at least: the SIGINT below lands in the middle

    built.clear()

    def interrupted_reset(layer):
        if not built:
            os.kill(os.getpid(), signal.SIGINT)  # Python runs its handler before the next line
        built.append(layer)
        original(layer)

    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", interrupted_reset)
    with pytest.raises(KeyboardInterrupt):
        get_backbone("gpt2").empty_model(arch)
    assert len(built) == layers  # the model was built to the end first
    assert torch.empty(1).device.type == "cpu"  # no meta mode left behind
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is Python's again


def test_a_section_without_ctrl_c_runs_as_if_nothing_were_deferred(python_sigint_handler):
    with interrupts_deferred():
        value = 6 * 7
    assert value == 42
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
    # A measuring worker ignores SIGINT (the search process handles Ctrl-C); deferring must not arm it.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_is_an_interrupt_inside_the_cli_and_at_its_default_after():
    # `timeout`, `docker stop` and systemd stop a process with SIGTERM: the command must stop as Ctrl-C
    # stops it (frontier written, worker stopped, scratch removed), then leave the handler as it was.
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(Terminated), terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert exit_code() == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with terminate_as_interrupt():
        assert exit_code() == 130  # a new command: no SIGTERM seen yet


def test_sigterm_waits_for_a_deferred_section_too(python_sigint_handler):
    with pytest.raises(Terminated), terminate_as_interrupt():
        finished = False
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            finished = True
    assert finished  # the section ran to its end before the SIGTERM landed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigterm_handler_someone_else_set_is_kept():
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
