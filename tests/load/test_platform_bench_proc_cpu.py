"""CPU figures by platform role (load.platform_bench.proc_cpu)."""

from __future__ import annotations

import os

from vpq.common.redis_server import free_port
from vpq.load.platform_bench.proc_cpu import cpu_by_role, cpu_shares, platform_root, role_of


def test_role_of_names_each_platform_process() -> None:
    assert role_of(["/v/bin/python", "-m", "vpq.gateway.main", "--settings", "s.json"]) == "gateway"
    assert role_of(["/v/bin/python3", "-m", "vpq.write_nodes.main"]) == "write_nodes"
    assert role_of(["/v/bin/python3", "-m", "vpq.read_nodes.main"]) == "read_nodes"
    assert role_of(["/usr/bin/redis-server", "127.0.0.1:6379"]) == "redis"
    assert role_of(["/v/bin/python3", "/v/bin/vpq", "up", "--data-dir", "d"]) == "supervisor"
    assert role_of(["/v/bin/python", "-m", "vpq.cli.main", "up", "--port", "1"]) == "supervisor"
    assert role_of(["/v/bin/python3", "/v/bin/vpq", "bench", "produce"]) is None
    assert role_of([]) is None


def test_cpu_shares_are_cores_over_the_interval() -> None:
    before = {"gateway": 1.0, "read_nodes": 2.0, "redis": 0.5}
    after = {"gateway": 3.0, "read_nodes": 2.5, "write_nodes": 9.0}
    assert cpu_shares(before, after, 2.0) == {"gateway": 1.0, "read_nodes": 0.25}
    assert cpu_shares(before, after, 0.0) == {}


def test_cpu_by_role_counts_the_root_as_supervisor() -> None:
    sum(i * i for i in range(200_000))  # some CPU time for this process
    sample = cpu_by_role(os.getpid())
    assert sample.get("supervisor", 0.0) > 0.0
    assert cpu_by_role(2**22 + 12345) == {}  # no such process


def test_platform_root_of_a_port_nobody_listens_on() -> None:
    assert platform_root(free_port()) is None
