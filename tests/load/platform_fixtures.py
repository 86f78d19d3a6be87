"""What the smoke tests of the ``vpq bench`` platform commands share: one real platform
per test module, started the way the commands start their own, and the JSON last line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from vpq.load.platform_bench.target import PlatformTarget


def last_json(output: str) -> dict[str, Any]:
    """The JSON object a bench command prints as its last line."""
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def platform_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway URL of one ``vpq up`` (2 physical partitions) for the test module."""
    target = PlatformTarget(None, physical_partitions=2, data_root=tmp_path_factory.mktemp("bench"))
    asyncio.run(target.start())
    try:
        yield target.url
    finally:
        asyncio.run(target.stop())
