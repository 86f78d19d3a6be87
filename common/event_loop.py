"""Run a coroutine to completion on uvloop when it is installed, else on asyncio's loop.

``uvloop.run`` creates its own loop and leaves the global event loop policy alone, so a
command, benchmark or child process can use it without changing how anything else in
the process gets its loop. The role processes use ``common.process_main.run``, which
also applies their garbage-collector policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``coro``'s result, run on uvloop (when ``use_uvloop`` and installed) or asyncio."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)
