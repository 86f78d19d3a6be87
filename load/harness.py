"""The peer benchmark harness: every chosen system through every chosen scenario, one
system at a time, in one run; then ratios, a JSON results file and a PNG chart.

Contract of :func:`run_harness`:

* Systems run one after the other (never at the same time) in the order vpq, redis,
  nats, rabbitmq; ``nats-subjects`` (NATS with one stream and a subject per queue) is
  added for scenario 3 when ``nats`` is chosen. A system whose server cannot be
  reached (or, for vpq, started) is skipped with its reason in the results.
* A scenario that fails or exceeds its hard time limit is recorded as
  ``{"status": "error", "error": ...}``; the run goes on. Every system is torn down
  (its queues/streams deleted) and stopped, whatever happened.
* Results: ``<data_dir>/peers-<stamp>.json``, ``.png`` (chart) and ``.md`` (the tables
  of docs/benchmarks.md); the dict written is also returned. Servers the harness starts (its own redis-server,
  ``vpq up``) keep their data in ``<data_dir>/work/<system>-<tag>``, removed after the
  system's run (kept when it could not start, for its logs). ``echo`` receives progress and summary lines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from vpq.load.chart import write_chart
from vpq.load.cpu_probe import PROBE_S, probe_cpu
from vpq.load.markdown import results_markdown
from vpq.load.peers.registry import NATS_URL, RABBITMQ_URL, SYSTEM_NAMES, Endpoints, make_system, work_dir
from vpq.load.profiles import Profile, profile_for
from vpq.load.report import check_totals, headline, ratios, scenario_lines
from vpq.load.scenarios import s1_produce, s2_latency, s3_queues, s4_consumers, s5_catchup
from vpq.load.scenarios.common import Context
from vpq.load.system import System, SystemUnavailable

log = logging.getLogger(__name__)

SCENARIOS: dict[int, ModuleType] = {1: s1_produce, 2: s2_latency, 3: s3_queues, 4: s4_consumers, 5: s5_catchup}
HARD_LIMIT_FACTOR = 1.5
START_TIMEOUT_S = 90.0
TEARDOWN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class HarnessConfig:
    systems: Sequence[str] = SYSTEM_NAMES
    scenarios: Sequence[int] = tuple(SCENARIOS)
    quick: bool = False
    data_dir: Path = Path(".vpq/bench")
    vpq_url: str = "http://127.0.0.1:8080"
    start_vpq: bool = True
    vpq_gateway_workers: int = 1
    nats_url: str = NATS_URL
    rabbitmq_url: str = RABBITMQ_URL
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    profile: Profile | None = None  # overrides the quick/full sizes (tests use tiny ones)


def parse_scenarios(text: str) -> list[int]:
    """``"1,3"`` -> ``[1, 3]``; ``ValueError`` for anything but scenario numbers."""
    try:
        numbers = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise ValueError(f"scenarios are numbers from {min(SCENARIOS)} to {max(SCENARIOS)}: {text!r}") from None
    bad = [n for n in numbers if n not in SCENARIOS]
    if bad or not numbers:
        raise ValueError(f"scenarios are numbers from {min(SCENARIOS)} to {max(SCENARIOS)}: {text!r}")
    return sorted(set(numbers))


def machine_info(data_dir: Path, probe_s: float = 0.0) -> dict[str, Any]:
    """CPU count and model, memory, the data directory's disk, OS and Python; with
    ``probe_s`` > 0, ``cpu_probe``: the CPU's speed and stalls over that many seconds
    (:func:`load.cpu_probe.probe_cpu`)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    probe = data_dir if data_dir.exists() else Path(".")
    disk = shutil.disk_usage(probe)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "disk_total_gib": round(disk.total / 2**30, 1),
        "disk_free_gib": round(disk.free / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        **({"cpu_probe": probe_cpu(probe_s)} if probe_s > 0 else {}),
    }


def plan(systems: Sequence[str], scenarios: Sequence[int]) -> list[tuple[str, list[int]]]:
    """(system, its scenarios) in run order; see the module docstring."""
    order = [n for n in SYSTEM_NAMES if n in systems] + [n for n in systems if n not in SYSTEM_NAMES]
    out: list[tuple[str, list[int]]] = []
    for name in order:
        out.append((name, list(scenarios) if name != "nats-subjects" else [n for n in scenarios if n == 3]))
        if name == "nats" and 3 in scenarios and "nats-subjects" not in systems:
            out.append(("nats-subjects", [3]))
    return [(n, s) for n, s in out if s]


async def _run_system(
    system: System, scenarios: list[int], ctx: Context, results: dict[str, Any], echo: Callable[[str], None]
) -> None:
    p = ctx.profile
    for number in scenarios:
        module = SCENARIOS[number]
        echo(f"[{system.name}] scenario {number}: {module.TITLE}")
        t0 = time.monotonic()
        try:
            outcome = await asyncio.wait_for(module.run(ctx), p.scenario_timeout_s * HARD_LIMIT_FACTOR)
        except Exception as exc:  # recorded; the run goes on with the next scenario
            log.warning("%s scenario %d failed", system.name, number, exc_info=True)
            kind = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            outcome = {"status": "error", "error": f"{kind}: {exc}"[:500]}
            echo(f"  error: {outcome['error']}")
        outcome["elapsed_s"] = round(time.monotonic() - t0, 2)
        results["scenarios"][str(number)]["systems"][system.name] = outcome


async def run_harness(cfg: HarnessConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring) and answer the results dict."""
    profile = cfg.profile or profile_for(cfg.quick)
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc)
    t_start = time.monotonic()
    endpoints = Endpoints(
        data_dir=cfg.data_dir,
        vpq_url=cfg.vpq_url,
        start_vpq=cfg.start_vpq,
        vpq_gateway_workers=cfg.vpq_gateway_workers,
        nats_url=cfg.nats_url,
        rabbitmq_url=cfg.rabbitmq_url,
        tag=cfg.tag,
    )
    results: dict[str, Any] = {
        "version": 1,
        "mode": profile.name,
        "started_at": started.isoformat(timespec="seconds"),
        "machine": machine_info(cfg.data_dir, PROBE_S),
        "profile": asdict(profile),
        "systems": {},
        "scenarios": {str(n): {"title": SCENARIOS[n].TITLE, "systems": {}} for n in cfg.scenarios},
    }
    for name, scenarios in plan(cfg.systems, cfg.scenarios):
        try:
            system = make_system(name, endpoints)
        except SystemUnavailable as exc:
            results["systems"][name] = {"available": False, "reason": str(exc)}
            echo(f"[{name}] skipped: {exc}")
            continue
        try:
            await asyncio.wait_for(system.start(), START_TIMEOUT_S)
        except (SystemUnavailable, TimeoutError) as exc:
            reason = str(exc) or f"not started within {START_TIMEOUT_S:g}s"
            results["systems"][name] = {"available": False, "reason": reason}
            echo(f"[{name}] skipped: {reason}")
            await system.stop()  # its work directory stays, with the logs that explain why
            continue
        results["systems"][name] = {"available": True, "durability": system.durability, **system.describe()}
        echo(f"[{name}] {system.durability}")
        try:
            await _run_system(system, scenarios, Context(system, profile, echo), results, echo)
        finally:
            try:
                await asyncio.wait_for(system.teardown(), TEARDOWN_TIMEOUT_S)
            except Exception as exc:
                echo(f"[{name}] teardown failed: {exc!r}")
            await system.stop()
            shutil.rmtree(work_dir(name, endpoints), ignore_errors=True)

    for number in cfg.scenarios:
        entry = results["scenarios"][str(number)]
        heads = {n: headline(number, r) for n, r in entry["systems"].items()}
        entry["headline"] = heads
        entry["ratios_vpq_over_peer"] = ratios(heads)
    results["checks"] = check_totals(results["scenarios"])
    results["machine"]["cpu_probe_after"] = probe_cpu(PROBE_S)
    results["elapsed_s"] = round(time.monotonic() - t_start, 1)

    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    json_path = cfg.data_dir / f"peers-{stamp}.json"
    png_path = cfg.data_dir / f"peers-{stamp}.png"
    md_path = cfg.data_dir / f"peers-{stamp}.md"
    results["files"] = {"json": str(json_path), "chart": str(png_path), "markdown": str(md_path)}
    json_path.write_text(json.dumps(results, indent=2, default=str))
    write_chart(results, png_path)
    md_path.write_text(results_markdown(results))

    echo("")
    for number in cfg.scenarios:
        for line in scenario_lines(number, SCENARIOS[number].TITLE, results["scenarios"][str(number)]["systems"]):
            echo(line)
    return results


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The one-line JSON summary the CLI prints last."""
    return {
        "mode": results.get("mode"),
        "elapsed_s": results.get("elapsed_s"),
        "systems": {n: ("measured" if s.get("available") else "skipped") for n, s in results.get("systems", {}).items()},
        "ratios_vpq_over_peer": {n: e.get("ratios_vpq_over_peer", {}) for n, e in results.get("scenarios", {}).items()},
        "checks": results.get("checks"),
        "results": results.get("files", {}).get("json"),
        "chart": results.get("files", {}).get("chart"),
    }
