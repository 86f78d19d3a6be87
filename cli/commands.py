"""Human sub-commands of ``vpq`` built on the SDK: produce, consume, queues, groups,
cluster, create-queue, delete-queue, delete-group, redrive.

Every command takes ``--url`` (env ``VPQ_URL``, default ``http://127.0.0.1:8080``),
``--token`` (env ``VPQ_TOKEN``) and ``--output/-o table|json`` (``--json`` is
``-o json``: the raw JSON answer instead of tables). Tables fit the terminal's width
(``COLUMNS``; 80 when not a terminal) with the columns that matter in human units;
``--wide`` shows every column (``cli/tables.py``). Expected
failures print one ``error: ...`` line on stderr (the server's message and code, or
"the gateway is not running at URL") and exit with status 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from enum import Enum
from typing import Annotated, Any, NoReturn, Optional, TypeVar

import orjson
import typer
from rich.console import Console, RenderableType
from rich.text import Text

from vpq.cli.tables import (
    View,
    cluster_detail,
    group_detail,
    message_line,
    produce_results_table,
    queue_detail,
    queues_table,
)
from vpq.sdk.client import DEFAULT_URL, AsyncClient
from vpq.sdk.errors import GatewayConnectionError, GatewayTimeoutError, VpqClientError
from vpq.sdk.models import Message, ProduceMessage
from vpq.sdk.retry import RetryPolicy

T = TypeVar("T")

CLI_RETRY = RetryPolicy(attempts=3, initial_backoff_s=0.1, max_backoff_s=1.0, max_retry_after_s=10.0)
MAX_TABLE_RESULTS = 20
WIDE_WIDTH = 1000  # --wide: no table is folded to the terminal

UrlOpt = Annotated[str, typer.Option("--url", envvar="VPQ_URL", help="gateway base URL")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", envvar="VPQ_TOKEN", help="bearer token")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the raw JSON answer (same as -o json)")]
WideOpt = Annotated[bool, typer.Option("--wide", "-w", help="show every column, nothing cut")]
LaneOpt = Annotated[Optional[str], typer.Option("--lane", help="swimlane ('' = backbone)")]
EnvOpt = Annotated[Optional[str], typer.Option("--env", help="environment (server default: prod)")]
SetOpt = Annotated[Optional[str], typer.Option("--set", help="set / regional cell ('' = default set)")]


class Output(str, Enum):
    table = "table"
    json = "json"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table (fits the terminal) or json (raw answer)")]


class Start(str, Enum):
    earliest = "earliest"
    latest = "latest"


class Ordering(str, Enum):
    key = "key"
    none = "none"


# -- plumbing --------------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> NoReturn:
    Console(stderr=True, highlight=False).print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


def _run(url: str, token: str | None, work: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run ``work`` with a client; turn expected failures into one error line and exit 1."""
    if not url.startswith(("http://", "https://")):
        _fail(f"invalid --url {url!r}: expected http://HOST:PORT")

    async def main() -> T:
        async with AsyncClient(url, token=token, retry=CLI_RETRY) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except GatewayTimeoutError as err:
        _fail(f"the gateway at {url} did not answer in time ({err.message})")
    except GatewayConnectionError as err:
        _fail(f"the gateway is not running at {url} ({err.details.get('reason', err.message)})")
    except VpqClientError as err:
        status = f", HTTP {err.status}" if err.status is not None else ""
        _fail(f"{err.message} [{err.code}{status}]")
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _print_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def _console() -> Console:
    return Console(highlight=False)


def _view(wide: bool) -> View:
    """Width of stdout's console (``COLUMNS``, 80 when not a terminal), mode, clock."""
    return View(width=_console().width, wide=wide, now_ms=int(time.time() * 1000))


def _print(renderables: Iterable[RenderableType], wide: bool = False) -> None:
    """Print to stdout; ``wide``: tables at their natural width (lines may pass the
    terminal's width, like ``kubectl -o wide``) rather than folded into it."""
    console = Console(highlight=False, width=WIDE_WIDTH) if wide else _console()
    for r in renderables:
        console.print(r)


def parse_value(text: str) -> Any:
    """A command-line value: JSON when it parses as JSON (``42``, ``{"a":1}``, ``"s"``),
    else the text itself as a string."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def parse_headers(items: Sequence[str]) -> dict[str, str]:
    """``["k=v", "x=1=2"]`` -> ``{"k": "v", "x": "1=2"}``; raises ``ValueError`` without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--header expects k=v, got {item!r}")
        out[name] = value
    return out


def _read_lines(path: str) -> list[str]:
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            _fail(f"cannot read {path}: {exc.strerror or exc}")
    return [line for line in lines if line.strip()]


# -- produce ---------------------------------------------------------------------------


def produce(
    queue: Annotated[str, typer.Argument(help="queue name")],
    values: Annotated[
        Optional[list[str]], typer.Argument(help="values (JSON when valid JSON, else strings)", show_default=False)
    ] = None,
    key: Annotated[Optional[str], typer.Option("--key", "-k", help="message key (per-key order)")] = None,
    lane: LaneOpt = None,
    env: EnvOpt = None,
    set_: SetOpt = None,
    header: Annotated[Optional[list[str]], typer.Option("--header", "-H", help="message header k=v (repeatable)")] = None,
    file: Annotated[Optional[str], typer.Option("--file", "-f", help="one value per line; '-' = stdin")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, max=10000, help="messages per request")] = 500,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
    wide: WideOpt = False,
) -> None:
    """Produce VALUEs (or the lines of --file / stdin) to QUEUE; prints where they were stored."""
    try:
        headers = parse_headers(header or [])
    except ValueError as exc:
        _fail(str(exc))
    if values:
        texts = list(values)
    elif file is not None:
        texts = _read_lines(file)
    elif not sys.stdin.isatty():
        texts = _read_lines("-")
    else:
        _fail("nothing to produce: give VALUE..., --file PATH, or pipe lines on stdin")
    if not texts:
        _fail("nothing to produce: the input is empty")
    messages = [ProduceMessage(value=parse_value(t), key=key, headers=headers or None) for t in texts]

    async def work(client: AsyncClient) -> list[Any]:
        results = []
        for i in range(0, len(messages), batch):
            results += await client.produce(queue, messages[i : i + batch], lane=lane, env=env, set=set_)
        return results

    results = _run(url, token, work)
    if json_out or output is Output.json:
        _print_json({"results": [r.__dict__ for r in results]})
        return
    if len(results) <= MAX_TABLE_RESULTS:
        _print([produce_results_table(results, _view(wide))], wide)
    else:
        parts = sorted({r.partition for r in results})
        typer.echo(f"produced {len(results)} messages to {queue} (partitions {','.join(map(str, parts))})")


# -- consume ---------------------------------------------------------------------------


def consume(
    queue: Annotated[str, typer.Argument(help="queue name")],
    group: Annotated[str, typer.Option("--group", "-g", help="consumer group")] = "vpq-cli",
    lane: LaneOpt = None,
    env: EnvOpt = None,
    set_: SetOpt = None,
    max_messages: Annotated[Optional[int], typer.Option("--max", "-n", min=1, help="stop after N messages")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-F", help="keep waiting for new messages")] = False,
    no_ack: Annotated[bool, typer.Option("--no-ack", help="do not ack (they are redelivered to the group)")] = False,
    start: Annotated[Start, typer.Option("--from", help="where a NEW group starts")] = Start.earliest,
    wait_ms: Annotated[int, typer.Option("--wait-ms", min=0, max=30000, help="long-poll wait per request (at least 1000 with --follow)")] = 1000,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Join GROUP on QUEUE with the given lane/env/set and print one line per message.

    Without --follow it stops at the first empty poll (or after --max messages); with
    --follow it waits for more until Ctrl-C. It leaves the group when done.
    """

    json_out = json_out or output is Output.json

    def show(msg: Message) -> None:
        typer.echo(orjson.dumps(msg.to_json()).decode() if json_out else message_line(msg))

    async def work(client: AsyncClient) -> int:
        poll_wait = max(wait_ms, 1000) if follow else wait_ms  # following: never spin on empty polls
        joined = await client.join(queue, group, lane=lane, env=env, set=set_, start=start.value)
        cid = joined.consumer_id
        count = 0
        try:
            while max_messages is None or count < max_messages:
                want = 100 if max_messages is None else min(1000, max_messages - count)
                batch = await client.poll(queue, group, cid, max_messages=want, wait_ms=poll_wait)
                if not batch:
                    if follow:
                        continue
                    break
                for msg in batch:
                    show(msg)
                count += len(batch)
                if not no_ack:
                    await client.ack(queue, group, cid, [m.id for m in batch])
        finally:
            try:
                await client.leave(queue, group, cid)
            except VpqClientError:
                pass  # the session timeout removes the consumer anyway
        return count

    count = _run(url, token, work)
    if not json_out:
        note = "not acked" if no_ack else "acked"
        Console(stderr=True, highlight=False).print(Text(f"{count} message(s) from {queue} / {group} ({note})", style="dim"))


# -- admin views -----------------------------------------------------------------------


def queues(
    name: Annotated[Optional[str], typer.Argument(help="show this queue in detail")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
    wide: WideOpt = False,
) -> None:
    """List queues, or show one with its config, placement and traffic."""
    if name is None:
        listed = _run(url, token, lambda c: c.list_queues())
        if json_out or output is Output.json:
            _print_json({"queues": listed})
        else:
            _print([queues_table(listed, _view(wide))], wide)
        return
    queue = _run(url, token, lambda c: c.get_queue(name))
    if json_out or output is Output.json:
        _print_json(queue)
    else:
        _print(queue_detail(queue, _view(wide)), wide)


def groups(
    queue: Annotated[str, typer.Argument(help="queue name")],
    group: Annotated[str, typer.Argument(help="consumer group")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
    wide: WideOpt = False,
) -> None:
    """Show a group's members (isolation context, assigned vps, in flight) and its lag."""
    info = _run(url, token, lambda c: c.group(queue, group))
    if json_out or output is Output.json:
        _print_json(info)
    else:
        _print(group_detail(info, _view(wide)), wide)


def cluster(
    ctx: typer.Context,
    show_map: Annotated[bool, typer.Option("--map", help="also show the current placement map")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
    wide: WideOpt = False,
) -> None:
    """Show write nodes, read nodes, physical partitions and the map epoch."""
    if ctx.invoked_subcommand is not None:
        return

    async def work(client: AsyncClient) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster": await client.cluster()}
        if show_map:
            out["map"] = await client.current_map()
        return out

    data = _run(url, token, work)
    if json_out or output is Output.json:
        _print_json(data if show_map else data["cluster"])
        return
    view = _view(wide)
    renderables = cluster_detail(data["cluster"], view)
    if show_map:
        current = data["map"]
        rows = [
            {"name": name, "virtual_partitions": q.get("virtual_partitions"), "placement": q.get("placement")}
            for name, q in sorted(current.get("queues", {}).items())
        ]
        renderables.append(queues_table(rows, view))
        renderables.append(Text(f"map epoch {current.get('epoch')}"))
    _print(renderables, wide)


def create_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    virtual_partitions: Annotated[Optional[int], typer.Option(help="power of two; may only grow")] = None,
    ordering: Annotated[Optional[Ordering], typer.Option(help="key (default) or none")] = None,
    max_deliveries: Annotated[Optional[int], typer.Option(min=1)] = None,
    visibility_timeout_ms: Annotated[Optional[int], typer.Option(min=1)] = None,
    retention_ms: Annotated[Optional[int], typer.Option()] = None,
    max_message_bytes: Annotated[Optional[int], typer.Option(min=1)] = None,
    dedup_window_ms: Annotated[
        Optional[int], typer.Option(min=0, help="a dedup_id stored this recently is not stored again; 0 = off")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
    output: OutputOpt = Output.table,
    wide: WideOpt = False,
) -> None:
    """Create a queue, or update the given settings of an existing one."""
    config = {
        "virtual_partitions": virtual_partitions,
        "ordering": ordering.value if ordering else None,
        "max_deliveries": max_deliveries,
        "visibility_timeout_ms": visibility_timeout_ms,
        "retention_ms": retention_ms,
        "max_message_bytes": max_message_bytes,
        "dedup_window_ms": dedup_window_ms,
    }
    queue = _run(url, token, lambda c: c.put_queue(name, **config))
    if json_out or output is Output.json:
        _print_json(queue)
    else:
        _print(queue_detail(queue, _view(wide)), wide)


def delete_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Delete a queue and its messages."""
    if not yes and not typer.confirm(f"delete queue {name!r} and its messages?"):
        raise typer.Exit(1)
    _run(url, token, lambda c: c.delete_queue(name))
    typer.echo(f"deleted {name}")


def delete_group(
    queue: Annotated[str, typer.Argument(help="queue name")],
    group: Annotated[str, typer.Argument(help="consumer group")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Delete a consumer group with its members, delivery and ack state."""
    if not yes and not typer.confirm(f"delete group {group!r} of queue {queue!r} and its state?"):
        raise typer.Exit(1)
    _run(url, token, lambda c: c.delete_group(queue, group))
    typer.echo(f"deleted group {group} of {queue}")


def redrive(
    queue: Annotated[str, typer.Argument(help="queue name")],
    group: Annotated[str, typer.Argument(help="consumer group")],
    max_messages: Annotated[Optional[int], typer.Option(min=1, help="at most this many (default: all)")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Deliver a group's dead letters to it again (they leave its dead-letter queue)."""
    n = _run(url, token, lambda c: c.redrive(queue, group, max_messages))
    if json_out:
        _print_json({"redriven": n})
    else:
        typer.echo(f"redrove {n} message(s) to {queue} / {group}")


def register_commands(app: typer.Typer) -> None:
    """Add the human commands to the ``vpq`` app."""
    app.command("produce")(produce)
    app.command("consume")(consume)
    app.command("queues")(queues)
    app.command("groups")(groups)
    app.command("create-queue")(create_queue)
    app.command("delete-queue")(delete_queue)
    app.command("delete-group")(delete_group)
    app.command("redrive")(redrive)
