"""The pure parts of ``vpq bench hotkey|catchup`` and the ordered backlog producer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from vpq.load.payload import parse_payload
from vpq.load.platform_bench import catchup, hotkey
from vpq.load.platform_bench.backlog import as_json_values, produce_ordered
from vpq.load.platform_bench.poll_counts import messages_per_poll, parse_poll_counts

ZERO = {"lost": 0, "duplicates": 0, "reordered": 0, "unexpected": 0, "timed_out": False}


def test_produce_ordered_keeps_every_keys_order_and_reports_each_ack() -> None:
    sent: list[list[tuple[str, bytes]]] = []
    acked: list[tuple[str, int]] = []

    async def send(pairs: Sequence[tuple[str, bytes]]) -> None:
        await asyncio.sleep(0)
        sent.append(list(pairs))

    rate = asyncio.run(produce_ordered(send, 50, 3, message_bytes=40, batch=4, workers=2,
                                       on_acked=lambda k, s: acked.append((k, s))))
    assert rate > 0 and len(acked) == 50 and max(len(b) for b in sent) == 4
    seqs: dict[str, list[int]] = {}
    for batch in sent:
        for key, payload in batch:
            stamp = parse_payload(payload)
            assert stamp.key == key and len(payload) == 40
            seqs.setdefault(key, []).append(stamp.seq)
    assert all(s == sorted(s) == list(range(len(s))) for s in seqs.values())
    assert as_json_values([("k", b"v")]) == [{"key": "k", "value": "v"}]
    with pytest.raises(ValueError):
        asyncio.run(produce_ordered(send, 0, 1, message_bytes=40))


def test_hotkey_summary_is_medians_and_their_ratio() -> None:
    rounds = [
        {"hot": {"messages_per_s": h, **ZERO}, "spread": {"messages_per_s": s, **ZERO}}
        for h, s in ((100.0, 1000.0), (300.0, 2000.0), (200.0, 4000.0))
    ]
    rounds[1]["hot"]["reordered"] = 2
    got = hotkey.summarize(rounds)
    assert (got["hot_per_s"], got["spread_per_s"], got["ratio"]) == (200.0, 2000.0, 0.1)
    assert got["ratio_per_round"] == [0.1, 0.15, 0.05] and got["reordered"] == 2 and not got["timed_out"]


def test_catchup_summary_and_cpu_per_message() -> None:
    assert catchup.per_message_us({"gateway": 1.0, "gone": 1.0}, {"gateway": 1.5, "new": 3.0}, 1000) == {"gateway": 500.0}
    assert catchup.per_message_us({}, {}, 0) == {}
    rounds = [
        {"vpq": {"messages_per_s": v, "cpu_us_per_message": {"gateway": g}, **ZERO},
         "redis": {"messages_per_s": r, "cpu_us_per_message": {"redis": 5.0}, **ZERO}}
        for v, r, g in ((10.0, 20.0, 3.0), (30.0, 20.0, 1.0), (20.0, 40.0, 2.0))
    ]
    got = catchup.summarize(rounds)
    assert (got["vpq_per_s"], got["redis_per_s"], got["ratio"]) == (20.0, 20.0, 1.0)
    assert got["ratio_per_round"] == [0.5, 1.5, 0.5]
    assert got["cpu_us_per_message"] == {"vpq": {"gateway": 2.0}, "redis": {"redis": 5.0}}


def test_quick_forms_are_smaller() -> None:
    assert hotkey.HotkeyConfig.quick().backlog < hotkey.HotkeyConfig().backlog
    assert catchup.CatchupConfig.quick().backlog < catchup.CatchupConfig().backlog
    with pytest.raises(ValueError):
        catchup.CatchupConfig(batch=1001)


def test_poll_counts_from_the_gateway_metrics_text() -> None:
    text = "\n".join([
        "# HELP vpq_gateway_requests_total HTTP requests answered",
        'vpq_gateway_requests_total{method="POST",route="/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/poll",'
        'status="200"} 7.0',
        'vpq_gateway_requests_total{method="POST",route="/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/poll",'
        'status="404"} 2.0',
        'vpq_gateway_requests_total{method="POST",route="/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/ack",'
        'status="200"} 5.0',
        'vpq_gateway_delivered_messages_total{group="g",queue="a"} 30.0',
        'vpq_gateway_delivered_messages_total{group="g",queue="b"} 12.0',
    ])
    assert parse_poll_counts(text) == (7, 42)
    assert messages_per_poll((2, 2), (7, 42)) == 8.0
    assert messages_per_poll(None, (7, 42)) is None and messages_per_poll((7, 1), (7, 42)) is None
