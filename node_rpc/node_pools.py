"""``NodePools``: keep-alive HTTP/1.1 connections to nodes without aiohttp, for the hot
node calls (the gateway's appends).

One ``sdk.http1_pool.Http1Pool`` per node address (``host:port``), opened on first use;
every request carries the pools' ``headers`` (the cluster secret). ``call`` keeps the
contract of ``node_rpc.call.call_node``: a ``NodeAnswer`` for 2xx, the node's own error
rebuilt for 4xx/5xx, ``Unavailable`` ``node_unreachable`` when the node cannot be reached,
the connection breaks or the timeout passes (an append that timed out may or may not have
been appended). A POST is never sent twice by the pool.
"""

from __future__ import annotations

from collections.abc import Mapping

from multidict import CIMultiDict, CIMultiDictProxy

from vpq.node_rpc.call import NodeAnswer, error_from_answer, unreachable
from vpq.sdk.http1_codec import BadHttpResponse, fixed_headers, host_header
from vpq.sdk.http1_pool import Http1Pool, HttpTransportError

_UNREACHABLE = (HttpTransportError, BadHttpResponse, TimeoutError, OSError)


class NodePools:
    """Pools to the nodes a process calls (see the module docstring); ``stop()`` closes
    them all."""

    def __init__(self, headers: Mapping[str, str], *, max_connections_per_node: int = 64) -> None:
        self._headers = dict(headers)
        self._max = max_connections_per_node
        self._pools: dict[str, Http1Pool] = {}

    def _pool(self, address: str) -> Http1Pool:
        pool = self._pools.get(address)
        if pool is None:
            host, _, port = address.rpartition(":")
            fixed = fixed_headers(host_header(host, int(port)), self._headers)
            pool = self._pools[address] = Http1Pool(host, int(port), fixed, self._max)
        return pool

    async def call(
        self,
        method: str,
        address: str,
        path: str,
        *,
        role: str,
        timeout_s: float,
        data: bytes | list[bytes | bytearray] | None = None,
        headers: Mapping[str, str] | None = None,
        content_type: bytes = b"application/octet-stream",
    ) -> NodeAnswer:
        """One request to ``http://{address}{path}`` (see the module docstring); ``data``
        may be a list of buffers, the body being their concatenation (written out
        without joining them)."""
        try:
            answer = await self._pool(address).request(method, path, headers, data, timeout_s, content_type)
        except _UNREACHABLE as exc:
            raise unreachable(role, address, exc) from exc
        if answer.status >= 400:
            raise error_from_answer(answer.status, answer.body, role, address)
        return NodeAnswer(answer.status, CIMultiDictProxy(CIMultiDict(answer.headers)), answer.body)

    async def stop(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.stop()
