"""Commands that need an optional extra of the vpq distribution.

``pip install vpq`` installs the client only (the SDK and the client commands); ``vpq up``
needs ``vpq[server]``, ``vpq rebalance`` ``vpq[spark]``, ``vpq bench`` ``vpq[bench]``. Those
commands import their modules inside the command (never when ``vpq.cli.main`` loads) and
first call ``require_extra``: when a module of the extra is missing it prints one line,
``error: vpq up needs the server extra: pip install 'vpq[server]' (missing: redis, ...)``,
and exits with status 1. ``missing_modules_exit`` turns a ``ModuleNotFoundError`` of a
third-party module raised by such a lazy import into the same message.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

# A few import names each extra provides (pyproject.toml [project.optional-dependencies];
# tests/test_packaging.py checks they belong to it): enough to tell whether it is installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "server": ("redis", "pydantic_settings", "mmh3", "crc32c", "sortedcontainers", "prometheus_client", "msgspec",
               "pyarrow"),
    "spark": ("pyspark", "matplotlib"),
    "bench": ("locust", "psutil", "matplotlib"),
}
# an extra that includes others: its own modules and theirs are checked
EXTRA_INCLUDES: dict[str, tuple[str, ...]] = {"spark": ("server",), "bench": ("server",)}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` (and of the extras it includes) that cannot be imported."""
    names = [*EXTRA_MODULES[extra]]
    for included in EXTRA_INCLUDES.get(extra, ()):
        names += EXTRA_MODULES[included]
    return [n for n in dict.fromkeys(names) if importlib.util.find_spec(n) is None]


def fail_missing(command: str, extra: str, missing: list[str]) -> NoReturn:
    """Print the one-line error naming the extra to install and exit with status 1."""
    names = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    message = f"{command} needs the {extra} extra: pip install 'vpq[{extra}]' (missing: {names})"
    Console(stderr=True, highlight=False, soft_wrap=True).print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(1)


def require_extra(command: str, *extras: str) -> None:
    """Exit with the error above unless every module of ``extras`` can be imported."""
    for extra in extras:
        missing = missing_modules(extra)
        if missing:
            fail_missing(command, extra, missing)


@contextmanager
def missing_modules_exit(command: str, extra: str) -> Iterator[None]:
    """Around a lazy import: a missing third-party module exits with the error above
    (a missing ``vpq`` module is a bug, and is raised as is)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if not top or top == "vpq":
            raise
        fail_missing(command, extra, [top])
