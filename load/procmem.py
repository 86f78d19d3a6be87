"""Server memory from the operating system: which process listens on a port, and the
resident set size (RSS) of a process and its descendants.

Uses psutil (installed with locust). Needs the right to see other users' processes
for servers run by another account (root here); when that is missing the functions
answer ``None`` instead of raising.
"""

from __future__ import annotations

import psutil


def pid_listening_on(port: int, host: str = "127.0.0.1") -> int | None:
    """The pid of the process with a TCP socket listening on ``port`` (any or ``host``)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return None
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.pid is None:
            continue
        if conn.laddr.port == port and conn.laddr.ip in (host, "0.0.0.0", "::", "::1"):
            return conn.pid
    return None


def rss_bytes(pid: int, include_children: bool = False) -> int | None:
    """RSS of ``pid`` (plus every descendant when ``include_children``), ``None`` when the
    process is gone or not visible."""
    try:
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        if include_children:
            for child in proc.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        return total
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def topmost_ancestor_matching(pid: int, needle: str) -> int:
    """The highest ancestor of ``pid`` (itself included) whose command line contains
    ``needle``; ``pid`` itself when none does. Finds the supervisor of a platform whose
    gateway process is the one listening."""
    best = pid
    try:
        proc: psutil.Process | None = psutil.Process(pid)
        while proc is not None:
            try:
                if needle in " ".join(proc.cmdline()):
                    best = proc.pid
            except (psutil.AccessDenied, psutil.ZombieProcess):
                pass
            proc = proc.parent()
    except psutil.NoSuchProcess:
        pass
    return best
