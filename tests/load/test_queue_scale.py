"""``vpq bench queues`` (load/queue_scale.py): the summary's arithmetic, and a small run of
the command against its own real ``vpq up``. The figures themselves are not judged here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.load.platform_fixtures import last_json
from tests.needs import needs_redis_binary
from vpq.cli.main import app
from vpq.load.queue_scale import percentile, summary

MB = 2**20


def _step(queues: int, ms: float, lat: list[float], rss: dict[str, int], redis: int) -> dict:
    return {"queues": queues, "create_ms_per_queue": ms, "create_cpu_ms_per_queue": ms / 2, "load1": ms,
            "first_produce_ms": lat, "rss": rss, "redis_used": redis}


def test_summary_compares_the_last_tenth_with_the_first_and_divides_growth_by_queues() -> None:
    base = {"rss": {"gateway": 50 * MB, "write": 80 * MB}, "redis_used": 1 * MB}
    steps = [_step(1000 * (i + 1), 1.0 if i < 19 else 1.5, [float(i)], {"gateway": 50 * MB + i * 1024 * 100,
                                                                         "write": 80 * MB}, MB + i * 100_000)
             for i in range(20)]
    s = summary(steps, base)
    assert s["queues"] == 20_000
    assert s["create_ms_per_queue_first_10pct"] == 1.0  # steps 0 and 1
    assert s["create_ms_per_queue_last_10pct"] == 1.25  # steps 18 and 19
    assert s["create_ratio"] == 1.25 and s["create_cpu_ratio"] == 1.25
    assert s["create_cpu_ms_per_queue_first_10pct"] == 0.5 and s["load1_min_max"] == [1.0, 1.5]
    assert s["first_produce_p99_ms"] == 19.0 and s["first_produce_p50_ms"] == 9.0 and s["first_produce_samples"] == 20
    assert s["kb_per_queue"] == {"gateway": round(19 * 100 / 20_000, 3), "write": 0.0}
    assert s["redis_bytes_per_queue"] == round(19 * 100_000 / 20_000, 1)
    assert summary([], base) == {}
    assert percentile([], 99) == 0.0 and percentile([3.0, 1.0, 2.0], 50) == 2.0


@needs_redis_binary
def test_bench_queues_runs_on_its_own_platform(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "queues", "--queues", "600", "--step", "200", "--probes", "3",
                                      "--concurrency", "16", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    assert last["bench"] == "queues" and last["queues"] == 600 and last["map_read"]["queues"] == 600
    assert last["first_produce_samples"] == 9 and last["first_produce_p99_ms"] > 0
    assert set(last["kb_per_queue"]) == {"gateway", "write", "read"} and last["redis_bytes_per_queue"] > 0
    assert last["create_cpu_ms_per_queue_first_10pct"] > 0
    assert last["create_ratio"] == pytest.approx(
        last["create_ms_per_queue_last_10pct"] / last["create_ms_per_queue_first_10pct"], rel=0.01)
    assert list(tmp_path.glob("queues-*.json"))
