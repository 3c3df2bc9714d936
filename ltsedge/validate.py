"""Small checks every reader of user input shares: one wording for the same mistake everywhere.

Pure Python, no heavy imports: the measuring worker uses it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ltsedge.errors import LtsedgeError


def is_int(value: Any) -> bool:
    """An integer that is not a bool (``True`` is an int to Python, not to a user writing TOML)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reject_unknown(what: str, given: Iterable[str], known: Iterable[str], *, sort_known: bool = True,
                   where: str = "", place: str = "", allowed: str | None = None) -> None:
    """Raise for the first name in ``given`` not in ``known``:
    "<where>: unknown <what> 'x' <place> (allowed: a, b)" (``allowed`` replaces the listed names)."""
    known = list(known)
    unknown = [name for name in given if name not in known]
    if unknown:
        first = unknown[0] if not sort_known else sorted(unknown)[0]
        allowed = allowed or ", ".join(sorted(known) if sort_known else known)
        prefix, place = (f"{where}: " if where else ""), (f" {place}" if place else "")
        raise LtsedgeError(f"{prefix}unknown {what} {first!r}{place} (allowed: {allowed})")


def parse_dims(text: Any) -> list[int]:
    """``"1x192"`` or ``[1, 192]`` -> ``[1, 192]``; ValueError unless every dimension is an integer >= 1."""
    dims = text
    if isinstance(text, str):
        dims = [int(d) for d in text.lower().split("x")]  # int() raises ValueError for us
    if not isinstance(dims, list) or not dims or not all(is_int(d) and d >= 1 for d in dims):
        raise ValueError(f"not positive dimensions: {text!r}")
    return dims


def parse_shape_options(items: Iterable[str], flag: str = "--shape") -> dict[str, list[int]]:
    """``["input_ids=1x192", ...]`` (a repeatable command-line option) -> ``{"input_ids": [1, 192]}``."""
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = parse_dims(dims)
        except ValueError:
            raise LtsedgeError(f"{flag} {item!r} is not NAME=DIMxDIM... with positive integers "
                               f"(e.g. input_ids=1x192)") from None
    return shapes


def toml_repr(value: Any) -> str:
    """A value as the user wrote it in TOML, for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{...}"
    return repr(value)


SCHEDULER_PROTOCOLS = ("tcp", "tls", "ws", "wss")  # what a Dask client reaches a remote scheduler over


def scheduler_address(text: str, flag: str = "--scheduler") -> str:
    """``tcp://HOST:PORT`` (tls, ws, wss too; a bare ``HOST:PORT`` is tcp), checked before anything connects."""
    protocol, sep, rest = text.partition("://")
    if not sep:
        protocol, rest = "tcp", text
    host, _, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 address: [::1]:8786
    if (protocol not in SCHEDULER_PROTOCOLS or not host or any(c.isspace() or c in "/?#@" for c in host)
            or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535):
        raise LtsedgeError(f"{flag} {text!r} is not a Dask scheduler address: expected PROTOCOL://HOST:PORT with "
                           f"PROTOCOL one of {', '.join(SCHEDULER_PROTOCOLS)} (e.g. tcp://192.168.1.10:8786)")
    return text
