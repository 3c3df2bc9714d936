"""The ``ltsedge`` command line: a thin layer over the Python API.

Every command turns bad input into one line on stderr and exit code 2 (``LtsedgeError``); measuring
commands never lose what they already measured. ``main`` is the console script (``ltsedge``, and
``python -m ltsedge``). Each command is a function in the module of its group, a few lines over the
Python API: ``candidate_commands`` (space, params, export), ``measure_commands`` (devices, profile,
calibrate), ``search_commands`` (search, report, compare, agent), ``check_command``,
``costmodel_commands`` (predict, costmodel), ``proxy_check_command`` and ``prune_command``; the help their options share is in
``options``.
"""

from __future__ import annotations

import sys

import typer

from ltsedge.cli.candidate_commands import export, params, space
from ltsedge.cli.check_command import check
from ltsedge.cli.costmodel_commands import costmodel, predict
from ltsedge.cli.measure_commands import calibrate, devices, profile
from ltsedge.cli.proxy_check_command import proxy_check
from ltsedge.cli.prune_command import prune
from ltsedge.cli.search_commands import agent, compare, report, search
from ltsedge.errors import LtsedgeError
from ltsedge.interrupts import Terminated, exit_code, terminate_as_interrupt

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Find small Transformer language models that fit a device: decoder-parameter proxy, "
    "latency and memory measured with onnxruntime on the device, Pareto frontier of deployable ONNX models.",
)

COMMANDS = (space, params, export, devices, profile, calibrate, search, prune, report, compare, agent, check, predict,
            costmodel, proxy_check)  # in the order ``ltsedge --help`` lists them
for _command in COMMANDS:
    app.command()(_command)
del _command


# click's exception base class, whether typer uses click or (typer >= 0.2x) a vendored copy of it.
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    with terminate_as_interrupt():  # `timeout`, `docker stop`, systemd: stop as Ctrl-C does, results kept
        code = _run()
    sys.exit(code)


def _run() -> int:
    """The command's exit code: every error it can meet, as one line on stderr."""
    try:
        code = app(standalone_mode=False)
    except ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `ltsedge`: the help was printed, as asked
            return 0
        typer.echo(f"error: {e.format_message()}", err=True)  # a bad option value: one line, like ours
        return 2
    except LtsedgeError as e:
        typer.echo(f"error: {e}", err=True)
        return e.exit_code
    except (KeyboardInterrupt, typer.Abort) as e:
        typer.echo("terminated" if isinstance(e, Terminated) else "interrupted", err=True)
        return exit_code()
    return code if isinstance(code, int) else 0
