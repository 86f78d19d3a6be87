"""Helpers of the replication e2e tests: the pid of a write node of a ``vpq up``, and
waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.integration.platform import Platform


def write_node_pid(p: Platform, node_id: str) -> int | None:
    """The pid of write node ``node_id``'s process, None while it has none."""
    for proc in p.children("vpq.write_nodes.main"):
        cmd = proc.cmdline()
        if cmd[cmd.index("--node-id") + 1] == node_id:
            return proc.pid
    return None


def until(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """``check()``'s first truthy answer, polled every 0.2 s; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s}s: {what}")
        time.sleep(0.2)
