"""CPU time of the platform's processes by role, to show which one limited a run.

``vpq up`` runs the gateway, each write node, each read node and (when embedded) Redis
as child processes of one supervisor. :func:`role_of` names a process's role from its
command line (pure); :func:`cpu_by_role` sums user+system CPU seconds per role over the
supervisor's descendants (and the supervisor itself, as ``supervisor``; with
``--single-process`` every role runs there). :func:`platform_root` finds the
supervisor of a running platform from its gateway port. :func:`cpu_shares` turns two
samples into cores used per role (1.0 = one core busy the whole time: a
single-threaded Python process at 1.0 is saturated). :func:`own_cpu_seconds` is the
benchmark process's own CPU time (is the client the limit?). :func:`rss_by_role` is the
resident memory per role, like :func:`cpu_by_role`.

Processes that are gone or not visible are skipped, so the figures are best effort.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence

import psutil

from vpq.load.procmem import pid_listening_on, topmost_ancestor_matching

_ROLES = (
    ("vpq.gateway.main", "gateway"),
    ("vpq.write_nodes.main", "write_nodes"),
    ("vpq.read_nodes.main", "read_nodes"),
    ("redis-server", "redis"),
)
_SUPERVISOR_NEEDLES = ("vpq up", "vpq.cli.main up")


def role_of(cmdline: Sequence[str]) -> str | None:
    """The platform role a command line runs, or ``None`` when it is none of them."""
    text = " ".join(cmdline)
    for needle, role in _ROLES:
        if needle in text:
            return role
    if any(needle in text for needle in _SUPERVISOR_NEEDLES):
        return "supervisor"
    return None


def cpu_by_role(root_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far per role of ``root_pid`` and its descendants."""
    out: dict[str, float] = {}
    for role, proc in _role_processes(root_pid):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        out[role] = out.get(role, 0.0) + times.user + times.system
    return out


def rss_by_role(root_pid: int) -> dict[str, int]:
    """Resident set size (bytes) per role of ``root_pid`` and its descendants (summed
    over the processes of a role)."""
    out: dict[str, int] = {}
    for role, proc in _role_processes(root_pid):
        try:
            out[role] = out.get(role, 0) + proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _role_processes(root_pid: int) -> list[tuple[str, psutil.Process]]:
    """``(role, process)`` of ``root_pid`` and its descendants that have a role."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    out: list[tuple[str, psutil.Process]] = []
    for proc in procs:
        try:
            role = role_of(proc.cmdline()) or ("supervisor" if proc.pid == root_pid else None)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if role is not None:
            out.append((role, proc))
    return out


def cpu_shares(before: Mapping[str, float], after: Mapping[str, float], seconds: float) -> dict[str, float]:
    """Cores used per role between two :func:`cpu_by_role` samples ``seconds`` apart
    (roles missing from either sample are left out; empty when ``seconds <= 0``)."""
    if seconds <= 0:
        return {}
    return {
        role: round(max(0.0, after[role] - before[role]) / seconds, 2)
        for role in sorted(after)
        if role in before
    }


def platform_root(port: int) -> int | None:
    """The supervisor (``vpq up``) of the platform whose gateway listens on ``port``;
    the listening process itself when it has no such ancestor; ``None`` when nothing
    visible listens there."""
    pid = pid_listening_on(port)
    if pid is None:
        return None
    for needle in _SUPERVISOR_NEEDLES:
        root = topmost_ancestor_matching(pid, needle)
        if root != pid:
            return root
    return pid


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
