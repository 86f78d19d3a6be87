"""The harness end to end in tiny sizes against the Redis Streams peer (its own
redis-server), the results file's shape, skipped systems, and the run plan. No
performance figure is asserted: only that the machinery measures and checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.needs import needs_redis_binary
from vpq.load.harness import HarnessConfig, parse_scenarios, plan, run_harness, summary
from vpq.load.peers.registry import parse_systems
from vpq.load.profiles import FULL, QUICK, Profile

TINY = Profile(
    name="tiny",
    producers=2,
    s1_duration_s=0.3,
    s1_max_messages={1: 40, 100: 300},
    s2_rate=100.0,
    s2_duration_s=0.2,
    s3_steps=(1, 5),
    s3_messages=60,
    s3_create_budget_s=5.0,
    s3_delete_budget_s=5.0,
    s4_steps=(1, 2),
    s4_messages_per_consumer=4,
    s5_backlog=300,
    s5_backlog_s=0.3,
    s5_rate=100.0,
    s5_duration_s=0.2,
    s5_catchup_max_s=0.5,
    scenario_timeout_s=30.0,
    s3_count_sample=5,
    s3_drain_sample=2,
    s4_shards=4,
    s4_keys=16,
    s4_work_ms=1.0,
    drain_batch=50,
)


def _assert_check(check: dict[str, object]) -> None:
    assert set(check) >= {"expected", "delivered", "lost", "duplicates", "reordered", "unexpected", "ok"}
    assert check["ok"] is True, check


@needs_redis_binary
async def test_scenario_1_against_redis_writes_results_and_chart(tmp_path: Path) -> None:
    lines: list[str] = []
    cfg = HarnessConfig(systems=["redis"], scenarios=[1], data_dir=tmp_path, profile=TINY)
    results = await run_harness(cfg, echo=lines.append)

    saved = json.loads(Path(results["files"]["json"]).read_text())
    assert saved["version"] == 1 and saved["mode"] == "tiny"
    assert set(saved) >= {"started_at", "machine", "profile", "systems", "scenarios", "checks", "elapsed_s", "files"}
    assert saved["machine"]["cpus"] >= 1
    for probe in ("cpu_probe", "cpu_probe_after"):  # the machine's speed goes with the figures
        assert saved["machine"][probe]["units"] > 0 and saved["machine"][probe]["unit_p50_ms"] > 0
    assert saved["systems"]["redis"]["available"] is True
    assert "appendfsync always" in saved["systems"]["redis"]["durability"]
    s1 = saved["scenarios"]["1"]
    redis = s1["systems"]["redis"]
    for b in ("batch_1", "batch_100"):
        assert redis[b]["messages"] > 0 and redis[b]["msgs_per_s"] > 0
        assert redis[b]["readback"]["handled"] == redis[b]["messages"]
        _assert_check(redis[b]["check"])
    assert set(s1["headline"]["redis"]) == {"batch_1_msgs_per_s", "batch_100_msgs_per_s"}
    assert s1["ratios_vpq_over_peer"] == {}
    assert saved["checks"]["checks"] == 2 and saved["checks"]["failed"] == 0
    assert Path(results["files"]["chart"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "### 1. " in Path(results["files"]["markdown"]).read_text()
    assert any("scenario 1" in line for line in lines)
    assert any("n/a (vpq not measured)" in line for line in lines)
    short = summary(results)
    assert short["systems"] == {"redis": "measured"} and short["checks"]["failed"] == 0
    json.dumps(short)


@needs_redis_binary
async def test_every_scenario_runs_and_checks_in_tiny_sizes(tmp_path: Path) -> None:
    cfg = HarnessConfig(systems=["redis"], scenarios=[2, 3, 4, 5], data_dir=tmp_path, profile=TINY)
    results = await run_harness(cfg, echo=lambda _line: None)
    per = {n: results["scenarios"][n]["systems"]["redis"] for n in ("2", "3", "4", "5")}
    for n, result in per.items():
        assert result.get("status") != "error", (n, result)
    assert per["2"]["end_to_end"]["count"] == per["2"]["scheduled"]
    assert [s["queues"] for s in per["3"]["steps"]] == [1, 5]
    assert all(s["count_mismatches"] == 0 and s["creation_complete"] for s in per["3"]["steps"])
    *others, last = per["3"]["steps"]
    assert all(len(s["round_msgs_per_s"]) == TINY.s3_rounds == 3 for s in others)
    assert len(last["round_msgs_per_s"]) == len(last["paired_1q"]["round_msgs_per_s"]) == TINY.s3_paired_rounds == 5
    assert [s["consumers"] for s in per["4"]["ordered"]] == [1, 2]
    assert [s["consumers"] for s in per["4"]["unordered"]] == [1, 2]
    assert per["5"]["backlog"] > 0 and per["5"]["idle"]["count"] > 0
    assert results["checks"]["failed"] == 0 and results["checks"]["checks"] >= 8


async def test_an_unreachable_system_is_skipped_with_its_reason(tmp_path: Path) -> None:
    lines: list[str] = []
    cfg = HarnessConfig(
        systems=["vpq"], scenarios=[1], data_dir=tmp_path, profile=TINY, vpq_url="http://127.0.0.1:9", start_vpq=False
    )
    results = await run_harness(cfg, echo=lines.append)
    assert results["systems"]["vpq"]["available"] is False
    assert "no ready platform" in results["systems"]["vpq"]["reason"]
    assert results["scenarios"]["1"]["systems"] == {}
    assert any("skipped" in line for line in lines)
    assert Path(results["files"]["json"]).exists()


def test_plan_adds_nats_subjects_for_scenario_3_only() -> None:
    assert plan(["rabbitmq", "nats", "vpq"], [1, 3]) == [
        ("vpq", [1, 3]), ("nats", [1, 3]), ("nats-subjects", [3]), ("rabbitmq", [1, 3])
    ]
    assert plan(["nats"], [1, 2]) == [("nats", [1, 2])]


def test_parsing_of_choices() -> None:
    assert parse_scenarios("3,1,3") == [1, 3]
    assert parse_systems("Redis, nats") == ["redis", "nats"]
    for bad in ("0", "6", "x", ""):
        with pytest.raises(ValueError):
            parse_scenarios(bad)
    for bad in ("kafka", ""):
        with pytest.raises(ValueError):
            parse_systems(bad)


def test_quick_is_smaller_than_full() -> None:
    assert len(QUICK.s3_steps) < len(FULL.s3_steps) and FULL.s3_steps[-1] == 10_000
    assert FULL.s4_steps == (1, 4, 16, 64)
    assert QUICK.s1_duration_s < FULL.s1_duration_s and QUICK.scenario_timeout_s < FULL.scenario_timeout_s


async def test_a_missing_client_library_skips_that_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "vpq.load.peers.rabbitmq", None)  # import now fails
    lines: list[str] = []
    results = await run_harness(
        HarnessConfig(systems=["rabbitmq"], scenarios=[1], data_dir=tmp_path, profile=TINY), echo=lines.append
    )
    assert results["systems"]["rabbitmq"]["available"] is False
    assert "aio-pika client is not installed" in results["systems"]["rabbitmq"]["reason"]
