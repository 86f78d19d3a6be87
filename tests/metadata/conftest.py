"""Fixtures for the metadata tests: a started store (``make_store`` is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from vpq.metadata.store import MetadataStore


@pytest.fixture
async def md(make_store: Callable[[], MetadataStore]) -> MetadataStore:
    s = make_store()
    await s.start()
    return s
