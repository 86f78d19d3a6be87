"""The nodes' metrics in the gateway's ``/metrics``.

``NodeMetricsScraper.scrape(own_text, nodes)`` fetches ``GET /internal/v1/metrics`` of every
given node concurrently (each bounded by ``timeout_s``), and returns ``own_text`` followed
by one merged exposition of every node that answered:

- every node sample gets the labels ``node`` (its registry id) and ``role`` (``write`` or
  ``read``), so series of different nodes never collide;
- families are merged by name: one ``# HELP``/``# TYPE`` per family, whatever the number
  of nodes (``merge_families``, pure);
- a family whose name is already in ``own_text``, or whose type differs from the one
  first seen under that name, is left out (it could not be merged into valid text);
- a node that does not answer 200 in time, or answers text that does not parse, is
  skipped and counted in ``vpq_metrics_scrape_errors_total{node,role}``; every node
  asked appears in ``vpq_node_up{node,role}`` (1 answered, 0 skipped).

The scrape-error counts live in the scraper (one per gateway process) and only grow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.leases import NodeRegistry

log = logging.getLogger("vpq.gateway.metrics")

METRICS_PATH = "/internal/v1/metrics"
DEFAULT_TIMEOUT_S = 2.0
NODE_LABEL = "node"
ROLE_LABEL = "role"


@dataclass(frozen=True, slots=True)
class NodeTarget:
    """A node to scrape: its registry id, role and ``host:port``."""

    node_id: str
    role: str
    address: str


async def registered_nodes(registry: NodeRegistry, roles: Sequence[str] = ("write", "read")) -> list[NodeTarget]:
    """The live nodes of ``roles`` in the registry; ``[]`` (logged) when Redis cannot tell."""
    try:
        return [NodeTarget(n.node_id, n.role, n.address) for role in roles for n in await registry.nodes(role)]
    except (MetadataUnavailable, OSError) as exc:
        log.warning("node metrics skipped: the node registry is unavailable: %s", exc)
        return []


def parse_text(text: str) -> list[Metric]:
    """Every family of Prometheus text; ``ValueError`` when it is not valid exposition."""
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not Prometheus text: {exc}") from exc


def merge_families(
    sources: Iterable[tuple[Mapping[str, str], Sequence[Metric]]], reserved: Iterable[str] = ()
) -> list[Metric]:
    """One family per name from several parsed expositions. Each source's samples get its
    labels (overriding labels of the same name). Families named in ``reserved``, a type
    that differs from the first one seen under a name, and repeated samples (same name
    and labels) are dropped. Order: first appearance. No I/O."""
    skip = set(reserved)
    merged: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for extra, families in sources:
        for fam in families:
            if fam.name in skip:
                continue
            target = merged.get(fam.name)
            if target is None:
                target = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            elif target.type != fam.type:
                log.warning("metric family %s is %s and %s: left out", fam.name, target.type, fam.type)
                continue
            for s in fam.samples:
                labels = {**s.labels, **extra}
                key = (s.name, tuple(sorted(labels.items())))
                if key not in seen:
                    seen.add(key)
                    target.samples.append(s._replace(labels=labels))
    return list(merged.values())


class _Families:
    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def render(families: Sequence[Metric]) -> str:
    """The Prometheus text of ``families`` (classic format, as ``generate_latest``)."""
    registry = CollectorRegistry()
    registry.register(_Families(families))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


class NodeMetricsScraper:
    """Fetches and merges the nodes' metrics (see the module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.errors: dict[tuple[str, str], int] = {}

    async def fetch(self, node: NodeTarget) -> list[Metric] | None:
        """The parsed families of one node, ``None`` (logged) when it could not be had."""
        try:
            async with self._session.get(f"http://{node.address}{METRICS_PATH}", timeout=self._timeout) as resp:
                if resp.status != 200:
                    raise ValueError(f"answered {resp.status}")
                return parse_text(await resp.text())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, UnicodeDecodeError) as exc:
            log.info("metrics of %s node %s (%s) skipped: %r", node.role, node.node_id, node.address, exc)
            return None

    async def scrape(self, own_text: str, nodes: Sequence[NodeTarget]) -> str:
        """``own_text`` followed by the merged node families (see the module docstring)."""
        results = await asyncio.gather(*(self.fetch(n) for n in nodes))
        sources: list[tuple[Mapping[str, str], Sequence[Metric]]] = []
        labels = [NODE_LABEL, ROLE_LABEL]
        up = GaugeMetricFamily("vpq_node_up", "1 when the node's metrics were scraped, else 0.", labels=labels)
        for node, families in zip(nodes, results, strict=True):
            key = (node.node_id, node.role)
            if families is None:
                self.errors[key] = self.errors.get(key, 0) + 1
            else:
                self.errors.setdefault(key, 0)
                sources.append(({NODE_LABEL: node.node_id, ROLE_LABEL: node.role}, families))
            up.add_metric(list(key), 0.0 if families is None else 1.0)
        errors = CounterMetricFamily(
            "vpq_metrics_scrape_errors", "Node metrics scrapes that failed or timed out.", labels=labels
        )
        for (node_id, role), n in sorted(self.errors.items()):
            errors.add_metric([node_id, role], float(n))
        try:
            reserved = [f.name for f in parse_text(own_text)] if own_text else []
        except ValueError:
            reserved = []
        merged = merge_families([({}, [up, errors]), *sources], reserved)
        text = own_text if not own_text or own_text.endswith("\n") else own_text + "\n"
        return text + render(merged)
