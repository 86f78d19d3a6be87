"""The ``--vpq-*`` command-line options of the locust files (each also settable by an
environment variable ``VPQ_LOAD_*``), registered once for both files, and their
conversion to :class:`load.locust_common.LoadOptions`."""

from __future__ import annotations

from typing import Any

from locust import events

from vpq.load.locust_common import LoadOptions, parse_list

DEFAULTS = LoadOptions()


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("vpq load", "what the vpq locust users produce and consume")
    group.add_argument("--vpq-queues", type=int, default=DEFAULTS.queues, env_var="VPQ_LOAD_QUEUES",
                       help="queues to spread the load over")
    group.add_argument("--vpq-queue-prefix", default=DEFAULTS.queue_prefix, env_var="VPQ_LOAD_QUEUE_PREFIX",
                       help="queue names are PREFIX-0, PREFIX-1, ...")
    group.add_argument("--vpq-batch", type=int, default=DEFAULTS.batch, env_var="VPQ_LOAD_BATCH",
                       help="messages per produce request")
    group.add_argument("--vpq-message-bytes", type=int, default=DEFAULTS.message_bytes,
                       env_var="VPQ_LOAD_MESSAGE_BYTES", help="size of each message value")
    group.add_argument("--vpq-keys", type=int, default=DEFAULTS.keys, env_var="VPQ_LOAD_KEYS",
                       help="distinct message keys")
    group.add_argument("--vpq-lanes", default=",".join(DEFAULTS.lanes), env_var="VPQ_LOAD_LANES",
                       help="comma-separated swimlanes; an empty item is the backbone")
    group.add_argument("--vpq-envs", default=",".join(DEFAULTS.envs), env_var="VPQ_LOAD_ENVS",
                       help="comma-separated envs")
    group.add_argument("--vpq-group", default=DEFAULTS.group, env_var="VPQ_LOAD_GROUP",
                       help="consumer group of the consume users")
    group.add_argument("--vpq-work-ms", type=float, default=DEFAULTS.work_ms, env_var="VPQ_LOAD_WORK_MS",
                       help="simulated work per consumed message, ms")
    group.add_argument("--vpq-max-messages", type=int, default=DEFAULTS.max_messages,
                       env_var="VPQ_LOAD_MAX_MESSAGES", help="max_messages per poll")
    group.add_argument("--vpq-wait-ms", type=int, default=DEFAULTS.wait_ms, env_var="VPQ_LOAD_WAIT_MS",
                       help="long-poll wait_ms")


def options_from(parsed: Any) -> LoadOptions:
    """The options of a locust run (``environment.parsed_options``)."""
    return LoadOptions(
        queues=parsed.vpq_queues,
        queue_prefix=parsed.vpq_queue_prefix,
        batch=parsed.vpq_batch,
        message_bytes=parsed.vpq_message_bytes,
        keys=parsed.vpq_keys,
        lanes=tuple(parse_list(parsed.vpq_lanes)),
        envs=tuple(e for e in parse_list(parsed.vpq_envs) if e) or ("prod",),
        group=parsed.vpq_group,
        work_ms=parsed.vpq_work_ms,
        max_messages=parsed.vpq_max_messages,
        wait_ms=parsed.vpq_wait_ms,
    )
