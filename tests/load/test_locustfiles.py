"""The locust files, run headless for a few seconds against the SDK tests' fake gateway."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sdk.fake_gateway import FakeGateway, GatewayThread

REPO = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).parent / "locust"


@pytest.fixture
def gateway() -> Iterator[GatewayThread]:
    thread = GatewayThread(FakeGateway())
    thread.start()
    yield thread
    thread.stop()


def test_produce_and_consume_users_run_without_failures(gateway: GatewayThread) -> None:
    cmd = [
        str(LOCUST), "-f", "load/locustfile_produce.py,load/locustfile_consume.py", "--headless",
        "-u", "4", "-r", "4", "-t", "3s", "--host", gateway.url, "--only-summary",
        "--vpq-queues", "2", "--vpq-batch", "3", "--vpq-lanes", ",feat-a", "--vpq-envs", "test",
        "--vpq-work-ms", "1", "--vpq-wait-ms", "100",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    fake = gateway.gateway
    produced = fake.requests_to("POST", "/messages")
    assert produced and all(len(r.body["messages"]) == 3 for r in produced)
    assert {r.headers.get("X-Lane") for r in produced} <= {"", "feat-a"}
    assert {r.headers.get("X-Env") for r in produced} == {"test"}
    assert set(fake.queues) == {"load-0", "load-1"}
    assert fake.requests_to("POST", "/consumers")  # joined
    assert fake.requests_to("POST", "/ack")
    assert fake.requests_to("DELETE", "")  # left when the test stopped
