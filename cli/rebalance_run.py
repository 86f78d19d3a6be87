"""What ``vpq rebalance`` runs (``cli/rebalance.py`` declares the command and imports this
module when it runs: the server and spark extras): the Spark remap job against the running
platform, its report and (unless ``--dry-run``) the plan applied through the safe cut-over
publisher.

Finding the platform, as ``vpq up`` left it:

- settings: ``--config FILE`` when given (plus ``VPQ_`` variables), else the running
  platform's ``<data-dir>/run/settings.json``, else the defaults/``VPQ_`` variables;
  ``--set KEY=VALUE`` applies over whichever was found (a bad key or value: a message
  naming it and exit status 2); the cut-over publisher follows ``rebalance.publisher``;
- Redis: ``--redis-url`` (or ``VPQ_REDIS_URL``), else ``<data-dir>/run/redis.url``,
  else the settings' ``redis.url``. None of them, or a Redis that does not answer:
  a one-line error and exit status 1;
- the cluster secret: the file the settings' ``cluster.secret_file`` names (``vpq up``
  records it), sent on every fence call to a write node; a file that cannot be used:
  a one-line error and exit status 1.

One run: read the map, the cluster's partition count and the live write nodes from
Redis; run ``spark_rebalance.runner.rebalance_once`` on a Spark session (``--master``,
default ``rebalance.master``: ``local[*]``; configured by ``rebalance.spark_conf``) over
the statistics under ``<data-dir>/stats`` (or ``rebalance.stats_uri``); print the report
(``cli.rebalance_report.print_outcome``: tables, PNG chart, JSON line); publish
(``spark_rebalance.publisher``) and print what was published plus one JSON line.
Progress goes to stderr (``cli.progress``): each stage (starting Spark, reading
statistics, aggregating and smoothing, planning, publishing) on a live line with
Spark's active stage and task counts, and one ``✓ stage  time`` line when it ends.
Exit status 0 whenever the run happened: nothing to move, a refused plan (stale
statistics: the reason is printed) or a busy cut-over included. ``--every S`` repeats
every S seconds on the same Spark session until Ctrl-C (a failed round is reported
and the next one runs).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import typer
from rich.console import Console
from rich.markup import escape

from vpq.cli.progress import SparkWatcher, Stages
from vpq.cli.rebalance_report import print_outcome
from vpq.common.cluster_secret import ClusterSecretError, load_cluster_secret
from vpq.common.errors import VpqError
from vpq.common.runfiles import read_redis_url, read_settings, settings_path
from vpq.config.overrides import apply_overrides, describe_error, parse_assignments
from vpq.config.redis_url import check_redis_url
from vpq.config.settings import Settings, load_settings
from vpq.metadata.connection import ClientOptions
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.maps import MapConflictError
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.cluster_auth import client_headers
from vpq.spark_rebalance.fence_client import WRITE_ROLE, HttpFenceClient
from vpq.spark_rebalance.publisher import Publisher, PublisherOptions, describe
from vpq.virtual_partitions.placement import PlacementMap

if TYPE_CHECKING:
    from vpq.spark_rebalance.runner import RebalanceOutcome

err_console = Console(stderr=True, highlight=False)
CLIENT_OPTIONS = ClientOptions(socket_timeout=10.0, connect_timeout=2.0, retries=2)


class TargetError(Exception):
    """The running platform (its settings or its Redis) could not be found."""


@dataclass(frozen=True)
class Target:
    settings: Settings
    redis_url: str
    source: str


def resolve_target(
    data_dir: Path | None, redis_url: str | None, config: Path | None, overrides: dict[str, Any] | None = None
) -> Target:
    """Settings and Redis URL of the platform to rebalance; see the module docstring.
    ``overrides`` (dotted keys, from ``--set``) apply to whichever settings are found;
    a bad key or value, or a malformed ``redis+sentinel://`` URL, raises ``ValueError``."""
    given = dict(overrides or {})
    if data_dir is not None:
        given["data_dir"] = data_dir
    try:
        base = load_settings(config, given)
    except FileNotFoundError as exc:
        raise TargetError(str(exc)) from exc
    except ValueError as exc:
        if overrides:
            raise
        raise TargetError(str(exc)) from exc
    dd = base.data_dir.resolve()
    settings = base
    if config is None and settings_path(dd).is_file():
        try:
            settings = read_settings(settings_path(dd))
        except (OSError, ValueError) as exc:
            raise TargetError(f"cannot read {settings_path(dd)}: {exc}") from exc
        settings = apply_overrides(settings, overrides or {})
    settings = settings.model_copy(update={"data_dir": dd})
    if redis_url:
        return Target(settings, check_redis_url(redis_url), "--redis-url / VPQ_REDIS_URL")
    found = read_redis_url(dd)
    if found:
        return Target(settings, found, str(dd / "run" / "redis.url"))
    if settings.redis.url:
        return Target(settings, settings.redis.url, "settings (redis.url)")
    raise TargetError(
        f"no running platform found: {dd / 'run' / 'redis.url'} does not exist and neither --redis-url "
        "nor VPQ_REDIS_URL is set (start one with `vpq up --data-dir DIR`)"
    )


@dataclass(frozen=True)
class ClusterState:
    current: PlacementMap
    partitions: list[int]
    write_nodes: list[str]
    fence_note: str | None


async def read_state(md: MetadataStore, settings: Settings) -> ClusterState:
    """The map, the partitions and the live write nodes, as Redis has them now."""
    raw = await md.maps.current()
    current = PlacementMap.from_dict(raw) if raw else PlacementMap(0, {})
    count = await md.read_partition_count() or settings.cluster.physical_partitions
    nodes = sorted(n.node_id for n in await md.nodes.nodes(WRITE_ROLE))
    snap = await md.fences.snapshot()
    note = None
    if snap.fence is not None:
        state = "expired: this run recovers it" if snap.expired else "in progress"
        note = f"cut-over {snap.fence.id} (fence epoch {snap.fence.epoch}, age {snap.age_ms} ms) is {state}"
    return ClusterState(current, list(range(count)), nodes, note)


async def _one_round(
    spark, md: MetadataStore, publisher: Publisher, target: Target, console: Console, dry_run: bool, master: str
) -> None:
    s = target.settings
    state = await read_state(md, s)
    console.print(
        f"map epoch {state.current.epoch}: {len(state.current.queues)} queue(s) on {len(state.partitions)} "
        f"physical partition(s); live write nodes: {', '.join(state.write_nodes) or 'none'}"
    )
    if state.fence_note:
        console.print(f"[yellow]note:[/] {state.fence_note}")
    from vpq.spark_rebalance.runner import default_stats_uri, rebalance_once  # pyspark: loaded when used

    now_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    with Stages(err_console) as stages, SparkWatcher(spark, stages.detail):
        outcome: RebalanceOutcome = rebalance_once(
            spark, state.current, state.partitions, now_ms, s.rebalance,
            stats_uri=default_stats_uri(s.data_dir, s.rebalance), queue_defaults=s.queues,
            expected_nodes=state.write_nodes or None, progress=stages.stage,
        )
    app = spark.sparkContext.applicationId
    err_console.print(
        f"[dim]Spark job ({master}, application {app}) done in {time.monotonic() - t0:.1f} s[/]", soft_wrap=True
    )
    print_outcome(outcome, console, s.data_dir, now_ms, s.rebalance, dry_run)
    plan = outcome.plan
    if dry_run or plan.refused is not None or not plan.changed:
        return
    with Stages(err_console) as stages:
        stages.stage(f"publishing {len(plan.moves)} move(s): fencing moved vps, sealing lineage, publishing the map")
        result = await publisher.apply(plan)
    for line in describe(result):
        console.print(line, markup=False, highlight=False)
    console.print(json.dumps({"publish": result.to_dict()}), soft_wrap=True, markup=False, highlight=False)


async def run_rebalance(target: Target, dry_run: bool, master: str, every: float | None, console: Console) -> int:
    """The command's body; returns the exit status."""
    from vpq.spark_rebalance.session import make_spark, stop_spark  # pyspark: loaded when used

    try:  # the fences go to the write nodes, which check the cluster secret
        secret = load_cluster_secret(target.settings.cluster.secret_file)
    except ClusterSecretError as exc:
        err_console.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    md = MetadataStore(target.settings.redis, url=target.redis_url, options=CLIENT_OPTIONS)
    try:
        try:
            await md.start()
        except (MetadataUnavailable, OSError) as exc:
            err_console.print(f"[red]error:[/] cannot reach Redis at {target.redis_url} (from {target.source}): {exc}")
            return 1
        with Stages(err_console) as stages:
            stages.stage(f"starting Spark ({master})")
            spark = make_spark(master, extra_conf=target.settings.rebalance.spark_conf)
        try:
            async with aiohttp.ClientSession(headers=client_headers(secret)) as session:
                publisher = Publisher(
                    md, HttpFenceClient(session, md.leases, md.nodes),
                    PublisherOptions.from_settings(target.settings.rebalance.publisher),
                )
                while True:
                    try:
                        await _one_round(spark, md, publisher, target, console, dry_run, master)
                    except (MetadataUnavailable, OSError, VpqError, MapConflictError) as exc:
                        err_console.print(f"[red]error:[/] rebalance round failed: {exc}")
                        if every is None:
                            return 1
                    if every is None:
                        return 0
                    await asyncio.sleep(every)
        finally:
            stop_spark(spark)
    finally:
        await md.stop()


def run_command(
    data_dir: Path | None, redis_url: str | None, dry_run: bool, master: str | None, every: float | None,
    config: Path | None, assignments: list[str] | None,
) -> None:
    """The body of ``vpq rebalance`` (``cli/rebalance.py`` declares its options); ends
    with ``typer.Exit`` carrying the exit status."""
    try:
        target = resolve_target(data_dir, redis_url, config, parse_assignments(assignments or ()))
    except TargetError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1)
    except ValueError as exc:
        err_console.print(f"[red]error:[/] {escape(describe_error(exc))}")
        raise typer.Exit(2)
    spark_master = master or target.settings.rebalance.master
    try:
        code = asyncio.run(run_rebalance(target, dry_run, spark_master, every, Console(highlight=False)))
    except KeyboardInterrupt:
        code = 0
    except Exception as exc:
        if not interrupted(exc):
            raise
        code = 0  # Ctrl-C inside a Spark call: py4j's cleanup failed while the interrupt unwound
    raise typer.Exit(code)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a ``KeyboardInterrupt`` was being handled (its
    ``__context__`` or ``__cause__`` chain holds one)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False
