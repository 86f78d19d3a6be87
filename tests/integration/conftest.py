import pytest

from tests.integration.api import Api
from tests.integration.platform import Platform

FAST = {
    "VPQ_QUEUES__SESSION_TIMEOUT_MS": "3000",
    "VPQ_REDIS__LEASE_TTL_MS": "2000",
}


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    yield from Platform(tmp_path_factory.mktemp("vpq"), physical_partitions=2, env=dict(FAST)).running()


@pytest.fixture
def api(platform):
    return Api(platform.url)
